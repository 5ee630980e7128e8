package ucx

import (
	"errors"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMemoryTypeString(t *testing.T) {
	assert.Equal(t, "host", MemoryHost.String())
	assert.Equal(t, "cuda", MemoryCUDA.String())
	assert.Equal(t, "memory type 7", MemoryType(7).String())
	assert.Equal(t, MemoryType(0), MemoryHost, "the zero value is host memory")
}

// TestCUDACallsWithoutCUDA: in a binary built without the cuda tag (with or without cgo) the
// CUDA calls answer ErrCUDANotBuilt, which matches errors.ErrUnsupported and names the build.
func TestCUDACallsWithoutCUDA(t *testing.T) {
	if CUDAEnabled() {
		t.Skip("built with -tags cuda: TestCUDABuildWithoutDevice covers this binary")
	}
	named := func(err error) {
		t.Helper()
		require.Error(t, err)
		require.True(t, errors.Is(err, errors.ErrUnsupported), "%v does not match errors.ErrUnsupported", err)
		require.ErrorIs(t, err, ErrCUDANotBuilt)
		require.Contains(t, err.Error(), "-tags cuda,ucx_static")
	}
	buf := make([]byte, 2)
	n, err := CUDADeviceCount()
	named(err)
	require.Zero(t, n)
	mt, ord, err := QueryMemory(uintptr(unsafe.Pointer(&buf[0])))
	named(err)
	require.Equal(t, MemoryHost, mt)
	require.Equal(t, -1, ord)
	named(CopyMemory(uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&buf[1])), 1))
	require.ErrorIs(t, CopyMemory(0, 0, -1), StatusInvalidParam)
}
