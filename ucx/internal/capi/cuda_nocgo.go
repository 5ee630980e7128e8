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
