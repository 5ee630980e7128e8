// Package transport defines the seam between the velo runtime and the wires it speaks over.
//
// A Transport moves opaque frames between velo instances and keeps per-peer order. It knows
// nothing of messages, handlers or rendezvous: the runtime frames those itself and hands the
// transport finished byte slices. Two transports exist: tcp (the control plane every deployment
// has) and ucx (active messages, plus one-sided reads for the rendezvous RDMA path).
//
// A transport that can also do one-sided reads implements RMA. The runtime only uses RMA on a
// transport added with velo.WithUCXTransport; added with velo.WithTransport, the same value
// carries messages only and the RDMA path reports not_configured.
package transport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
)

// InstanceID names one velo instance for its lifetime. It is drawn at random when the
// instance starts, so a restarted process is a new instance.
type InstanceID uint64

// String is the ID as 16 lowercase hex digits, the form every log line, error, PeerInfo's JSON and
// the introspection page use, so %v and %s print an ID the way the rest of velo shows it. (%x of
// an InstanceID now hex-encodes that text; convert with uint64(id) for the number.)
func (id InstanceID) String() string { return fmt.Sprintf("%016x", uint64(id)) }

// PeerAddress is what a transport needs to reach a remote instance: the instance's identity
// and the address blob that the remote transport of the same Name published.
type PeerAddress struct {
	ID          InstanceID
	Incarnation uint64
	Blob        []byte
	// Learned: the application did not register the peer; it reached this instance first and
	// told it its addresses. A transport opens nothing to such a peer ahead of use (no eager
	// endpoint): the peer may be gone again at once, and an instance that many peers reach
	// should hold connections only to those it talks to.
	Learned bool
}

// Errors a transport returns. Implementations wrap them with detail and the fix.
var (
	// ErrInvalidEndpoint: an address blob that this transport cannot use (wrong version,
	// truncated, unparsable). The peer is not registered.
	ErrInvalidEndpoint = errors.New("invalid endpoint")
	// ErrUnknownPeer: a send to a peer that was never registered and never connected to us.
	ErrUnknownPeer = errors.New("unknown peer")
	// ErrPeerUnreachable: the connection to the peer failed or was lost.
	ErrPeerUnreachable = errors.New("peer unreachable")
	// ErrUnauthenticated: the peer failed authentication (another cluster secret, a certificate
	// the cluster CA did not sign, no credentials where they are required). It comes wrapped with
	// ErrPeerUnreachable.
	ErrUnauthenticated = errors.New("peer failed authentication")
	// ErrFrameTooLarge: a frame above MaxFrameSize, on send or on receive.
	ErrFrameTooLarge = errors.New("frame too large")
	// ErrClosed: the transport was closed. It is the root of velo's closed family (velo.ErrClosed):
	// the messenger's, the rendezvous service's and the RDMA registry's closed errors match it.
	ErrClosed = errors.New("transport closed")
)

// Host is the runtime as a transport sees it. The runtime passes it to Start.
type Host interface {
	// LocalID is this instance's ID; transports put it in hellos and frame headers.
	LocalID() InstanceID
	// Incarnation is this instance's random 64-bit incarnation.
	Incarnation() uint64
	// Deliver hands one received frame to the runtime. Frames from one peer are delivered in
	// the order that peer sent them, one at a time. The runtime owns frame after the call.
	Deliver(from InstanceID, frame []byte)
	// PeerDown reports that the transport lost its connection to a peer for good (keepalive
	// failure, EOF, reset). Frames in flight to it may be lost; later sends may reconnect.
	PeerDown(peer InstanceID, err error)
	// Logger is the runtime's logger.
	Logger() *slog.Logger
}

// AuthObserver is an optional extension of Host. A transport that authenticates its peers (the TCP
// transport with credentials) calls PeerAuthenticated for each peer a handshake authenticated,
// before any frame of that connection is delivered; identity is what the credentials name (a
// certificate's common name), or "". session is a key only the two sides of that handshake
// know, with which other transports prove that what they send comes from the same peer.
type AuthObserver interface {
	PeerAuthenticated(peer InstanceID, incarnation uint64, identity string, session []byte)
}

// AuthFailureObserver is an optional extension of Host. A transport that authenticates its peers
// calls PeerAuthFailed when a handshake with a peer it dialled failed authentication; err wraps
// ErrUnauthenticated and says why. Only dialled peers are reported: the ID an inbound connection
// claims is not proven before its handshake succeeds.
type AuthFailureObserver interface {
	PeerAuthFailed(peer InstanceID, err error)
}

