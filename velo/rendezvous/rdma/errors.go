package rdma

import (
	"errors"

	"github.com/velo-go/velo/velo/internal/errfam"
	"github.com/velo-go/velo/velo/transport"
	"github.com/velo-go/velo/verbs"
)

// Sentinels of this package; test with errors.Is.
var (
	// ErrArenaMap: an arena could not be mapped (mmap or mlock failed). Staging falls back to
	// plain memory with reason pool_exhausted.
	ErrArenaMap = errors.New("cannot map a pinned arena")
	// ErrMemlock: an arena did not fit RLIMIT_MEMLOCK. It also matches ErrArenaMap and
	// verbs.ErrMemlock; the text names the limit and the fix.
	ErrMemlock = errfam.New("memlock limit too low for a pinned arena", ErrArenaMap, verbs.ErrMemlock)
	// ErrBudget: the registered-bytes budget has no room for the request.
	ErrBudget = errors.New("registered-bytes budget spent")
	// ErrPoolExhausted: no mapped arena has room and the caller may not map one.
	ErrPoolExhausted = errors.New("no pinned memory available")
	// ErrClosed: the registry was closed. It also matches transport.ErrClosed (velo.ErrClosed).
	ErrClosed = errfam.New("rdma registry closed", transport.ErrClosed)
	// ErrDescriptor: an offer or descriptor that this build cannot decode.
	ErrDescriptor = errors.New("malformed RDMA descriptor")
	// ErrUnsupported: pinned arenas need Linux. It also matches errors.ErrUnsupported.
	ErrUnsupported = errfam.New("pinned arenas are unsupported on this platform (Linux only)", errors.ErrUnsupported)
)
