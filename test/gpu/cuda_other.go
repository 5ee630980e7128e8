//go:build !(cuda && ucx_static && cgo && linux)

package gpu

import "errors"

// Built says whether this binary can touch GPU memory at all.
const Built = false

var errNotBuilt = errors.New("gpu: built without -tags cuda,ucx_static (make test-gpu-bundle builds the suite with them)")

// Devices returns an error: this binary has no CUDA.
func Devices() (int, error) { return 0, errNotBuilt }

// Buffer is n bytes of device memory on one device.
type Buffer struct {
	Ptr    uintptr
	Len    int
	Device int
}

// Alloc returns an error: this binary has no CUDA.
func Alloc(device, n int) (*Buffer, error) { return nil, errNotBuilt }

// Bytes is nil.
func (b *Buffer) Bytes() []byte { return nil }

// Upload returns an error.
func (b *Buffer) Upload(src []byte) error { return errNotBuilt }

// Download returns an error.
func (b *Buffer) Download(dst []byte) error { return errNotBuilt }

// Free does nothing.
func (b *Buffer) Free() error { return nil }
