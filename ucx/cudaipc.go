// CUDA IPC: device memory of one process mapped into another process of the same host, the
// device-memory half of velo's same-host path. The owner exports the allocation a range lies in
// (ExportIPC), hands the export to a consumer over a channel it trusts, and the consumer maps it
// (OpenIPC) and copies out of it on its own GPU context (IPCMapping.CopyTo). The driver calls
// are package capi's (build tag cuda); without the tag every call answers ErrCUDANotBuilt.

package ucx

import (
	"fmt"
	"sync"

	"github.com/velo-go/velo/ucx/internal/capi"
)

// IPCHandleSize is the size of a CUDA IPC memory handle.
const IPCHandleSize = capi.CudaIpcHandleSize

// IPCExport is what a consumer needs to map an owner's device memory: the IPC handle of the
// whole allocation (a CUDA IPC handle never names part of one), the allocation's size and
// process-wide buffer ID, where the exported address lies in it, and the UUID of its device.
type IPCExport struct {
	Handle   [IPCHandleSize]byte
	BufferID uint64 // CU_POINTER_ATTRIBUTE_BUFFER_ID: unique per allocation for the owner's life
	Size     uint64 // the allocation's size
	Offset   uint64 // of the exported address from the allocation's base
	Device   int    // the owner's device ordinal (in the owner's numbering)
	UUID     [16]byte
}

// ExportIPC exports the allocation addr lies in (cuMemGetAddressRange, cuIpcGetMemHandle on the
// device's primary context); [addr, addr+n) must lie in it. Memory that is not a cuMemAlloc or
// cudaMalloc allocation (host memory, cuMemCreate, a stream-ordered pool) is refused with the
// driver's answer. Without a driver it returns the driver's error (*CUDAError naming the call
// and, for the stub library, that no driver is there); without CUDA in the binary,
// ErrCUDANotBuilt.
func ExportIPC(addr uintptr, n int) (IPCExport, error) {
	if n <= 0 {
		return IPCExport{}, fmt.Errorf("ucx: ExportIPC: %w: length %d", StatusInvalidParam, n)
	}
	if !capi.CudaEnabled() {
		return IPCExport{}, ErrCUDANotBuilt
	}
	h, base, size, id, ord, uuid, res := capi.CudaIpcExport(addr)
	if err := cudaErr("cuIpcGetMemHandle", res); err != nil {
		if ce, ok := err.(*CUDAError); ok && ce.Name == "CUDA_ERROR_NOT_SUPPORTED" {
			return IPCExport{}, fmt.Errorf("%w: the memory at %#x is not a cuMemAlloc/cudaMalloc allocation (cuMemCreate and stream-ordered pools have no legacy IPC handle)", err, addr)
		}
		return IPCExport{}, err
	}
	if uint64(addr) < base || uint64(addr)-base+uint64(n) > size {
		return IPCExport{}, fmt.Errorf("ucx: ExportIPC: %w: [%#x, +%d) runs past its allocation [%#x, +%d)", StatusInvalidParam, addr, n, base, size)
	}
	return IPCExport{Handle: h, BufferID: id, Size: size, Offset: uint64(addr) - base, Device: ord, UUID: uuid}, nil
}

// IPCMapping is another process's allocation mapped into this one (OpenIPC). Close unmaps it;
// the owner must not free the allocation before every consumer closed its mapping.
type IPCMapping struct {
	mu     sync.Mutex
	ptr    uintptr
	size   uint64
	device int
	copies int  // copies under way
	closed bool // Close was called; the last copy unmaps
	err    error
}

// OpenIPC maps an export of another process (cuIpcOpenMemHandle with lazy peer access) on the
// primary context of the device with the export's UUID when this process sees it, else on device
// near (0 when near is negative). size is the allocation's size from the export.
func OpenIPC(e IPCExport, near int) (*IPCMapping, error) {
	if !capi.CudaEnabled() {
		return nil, ErrCUDANotBuilt
	}
	if e.Size == 0 || e.Offset >= e.Size {
		return nil, fmt.Errorf("ucx: OpenIPC: %w: an export at %d of an allocation of %d bytes", StatusInvalidParam, e.Offset, e.Size)
	}
	ptr, ord, res := capi.CudaIpcOpen(e.Handle, e.UUID, near)
	if err := cudaErr("cuIpcOpenMemHandle", res); err != nil {
		return nil, err
	}
	return &IPCMapping{ptr: ptr, size: e.Size, device: ord}, nil
}

// Device is the ordinal of the device the mapping was opened on.
func (m *IPCMapping) Device() int { return m.device }

// CopyTo copies n bytes at off of the mapped allocation to dst (device or host memory, unified
// addressing) on the context the mapping was opened on, and returns once they are at dst.
func (m *IPCMapping) CopyTo(dst uintptr, off uint64, n int) error {
	if n < 0 || off > m.size || uint64(n) > m.size-off {
		return fmt.Errorf("ucx: IPCMapping.CopyTo: %w: %d bytes at %d of a mapping of %d", StatusInvalidParam, n, off, m.size)
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return fmt.Errorf("ucx: IPCMapping.CopyTo: %w: the mapping is closed", StatusInvalidParam)
	}
	m.copies++
	m.mu.Unlock()
	var err error
	if n > 0 {
		err = cudaErr("cuMemcpyAsync", capi.CudaCopyOn(m.device, dst, m.ptr+uintptr(off), uintptr(n)))
	}
	m.mu.Lock()
	m.copies--
	last := m.closed && m.copies == 0
	m.mu.Unlock()
	if last {
		m.unmap()
	}
	return err
}

// Close unmaps the allocation (cuIpcCloseMemHandle) once no copy out of it is under way; it is
// idempotent and returns the unmapping's error when it ran here.
func (m *IPCMapping) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	now := m.copies == 0
	m.mu.Unlock()
	if now {
		return m.unmap()
	}
	return nil
}

func (m *IPCMapping) unmap() error {
	err := cudaErr("cuIpcCloseMemHandle", capi.CudaIpcClose(m.device, m.ptr))
	m.mu.Lock()
	m.err = err
	m.mu.Unlock()
	return err
}
