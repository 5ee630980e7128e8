//go:build cgo && linux

package ucxtransport_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/velo/transport"
	"github.com/velo-go/velo/velo/transport/ucxtransport"
)

// The transport's CUDA IPC calls, which the same-host lane uses for device memory, without a
// GPU: in a binary without CUDA each answers errors.ErrUnsupported naming the tags (the lane then
// has no CUDA IPC at all); with CUDA and the stub driver each answers the driver's error, so the
// lane records that reason and keeps device memory on UCX. Nothing is mapped either way.
func TestCUDAIPCCallsWithoutADevice(t *testing.T) {
	if _, err := ucx.CUDADeviceCount(); err == nil {
		t.Skip("this machine has a CUDA driver: test/gpu covers CUDA IPC")
	}
	u, err := ucxtransport.New(ucxtransport.Config{TLS: "tcp", Logger: quiet})
	require.NoError(t, err)
	defer u.Close()
	var ipc transport.CUDAIPC = u
	mem := make([]byte, 4096)
	_, eerr := ipc.ExportCUDA(mem)
	m, oerr := ipc.OpenCUDA(transport.CUDAExport{AllocSize: 4096}, mem, transport.MemoryHost)
	rerr := ipc.CUDAReady()
	require.Error(t, eerr)
	require.Error(t, oerr)
	require.Error(t, rerr)
	assert.Nil(t, m)
	for _, err := range []error{eerr, oerr, rerr} {
		if ucx.CUDAEnabled() {
			assert.False(t, errors.Is(err, errors.ErrUnsupported), "a CUDA build answers the driver's error: %v", err)
			assert.Contains(t, err.Error(), "CUDA_ERROR_STUB_LIBRARY")
		} else {
			assert.ErrorIs(t, err, errors.ErrUnsupported)
			assert.Contains(t, err.Error(), "-tags cuda,ucx_static")
		}
	}
	t.Logf("export: %v\nopen: %v\nready: %v", eerr, oerr, rerr)
}
