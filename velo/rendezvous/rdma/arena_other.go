//go:build !linux

package rdma

import "fmt"

// mapArena: arenas are mmap'd and mlocked, which this package does only on Linux (the only
// platform the UCX transport runs on).
func mapArena(size int) ([]byte, error) {
	return nil, fmt.Errorf("rdma: %w: pinned arenas need Linux", ErrUnsupported)
}

func unmapArena(mem []byte) error { return nil }

func lockArena(mem []byte) error {
	return fmt.Errorf("rdma: %w: pinned arenas need Linux", ErrUnsupported)
}