// AuthGate is an optional extension of Host for transports that cannot authenticate peers
// themselves (UCX). When AuthRequired, such a transport accepts frames only from a peer
// incarnation that is Authenticated, and calls Authenticate (which has the control plane connect
// and run its handshake) before it opens an endpoint to a peer.
//
// HelloProof and HelloKey bind the transport's own greeting, and what follows it, to the control
// plane's session with the peer: the sender proves msg (its hello, addressed to that peer) with
// the session key; HelloKey checks a proof against the keys of that peer's incarnation and, when
// one made it, returns a key derived from that session key and that hello, which both sides use
// to seal the frames that follow the hello. A process that can reach the transport but was never
// authenticated cannot open an endpoint in an authenticated peer's name, replace that peer's
// address, nor send a frame on an endpoint the peer opened.
type AuthGate interface {
	AuthRequired() bool
	Authenticated(peer InstanceID, incarnation uint64) bool
	Authenticate(ctx context.Context, peer InstanceID) error
	HelloProof(peer InstanceID, msg []byte) ([]byte, error)
	HelloKey(peer InstanceID, incarnation uint64, msg, proof []byte) ([]byte, bool)
}

// Claimer is an optional extension of Host for transports that read frames off a byte stream
// (TCP). It exists so that a large frame whose destination is already known — a rendezvous chunk
// answering a pull, whose bytes belong in the caller's GetInto buffer, or a chunk of a chunked
// push, whose bytes belong in a granted range — is read from the socket straight into that buffer
// instead of into a fresh frame and then copied. On a loaded machine
// that copy and allocation are the difference between the chunked path keeping up with a raw TCP
// stream and not. Transports that receive whole messages (UCX active messages) ignore it.
//
// For each incoming frame of size bytes, a stream transport that supports claiming reads the
// first min(ClaimPrefix(), size) bytes as prefix and calls Claim. When Claim returns a buffer, it
// has exactly size-len(prefix) bytes; the transport reads the rest of the frame into it and then
// calls Claimed exactly once, with nil or with the read error (in which case the connection is
// dropped and PeerDown follows). When Claim returns nil, the transport reads the rest itself and
// calls Deliver with the whole frame as usual. Claim and Claimed run on the connection's reader
// and keep the per-peer order of Deliver.
type Claimer interface {
	ClaimPrefix() int
	Claim(from InstanceID, prefix []byte, size int) []byte
	Claimed(from InstanceID, prefix []byte, err error)
}

// InlineHost is an optional extension of Host for transports that read each connection on a
// goroutine of their own (TCP). It exists because handing every received message to another
// goroutine costs a scheduler wake-up per message, and on a small machine that wake-up costs more
// than a typical handler: with it, the runtime may run a message's handler on the very goroutine
// that read the message.
//
// Such a transport calls DeliverInline instead of Deliver. The connection must not go unread for
// long while a handler runs on its reader (answers to this side's own calls arrive on it, and a
// handler may call back the peer that called it), so the transport also passes handOff. The
// runtime calls handOff at most once, from any goroutine, while DeliverInline has not returned,
// when it decides the handler is taking too long; handOff must start another goroutine that goes on
// reading the connection from where this one stopped, and must not block. DeliverInline returns
// false if and only if it called handOff (after handOff returned); the calling goroutine must then
// leave the connection alone. Frames from one peer reach DeliverInline in order, one at a time,
// exactly as with Deliver.
//
// Answers tells the transport which frames answer a call of this side's own (as opposed to those
// the peer sent on its own accord). An Awaiter uses it to tell connections where only answers
// arrive, which its callers may leave unread between calls, from those where the peer also sends
// requests, which keep a reader.
type InlineHost interface {
	DeliverInline(from InstanceID, frame []byte, handOff func()) (stillReading bool)
	Answers(frame []byte) bool
}

// Awaiter is an optional extension of Transport for stream transports (TCP). A caller that sent a
// request and now waits for the answer calls Await: when nothing else reads the connection to peer,
// the caller's goroutine reads it and delivers what arrives, so the answer completes the call on
// the goroutine that waits for it. Handing the answer from a reader goroutine to the caller costs a
// scheduler wake-up per call, which on a small machine is as much as the rest of a round trip.
//
// Await returns once w is fired (the runtime completed the call) or ctx ends. Frames it reads for
// other calls or handlers are delivered with Host.Deliver, never run on the caller's goroutine.
type Awaiter interface {
	Await(ctx context.Context, peer InstanceID, w *Waiter)
}

// Waiter is one call as an Awaiter sees it. The runtime calls Fire once the call is complete
// (answered, failed or given up); an Awaiter sets an interrupt with SetInterrupt to learn of it, for
// instance to wake its own read when the answer came some other way.
type Waiter struct {
	mu        sync.Mutex
	fired     bool
	interrupt func()
}

