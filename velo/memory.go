package velo

import (
	"context"
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/rendezvous"
	"github.com/velo-go/velo/velo/rendezvous/rdma"
	"github.com/velo-go/velo/velo/transport"
)

// Memory types: GPU memory staged as a region, read into and (through a host buffer) put from.
// See docs/gpu.md.

// MemoryType is the kind of memory a buffer lives in: MemoryHost or MemoryCUDA.
type MemoryType = transport.MemoryType

// Memory types.
const (
	// MemoryHost is ordinary host memory.
	MemoryHost = transport.MemoryHost
	// MemoryCUDA is memory of a CUDA device: a device pointer from cuMemAlloc or cudaMalloc. Only
	// a binary built with -tags cuda,ucx_static, with the UCX transport added with
	// WithUCXTransport, moves it; any other answers it with an error matching
	// errors.ErrUnsupported (ErrUnsupportedMemory) that names the tags.
	MemoryCUDA = transport.MemoryCUDA
)

// ErrUnsupportedMemory: memory of a type this instance cannot move: CUDA memory in a binary built
// without -tags cuda,ucx_static, or in an instance without the UCX transport (WithUCXTransport).
// It matches errors.ErrUnsupported; the text names the build or the option that has it.
var ErrUnsupportedMemory = rendezvous.ErrUnsupportedMemory

// ErrBadMemory: a Memory that describes no memory: no address, a length below one byte, a range
// that wraps around the address space, a device ordinal below zero for device memory.
var ErrBadMemory = errors.New("bad memory description")

// Memory describes a buffer: Len bytes at Addr, of type Type, on CUDA device Device (an ordinal;
// -1 for host memory). Make one with HostMemory or CUDAMemory.
//
// velo never allocates, frees or owns device memory, nor creates a CUDA context: the application
// allocates, keeps the memory valid for as long as velo may use it (see each call), and
// synchronises its streams before it stages memory and after a get into it returns (docs/gpu.md).
type Memory struct {
	Addr   uintptr
	Len    int
	Type   MemoryType
	Device int

	host   []byte // HostMemory's slice, which keeps Go memory alive
	bounce bool   // tests: take the device path with host memory
}

// HostMemory describes host memory b. Described memory takes the same calls as device memory
// (WrapRegionMemory, GetIntoMemory, GetRequestInto, RangeInto, PutMemory).
func HostMemory(b []byte) Memory {
	m := Memory{Len: len(b), Type: MemoryHost, Device: -1, host: b}
	if len(b) > 0 {
		m.Addr = uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	}
	return m
}

// CUDAMemory describes n bytes of CUDA device memory at ptr (a CUdeviceptr, or what cudaMalloc
// returned), allocated on device (its ordinal). velo checks it when it is used: a binary without
// CUDA refuses it (ErrUnsupportedMemory), and one with CUDA asks the driver that ptr is memory of
// that device for all n bytes.
func CUDAMemory(ptr uintptr, n int, device int) Memory {
	return Memory{Addr: ptr, Len: n, Type: MemoryCUDA, Device: device}
}

// String describes m for logs and errors.
func (m Memory) String() string {
	if m.Type == MemoryHost {
		return fmt.Sprintf("%d bytes of host memory at %#x", m.Len, m.Addr)
	}
	return fmt.Sprintf("%d bytes of %v memory at %#x on device %d", m.Len, m.Type, m.Addr, m.Device)
}

