//go:build cuda && ucx_static

// The few CUDA driver calls velo makes itself (build tag cuda): initialise the driver, count
// the devices, ask what memory an address is, copy between host and device memory, and export,
// open and close CUDA IPC handles (the same-host path's device memory).
// Everything else on the GPU is UCX's (its cuda_copy and cuda_ipc transports) or the
// application's. velo never creates a CUDA context: a copy runs on the primary context of the
// device that owns the memory, retained once per device for the life of the process and made
// current only for the duration of the copy, as UCX's cuda_copy does; it goes on a non-blocking
// stream of velo's own on that context, so it neither waits for nor orders the application's
// streams (the application synchronises its own work before it hands memory to velo).
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
/* velo's own stream per device, non-blocking: a copy waits for itself, never for the
 * application's work on the legacy default stream or any other. */
static CUstream        velo_cuda_stream[VELO_CUDA_MAX_DEVICES];

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

/* The primary context of device ordinal and velo's stream on it, made on first use (the context
 * retained for the life of the process). */
static CUresult velo_cuda_context(int ordinal, CUcontext *ctx, CUstream *stream)
{
	CUresult res = CUDA_SUCCESS;
	CUcontext prev;
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
	if (res == CUDA_SUCCESS && velo_cuda_stream[ordinal] == NULL) {
		res = cuCtxPushCurrent(velo_cuda_primary[ordinal]);
		if (res == CUDA_SUCCESS) {
			res = cuStreamCreate(&velo_cuda_stream[ordinal], CU_STREAM_NON_BLOCKING);
			cuCtxPopCurrent(&prev);
		}
	}
	*ctx    = velo_cuda_primary[ordinal];
	*stream = velo_cuda_stream[ordinal];
	pthread_mutex_unlock(&velo_cuda_lock);
	return res;
}

/* velo_cuda_push makes the primary context of device ordinal current (velo_cuda_context) and
 * says velo's stream on it; velo_cuda_pop makes the previous context current again and returns
 * res, or the pop's failure when res is success. */
static CUresult velo_cuda_push(int ordinal, CUstream *stream)
{
	CUcontext ctx;
	CUresult res = velo_cuda_init();

	if (res == CUDA_SUCCESS) {
		res = velo_cuda_context(ordinal, &ctx, stream);
	}
	if (res == CUDA_SUCCESS) {
		res = cuCtxPushCurrent(ctx);
	}
	return res;
}

static CUresult velo_cuda_pop(CUresult res)
{
	CUcontext prev;
	CUresult res2 = cuCtxPopCurrent(&prev);

	return res != CUDA_SUCCESS ? res : res2;
}

int velo_cuda_copy(uint64_t dst, uint64_t src, size_t n)
{
	int dst_type, dst_dev, src_type, src_dev, dev;
	CUresult res;

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
	return velo_cuda_copy_on(dev, dst, src, n);
}

int velo_cuda_copy_on(int ordinal, uint64_t dst, uint64_t src, size_t n)
{
	CUstream stream;
	CUresult res = velo_cuda_push(ordinal, &stream);

	if (res != CUDA_SUCCESS) {
		return res;
	}
	/* With unified addressing the copy finds each side's kind itself. It runs on velo's own
	 * stream and the call returns once that stream has finished it: the bytes are in place,
	 * and nothing of the application's was waited for. */
	res = cuMemcpyAsync((CUdeviceptr)dst, (CUdeviceptr)src, n, stream);
	if (res == CUDA_SUCCESS) {
		res = cuStreamSynchronize(stream);
	}
	return velo_cuda_pop(res);
}

/* CUDA IPC. The owner exports the allocation a leased range lies in (a legacy IPC handle names
 * a whole cuMemAlloc allocation, never a part of it), and the consumer maps it on a context of
 * its own: the primary context of the device with the export's UUID when this process sees that
 * device (a same-device mapping), else the primary context of the device it copies to, with peer
 * access enabled lazily by the driver. Memory of cuMemCreate (VMM) or of a stream-ordered pool
 * (cudaMallocAsync) cannot be exported this way: the driver says so with
 * CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, and the export answers CUDA_ERROR_NOT_SUPPORTED. */
