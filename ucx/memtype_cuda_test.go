//go:build cuda && cgo && linux

package ucx

import (
	"errors"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// TestCUDABuildWithoutDevice runs in the binary built with -tags cuda,ucx_static on a machine
// without a GPU (the build machine, where libcuda.so.1 is the CUDA toolkit's stub): every CUDA
// call answers with the driver's error, none crashes, host memory still registers as host,
// and a host buffer passed as CUDA memory is refused with nothing registered. On a machine
// with a GPU it is skipped: test/gpu runs there.
func TestCUDABuildWithoutDevice(t *testing.T) {
	require.True(t, CUDAEnabled(), "a binary built with the cuda tag says it has CUDA")
	n, err := CUDADeviceCount()
	if err == nil && n > 0 {
		t.Skipf("this machine has %d CUDA devices: the GPU suite (make test-gpu) covers it", n)
	}
	var cerr *CUDAError
	if err != nil {
		require.True(t, errors.As(err, &cerr), "%v is not a *CUDAError", err)
		require.NotEmpty(t, cerr.Name)
		t.Logf("CUDADeviceCount: %v", err)
	}

	buf := make([]byte, 4096)
	p := uintptr(unsafe.Pointer(&buf[0]))
	mt, ord, qerr := QueryMemory(p)
	if qerr != nil {
		require.True(t, errors.As(qerr, &cerr), "%v is not a *CUDAError", qerr)
	} else {
		require.Equal(t, MemoryHost, mt)
		require.Equal(t, -1, ord)
	}
	cerr2 := CopyMemory(p, p+2048, 2048)
	if cerr2 != nil {
		require.True(t, errors.As(cerr2, &cerr), "%v is not a *CUDAError", cerr2)
		require.False(t, errors.Is(cerr2, errors.ErrUnsupported), "CopyMemory in a CUDA build says the build lacks CUDA")
	}

	ctx := testContext(t)
	b := newTestEngine(t, "b", nil)
	mem := allocFilled(t, 1<<20, 44)
	reg, err := b.RegisterWith(ctx, mem.Bytes(), RegisterOptions{MemoryType: MemoryCUDA})
	require.Error(t, err, "host memory registered as CUDA memory")
	require.Nil(t, reg)
	require.False(t, errors.Is(err, errors.ErrUnsupported), "a CUDA build answered %v", err)
	t.Logf("host memory as MemoryCUDA: %v", err)
	require.Zero(t, liveRegistrations(b))

	reg, err = b.RegisterWith(ctx, mem.Bytes(), RegisterOptions{MemoryType: MemoryHost})
	require.NoError(t, err)
	require.Equal(t, MemoryHost, reg.MemoryType())
	require.NoError(t, reg.Unregister(ctx))
}
