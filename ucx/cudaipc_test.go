package ucx

import (
	"errors"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// CUDA IPC without a GPU: in a binary without CUDA every call answers ErrCUDANotBuilt (matching
// errors.ErrUnsupported); with CUDA and no driver (the toolkit's stub libcuda.so.1, a build
// machine), the driver's error names the call and says that no driver is there. Nothing is
// mapped either way, and bad arguments are refused before the driver is asked.
func TestCUDAIPCWithoutADevice(t *testing.T) {
	host := make([]byte, 4096)
	addr := uintptr(unsafe.Pointer(&host[0]))

	_, err := ExportIPC(addr, 0)
	require.ErrorIs(t, err, StatusInvalidParam, "an export of no bytes")
	_, err = OpenIPC(IPCExport{Size: 10, Offset: 10}, 0)
	if CUDAEnabled() {
		require.ErrorIs(t, err, StatusInvalidParam, "an export whose offset is past its allocation")
	}

	_, err = ExportIPC(addr, len(host))
	require.Error(t, err)
	m, oerr := OpenIPC(IPCExport{Size: 4096}, -1)
	require.Error(t, oerr)
	require.Nil(t, m)
	if !CUDAEnabled() {
		require.ErrorIs(t, err, ErrCUDANotBuilt)
		require.ErrorIs(t, oerr, ErrCUDANotBuilt)
		require.True(t, errors.Is(err, errors.ErrUnsupported))
		return
	}
	if _, derr := CUDADeviceCount(); derr == nil {
		t.Skip("this machine has a CUDA driver: the GPU suite (test/gpu) covers CUDA IPC")
	}
	var ce *CUDAError
	require.ErrorAs(t, err, &ce, "the export names the driver's answer: %v", err)
	assert.Contains(t, err.Error(), "cuIpcGetMemHandle")
	assert.Contains(t, err.Error(), "CUDA_ERROR_", "the driver's result by name")
	require.ErrorAs(t, oerr, &ce)
	assert.Contains(t, oerr.Error(), "cuIpcOpenMemHandle")
	t.Logf("export: %v\nopen: %v", err, oerr)
}
