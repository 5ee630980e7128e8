//go:build cgo && linux

package capi

// #include "capi.h"
import "C"

import "unsafe"

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

// CudaIpcHandleSize is the size of a CUDA IPC memory handle (CU_IPC_HANDLE_SIZE).
const CudaIpcHandleSize = 64

// CudaIpcExport wraps velo_cuda_ipc_export: the IPC handle of the allocation addr lies in, the
// allocation's base, size and process-wide buffer ID, and its device's ordinal and UUID.
func CudaIpcExport(addr uintptr) (handle [CudaIpcHandleSize]byte, base, size, bufferID uint64, ordinal int, uuid [16]byte, res int) {
	var b, s, id C.uint64_t
	var ord C.int
	r := C.velo_cuda_ipc_export(C.uint64_t(addr), unsafe.Pointer(&handle[0]), &b, &s, &id, &ord, unsafe.Pointer(&uuid[0]))
	return handle, uint64(b), uint64(s), uint64(id), int(ord), uuid, int(r)
}

// CudaIpcOpen wraps velo_cuda_ipc_open: handle mapped on the device with uuid when this process
// sees it, else on device near; the mapping's address and the device it was opened on.
func CudaIpcOpen(handle [CudaIpcHandleSize]byte, uuid [16]byte, near int) (ptr uintptr, ordinal int, res int) {
	var p C.uint64_t
	var ord C.int
	r := C.velo_cuda_ipc_open(unsafe.Pointer(&handle[0]), unsafe.Pointer(&uuid[0]), C.int(near), &p, &ord)
	return uintptr(p), int(ord), int(r)
}

// CudaIpcClose wraps velo_cuda_ipc_close: cuIpcCloseMemHandle of a mapping opened on ordinal.
func CudaIpcClose(ordinal int, ptr uintptr) int {
	return int(C.velo_cuda_ipc_close(C.int(ordinal), C.uint64_t(ptr)))
}

// CudaCopyOn wraps velo_cuda_copy_on: CudaCopy on the primary context of device ordinal.
func CudaCopyOn(ordinal int, dst, src, n uintptr) int {
	return int(C.velo_cuda_copy_on(C.int(ordinal), C.uint64_t(dst), C.uint64_t(src), C.size_t(n)))
}
