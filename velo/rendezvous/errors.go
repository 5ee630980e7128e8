package rendezvous

import (
	"errors"
	"fmt"

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
	// ErrProtocol: the owner answered something a correct owner never sends.
	ErrProtocol = errors.New("rendezvous protocol violation")
	// ErrClosed: the rendezvous service was shut down.
	ErrClosed = messenger.ErrClosed
	// ErrTooLarge: the payload is larger than this build can stage or move, or a handle claims
	// more bytes than this instance's MaxGetSize lets Get allocate.
	ErrTooLarge = errors.New("payload too large")
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
)

var kindSentinels = map[string]error{
	kindBadHandle: ErrBadHandle,
	kindReleased:  ErrReleased,
	kindForeign:   ErrForeignHandle,
	kindBadLease:  ErrBadLease,
	kindProtocol:  ErrProtocol,
	kindClosed:    ErrClosed,
	kindTooLarge:  ErrTooLarge,
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

// remoteErr maps an error that came back from the owner onto this package's sentinels, keeping
// the remote detail.
func remoteErr(op string, err error) error {
	var re *messenger.RemoteError
	if errors.As(err, &re) {
		if s, ok := kindSentinels[re.Kind]; ok {
			return fmt.Errorf("rendezvous: %s: %w: %w", op, s, err)
		}
	}
	return fmt.Errorf("rendezvous: %s: %w", op, err)
}