int velo_cuda_ipc_export(uint64_t addr, void *handle, uint64_t *base, uint64_t *size, uint64_t *buffer_id,
                         int *ordinal, void *uuid)
{
	unsigned long long id = 0;
	int memtype, dev, capable = 0;
	CUstream stream;
	CUdeviceptr b = 0;
	size_t sz = 0;
	CUipcMemHandle h;
	CUdevice cudev;
	CUuuid u;
	CUresult res;

	*base = 0;
	*size = 0;
	*buffer_id = 0;
	*ordinal = -1;
	res = velo_cuda_query(addr, &memtype, &dev);
	if (res != CUDA_SUCCESS) {
		return res;
	}
	if (dev < 0) {
		return CUDA_ERROR_INVALID_VALUE; /* host memory has no IPC handle */
	}
	res = cuPointerGetAttribute(&capable, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, (CUdeviceptr)addr);
	if (res == CUDA_SUCCESS && !capable) {
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	res = cuPointerGetAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, (CUdeviceptr)addr);
	if (res != CUDA_SUCCESS) {
		return res;
	}
	res = cuDeviceGet(&cudev, dev);
	if (res == CUDA_SUCCESS) {
		res = cuDeviceGetUuid(&u, cudev);
	}
	if (res != CUDA_SUCCESS) {
		return res;
	}
	res = velo_cuda_push(dev, &stream);
	if (res != CUDA_SUCCESS) {
		return res;
	}
	res = cuMemGetAddressRange(&b, &sz, (CUdeviceptr)addr);
	if (res == CUDA_SUCCESS) {
		res = cuIpcGetMemHandle(&h, b);
	}
	res = velo_cuda_pop(res);
	if (res != CUDA_SUCCESS) {
		return res;
	}
	memcpy(handle, &h, CU_IPC_HANDLE_SIZE);
	memcpy(uuid, &u, sizeof(u));
	*base = (uint64_t)b;
	*size = (uint64_t)sz;
	*buffer_id = (uint64_t)id;
	*ordinal = dev;
	return CUDA_SUCCESS;
}

int velo_cuda_ipc_open(const void *handle, const void *uuid, int near, uint64_t *ptr, int *ordinal)
{
	CUcontext prev;
	CUstream stream;
	CUdeviceptr p = 0;
	CUipcMemHandle h;
	CUdevice cudev;
	CUuuid u;
	CUresult res, res2;
	int count = 0, dev = -1, i;

	*ptr = 0;
	*ordinal = -1;
	res = velo_cuda_device_count(&count);
	if (res != CUDA_SUCCESS) {
		return res;
	}
	for (i = 0; i < count && dev < 0; i++) {
		if (cuDeviceGet(&cudev, i) == CUDA_SUCCESS && cuDeviceGetUuid(&u, cudev) == CUDA_SUCCESS &&
		    memcmp(&u, uuid, sizeof(u)) == 0) {
			dev = i;
		}
	}
	if (dev < 0) {
		dev = near >= 0 ? near : 0;
	}
	res = velo_cuda_push(dev, &stream);
	if (res != CUDA_SUCCESS) {
		return res;
	}
	memcpy(&h, handle, CU_IPC_HANDLE_SIZE);
	res = cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
	res2 = cuCtxPopCurrent(&prev);
	if (res != CUDA_SUCCESS) {
		return res;
	}
	if (res2 != CUDA_SUCCESS) {
		cuIpcCloseMemHandle(p);
		return res2;
	}
	*ptr = (uint64_t)p;
	*ordinal = dev;
	return CUDA_SUCCESS;
}

int velo_cuda_ipc_close(int ordinal, uint64_t ptr)
{
	CUstream stream;
	CUresult res = velo_cuda_push(ordinal, &stream);

	if (res != CUDA_SUCCESS) {
		return res;
	}
	return velo_cuda_pop(cuIpcCloseMemHandle((CUdeviceptr)ptr));
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
	case CUDA_ERROR_NOT_SUPPORTED:       return "CUDA_ERROR_NOT_SUPPORTED";
	case CUDA_ERROR_INVALID_HANDLE:      return "CUDA_ERROR_INVALID_HANDLE";
	case CUDA_ERROR_MAP_FAILED:          return "CUDA_ERROR_MAP_FAILED";
	default:                             return "unknown CUDA error";
	}
}
