//go:build cuda && ucx_static

// The few CUDA driver calls velo makes itself (build tag cuda): initialise the driver, count
// the devices, ask what memory an address is, and copy between host and device memory.
// Everything else on the GPU is UCX's (its cuda_copy and cuda_ipc transports) or the
// application's. velo never creates a CUDA context: a copy runs on the primary context of the
// device that owns the memory, retained once per device for the life of the process and made
// current only for the duration of the copy, exactly as UCX's cuda_copy does.
//
// Nothing here crashes without a GPU: with the driver's stub library (the build machine) or no
// device, cuInit fails and every call returns that result, which package ucx reports.

#include "capi.h"

#include <cuda.h>
#include <pthread.h>
#include <string.h>

#define VELO_CUDA_MAX_DEVICES 64

static pthread_once_t  velo_cuda_once = PTHREAD_ONCE_INIT;
static CUresult        velo_cuda_init_result;
static pthread_mutex_t velo_cuda_lock = PTHREAD_MUTEX_INITIALIZER;
static CUcontext       velo_cuda_primary[VELO_CUDA_MAX_DEVICES];

static void velo_cuda_init_once(void)
{
	velo_cuda_init_result = cuInit(0);
}

static CUresult velo_cuda_init(void)
{
	pthread_once(&velo_cuda_once, velo_cuda_init_once);
	return velo_cuda_init_result;
}

int velo_cuda_enabled(void)
{
	return 1;
}

int velo_cuda_device_count(int *count)
{
	CUresult res = velo_cuda_init();

	*count = 0;
	if (res != CUDA_SUCCESS) {
		return res;
	}
	return cuDeviceGetCount(count);
}

int velo_cuda_query(uint64_t addr, int *memtype, int *ordinal)
{
	CUresult res = velo_cuda_init();
	CUmemorytype mt = 0;
	int dev = -1;

	*memtype = UCS_MEMORY_TYPE_HOST;
	*ordinal = -1;
	if (res != CUDA_SUCCESS) {
		return res;
	}
	res = cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)addr);
	if (res == CUDA_ERROR_INVALID_VALUE) {
		return CUDA_SUCCESS; /* memory the driver does not know: ordinary host memory */
	}
	if (res != CUDA_SUCCESS) {
		return res;
	}
	if (mt != CU_MEMORYTYPE_DEVICE) {
		return CUDA_SUCCESS; /* pinned host memory (cuMemHostAlloc) is host memory too */
	}
	res = cuPointerGetAttribute(&dev, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (CUdeviceptr)addr);
	if (res != CUDA_SUCCESS) {
		return res;
	}
	*memtype = UCS_MEMORY_TYPE_CUDA;
	*ordinal = dev;
	return CUDA_SUCCESS;
}

/* The primary context of device ordinal, retained on first use. */
static CUresult velo_cuda_context(int ordinal, CUcontext *ctx)
{
	CUresult res = CUDA_SUCCESS;
	CUdevice dev;

	if (ordinal < 0 || ordinal >= VELO_CUDA_MAX_DEVICES) {
		return CUDA_ERROR_INVALID_DEVICE;
	}
	pthread_mutex_lock(&velo_cuda_lock);
	if (velo_cuda_primary[ordinal] == NULL) {
		res = cuDeviceGet(&dev, ordinal);
		if (res == CUDA_SUCCESS) {
			res = cuDevicePrimaryCtxRetain(&velo_cuda_primary[ordinal], dev);
		}
	}
	*ctx = velo_cuda_primary[ordinal];
	pthread_mutex_unlock(&velo_cuda_lock);
	return res;
}

int velo_cuda_copy(uint64_t dst, uint64_t src, size_t n)
{
	int dst_type, dst_dev, src_type, src_dev, dev;
	CUcontext ctx, prev;
	CUresult res, res2;

	res = velo_cuda_query(dst, &dst_type, &dst_dev);
	if (res == CUDA_SUCCESS) {
		res = velo_cuda_query(src, &src_type, &src_dev);
	}
	if (res != CUDA_SUCCESS) {
		return res;
	}
	dev = dst_dev >= 0 ? dst_dev : src_dev;
	if (dev < 0) {
		memmove((void*)(uintptr_t)dst, (const void*)(uintptr_t)src, n);
		return CUDA_SUCCESS;
	}
	res = velo_cuda_context(dev, &ctx);
	if (res != CUDA_SUCCESS) {
		return res;
	}
	res = cuCtxPushCurrent(ctx);
	if (res != CUDA_SUCCESS) {
		return res;
	}
	/* cuMemcpy with unified addressing finds each side's kind itself; the synchronize makes
	 * a device-to-device copy complete before the call returns, as for the other directions. */
	res = cuMemcpy((CUdeviceptr)dst, (CUdeviceptr)src, n);
	if (res == CUDA_SUCCESS) {
		res = cuCtxSynchronize();
	}
	res2 = cuCtxPopCurrent(&prev);
	return res != CUDA_SUCCESS ? res : res2;
}

const char *velo_cuda_error_name(int res)
{
	const char *name = NULL;

	if (res == VELO_CUDA_NOT_BUILT) {
		return "CUDA not built in";
	}
	if (cuGetErrorName((CUresult)res, &name) == CUDA_SUCCESS && name != NULL) {
		return name;
	}
	/* The driver's stub library answers cuGetErrorName with an error too. */
	switch (res) {
	case CUDA_ERROR_INVALID_VALUE:       return "CUDA_ERROR_INVALID_VALUE";
	case CUDA_ERROR_NOT_INITIALIZED:     return "CUDA_ERROR_NOT_INITIALIZED";
	case CUDA_ERROR_STUB_LIBRARY:        return "CUDA_ERROR_STUB_LIBRARY";
	case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH: return "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH";
	case CUDA_ERROR_NO_DEVICE:           return "CUDA_ERROR_NO_DEVICE";
	case CUDA_ERROR_INVALID_DEVICE:      return "CUDA_ERROR_INVALID_DEVICE";
	default:                             return "unknown CUDA error";
	}
}
