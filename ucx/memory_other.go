//go:build !linux

package ucx

// Memory is mmap'd registration memory; on this platform it cannot be allocated.
type Memory struct{}

// MemoryOptions tune AllocMemory.
type MemoryOptions struct {
	Lock bool
}

// AllocMemory returns ErrUnsupported off Linux.
func AllocMemory(size int, opts MemoryOptions) (*Memory, error) { return nil, ErrUnsupported }

// Bytes returns nil.
func (m *Memory) Bytes() []byte { return nil }

// Addr returns 0.
func (m *Memory) Addr() uintptr { return 0 }

// Len returns 0.
func (m *Memory) Len() int { return 0 }

// Locked returns false.
func (m *Memory) Locked() bool { return false }

// Free does nothing.
func (m *Memory) Free() error { return nil }
