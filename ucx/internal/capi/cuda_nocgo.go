//go:build !cgo || !linux

package capi

// The build without UCX has no CUDA either: every call returns CudaNotBuilt.

// CudaNotBuilt is the result of every call in a build without the cuda tag.
const CudaNotBuilt = int(-1)

// CudaEnabled is false.
func CudaEnabled() bool { return false }

// CudaDeviceCount returns CudaNotBuilt.
func CudaDeviceCount() (count int, res int) { return 0, CudaNotBuilt }

// CudaQuery returns CudaNotBuilt.
func CudaQuery(addr uintptr) (memType, ordinal, res int) { return MemTypeHost, -1, CudaNotBuilt }

// CudaCopy returns CudaNotBuilt.
func CudaCopy(dst, src, n uintptr) int { return CudaNotBuilt }

// CudaErrorName names CudaNotBuilt.
func CudaErrorName(res int) string { return "CUDA not built in" }

// CudaIpcHandleSize is the size of a CUDA IPC memory handle (CU_IPC_HANDLE_SIZE).
const CudaIpcHandleSize = 64

// CudaIpcExport returns CudaNotBuilt.
func CudaIpcExport(addr uintptr) (handle [CudaIpcHandleSize]byte, base, size, bufferID uint64, ordinal int, uuid [16]byte, res int) {
	return handle, 0, 0, 0, -1, uuid, CudaNotBuilt
}

// CudaIpcOpen returns CudaNotBuilt.
func CudaIpcOpen(handle [CudaIpcHandleSize]byte, uuid [16]byte, near int) (ptr uintptr, ordinal int, res int) {
	return 0, -1, CudaNotBuilt
}

// CudaIpcClose returns CudaNotBuilt.
func CudaIpcClose(ordinal int, ptr uintptr) int { return CudaNotBuilt }

// CudaCopyOn returns CudaNotBuilt.
func CudaCopyOn(ordinal int, dst, src, n uintptr) int { return CudaNotBuilt }
