//go:build !linux

package verbs

import "fmt"

// ReadMemlock returns an error wrapping ErrUnsupported: RDMA memory pinning is Linux-only.
func ReadMemlock() (Memlock, error) {
	return Memlock{}, fmt.Errorf("verbs: memlock: %w", ErrUnsupported)
}

// CheckMemlock returns an error wrapping ErrUnsupported.
func CheckMemlock(need uint64) error {
	return fmt.Errorf("verbs: memlock: %w", ErrUnsupported)
}

// RaiseMemlock returns an error wrapping ErrUnsupported.
func RaiseMemlock() (Memlock, error) {
	return Memlock{}, fmt.Errorf("verbs: memlock: %w", ErrUnsupported)
}
