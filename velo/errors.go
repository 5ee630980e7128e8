package velo

import (
	"github.com/velo-go/velo/velo/messenger"
	"github.com/velo-go/velo/velo/rendezvous"
	"github.com/velo-go/velo/velo/rendezvous/rdma"
	"github.com/velo-go/velo/velo/transport"
)

// RemoteError is what a call returns when the peer answered with an error: the Peer, the Handler,
// the Code of the failure, the Kind the remote handler attached with messenger.WithKind (or ""),
// and the peer's Text. Through Error and Unwrap it matches the sentinel of its code
// (ErrHandlerFailed, ErrUnknownHandler, ErrHandlerPanic, ErrBadRequest, ErrUnavailable);
// rendezvous errors the owner answered with wrap it too, beside their own sentinel.
type RemoteError = messenger.RemoteError

// Sentinel errors. Every error velo returns wraps one of these (errors.Is); the text around it
// names the detail and the fix.
var (
	// ErrInvalidEndpoint: RegisterPeer was given an address it cannot use (wrong version, truncated,
	// no address for any of this instance's transports, or this instance itself).
	ErrInvalidEndpoint = transport.ErrInvalidEndpoint
	// ErrUnknownPeer: a send to a peer that was never registered and never connected.
	ErrUnknownPeer = transport.ErrUnknownPeer
	// ErrPeerUnreachable: the connection to the peer failed or was lost mid-call.
	ErrPeerUnreachable = transport.ErrPeerUnreachable
	// ErrFrameTooLarge: a frame above a transport's limit.
	ErrFrameTooLarge = transport.ErrFrameTooLarge
	// ErrClosed: the instance, or the transport or registry a call needed, was closed. Every
	// closed error of velo's packages matches it (it is transport.ErrClosed, their root).
	ErrClosed = transport.ErrClosed

	// ErrUnknownHandler: the peer has no handler of that name.
	ErrUnknownHandler = messenger.ErrUnknownHandler
	// ErrHandlerFailed: the peer's handler returned an error.
	ErrHandlerFailed = messenger.ErrHandlerFailed
	// ErrHandlerPanic: the peer's handler panicked (the peer recovered).
	ErrHandlerPanic = messenger.ErrHandlerPanic
	// ErrBadRequest: the peer could not read the message (e.g. a staged payload it could not fetch).
	ErrBadRequest = messenger.ErrBadRequest
	// ErrUnavailable: the peer refused the call before any handler saw it: it is shutting down,
	// or its inbox for this instance is full (WithInboxLimit); retry later.
	ErrUnavailable = messenger.ErrUnavailable
	// ErrNoRoute: no transport reaches the peer.
	ErrNoRoute = messenger.ErrNoRoute
	// ErrInvalidName: a handler name that is empty, too long or reserved ("velo." prefix).
	ErrInvalidName = messenger.ErrInvalidName

	// ErrBadHandle: a handle its owner never issued (forged or corrupted).
	ErrBadHandle = rendezvous.ErrBadHandle
	// ErrReleased: the handle's payload was freed: every reference was released.
	ErrReleased = rendezvous.ErrReleased
	// ErrForeignHandle: a handle sent to an instance that does not own it.
	ErrForeignHandle = rendezvous.ErrForeignHandle
	// ErrBadLease: a lease that is unknown, already ended, or another consumer's.
	ErrBadLease = rendezvous.ErrBadLease
	// ErrBufferSize: GetInto's buffer (or a GetRequest's Into) is not exactly the handle's size, or
	// a Range's Dst is shorter than its Length.
	ErrBufferSize = rendezvous.ErrBufferSize
	// ErrDuplicateHandle: a GetBatch named the same handle twice; the later entry is refused.
	ErrDuplicateHandle = rendezvous.ErrDuplicateHandle
	// ErrRange: a Range that is empty or reaches past the payload (refused before anything moves).
	ErrRange = rendezvous.ErrRange
	// ErrRegionFreed: StageRegion of a region after its Free.
	ErrRegionFreed = rdma.ErrRegionFreed
	// ErrProtocol: a peer sent something a correct peer never sends (messenger.ErrProtocol, which
	// the rendezvous service's protocol errors match too).
	ErrProtocol = messenger.ErrProtocol
	// ErrTooLarge: a payload above what this instance stages, or a handle that claims more than
	// WithMaxGetSize lets Get, GetPinned or a staged message allocate.
	ErrTooLarge = rendezvous.ErrTooLarge
	// ErrUnauthenticated: the owner authenticates its peers (a cluster secret or mutual TLS on its
	// control plane) and refused this instance a lease: it is not authenticated there.
	ErrUnauthenticated = rendezvous.ErrUnauthenticated
)
