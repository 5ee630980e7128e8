package push

import (
	"errors"

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

// kinds are the sentinels a caller's errors match, the names they travel under in a remote error
// and what to do about each; the last three never cross the wire.
var kinds = messenger.NewKinds("push",
	messenger.Kind{Name: "push.bad_grant", Sentinel: ErrBadGrant, Fix: "use the handle exactly as the receiver's GrantHandle.MarshalText or MarshalBinary wrote it"},
	messenger.Kind{Name: "push.ended", Sentinel: ErrGrantEnded, Fix: "ask the receiver for a new grant (GrantWrite)"},
	messenger.Kind{Name: "push.not_grantee", Sentinel: ErrNotGrantee, Fix: "the receiver granted these ranges to another instance; ask it for a grant naming this one"},
	messenger.Kind{Name: "push.out_of_grant", Sentinel: ErrOutOfGrant, Fix: "write inside the ranges the grant names (GrantHandle.Ranges)"},
	messenger.Kind{Name: "push.unauthenticated", Sentinel: ErrUnauthenticated, Fix: "configure this instance with the receiver's cluster secret or a certificate of its cluster CA (docs/security.md)"},
	messenger.Kind{Sentinel: ErrOverlap},
	messenger.Kind{Sentinel: ErrEmptyPut},
	messenger.Kind{Sentinel: ErrNotifyTooLarge},
)

// receiverErr tags a receiver-side error with the kind its sentinel travels under.
func receiverErr(err error) error { return kinds.Tag(err) }

// opErr wraps err of op: a sentinel of this package, local or from the receiver's answer, is said
// in its own words with its fix; anything else keeps its text.
func opErr(op string, err error) error { return kinds.Said(op, err) }
