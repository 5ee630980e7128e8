package rendezvous

import (
	"errors"

	"github.com/velo-go/velo/velo/internal/errfam"
	"github.com/velo-go/velo/velo/messenger"
)

// Sentinels matched by errors.Is on the errors this package returns, locally or after a round trip
// to the owner.
var (
	// ErrBadHandle: the handle was not issued by its owner (forged, corrupted, or its nonce does not
	// match the slot).
	ErrBadHandle = errors.New("bad rendezvous handle")
	// ErrReleased: the handle's slot is gone: every reference to it was released.
	ErrReleased = errors.New("rendezvous handle already released")
	// ErrForeignHandle: the handle was sent to an instance that does not own it.
	ErrForeignHandle = errors.New("rendezvous handle belongs to another owner")
	// ErrBadLease: the lease is unknown, already ended (detached, released, expired, reaped), or
	// held by another consumer.
	ErrBadLease = errors.New("rendezvous lease is not valid")
	// ErrBufferSize: GetInto was given a buffer whose length is not the handle's size.
	ErrBufferSize = errors.New("destination buffer does not match the payload size")
	// ErrProtocol: the owner answered something a correct owner never sends. It also matches
	// messenger.ErrProtocol (velo.ErrProtocol).
	ErrProtocol = errfam.New("rendezvous protocol violation", messenger.ErrProtocol)
	// ErrClosed: the rendezvous service was shut down.
	ErrClosed = messenger.ErrClosed
	// ErrTooLarge: the payload is larger than this build can stage or move, or a handle claims
	// more bytes than this instance's MaxGetSize lets Get allocate.
	ErrTooLarge = errors.New("payload too large")
	// ErrUnauthenticated: the owner requires authenticated peers (credentials configured on its
	// control plane) and the requester is not one; no lease or remote key was granted.
	ErrUnauthenticated = errors.New("peer not authenticated")
)

// Error kinds: the names these sentinels travel under in a remote error.
const (
	kindBadHandle = "rendezvous.bad_handle"
	kindReleased  = "rendezvous.released"
	kindForeign   = "rendezvous.foreign_handle"
	kindBadLease  = "rendezvous.bad_lease"
	kindProtocol  = "rendezvous.protocol"
	kindClosed    = "rendezvous.closed"
	kindTooLarge  = "rendezvous.too_large"
	kindUnauth    = "rendezvous.unauthenticated"
)

// kinds are the sentinels a caller's errors match, with the fixes of those a caller can do
// something about; the owner's text says what happened.
var kinds = messenger.NewKinds("rendezvous",
	messenger.Kind{Name: kindBadHandle, Sentinel: ErrBadHandle, Fix: "the handle was not issued by this owner, or was damaged on its way; handles are only valid as the owner's MarshalText or MarshalBinary wrote them"},
	messenger.Kind{Name: kindReleased, Sentinel: ErrReleased, Fix: "a handle is staged with one reference and Get then Release spends it: Ref it once per further Get, or end the lease with Detach to fetch again"},
	messenger.Kind{Name: kindForeign, Sentinel: ErrForeignHandle},
	messenger.Kind{Name: kindBadLease, Sentinel: ErrBadLease, Fix: "the owner ended the lease: its TTL passed (WithLeaseTTL), the payload was released, or the owner restarted; Get the handle again"},
	messenger.Kind{Name: kindProtocol, Sentinel: ErrProtocol},
	messenger.Kind{Name: kindClosed, Sentinel: ErrClosed},
	messenger.Kind{Name: kindTooLarge, Sentinel: ErrTooLarge},
	messenger.Kind{Name: kindUnauth, Sentinel: ErrUnauthenticated, Fix: "configure this instance with the owner's cluster secret or a certificate of its cluster CA (docs/security.md)"},
)

// ownerErr tags an owner-side error with the kind its sentinel travels under.
func ownerErr(err error) error { return kinds.Tag(err) }

// localErr is an error of op from this instance's own store, in the same words as remoteErr's.
func localErr(op string, err error) error { return kinds.Said(op, err) }

// remoteErr maps an error that came back from the owner onto this package's sentinels. An answer
// of a known kind is said once, in the owner's words (which name the handle and so the owner); it
// matches the sentinel and the messenger's RemoteError. Anything else keeps the messenger's text.
// The owner's answer to an acquire is the answer to the caller's Get, and is said as such.
func remoteErr(op string, err error) error {
	if op == "acquire" {
		op = "get"
	}
	return kinds.Remote(op, err)
}