// view checks m's shape and returns the []byte that views it (for device memory, a view nothing
// but the transport and its copies touch) and its rendezvous description.
func (m Memory) view() ([]byte, rendezvous.Memory, error) {
	rm := rendezvous.Memory{Type: m.Type, Device: m.Device, Bounce: m.bounce}
	switch {
	case m.Type != MemoryHost && m.Type != MemoryCUDA:
		return nil, rm, fmt.Errorf("velo: %w: %v is not a memory type velo knows (MemoryHost, MemoryCUDA)", ErrBadMemory, m.Type)
	case m.Len <= 0:
		return nil, rm, fmt.Errorf("velo: %w: %d bytes: describe at least one byte", ErrBadMemory, m.Len)
	case m.Addr == 0:
		return nil, rm, fmt.Errorf("velo: %w: address 0: pass the pointer the memory was allocated at", ErrBadMemory)
	case uint64(m.Addr) > math.MaxUint64-uint64(m.Len)+1 || uint64(m.Len) > uint64(math.MaxInt64):
		return nil, rm, fmt.Errorf("velo: %w: %d bytes at %#x wrap around the address space", ErrBadMemory, m.Len, m.Addr)
	case m.Type == MemoryCUDA && m.Device < 0:
		return nil, rm, fmt.Errorf("velo: %w: CUDA device %d: pass the ordinal the memory was allocated on (0 for the first GPU)", ErrBadMemory, m.Device)
	}
	if m.host != nil {
		if len(m.host) != m.Len || uintptr(unsafe.Pointer(unsafe.SliceData(m.host))) != m.Addr {
			return nil, rm, fmt.Errorf("velo: %w: a HostMemory whose Addr or Len was changed: describe the slice again", ErrBadMemory)
		}
		return m.host, rm, nil
	}
	if m.Type == MemoryHost {
		return nil, rm, fmt.Errorf("velo: %w: host memory without its slice: describe it with HostMemory", ErrBadMemory)
	}
	return deviceView(m.Addr, m.Len), rm, nil
}

// deviceView is a []byte over n bytes of device memory at addr: a view for the transport and the
// CUDA driver, never dereferenced by Go. The address is outside the Go heap, so the collector
// ignores it; it is read through a pointer to addr rather than converted, the way a pointer that
// came from C is carried.
func deviceView(addr uintptr, n int) []byte {
	p := *(*unsafe.Pointer)(unsafe.Pointer(&addr))
	return unsafe.Slice((*byte)(p), n)
}

// checkMemory is rendezvous.Config.CheckMemory: the transport's verdict on a typed buffer (the
// RDMA registry's, which asks the UCX transport), or, without an RDMA registry, host memory only.
func (v *Velo) checkMemory(b []byte, m rendezvous.Memory) error {
	if v.rdma != nil {
		return v.rdma.CheckMemory(b, m, m.Device)
	}
	if m.Type != MemoryHost {
		return fmt.Errorf("velo: %w: %v memory needs the UCX transport (WithUCXTransport) of a binary built with -tags cuda,ucx_static", ErrUnsupportedMemory, m.Type)
	}
	return nil
}

// copyMemory is rendezvous.Config.CopyMemory.
func (v *Velo) copyMemory(dst []byte, dt MemoryType, src []byte, st MemoryType) error {
	if v.rdma != nil {
		return v.rdma.CopyMemory(dst, dt, src, st)
	}
	if dt != MemoryHost || st != MemoryHost {
		return fmt.Errorf("velo: %w: copying %v memory needs the UCX transport (WithUCXTransport) of a binary built with -tags cuda,ucx_static", ErrUnsupportedMemory, dt)
	}
	copy(dst, src)
	return nil
}

// CheckMemory reports whether this instance can stage, read into and put from m: its shape (an
// address, at least one byte, no wrap-around), and for device memory the transport's verdict: a
// binary built with -tags cuda,ucx_static and the UCX transport, a device ordinal the driver
// knows, and a pointer the driver says is memory of that device for all of m.Len bytes (a host
// pointer passed as CUDAMemory, and a device pointer passed as HostMemory in a binary with CUDA,
// are refused). Every call that takes a Memory checks it so first; nothing is registered when
// the check fails.
func (v *Velo) CheckMemory(m Memory) error {
	b, rm, err := m.view()
	if err != nil {
		return err
	}
	if err := v.checkMemory(b, rm); err != nil {
		return fmt.Errorf("velo: %v: %w", m, err)
	}
	return nil
}

