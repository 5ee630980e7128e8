//go:build !(cuda && ucx_static)

// The build without the cuda tag (or with it but without ucx_static, which link_cuda_needs_static.go
// refuses): no CUDA library is linked, and every call says so. Package
// ucx turns VELO_CUDA_NOT_BUILT into an error matching errors.ErrUnsupported that names the
// build tags (see cuda.c for the build with them).

#include "capi.h"

int velo_cuda_enabled(void)
{
	return 0;
}

int velo_cuda_device_count(int *count)
{
	*count = 0;
	return VELO_CUDA_NOT_BUILT;
}

int velo_cuda_query(uint64_t addr, int *memtype, int *ordinal)
{
	(void)addr;
	*memtype = UCS_MEMORY_TYPE_HOST;
	*ordinal = -1;
	return VELO_CUDA_NOT_BUILT;
}

int velo_cuda_copy(uint64_t dst, uint64_t src, size_t n)
{
	(void)dst;
	(void)src;
	(void)n;
	return VELO_CUDA_NOT_BUILT;
}

const char *velo_cuda_error_name(int res)
{
	(void)res;
	return "CUDA not built in";
}

int velo_cuda_ipc_export(uint64_t addr, void *handle, uint64_t *base, uint64_t *size, uint64_t *buffer_id,
                         int *ordinal, void *uuid)
{
	(void)addr;
	(void)handle;
	(void)uuid;
	*base = 0;
	*size = 0;
	*buffer_id = 0;
	*ordinal = -1;
	return VELO_CUDA_NOT_BUILT;
}

int velo_cuda_ipc_open(const void *handle, const void *uuid, int near, uint64_t *ptr, int *ordinal)
{
	(void)handle;
	(void)uuid;
	(void)near;
	*ptr = 0;
	*ordinal = -1;
	return VELO_CUDA_NOT_BUILT;
}

int velo_cuda_ipc_close(int ordinal, uint64_t ptr)
{
	(void)ordinal;
	(void)ptr;
	return VELO_CUDA_NOT_BUILT;
}

int velo_cuda_copy_on(int ordinal, uint64_t dst, uint64_t src, size_t n)
{
	(void)ordinal;
	(void)dst;
	(void)src;
	(void)n;
	return VELO_CUDA_NOT_BUILT;
}
