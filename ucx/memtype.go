// Memory types: host memory and CUDA device memory, as registrations, GET destinations and
// the few CUDA calls velo makes itself (build tag cuda).

package ucx

import (
	"fmt"

	"github.com/velo-go/velo/ucx/internal/capi"
)

// MemoryType is the kind of memory a buffer lives in. The zero value is host memory, the kind
// every API of this package took before memory types existed.
type MemoryType uint8

const (
	// MemoryHost is ordinary host memory (UCS_MEMORY_TYPE_HOST).
	MemoryHost MemoryType = 0
	// MemoryCUDA is memory of a CUDA device, a device pointer from cuMemAlloc or cudaMalloc
	// (UCS_MEMORY_TYPE_CUDA). Only a binary built with -tags cuda,ucx_static takes it.
	MemoryCUDA MemoryType = 1
)

// String names the memory type: "host", "cuda", or "memory type N" for a type this package
// does not know (a UCX key may name other types of UCX's).
func (t MemoryType) String() string {
	switch t {
	case MemoryHost:
		return "host"
	case MemoryCUDA:
		return "cuda"
	}
	return fmt.Sprintf("memory type %d", uint8(t))
}

// ucs is the ucs_memory_type_t of t for package capi.
func (t MemoryType) ucs() int {
	if t == MemoryCUDA {
		return capi.MemTypeCUDA
	}
	return capi.MemTypeHost
}

func (t MemoryType) valid() error {
	if t > MemoryCUDA {
		return fmt.Errorf("ucx: %w: %v is not a memory type this package knows (MemoryHost or MemoryCUDA)", StatusInvalidParam, t)
	}
	return nil
}

// ErrCUDANotBuilt is what a binary built without CUDA answers to CUDA memory and to the CUDA
// calls: it names the build that has it. It matches errors.ErrUnsupported.
var ErrCUDANotBuilt error = &unsupported{"ucx: CUDA memory needs a binary built with -tags cuda,ucx_static " +
	"(after make ucx-static-cuda, which builds UCX with CUDA support); this one was built without the cuda tag"}

// CUDAError is a failed CUDA driver call: its name and result code, for example
// cuInit: CUDA_ERROR_STUB_LIBRARY (34) on a machine whose libcuda.so.1 is the driver's stub.
type CUDAError struct {
	Call string // the driver call, e.g. "cuInit"
	Code int    // its CUresult
	Name string // CUDA_ERROR_...
}

func (e *CUDAError) Error() string {
	msg := fmt.Sprintf("ucx: %s: %s (%d)", e.Call, e.Name, e.Code)
	switch e.Name {
	case "CUDA_ERROR_STUB_LIBRARY":
		msg += ": the libcuda.so.1 loaded is the CUDA toolkit's stub, not the NVIDIA driver's (no driver on this machine)"
	case "CUDA_ERROR_NO_DEVICE":
		msg += ": the NVIDIA driver sees no CUDA device"
	case "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH":
		msg += ": the NVIDIA kernel module and its user-space libcuda.so.1 are of different releases"
	}
	return msg
}

func cudaErr(call string, res int) error {
	switch res {
	case 0:
		return nil
	case capi.CudaNotBuilt:
		return ErrCUDANotBuilt
	}
	return &CUDAError{Call: call, Code: res, Name: capi.CudaErrorName(res)}
}

// CUDAEnabled reports whether this binary was built with CUDA (-tags cuda,ucx_static): whether
// its UCX has the CUDA transports and this package takes MemoryCUDA. It says nothing about the
// machine: CUDADeviceCount does.
func CUDAEnabled() bool { return capi.CudaEnabled() }

// CUDADeviceCount initialises the CUDA driver (cuInit) and returns the number of CUDA devices.
// Without a driver or a device it returns the driver's error (a *CUDAError); in a binary built
// without CUDA, ErrCUDANotBuilt.
func CUDADeviceCount() (int, error) {
	n, res := capi.CudaDeviceCount()
	if err := cudaErr("cuInit/cuDeviceGetCount", res); err != nil {
		return 0, err
	}
	return n, nil
}

// QueryMemory asks the CUDA driver what memory addr is: MemoryCUDA with its device ordinal, or
// MemoryHost with ordinal -1 (also for pinned host memory and for memory the driver never saw).
// Without a driver it returns the driver's error; without CUDA in the binary, ErrCUDANotBuilt.
func QueryMemory(addr uintptr) (MemoryType, int, error) {
	mt, ord, res := capi.CudaQuery(addr)
	if err := cudaErr("cuPointerGetAttribute", res); err != nil {
		return MemoryHost, -1, err
	}
	if mt == capi.MemTypeCUDA {
		return MemoryCUDA, ord, nil
	}
	return MemoryHost, -1, nil
}

// CopyMemory copies n bytes from src to dst, each host or device memory (unified addressing),
// on the primary context of the device that owns one of them, and returns once the bytes are at
// dst. velo never creates a CUDA context of its own: the primary context is the one the runtime
// API and UCX's cuda_copy use too. The copy goes on a non-blocking stream of its own, so it does
// not wait for the application's streams: synchronise them before handing the memory over.
func CopyMemory(dst, src uintptr, n int) error {
	if n < 0 {
		return fmt.Errorf("ucx: CopyMemory: %w: negative length %d", StatusInvalidParam, n)
	}
	if !capi.CudaEnabled() {
		return ErrCUDANotBuilt
	}
	if n == 0 {
		return nil
	}
	return cudaErr("cuMemcpy", capi.CudaCopy(dst, src, uintptr(n)))
}

// checkMemory checks that [addr, addr+n) is memory of type want before it goes to UCX: CUDA
// memory needs a binary with CUDA, and in such a binary the driver is asked (when it is there)
// whether the pointer is what the caller says, so that a device pointer passed as host memory
// (or the reverse) fails here instead of crashing a memcpy. what names the buffer in the error.
func checkMemory(what string, addr uintptr, n int, want MemoryType) error {
	if err := want.valid(); err != nil {
		return err
	}
	if !capi.CudaEnabled() {
		if want == MemoryCUDA {
			return fmt.Errorf("ucx: %s: %w", what, ErrCUDANotBuilt)
		}
		return nil
	}
	if n == 0 {
		return nil
	}
	got, _, err := QueryMemory(addr)
	if err != nil {
		if want == MemoryHost {
			return nil // no driver: there is no device memory either
		}
		return fmt.Errorf("ucx: %s: said to be CUDA memory, and the driver cannot tell: %w", what, err)
	}
	if got != want {
		return fmt.Errorf("ucx: %s: %w: the memory at %#x is %v memory, not %v", what, StatusInvalidParam, addr, got, want)
	}
	if want == MemoryCUDA {
		last, _, err := QueryMemory(addr + uintptr(n) - 1)
		if err != nil || last != MemoryCUDA {
			return fmt.Errorf("ucx: %s: %w: [%#x, +%d) runs past the CUDA allocation", what, StatusInvalidParam, addr, n)
		}
	}
	return nil
}