// Fire marks the call complete and runs the interrupt, if one is set, once.
func (w *Waiter) Fire() {
	w.mu.Lock()
	f := w.interrupt
	w.fired, w.interrupt = true, nil
	w.mu.Unlock()
	if f != nil {
		f()
	}
}

// SetInterrupt sets the function Fire runs (nil clears it). It returns false, and sets nothing,
// when the call is already complete.
func (w *Waiter) SetInterrupt(f func()) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fired {
		return false
	}
	w.interrupt = f
	return true
}

// Transport moves frames between instances.
//
// All methods are safe for concurrent use. Send keeps per-peer order: two Sends to the same
// peer that do not overlap in time arrive in the order they were called.
type Transport interface {
	// Name keys this transport's address blob in a PeerInfo: "tcp" or "ucx".
	Name() string
	// Start binds the transport to the runtime. It is called once, before any other method
	// except Name.
	Start(h Host) error
	// Address is the blob a remote transport of the same Name needs to reach this one.
	Address() []byte
	// AddPeer validates a peer's blob and records it. It wraps ErrInvalidEndpoint when the
	// blob is unusable. It may open the connection at once (eager wireup) or on first Send.
	AddPeer(ctx context.Context, peer PeerAddress) error
	// RemovePeer forgets a peer and closes any connection to it.
	RemovePeer(peer InstanceID)
	// Reaches reports whether Send to peer can work now: the peer was added, or it connected
	// to us and the connection is up.
	Reaches(peer InstanceID) bool
	// Send transmits one frame, the concatenation of parts, to peer. It returns once the
	// transport has taken the frame (written it or completed the send), or with an error.
	// The caller may reuse parts after Send returns.
	Send(ctx context.Context, peer InstanceID, parts ...[]byte) error
	// MaxFrameSize is the largest frame Send accepts and the receiver will read.
	MaxFrameSize() int
	// Close stops the transport, closes every connection and waits for its goroutines.
	Close() error
}

// ListenScoper is a transport whose listening can follow the control plane's: velo.New calls
// ScopeListen once, before it starts anything or reads the transport's metrics, with the address
// its control-plane transport listens on (a ControlPlane's ListenAddr), or with the zero Addr when
// it has none. The UCX transport keeps its tcp listener on that address's interface unless the
// operator named devices; an unspecified address (0.0.0.0, ::) leaves it listening everywhere. An
// error fails velo.New.
type ListenScoper interface {
	ScopeListen(ip netip.Addr) error
}

// ControlPlane is a transport that listens for the control plane (the TCP transport): its
// address is the one ListenScoper transports follow.
type ControlPlane interface {
	ListenAddr() net.Addr
}

// RMA is one-sided remote memory access, the capability the rendezvous RDMA path needs.
// The UCX transport implements it.
type RMA interface {
	// RMABackend names the backend in offers and descriptors ("ucx").
	RMABackend() string
	// RegisterMemory makes mem remotely readable and returns its registration. mem must not
	// be Go heap memory: it is mmap'd, page-aligned memory that outlives the registration.
	// Each call is a separate registration with its own remote key.
	RegisterMemory(mem []byte) (Registration, error)
	// Get reads len(dst) bytes at offset of the region that key names in peer's memory into
	// dst. key is what one of peer's Registrations returned from Key, opaque to everyone but
	// the backend: Get checks it and the range once, before anything is posted. It returns
	// when the bytes are in dst or with an error. If ctx ends first the read still owns dst
	// until it completes; Get returns only after that.
	Get(ctx context.Context, peer InstanceID, key []byte, offset uint64, dst []byte) error
	// CanGet reports whether a Get to peer can be attempted: the peer is registered on this
	// transport with an RMA-capable address.
	CanGet(peer InstanceID) bool
	// ForceClosePeer closes every endpoint to peer with force: operations in flight to it,
	// reads it is being served included, are cancelled, so no key this side handed to peer can
	// read memory any more once they settled (each Registration's Dead says when). The
	// rendezvous registry calls it for a consumer that stayed unresponsive while holding a
	// revoked key's read; later messages to peer open a new endpoint.
	ForceClosePeer(peer InstanceID) error
}

