//go:build linux

package rdma

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/velo-go/velo/verbs"
)

// mapArena maps size bytes of anonymous memory, faults every page in (MAP_POPULATE, so the first
// remote read takes no page fault) and locks it (mlock, so it cannot be swapped out under a NIC).
func mapArena(size int) ([]byte, error) {
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("rdma: %w: mmap of %s: %w", ErrArenaMap, verbs.FormatBytes(uint64(size)), err)
	}
	if err := lockArena(mem); err != nil {
		_ = unix.Munmap(mem)
		return nil, err
	}
	return mem, nil
}

// lockArena locks mem (mlock, so it cannot be swapped out under a NIC).
func lockArena(mem []byte) error {
	if err := unix.Mlock(mem); err != nil {
		return memlockError(len(mem), err)
	}
	return nil
}

// memlockError explains a failed mlock: the limit, what is already locked, and the fix.
func memlockError(size int, err error) error {
	if !errors.Is(err, unix.ENOMEM) && !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EAGAIN) {
		return fmt.Errorf("rdma: %w: mlock of a %s arena: %w", ErrArenaMap, verbs.FormatBytes(uint64(size)), err)
	}
	m, rerr := verbs.ReadMemlock()
	if rerr == nil {
		if cerr := m.Check(uint64(size)); cerr != nil {
			return fmt.Errorf("rdma: %w: mlock of a %s arena failed (%v): %w", ErrMemlock, verbs.FormatBytes(uint64(size)), err, cerr)
		}
	}
	// The limit looks large enough, or could not be read: still name the limit and the fix.
	return fmt.Errorf("rdma: %w: mlock of a %s arena failed (%v) under RLIMIT_MEMLOCK: run `ulimit -l unlimited` before starting the process, or grant IPC_LOCK in a container, or lower RDMAPoolConfig.ArenaSize: %w",
		ErrMemlock, verbs.FormatBytes(uint64(size)), err, verbs.ErrMemlock)
}

func unmapArena(mem []byte) error {
	if err := unix.Munmap(mem); err != nil {
		return fmt.Errorf("rdma: munmap of an arena: %w", err)
	}
	return nil
}