// WrapRegionMemory makes m a region without copying it, as WrapRegion does for host
// memory: staged (StageRegion), each lease registers it with its memory type and its own key,
// and consumers read it by RDMA with their destination's type, or by chunks through this
// instance's host bounce buffers (reason device_bounce): without the RDMA path (kill switch,
// no offer) and for a consumer of an earlier release, which reads host memory only. m must stay
// valid, unmoved and unfreed until Region.Done is closed; memory freed while staged is
// undefined behaviour (docs/gpu.md says what velo detects). The region's Bytes is a view of
// device memory that the application must not read or write with the CPU.
func (v *Velo) WrapRegionMemory(m Memory) (*Region, error) {
	b, rm, err := m.view()
	if err != nil {
		return nil, err
	}
	if v.rdma == nil {
		if err := v.checkMemory(b, rm); err != nil {
			return nil, err
		}
		return rdma.PlainRegionMemory(b, rm, metrics.ReasonNotConfigured), nil
	}
	g, err := v.rdma.WrapRegionMemory(b, rm, m.Device)
	if err != nil {
		return nil, fmt.Errorf("velo: WrapRegionMemory(%v): %w", m, err)
	}
	return g, nil
}

// GetIntoMemory is GetInto into m, which must be exactly h.Size bytes. Device memory is read by
// the transport with its type on the RDMA path (on GPUDirect RDMA hardware the NIC writes it),
// and through host bounce buffers on the chunked path (PullWindow of them, one chunk each; reason
// device_bounce). When it returns, nothing writes m any more; launch the work that reads m after
// that. The lease's Bytes views m: for device memory the CPU must not read it.
func (v *Velo) GetIntoMemory(ctx context.Context, h Handle, m Memory) (*Lease, error) {
	b, rm, err := m.view()
	if err != nil {
		return nil, err
	}
	if !rm.Typed() {
		// The rendezvous service checks typed memory; a device pointer described as host
		// memory is caught here, in a binary with CUDA.
		if err := v.checkMemory(b, rm); err != nil {
			return nil, fmt.Errorf("velo: GetIntoMemory(%v): %w", m, err)
		}
	}
	l, err := v.rv.GetIntoMemory(ctx, h, b, rm)
	return l, v.ownerGone(h, err)
}

// GetRequestInto is a GetBatch entry that fetches h into m (exactly h.Size bytes). An m that
// describes no memory fails that entry alone (ErrBufferSize).
func GetRequestInto(h Handle, m Memory) GetRequest {
	b, rm, err := m.view()
	if err != nil {
		return GetRequest{Handle: h, Into: []byte{}, IntoMemory: rendezvous.Memory{Type: m.Type}}
	}
	return GetRequest{Handle: h, Into: b, IntoMemory: rm}
}

// RangeInto is a ReadRanges entry that reads length bytes at offset of the payload into the first
// length bytes of m. An m that describes no memory fails that range alone (ErrBufferSize).
func RangeInto(offset, length uint64, m Memory) Range {
	b, rm, err := m.view()
	if err != nil {
		return Range{Offset: offset, Length: length, Dst: nil}
	}
	return Range{Offset: offset, Length: length, Dst: b, DstMemory: rm}
}

// putBounce bounds the host buffer PutMemory copies device memory through.
const putBounce = 4 << 20

// PutMemory is Put from m: device memory is copied to a host buffer (at most 4 MiB at a time)
// and put from there, piece by piece; opts.Notify goes with the last piece, once all are in the
// receiver's memory. Host memory is put as it is.
func (v *Velo) PutMemory(ctx context.Context, h GrantHandle, offset uint64, src Memory, opts *PutOptions) error {
	b, rm, err := src.view()
	if err != nil {
		return err
	}
	if err := v.checkMemory(b, rm); err != nil {
		return fmt.Errorf("velo: PutMemory(%v): %w", src, err)
	}
	if !rm.Typed() {
		return v.Put(ctx, h, offset, b, opts)
	}
	buf := make([]byte, min(len(b), putBounce))
	for off := 0; off < len(b); off += len(buf) {
		n := min(len(buf), len(b)-off)
		if err := v.copyMemory(buf[:n], MemoryHost, b[off:off+n], rm.Type); err != nil {
			return fmt.Errorf("velo: PutMemory: copying %d bytes at %d to the host buffer: %w", n, off, err)
		}
		var o *PutOptions
		if off+n == len(b) {
			o = opts
		}
		if err := v.Put(ctx, h, offset+uint64(off), buf[:n], o); err != nil {
			return err
		}
	}
	return nil
}