// PayloadMapper is an RMA that maps the memory of a staged payload itself: the same-host path
// (package transport/shm) puts a payload of at least PayloadMin bytes in a sealed memfd of its
// own, which a consumer of this host then reads with one copy. The RDMA registry asks it for the
// memory of each such payload staged by StageDataPinned. The memory is ordinary host memory
// mapped shared, which every backend (UCX included) registers and serves as any other.
type PayloadMapper interface {
	// PayloadMin is the smallest payload MapPayload takes, in bytes; 0: none.
	PayloadMin() int
	// MapPayload returns size bytes of zeroed, page-aligned memory (size is a whole number of
	// pages) for one payload, and the function that unmaps it, which the caller calls once, when
	// no registration of the memory is alive any more. The memory is never handed out again.
	MapPayload(size int) (mem []byte, release func() error, err error)
}

// PathRefuser is an RMA transport that can say why it does not reach a peer it knows (CanGet
// false): the answer is one of the chunked-path reasons of package metrics ("release_mismatch"
// when the two sides' UCX builds cannot talk), or "" when it has none to give and the runtime
// counts no_offer.
type PathRefuser interface {
	PathRefusal(peer InstanceID) string
}

// Read is one read of ManyReader.ReadMany: len(Dst) bytes at Offset of the region Key names.
type Read struct {
	Key    []byte
	Offset uint64
	Dst    []byte
	// Memory is Dst's memory type (zero: host memory). Only a transport that says it reads
	// typed memory in a batch (MemoryRMA.ReadsTypedMany) is given reads of another type.
	Memory MemoryType
}

// ManyReader is an RMA that posts many reads in one call. The rendezvous registry reads batches
// (GetBatch) and ranges (ReadRanges) through it when the transport has it, and with one Get per
// read, several at a time, when it does not.
type ManyReader interface {
	// ReadMany reads every entry of reads from peer with up to window reads in flight, none
	// waiting for another before it is posted. done(i, err) runs once per read, as it completes,
	// on the calling goroutine; one read's failure (a key or range the backend refuses, a revoked
	// registration) fails only that read. ReadMany returns once nothing writes any Dst; if ctx ends
	// first, the reads not yet done fail with its error.
	ReadMany(ctx context.Context, peer InstanceID, reads []Read, window int, done func(i int, err error))
}

// ManyRegisterer is an RMA that registers many regions in one call, each with its own key (the
// owner's side of a batch: one wait for the backend instead of one per region). The registry
// uses it when the transport has it.
type ManyRegisterer interface {
	// RegisterMemoryMany is RegisterMemory for each region; every region gets its own
	// registration or its own error.
	RegisterMemoryMany(mems [][]byte) ([]Registration, []error)
}

// RegisterEach registers every region with rma, all in one call when rma is a ManyRegisterer and
// there are several, else one RegisterMemory each; every region gets its own registration or its
// own error.
func RegisterEach(rma RMA, mems [][]byte) ([]Registration, []error) {
	if mr, ok := rma.(ManyRegisterer); ok && len(mems) > 1 {
		return mr.RegisterMemoryMany(mems)
	}
	regs := make([]Registration, len(mems))
	errs := make([]error, len(mems))
	for i, m := range mems {
		regs[i], errs[i] = rma.RegisterMemory(m)
	}
	return regs, errs
}

// RangeKeyer is a Registration that names parts of its region: RangeKey(off, n) is a key like
// Key's for the n bytes at off, which a reader uses as the key of a region of its own and which
// dies with the registration. It narrows what a reader asks for, not what the key reaches (the
// backend checks reads against the whole registration): an owner hands the parts of one
// registration to one reader only.
type RangeKeyer interface {
	RangeKey(off, n int) ([]byte, error)
}

// RunRegisterer is an RMA whose registrations are RangeKeyers. An owner that leases neighbouring
// slots to one consumer in one batch registers them once, as one region, and gives each lease
// the key of its own slot (see velo/rendezvous/rdma, "runs").
type RunRegisterer interface {
	RegistersRuns() bool
}

// Registration is one registered memory region. Its life has two steps, because a remote read
// may be under way when the owner ends it: Revoke stops the key from starting new reads, and
// Dead is closed once no read of the region is in flight and the region is no longer registered.
// Only then may the memory be reused or unmapped.
type Registration interface {
	// Len is the registered length in bytes.
	Len() int
	// Key is everything a peer needs to read the region (for UCX: the sealed remote key,
	// which names the region's address and length too). It is opaque outside the backend.
	Key() []byte
	// Revoke makes the key refuse every read that has not started; it is idempotent and returns
	// without waiting for reads already under way. An error means the revocation could not be
	// handed to the transport (ctx ended first); the key is then still live and Revoke may be
	// called again.
	Revoke(ctx context.Context) error
	// Dead is closed when no remote read can touch the memory any more: the key was revoked and
	// every read under way finished, or the endpoints that carried them were closed with force,
	// or the transport was closed.
	Dead() <-chan struct{}
}
