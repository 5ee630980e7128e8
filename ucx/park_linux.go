//go:build linux

package ucx

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// parker is how the progressor sleeps and how other goroutines wake it.
//
// Why not poll(2) on the event fd, the obvious way: a goroutine blocked in a system call
// keeps its P (the Go scheduler's right to run Go code) until the runtime's monitor
// notices, 20 µs to 10 ms later. A sleeping engine would hold one of GOMAXPROCS Ps for
// most of its life, and every goroutine it woke would wait behind it (measured when the
// engine still had a locked progress thread: velo's UCX transport took 0.73 ms per 64 B
// round trip with poll(2) and 0.29 ms with this parker).
//
// So the progressor waits in Go's network poller instead, on a duplicate of the event fd
// (UCX's fd is an epoll set; Go's poller adds it to its own): the goroutine parks in the
// scheduler, its P goes straight to other goroutines, and the poller makes it runnable
// again when the fd fires.
//
// Waking is cheaper this way too. A submitter does not write UCX's wake-up eventfd
// (ucp_worker_signal: a system call, then the poller thread's wake-up, then the locked
// thread's); it moves the read deadline into the past, which readies the parked
// goroutine directly.
//
// Go's poller is edge-triggered and UCX's fd is level-triggered (it stays readable while
// any of its sources has events), and every wait begins by forgetting the edges the poller
// latched. wait therefore looks at the level itself before it first blocks: readiness that
// came before the look is seen by it, readiness after it is an edge that wakes the poller
// (or that it latched, which ends the block at once). A stale edge only costs a spurious
// return. TestParkerNoLostWakeups and TestEngineWakeStress check both paths.
type parker struct {
	fd    int // the worker's event fd; UCX owns it
	file  *os.File
	conn  syscall.RawConn
	poll  []unix.PollFd
	state atomic.Int32
}

const (
	parkerAwake int32 = iota
	parkerParking
)

// longAgo is a deadline that has always passed: setting it wakes a waiter at once.
var longAgo = time.Unix(1, 0)

func newParker(fd int) (*parker, error) {
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("ucx: duplicating the worker event fd: %w", err)
	}
	// os.NewFile registers only non-blocking descriptors with the poller. The flag is on the
	// open file description, which UCX shares; UCX only epoll_waits and arms on it, and
	// neither cares.
	if err := unix.SetNonblock(dup, true); err != nil {
		unix.Close(dup)
		return nil, fmt.Errorf("ucx: worker event fd: %w", err)
	}
	f := os.NewFile(uintptr(dup), "ucx-worker-efd")
	conn, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("ucx: worker event fd: %w", err)
	}
	p := &parker{fd: fd, file: f, conn: conn, poll: []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}}
	// Prove the fd is in the poller: a descriptor it refused would make every wait a
	// blocking read, which for an epoll fd fails with EINVAL.
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		f.Close()
		return nil, fmt.Errorf("ucx: the worker event fd cannot join Go's poller: %w", err)
	}
	return p, nil
}

// prepare announces that the caller is about to wait, with the given bound. Call it
// before the last look at the work queue: a wake after this point is never lost.
func (p *parker) prepare(timeout time.Duration) {
	p.state.Store(parkerParking)
	_ = p.file.SetReadDeadline(time.Now().Add(timeout))
}

// wait blocks until the fd is readable, the deadline passes or wake is called. The
// caller armed the fd (ucp_worker_arm) after prepare.
//
// The level is checked once, before the first block: each wait starts by resetting what
// Go's poller latched (internal/poll's prepareRead), so readiness that came before the wait
// is seen only by looking. Go calls back again only after the poller saw an edge, a deadline
// or a wake; the caller progresses the worker and arms it again after any return, so a
// second look would only cost a system call per wake-up.
func (p *parker) wait() error {
	first := true
	err := p.conn.Read(func(uintptr) bool {
		if !first {
			return true
		}
		first = false
		return p.readable()
	})
	if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		return err
	}
	return nil
}

func (p *parker) readable() bool {
	for {
		n, err := unix.Poll(p.poll, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return n > 0 || err != nil
	}
}

// done ends a prepare, whether or not the caller waited.
func (p *parker) done() { p.state.Store(parkerAwake) }

// wake makes a current or imminent wait return. Callers serialise wake with their own
// last look at the queue (the engine holds its mutex for both), so a wake either lands
// after prepare or the queue check sees the work.
func (p *parker) wake() {
	if p.state.Load() == parkerParking {
		_ = p.file.SetReadDeadline(longAgo)
	}
}

func (p *parker) close() { p.file.Close() }
