//go:build linux

package ucx

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Memory is a page-aligned anonymous mapping outside the Go heap, the kind of memory to
// register with Context.MapMemory or Engine.Register. It is pre-faulted (MAP_POPULATE),
// so the first remote read does not take page faults, and optionally locked (mlock), so
// it cannot be swapped out while a NIC may read it. The garbage collector never sees it:
// it moves nowhere and lives until Free.
//
// This is pure Go (no cgo): the verbs module and tests can use it without UCX.
type Memory struct {
	mu     sync.Mutex
	b      []byte
	locked bool
}

// MemoryOptions tune AllocMemory.
type MemoryOptions struct {
	// Lock pins the pages in RAM with mlock. It needs RLIMIT_MEMLOCK above the size or
	// CAP_IPC_LOCK.
	Lock bool
}

// AllocMemory maps size bytes (rounded up to whole pages).
func AllocMemory(size int, opts MemoryOptions) (*Memory, error) {
	if size <= 0 {
		return nil, fmt.Errorf("ucx: AllocMemory: size %d must be positive", size)
	}
	page := os.Getpagesize()
	n := (size + page - 1) / page * page
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("ucx: mmap of %d bytes: %w", n, err)
	}
	m := &Memory{b: b}
	if opts.Lock {
		if err := unix.Mlock(b); err != nil {
			_ = unix.Munmap(b)
			if errors.Is(err, unix.ENOMEM) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EAGAIN) {
				return nil, fmt.Errorf("ucx: mlock of %d bytes: %w (RLIMIT_MEMLOCK too low: run 'ulimit -l unlimited' or grant CAP_IPC_LOCK)", n, err)
			}
			return nil, fmt.Errorf("ucx: mlock of %d bytes: %w", n, err)
		}
		m.locked = true
	}
	return m, nil
}

// Bytes is the mapping; nil after Free.
func (m *Memory) Bytes() []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.b
}

// Addr is the mapping's start address.
func (m *Memory) Addr() uintptr {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.b) == 0 {
		return 0
	}
	return uintptr(unsafe.Pointer(&m.b[0]))
}

// Len is the mapped length in bytes (a whole number of pages).
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.b)
}

// Locked reports whether the pages are locked in RAM.
func (m *Memory) Locked() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.locked
}

// Free unmaps the memory. Unmap every registration of it first: a peer reading freed
// memory through a software-emulated GET would crash this process (see docs/ucx.md).
// Free is idempotent.
func (m *Memory) Free() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.b == nil {
		return nil
	}
	b := m.b
	m.b = nil
	m.locked = false
	if err := unix.Munmap(b); err != nil {
		return fmt.Errorf("ucx: munmap: %w", err)
	}
	return nil
}
