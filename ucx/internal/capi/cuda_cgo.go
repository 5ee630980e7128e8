//go:build cgo && linux

package capi

// #include "capi.h"
import "C"

// The CUDA calls of cuda.c (build tag cuda) or nocuda.c (without it). Each returns a CUresult:
// 0 is success, CudaNotBuilt means the binary has no CUDA.

// CudaNotBuilt is the result of every call in a build without the cuda tag.
const CudaNotBuilt = int(C.VELO_CUDA_NOT_BUILT)

// CudaEnabled wraps velo_cuda_enabled: whether this binary was built with CUDA.
func CudaEnabled() bool { return C.velo_cuda_enabled() != 0 }

// CudaDeviceCount wraps velo_cuda_device_count (cuInit, cuDeviceGetCount).
func CudaDeviceCount() (count int, res int) {
	var n C.int
	r := C.velo_cuda_device_count(&n)
	return int(n), int(r)
}

// CudaQuery wraps velo_cuda_query (cuPointerGetAttribute): addr's memory type (MemTypeHost or
// MemTypeCUDA) and device ordinal (-1 for host memory).
func CudaQuery(addr uintptr) (memType, ordinal, res int) {
	var mt, ord C.int
	r := C.velo_cuda_query(C.uint64_t(addr), &mt, &ord)
	return int(mt), int(ord), int(r)
}

// CudaCopy wraps velo_cuda_copy: n bytes from src to dst with cuMemcpyAsync on velo's stream of
// the primary context of the device that owns one of them, waited for (memmove when both are
// host memory).
func CudaCopy(dst, src, n uintptr) int {
	return int(C.velo_cuda_copy(C.uint64_t(dst), C.uint64_t(src), C.size_t(n)))
}

// CudaErrorName wraps velo_cuda_error_name (cuGetErrorName, with names of its own for what the
// driver's stub library cannot name).
func CudaErrorName(res int) string { return C.GoString(C.velo_cuda_error_name(C.int(res))) }
