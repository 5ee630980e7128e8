//go:build cuda && ucx_static && cgo && linux

package gpu

// The suite's own device memory, through the CUDA driver API on each device's primary context
// (the context the CUDA runtime and UCX's cuda_copy use too). Linked against the toolkit's stub
// libcuda.so like the ucx module (third_party/cuda/README.md); the driver's libcuda.so.1 at run
// time.

// #cgo CFLAGS: -I${SRCDIR}/../../third_party/cuda/root/include
// #cgo LDFLAGS: -L${SRCDIR}/../../third_party/cuda/root/lib/stubs -lcuda
// #include <cuda.h>
// #include <stdint.h>
//
// static CUresult gpu_ctx(int ordinal, CUcontext *ctx) {
// 	CUdevice dev;
// 	CUresult r = cuDeviceGet(&dev, ordinal);
// 	if (r != CUDA_SUCCESS) return r;
// 	r = cuDevicePrimaryCtxRetain(ctx, dev);
// 	if (r != CUDA_SUCCESS) return r;
// 	return cuCtxPushCurrent(*ctx);
// }
// static void gpu_pop(void) { CUcontext c; cuCtxPopCurrent(&c); }
// static CUresult gpu_alloc(int ordinal, size_t n, void **ptr) {
// 	CUcontext ctx; CUdeviceptr p = 0;
// 	CUresult r = gpu_ctx(ordinal, &ctx);
// 	if (r != CUDA_SUCCESS) return r;
// 	r = cuMemAlloc(&p, n);
// 	gpu_pop();
// 	*ptr = (void *)(uintptr_t)p;
// 	return r;
// }
// static CUresult gpu_free(int ordinal, uint64_t ptr) {
// 	CUcontext ctx;
// 	CUresult r = gpu_ctx(ordinal, &ctx);
// 	if (r != CUDA_SUCCESS) return r;
// 	r = cuMemFree((CUdeviceptr)ptr);
// 	gpu_pop();
// 	if (r == CUDA_SUCCESS) { CUdevice dev; if (cuDeviceGet(&dev, ordinal) == CUDA_SUCCESS) cuDevicePrimaryCtxRelease(dev); }
// 	return r;
// }
// static CUresult gpu_htod(int ordinal, uint64_t dst, const void *src, size_t n) {
// 	CUcontext ctx;
// 	CUresult r = gpu_ctx(ordinal, &ctx);
// 	if (r != CUDA_SUCCESS) return r;
// 	r = cuMemcpyHtoD((CUdeviceptr)dst, src, n);
// 	if (r == CUDA_SUCCESS) r = cuCtxSynchronize();
// 	gpu_pop();
// 	return r;
// }
// static CUresult gpu_dtoh(int ordinal, void *dst, uint64_t src, size_t n) {
// 	CUcontext ctx;
// 	CUresult r = gpu_ctx(ordinal, &ctx);
// 	if (r != CUDA_SUCCESS) return r;
// 	r = cuMemcpyDtoH(dst, (CUdeviceptr)src, n);
// 	gpu_pop();
// 	return r;
// }
// static CUresult gpu_init(int *count) {
// 	CUresult r = cuInit(0);
// 	*count = 0;
// 	if (r != CUDA_SUCCESS) return r;
// 	return cuDeviceGetCount(count);
// }
// static const char *gpu_err(CUresult r) {
// 	const char *s = 0;
// 	if (cuGetErrorName(r, &s) != CUDA_SUCCESS || s == 0) return "unknown CUDA error";
// 	return s;
// }
import "C"

import (
	"fmt"
	"unsafe"
)

// Built says whether this binary can touch GPU memory at all.
const Built = true

func cuErr(call string, r C.CUresult) error {
	if r == C.CUDA_SUCCESS {
		return nil
	}
	return fmt.Errorf("%s: %s (%d)", call, C.GoString(C.gpu_err(r)), int(r))
}

// Devices initialises the driver and counts the CUDA devices.
func Devices() (int, error) {
	var n C.int
	if err := cuErr("cuInit/cuDeviceGetCount", C.gpu_init(&n)); err != nil {
		return 0, err
	}
	return int(n), nil
}

// Buffer is n bytes of device memory on one device.
type Buffer struct {
	Ptr    uintptr
	Len    int
	Device int
	p      unsafe.Pointer // the device address, as the driver returned it (never dereferenced)
}

// Alloc allocates n bytes on device ordinal (cuMemAlloc on its primary context).
func Alloc(device, n int) (*Buffer, error) {
	var p unsafe.Pointer
	if err := cuErr("cuMemAlloc", C.gpu_alloc(C.int(device), C.size_t(n), &p)); err != nil {
		return nil, err
	}
	return &Buffer{Ptr: uintptr(p), Len: n, Device: device, p: p}, nil
}

// Bytes is the buffer as the []byte the ucx and velo APIs take for device memory: a view that
// only UCX and the driver may read or write, never Go code.
func (b *Buffer) Bytes() []byte {
	return unsafe.Slice((*byte)(b.p), b.Len)
}

// Upload copies src to the start of the buffer (cuMemcpyHtoD, synchronous).
func (b *Buffer) Upload(src []byte) error {
	if len(src) > b.Len {
		return fmt.Errorf("upload of %d bytes into a %d-byte buffer", len(src), b.Len)
	}
	if len(src) == 0 {
		return nil
	}
	return cuErr("cuMemcpyHtoD", C.gpu_htod(C.int(b.Device), C.uint64_t(b.Ptr), unsafe.Pointer(&src[0]), C.size_t(len(src))))
}

// Download copies the first len(dst) bytes of the buffer to dst (cuMemcpyDtoH, synchronous).
func (b *Buffer) Download(dst []byte) error {
	if len(dst) > b.Len {
		return fmt.Errorf("download of %d bytes from a %d-byte buffer", len(dst), b.Len)
	}
	if len(dst) == 0 {
		return nil
	}
	return cuErr("cuMemcpyDtoH", C.gpu_dtoh(C.int(b.Device), unsafe.Pointer(&dst[0]), C.uint64_t(b.Ptr), C.size_t(len(dst))))
}

// Free releases the buffer (cuMemFree).
func (b *Buffer) Free() error {
	if b == nil || b.Ptr == 0 {
		return nil
	}
	err := cuErr("cuMemFree", C.gpu_free(C.int(b.Device), C.uint64_t(b.Ptr)))
	b.Ptr, b.p = 0, nil
	return err
}
