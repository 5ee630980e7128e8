package push

import (
	"errors"
	"fmt"

	"github.com/velo-go/velo/velo/messenger"
	"github.com/velo-go/velo/velo/rendezvous"
)

// Sentinels matched by errors.Is on what this package returns, locally or after a round trip to
// the receiver.
var (
	// ErrBadGrant: the grant handle is damaged, was not issued by its receiver, or its nonce does
	// not match.
	ErrBadGrant = errors.New("bad write grant")
	// ErrGrantEnded: the grant is over: revoked by its receiver, expired, ended because its writer
	// went down or restarted, or because the receiver drains or closed. The key behind it is dead.
	ErrGrantEnded = errors.New("write grant ended")
	// ErrNotGrantee: the grant names another writer; only the instance it names may use it.
	ErrNotGrantee = errors.New("write grant belongs to another writer")
	// ErrOutOfGrant: a write outside the grant's ranges, or a range outside the region.
	ErrOutOfGrant = errors.New("range outside the write grant")
	// ErrOverlap: a grant's ranges overlap each other or a live grant of another writer on the same
	// region.
	ErrOverlap = errors.New("ranges overlap a live write grant")
	// ErrEmptyPut: a put of no bytes.
	ErrEmptyPut = errors.New("put of no bytes")
	// ErrNotifyTooLarge: a notification payload above the limit (Config.MaxNotify).
	ErrNotifyTooLarge = errors.New("notification too large")
	// ErrUnauthenticated: the receiver requires authenticated peers and the writer is not one; it
	// was given no key and wrote nothing. It is the pull path's sentinel (velo.ErrUnauthenticated).
	ErrUnauthenticated = rendezvous.ErrUnauthenticated
	// ErrClosed: this instance's push service is closed.
	ErrClosed = messenger.ErrClosed
	// ErrDraining: the receiver drains; it takes no new grant and ended the ones it had.
	ErrDraining = messenger.ErrDraining
)

// Kinds: the names the sentinels travel under in a remote error.
var kindSentinels = map[string]error{
	"push.bad_grant":       ErrBadGrant,
	"push.ended":           ErrGrantEnded,
	"push.not_grantee":     ErrNotGrantee,
	"push.out_of_grant":    ErrOutOfGrant,
	"push.unauthenticated": ErrUnauthenticated,
}

// receiverErr tags a receiver-side error with the kind its sentinel travels under.
func receiverErr(err error) error {
	for k, s := range kindSentinels {
		if errors.Is(err, s) {
			return messenger.WithKind(err, k)
		}
	}
	return err
}

// fixes say what the caller can do about a sentinel.
var fixes = map[error]string{
	ErrGrantEnded:      "ask the receiver for a new grant (GrantWrite)",
	ErrBadGrant:        "use the handle exactly as the receiver's GrantHandle.MarshalText or MarshalBinary wrote it",
	ErrNotGrantee:      "the receiver granted these ranges to another instance; ask it for a grant naming this one",
	ErrOutOfGrant:      "write inside the ranges the grant names (GrantHandle.Ranges)",
	ErrUnauthenticated: "configure this instance with the receiver's cluster secret or a certificate of its cluster CA (docs/security.md)",
}

// opError is one failed operation, said once, with the fix where there is one.
type opError struct {
	op       string
	detail   string
	sentinel error
	causes   []error
}

func (e *opError) Error() string {
	s := "push: " + e.op + ": " + e.detail
	if fix := fixes[e.sentinel]; fix != "" {
		s += " (" + fix + ")"
	}
	return s
}

func (e *opError) Unwrap() []error { return e.causes }

// opErr wraps err of op: a sentinel of this package, local or from the receiver's answer, is said
// in its own words with its fix; anything else keeps its text.
func opErr(op string, err error) error {
	if err == nil {
		return nil
	}
	var re *messenger.RemoteError
	if errors.As(err, &re) {
		if s, ok := kindSentinels[re.Kind]; ok {
			return &opError{op: op, detail: re.Text, sentinel: s, causes: []error{s, re}}
		}
	}
	for _, s := range []error{ErrBadGrant, ErrGrantEnded, ErrNotGrantee, ErrOutOfGrant, ErrUnauthenticated, ErrOverlap, ErrEmptyPut, ErrNotifyTooLarge} {
		if errors.Is(err, s) {
			return &opError{op: op, detail: err.Error(), sentinel: s, causes: []error{err}}
		}
	}
	return fmt.Errorf("push: %s: %w", op, err)
}
