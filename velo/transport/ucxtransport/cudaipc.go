package ucxtransport

import (
	"fmt"

	"github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/velo/transport"
)

// CUDA IPC for the same-host path (package velo/transport/shm): the driver calls are package
// ucx's, and without -tags cuda,ucx_static every one answers ucx.ErrCUDANotBuilt.

var _ transport.CUDAIPC = (*Transport)(nil)

// ExportCUDA implements transport.CUDAIPC.
func (t *Transport) ExportCUDA(mem []byte) (transport.CUDAExport, error) {
	if len(mem) == 0 {
		return transport.CUDAExport{}, fmt.Errorf("ucx: ExportCUDA of no memory")
	}
	e, err := ucx.ExportIPC(addrOf(mem), len(mem))
	if err != nil {
		return transport.CUDAExport{}, fmt.Errorf("ucx: exporting %d bytes of cuda memory at %#x by CUDA IPC: %w", len(mem), addrOf(mem), err)
	}
	return transport.CUDAExport{Handle: e.Handle, AllocID: e.BufferID, AllocSize: e.Size, Offset: e.Offset, Device: e.UUID}, nil
}

// OpenCUDA implements transport.CUDAIPC.
func (t *Transport) OpenCUDA(e transport.CUDAExport, near []byte, nearType transport.MemoryType) (transport.CUDAMapping, error) {
	dev := -1
	if nearType == transport.MemoryCUDA && len(near) > 0 {
		if mt, d, err := ucx.QueryMemory(addrOf(near)); err == nil && mt == ucx.MemoryCUDA {
			dev = d
		}
	}
	m, err := ucx.OpenIPC(ucx.IPCExport{Handle: e.Handle, BufferID: e.AllocID, Size: e.AllocSize, Offset: e.Offset, UUID: e.Device}, dev)
	if err != nil {
		return nil, fmt.Errorf("ucx: opening a CUDA IPC handle of an allocation of %d bytes: %w", e.AllocSize, err)
	}
	return cudaMapping{m}, nil
}

type cudaMapping struct{ m *ucx.IPCMapping }

func (c cudaMapping) CopyTo(dst []byte, dt transport.MemoryType, off uint64) error {
	if err := c.m.CopyTo(addrOf(dst), off, len(dst)); err != nil {
		return fmt.Errorf("ucx: copying %d bytes out of a CUDA IPC mapping into %v memory: %w", len(dst), dt, err)
	}
	return nil
}

func (c cudaMapping) Close() error { return c.m.Close() }

// CUDAReady implements transport.CUDAIPC: the driver sees at least one device.
func (t *Transport) CUDAReady() error {
	n, err := cudaDevices()
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("ucx: the CUDA driver sees no device")
	}
	return nil
}
