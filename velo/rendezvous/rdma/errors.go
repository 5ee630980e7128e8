package rdma

import (
	"errors"

	"github.com/velo-go/velo/verbs"
)

// Sentinels of this package; test with errors.Is.
var (
	// ErrArenaMap: an arena could not be mapped (mmap or mlock failed). Staging falls back to
	// plain memory with reason pool_exhausted.
	ErrArenaMap = errors.New("cannot map a pinned arena")
	// ErrMemlock: an arena did not fit RLIMIT_MEMLOCK. It also matches ErrArenaMap and
	// verbs.ErrMemlock; the text names the limit and the fix.
	ErrMemlock = &sentinel{"memlock limit too low for a pinned arena", ErrArenaMap}
	// ErrBudget: the registered-bytes budget has no room for the request.
	ErrBudget = errors.New("registered-bytes budget spent")
	// ErrPoolExhausted: no mapped arena has room and the caller may not map one.
	ErrPoolExhausted = errors.New("no pinned memory available")
	// ErrClosed: the registry was closed.
	ErrClosed = errors.New("rdma registry closed")
	// ErrDescriptor: an offer or descriptor that this build cannot decode.
	ErrDescriptor = errors.New("malformed RDMA descriptor")
	// ErrUnsupported: pinned arenas need Linux.
	ErrUnsupported = errors.New("unsupported on this platform")
)

// sentinel is an error that also matches a parent sentinel and verbs.ErrMemlock.
type sentinel struct {
	msg    string
	parent error
}

func (s *sentinel) Error() string { return s.msg }
func (s *sentinel) Is(target error) bool {
	return target == s.parent || target == verbs.ErrMemlock
}
