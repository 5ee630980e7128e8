package transport

import (
	"context"
	"fmt"
)

// MemoryType is the kind of memory a buffer lives in. The zero value is host memory, the kind
// every method of this package took before memory types existed.
type MemoryType uint8

const (
	// MemoryHost is ordinary host memory.
	MemoryHost MemoryType = 0
	// MemoryCUDA is memory of a CUDA device (a device pointer from cuMemAlloc or cudaMalloc).
	MemoryCUDA MemoryType = 1
)

// String names the memory type: "host", "cuda", or "memory type N" for one this package does not
// know.
func (t MemoryType) String() string {
	switch t {
	case MemoryHost:
		return "host"
	case MemoryCUDA:
		return "cuda"
	}
	return fmt.Sprintf("memory type %d", uint8(t))
}

// Device memory travels through the RMA seam as a []byte that views it
// (unsafe.Slice((*byte)(unsafe.Pointer(ptr)), n)): its address and length are what the methods
// below need, and nothing above the backend dereferences it. Code that may hold such a view
// checks the memory type before it reads or writes the bytes, and copies with CopyMemory.

// MemoryRMAWriter is an RMAWriter that registers memory of a given type for writing (the UCX
// transport: the owner's guarded PUT copies into device memory with the CUDA driver, and on
// InfiniBand the NIC writes it). The push receiver uses it for grants of typed regions.
type MemoryRMAWriter interface {
	RMAWriter
	// RegisterMemoryWritableOf is RegisterMemoryWritable of memory of type t.
	RegisterMemoryWritableOf(mem []byte, t MemoryType) (Registration, error)
}

// MemoryRMA is an RMA that also registers, and reads into, memory that is not host memory
// (the UCX transport). The rendezvous RDMA registry uses it for regions and destinations whose
// memory type the caller gave; a transport without it serves host memory only.
type MemoryRMA interface {
	RMA
	// CheckMemory reports whether mem is memory of type t on device (a CUDA device ordinal; -1
	// for host memory) that this transport can register and read into. Its error wraps
	// errors.ErrUnsupported, naming the build that has the memory type, when this binary has
	// none; otherwise it names what is wrong (a host pointer said to be device memory or the
	// reverse, a device that does not exist).
	CheckMemory(mem []byte, t MemoryType, device int) error
	// RegisterMemoryOf is RegisterMemory of memory of type t.
	RegisterMemoryOf(mem []byte, t MemoryType) (Registration, error)
	// GetMemory is Get into a destination of type t.
	GetMemory(ctx context.Context, peer InstanceID, key []byte, offset uint64, dst []byte, t MemoryType) error
	// CopyMemory copies len(src) bytes (len(dst) == len(src)) between any two memories of the
	// types given, and returns once they are at dst. The chunked path copies device memory
	// through a host bounce buffer with it.
	CopyMemory(dst []byte, dt MemoryType, src []byte, st MemoryType) error
	// ReadsTypedMany reports whether the transport's ManyReader.ReadMany honours Read.Memory;
	// if not, reads into typed memory go one GetMemory each.
	ReadsTypedMany() bool
}

// PeerMemoryRegisterer is a MemoryRMA whose registrations of typed memory depend on the peer that
// will read them (the same-host path: device memory exported by CUDA IPC to a consumer of its
// host, registered with the UCX transport for any other). The rendezvous registry calls it, when
// the transport has it, with the consumer the lease was granted to.
type PeerMemoryRegisterer interface {
	RegisterMemoryOfFor(peer InstanceID, mem []byte, t MemoryType) (Registration, error)
}

// CUDAExport is device memory of one process made mappable by another process of the same host
// (CUDA IPC): the handle names the whole allocation the memory lies in, never a part of it.
// velo/internal/wire encodes it for the same-host path's channel.
type CUDAExport struct {
	Handle    [64]byte // the allocation's CUDA IPC memory handle
	AllocID   uint64   // the allocation's process-wide buffer ID (unique for the owner's life)
	AllocSize uint64   // the allocation's size
	Offset    uint64   // of the exported memory from the allocation's base
	Device    [16]byte // the UUID of the allocation's device
}

// CUDAMapping is another process's allocation mapped into this one.
type CUDAMapping interface {
	// CopyTo copies len(dst) bytes at off of the allocation into dst, memory of type dt, and
	// returns once they are there.
	CopyTo(dst []byte, dt MemoryType, off uint64) error
	// Close unmaps the allocation (once the copies under way finished).
	Close() error
}

// CUDAIPC is a MemoryRMA that hands device memory to another process of the same host by CUDA
// IPC and maps what another process handed over (the UCX transport; the CUDA calls answer
// errors.ErrUnsupported without -tags cuda,ucx_static). The same-host path uses it for leases of
// device memory.
type CUDAIPC interface {
	// ExportCUDA exports the allocation device memory mem lies in.
	ExportCUDA(mem []byte) (CUDAExport, error)
	// OpenCUDA maps an export: on the export's device when this process sees it, else on the
	// device of near when near is device memory (type nearType), else on device 0.
	OpenCUDA(e CUDAExport, near []byte, nearType MemoryType) (CUDAMapping, error)
	// CUDAReady says why this process cannot open exports (nil when the driver sees a device).
	CUDAReady() error
}
