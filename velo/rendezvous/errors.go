package rendezvous

import (
	"errors"
	"fmt"

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

var kindSentinels = map[string]error{
	kindBadHandle: ErrBadHandle,
	kindReleased:  ErrReleased,
	kindForeign:   ErrForeignHandle,
	kindBadLease:  ErrBadLease,
	kindProtocol:  ErrProtocol,
	kindClosed:    ErrClosed,
	kindTooLarge:  ErrTooLarge,
	kindUnauth:    ErrUnauthenticated,
}

// ownerErr tags an owner-side error with the kind its sentinel travels under.
func ownerErr(err error) error {
	for k, s := range kindSentinels {
		if errors.Is(err, s) {
			return messenger.WithKind(err, k)
		}
	}
	return err
}

// fixes say, for the sentinels a caller can do something about, what to do; the owner's text says
// what happened.
var fixes = map[error]string{
	ErrReleased:        "a handle is staged with one reference and Get then Release spends it: Ref it once per further Get, or end the lease with Detach to fetch again",
	ErrBadLease:        "the owner ended the lease: its TTL passed (WithLeaseTTL), the payload was released, or the owner restarted; Get the handle again",
	ErrBadHandle:       "the handle was not issued by this owner, or was damaged on its way; handles are only valid as the owner's MarshalText or MarshalBinary wrote them",
	ErrUnauthenticated: "configure this instance with the owner's cluster secret or a certificate of its cluster CA (docs/security.md)",
}

// publicOps names the protocol steps as the caller knows them: the owner's answer to an acquire
// is the answer to the caller's Get.
var publicOps = map[string]string{"acquire": "get"}

// opError is an error of one operation, said once: the operation, the detail (the owner's own
// text, which names the handle and so the owner, whether it came over the wire or from the local
// store), and the fix where there is one. It matches this package's sentinel and, for an answer
// that came over the wire, the messenger's RemoteError (errors.As gives the peer and handler).
type opError struct {
	op       string
	detail   string
	sentinel error
	causes   []error
}

func (e *opError) Error() string {
	s := "rendezvous: " + e.op + ": " + e.detail
	if fix := fixes[e.sentinel]; fix != "" {
		s += " (" + fix + ")"
	}
	return s
}

func (e *opError) Unwrap() []error { return e.causes }

// localErr is an error of op from this instance's own store, in the same words as remoteErr's.
func localErr(op string, err error) error {
	for _, s := range kindSentinels {
		if errors.Is(err, s) {
			return &opError{op: op, detail: err.Error(), sentinel: s, causes: []error{err}}
		}
	}
	return fmt.Errorf("rendezvous: %s: %w", op, err)
}

// remoteErr maps an error that came back from the owner onto this package's sentinels. An answer
// of a known kind is said once, in the owner's words; anything else keeps the messenger's text.
func remoteErr(op string, err error) error {
	if p, ok := publicOps[op]; ok {
		op = p
	}
	var re *messenger.RemoteError
	if errors.As(err, &re) {
		if s, ok := kindSentinels[re.Kind]; ok {
			return &opError{op: op, detail: re.Text, sentinel: s, causes: []error{s, re}}
		}
	}
	return fmt.Errorf("rendezvous: %s: %w", op, err)
}
