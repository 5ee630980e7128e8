package ucxtransport

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/velo/transport"
)

var (
	_ transport.MemoryRMA       = (*Transport)(nil)
	_ transport.MemoryRMAWriter = (*Transport)(nil)
)

// RegisterMemoryWritableOf implements transport.MemoryRMAWriter: RegisterMemoryWritable with
// the memory type passed to ucp_mem_map (the guarded PUT copies into CUDA memory with the driver).
func (t *Transport) RegisterMemoryWritableOf(mem []byte, mt transport.MemoryType) (transport.Registration, error) {
	um, err := ucxMemory(mt)
	if err != nil {
		return nil, err
	}
	return t.register("RegisterMemoryWritable", mem, ucx.RegisterOptions{Access: ucx.AccessWrite, MemoryType: um}, " of "+mt.String()+" memory for writing")
}

// ucxMemory is t as package ucx names it.
func ucxMemory(t transport.MemoryType) (ucx.MemoryType, error) {
	switch t {
	case transport.MemoryHost:
		return ucx.MemoryHost, nil
	case transport.MemoryCUDA:
		return ucx.MemoryCUDA, nil
	}
	return 0, fmt.Errorf("ucx: %v is not a memory type this transport knows (host or cuda)", t)
}

func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// CheckMemory implements transport.MemoryRMA. Host memory is always fine. CUDA memory needs a
// binary built with -tags cuda,ucx_static (otherwise the error matches errors.ErrUnsupported and
// names the tags), a device ordinal the driver knows, and a pointer the driver says is memory of
// that device from its first byte to its last.
func (t *Transport) CheckMemory(mem []byte, mt transport.MemoryType, device int) error {
	if _, err := ucxMemory(mt); err != nil {
		return err
	}
	if mt == transport.MemoryHost {
		if !ucx.CUDAEnabled() || len(mem) == 0 {
			return nil
		}
		// With CUDA in the binary, a device pointer passed as host memory is caught here: the
		// chunked path would read or write it with the CPU.
		if got, _, err := ucx.QueryMemory(addrOf(mem)); err == nil && got != ucx.MemoryHost {
			return fmt.Errorf("ucx: the memory at %#x is %v memory, passed as host memory: describe it with velo.CUDAMemory", addrOf(mem), got)
		}
		return nil
	}
	if !ucx.CUDAEnabled() {
		return fmt.Errorf("ucx: %v memory: %w", mt, ucx.ErrCUDANotBuilt)
	}
	n, err := cudaDevices()
	if err != nil {
		return fmt.Errorf("ucx: %v memory on device %d: %w", mt, device, err)
	}
	if device < 0 || device >= n {
		return fmt.Errorf("ucx: %v memory on device %d: %w: this machine has %d CUDA devices (ordinals 0..%d); pass the ordinal the memory was allocated on", mt, device, errBadMemory, n, n-1)
	}
	first, dev, err := ucx.QueryMemory(addrOf(mem))
	if err != nil {
		return fmt.Errorf("ucx: the memory at %#x, said to be %v memory: %w", addrOf(mem), mt, err)
	}
	if first != ucx.MemoryCUDA {
		return fmt.Errorf("ucx: the memory at %#x is %v memory, not %v memory: describe it with velo.HostMemory", addrOf(mem), first, mt)
	}
	if dev != device {
		return fmt.Errorf("ucx: the memory at %#x is on CUDA device %d, not device %d: pass the ordinal the memory was allocated on", addrOf(mem), dev, device)
	}
	last, ldev, err := ucx.QueryMemory(addrOf(mem) + uintptr(len(mem)) - 1)
	if err != nil || last != ucx.MemoryCUDA || ldev != device {
		return fmt.Errorf("ucx: [%#x, +%d) runs past its CUDA allocation: pass the length that was allocated, or less", addrOf(mem), len(mem))
	}
	return nil
}

// cudaDevices is ucx.CUDADeviceCount, asked of the driver once per process (the count does not
// change while it runs; a batch into GPU memory checks every entry).
var cudaDevices = sync.OnceValues(ucx.CUDADeviceCount)

// errBadMemory is the root of CheckMemory's refusals of memory that is not what it is said to be.
var errBadMemory = errors.New("memory is not what it is described as")

// RegisterMemoryOf implements transport.MemoryRMA: RegisterMemory with the memory type passed to
// ucp_mem_map, so the owner's replies send from the memory with its type.
func (t *Transport) RegisterMemoryOf(mem []byte, mt transport.MemoryType) (transport.Registration, error) {
	um, err := ucxMemory(mt)
	if err != nil {
		return nil, err
	}
	return t.register("RegisterMemory", mem, ucx.RegisterOptions{MemoryType: um}, " of "+mt.String()+" memory")
}

// GetMemory implements transport.MemoryRMA: Get into a destination of type mt.
func (t *Transport) GetMemory(ctx context.Context, id transport.InstanceID, key []byte, offset uint64, dst []byte, mt transport.MemoryType) error {
	um, err := ucxMemory(mt)
	if err != nil {
		return err
	}
	return t.get(ctx, id, key, offset, dst, ucx.GetOptions{DstMemory: um})
}

// ReadsTypedMany implements transport.MemoryRMA: ReadMany passes each read's memory type to the
// engine's GetMany (ucx.KeyRead.DstMemory), which posts a typed read on its own.
func (t *Transport) ReadsTypedMany() bool { return true }

// CopyMemory implements transport.MemoryRMA. Host to host is a copy; anything else goes to the
// CUDA driver (ucx.CopyMemory), which a binary without CUDA refuses with ucx.ErrCUDANotBuilt.
func (t *Transport) CopyMemory(dst []byte, dt transport.MemoryType, src []byte, st transport.MemoryType) error {
	if len(dst) != len(src) {
		return fmt.Errorf("ucx: CopyMemory of %d bytes into %d", len(src), len(dst))
	}
	if dt == transport.MemoryHost && st == transport.MemoryHost {
		copy(dst, src)
		return nil
	}
	if len(src) == 0 {
		return nil
	}
	if err := ucx.CopyMemory(addrOf(dst), addrOf(src), len(src)); err != nil {
		return fmt.Errorf("ucx: copying %d bytes from %v to %v memory: %w", len(src), st, dt, err)
	}
	return nil
}
