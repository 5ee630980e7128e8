package velo

import (
	"context"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/velo-go/velo/velo/auth"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/push"
	"github.com/velo-go/velo/velo/transport"
	"github.com/velo-go/velo/velo/transport/shm"
)

// Push: a writer puts bytes into ranges of a region a receiver granted it, and the receiver is told,
// after the bytes are there, that they are (package velo/push; docs/velo.md, "Push").

// WriteGrant is a receiver's grant of ranges of one of its regions to one writer (GrantWrite). Its
// methods are safe for concurrent use:
//
//   - Handle() GrantHandle: what the writer needs; give it to the writer in a message.
//   - Notifications() <-chan Notification: the writer's notifications in order, when
//     GrantOptions.OnNotify is not set (nil otherwise); closed once the grant ended.
//   - Wait(ctx, ranges ...GrantRange) error: returns once notifications covered every byte of
//     ranges (all the grant's when none are given), or with the grant's end or ctx's error.
//   - Revoke(ctx) error: ends the grant now; later puts fail with ErrGrantEnded.
//   - Done() <-chan struct{}: closed once the grant ended and no write can land any more.
//   - Err() error: why the grant ended (nil while it lives).
//   - ID() uint64, Writer() InstanceID, Ranges() []GrantRange: what the grant is.
type WriteGrant = push.Grant

// GrantHandle names a write grant; the receiver gives it to the writer in a message (it encodes
// with MarshalBinary and MarshalText, and decodes with UnmarshalBinary and UnmarshalText). It
// says who may write what until when, and is meaningless without the receiver: the key behind it
// goes only to the writer it names, and its 128-bit nonce makes it unguessable. IsZero reports the
// zero handle; String prints it.
//
//	type GrantHandle struct {
//		Receiver InstanceID
//		Writer   InstanceID
//		ID       uint64
//		Nonce    [16]byte
//		Expires  uint64       // when the grant ends at the latest, Unix ms of the receiver's clock
//		Ranges   []GrantRange // what the writer may write, in the region's offsets
//	}
type GrantHandle = push.GrantHandle

// GrantOptions configure GrantWrite; the zero value grants the whole region for a minute.
type GrantOptions struct {
	// Ranges are the ranges of the region the writer may write (default: the whole region). They
	// must lie inside the region, must not overlap each other, and must not overlap a live grant
	// of another writer on the same region; at most 1024.
	Ranges []GrantRange
	// TTL bounds the grant's life (default 60 s).
	TTL time.Duration
	// OnNotify, when set, receives each notification, in order, on a goroutine of the instance:
	// keep it short (the writer's next notification waits for it). Without it notifications go to
	// the channel of WriteGrant.Notifications.
	OnNotify func(Notification)
	// NotifyBuffer is the capacity of that channel (default 1024). A receiver that does not read it
	// holds up the writer's notifications, never its writes.
	NotifyBuffer int
}

// GrantRange is a range of a receiver's region: Length bytes at Offset; End() is Offset+Length.
//
//	type GrantRange struct {
//		Offset uint64
//		Length uint64
//	}
type GrantRange = push.Range

// Notification is what a writer said after a put: the grant (its ID), the writer, the ranges now
// written, and the writer's payload.
//
//	type Notification struct {
//		Writer  InstanceID
//		Grant   uint64
//		Ranges  []GrantRange
//		Payload []byte
//	}
type Notification = push.Notification

// PutRequest is one entry of PutBatch.
type PutRequest struct {
	// Offset is where Src goes in the receiver's region, inside one of the grant's ranges.
	Offset uint64
	// Src is the bytes to write; at least one.
	Src []byte
	// Notify sends Payload as a notification as soon as this entry's bytes are in the receiver's
	// memory, covering this entry's range.
	Notify  bool
	Payload []byte
}

// PutBatchOptions configure PutBatch; nil means the zero value.
type PutBatchOptions struct {
	// Notify sends one notification after every entry of the batch succeeded, covering all their
	// ranges, with Payload; it is not sent when an entry failed.
	Notify  bool
	Payload []byte
	// Window is how many writes (RDMA) or chunks (over the control plane) are in flight at once
	// (default 16).
	Window int
}

// GrantOptions, PutRequest and PutBatchOptions are package push's types under the names and
// documentation of this package: each pair has one underlying type, which the conversions below
// prove at compile time, so GrantWrite and PutBatch pass them through without a copy.
var (
	_ = push.GrantOptions(GrantOptions{})
	_ = push.PutRequest(PutRequest{})
	_ = push.BatchOptions(PutBatchOptions{})
)

func pushRequests(reqs []PutRequest) []push.PutRequest {
	return unsafe.Slice((*push.PutRequest)(unsafe.Pointer(unsafe.SliceData(reqs))), len(reqs))
}

// Push's sentinels (errors.Is).
var (
	ErrBadGrant       = push.ErrBadGrant
	ErrGrantEnded     = push.ErrGrantEnded
	ErrNotGrantee     = push.ErrNotGrantee
	ErrOutOfGrant     = push.ErrOutOfGrant
	ErrOverlap        = push.ErrOverlap
	ErrEmptyPut       = push.ErrEmptyPut
	ErrNotifyTooLarge = push.ErrNotifyTooLarge
)

// GrantWaitError is WriteGrant.Wait's error when the wait stopped (the grant ended, or the
// context's deadline or cancel) before notifications covered the ranges it waited for. Its
// fields: Grant and Writer name the grant; Missing lists the bytes never notified, merged and in
// order; Err is what stopped the wait. Error lists the first eight missing ranges and counts the
// rest, and Unwrap returns Err, so errors.Is matches ErrGrantEnded or the context's error.
type GrantWaitError = push.WaitError

// PutOptions configure Put.
type PutOptions struct {
	// Notify sends Payload as a notification once the bytes are in the receiver's memory.
	Notify  bool
	Payload []byte
}

// GrantWrite grants writer the ranges opts names of region g (all of it by default) until the grant
// ends: Revoke, its TTL, the writer going down or restarting, or this instance draining or closing.
// The writer must be a live peer of this instance (RegisterPeer or discovery; not down, not
// unauthenticated); the grant is bound to the incarnation known now. Hand WriteGrant.Handle to the
// writer; only that writer gets the key behind it, and with credentials configured only once its
// control plane authenticated it. A pinned region
// (NewRegion, WrapRegion or WrapRegionMemory with an RDMA registry) is written by RDMA where
// both sides can; any other by chunks over the control plane (into GPU memory through a host
// buffer: docs/gpu.md). A region of a grant stays staged until Done, so Free does
// not give its memory back while a write may land.
func (v *Velo) GrantWrite(ctx context.Context, writer InstanceID, g *Region, opts GrantOptions) (*WriteGrant, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s, err := v.pushService()
	if err != nil {
		return nil, err
	}
	inc, state, ok := v.peerIncarnation(writer)
	if state == StateUnauthenticated {
		return nil, fmt.Errorf("velo: GrantWrite: %w: writer %016x failed authentication (Peers says why): give it this cluster's credentials", ErrUnknownPeer, uint64(writer))
	}
	if !ok || state == StateDown {
		return nil, fmt.Errorf("velo: GrantWrite: %w: writer %016x is not a live peer of this instance (RegisterPeer it first)", ErrUnknownPeer, uint64(writer))
	}
	return s.Grant(writer, inc, g, push.GrantOptions(opts))
}

// Put writes src at offset of the receiver's region through the grant h names (offset in the
// region's terms, inside one of h.Ranges) and returns once the bytes are in the receiver's memory;
// with opts.Notify, once the notification that follows them was delivered too. The first put of a
// grant asks the receiver for its path (one round trip); later ones go straight out. A write outside
// the grant, of no bytes, with a notification above 1 MiB, or through a handle naming another
// writer fails before anything is sent.
func (v *Velo) Put(ctx context.Context, h GrantHandle, offset uint64, src []byte, opts *PutOptions) error {
	s, err := v.pushService()
	if err != nil {
		return err
	}
	var o PutOptions
	if opts != nil {
		o = *opts
	}
	return s.Put(ctx, h, offset, src, o.Notify, o.Payload)
}

// PutBatch writes every entry through h, a window of them in flight, each failing alone. An entry's
// notification (PutRequest.Notify) goes out as soon as its own bytes are in the receiver's memory;
// the batch's (opts.Notify) once all are. It returns one error per entry, and the batch
// notification's error.
func (v *Velo) PutBatch(ctx context.Context, h GrantHandle, reqs []PutRequest, opts *PutBatchOptions) ([]error, error) {
	s, err := v.pushService()
	if err != nil {
		errs := make([]error, len(reqs))
		for i := range errs {
			errs[i] = err
		}
		return errs, err
	}
	var o PutBatchOptions
	if opts != nil {
		o = *opts
	}
	return s.PutBatch(ctx, h, pushRequests(reqs), push.BatchOptions(o))
}

// PushGrants is how many write grants this instance holds live as receiver.
func (v *Velo) PushGrants() int {
	v.pusher.mu.Lock()
	s := v.pusher.s
	v.pusher.mu.Unlock()
	if s == nil {
		return 0
	}
	return s.Grants()
}

// pusher is the instance's push service. The first grant or put makes it, so that an instance
// that never pushes registers no push series and claims no write requests on its transports;
// beginDrain drains it, Close ends it, and the instance's peer events end the grants of writers
// that went down or restarted (pushPeerEvent).
type pusher struct {
	mu    sync.Mutex
	s     *push.Service
	err   error // why the service could not be made; every later grant or put returns it
	ended bool  // Close ended the service; none is made any more
}

func (v *Velo) pushService() (*push.Service, error) {
	v.pusher.mu.Lock()
	defer v.pusher.mu.Unlock()
	if v.pusher.ended || v.closed.Load() {
		return nil, fmt.Errorf("velo: %w", ErrClosed)
	}
	if v.pusher.s == nil && v.pusher.err == nil {
		v.pusher.s, v.pusher.err = v.startPush()
	}
	return v.pusher.s, v.pusher.err
}

// drainPush ends every grant and refuses new ones: the instance drains. A service made later is
// drained as it is made (startPush).
func (v *Velo) drainPush() {
	v.pusher.mu.Lock()
	s := v.pusher.s
	v.pusher.mu.Unlock()
	if s != nil {
		s.Drain()
	}
}

// endPush ends the push service for good. Close calls it first: the grants' keys are revoked
// while the registry still serves them, and a handler waiting for a grant's writes returns.
func (v *Velo) endPush() {
	v.pusher.mu.Lock()
	s := v.pusher.s
	v.pusher.ended = true
	v.pusher.mu.Unlock()
	if s != nil {
		s.Close()
	}
}

// pushPeerEvent ends the grants of a writer that went down or restarted. Ending a grant revokes
// its keys on the transport that may be the one reporting the peer, so it runs on a goroutine of
// its own, which ends with it.
func (v *Velo) pushPeerEvent(ev PeerEvent) {
	var writer InstanceID
	var why string
	switch ev.Kind {
	case PeerDown:
		writer, why = ev.Peer.ID, "went down: "+ev.Peer.Err
	case PeerRestarted:
		writer, why = ev.Previous, "restarted"
	default:
		return
	}
	v.pusher.mu.Lock()
	s := v.pusher.s
	v.pusher.mu.Unlock()
	if s != nil {
		go s.WriterGone(writer, why)
	}
}

// startPush makes the push service; pushService calls it under pusher.mu.
func (v *Velo) startPush() (*push.Service, error) {
	m := push.NewMetrics()
	if reg, ok := v.gatherer.(prometheus.Registerer); ok {
		if err := metrics.Register(reg, m.Collectors()...); err != nil {
			return nil, fmt.Errorf("velo: push metrics: %w", err)
		}
	}
	cfg := push.Config{Self: v.id, Messenger: v.msgr, Logger: v.log, Metrics: m,
		Incarnation: func(id InstanceID) (uint64, bool) {
			inc, _, ok := v.peerIncarnation(id)
			return inc, ok
		},
		AuthRefused: v.m.CountAuthRefusal,
		InlineMax:   v.pushInline,
	}
	if v.rdma != nil {
		cfg.Registry = v.rdma
	}
	cfg.WriterVia = -1
	for i, t := range v.transports {
		w, wok := t.(transport.RMAWriter)
		r, rok := t.(transport.RMA)
		if wok && rok {
			cfg.Writer, cfg.CanRMA, cfg.WriterVia = w, canWrite(r), i
			if v.shm != nil {
				// The same-host path writes a grant through shared memory when the receiver
				// registered it there (its keys say so, on both sides); the route reads the keys.
				if rw, ok := shm.Route(r, v.shm).(rmaWriter); ok {
					cfg.Writer, cfg.CanRMA = rw, canWrite(rw)
				}
				cfg.SameHostKey = shm.IsKey
			}
			break
		}
	}
	if cfg.Registry == nil || v.rdma.KillSwitch() {
		cfg.Writer, cfg.WriterVia = nil, -1 // the kill switch, or no registry: this side writes by chunks too
	}
	if v.authMode != auth.ModeNone {
		cfg.Authorize = v.authorize
	}
	s := push.New(cfg)
	if v.draining.Load() {
		s.Drain() // beginDrain ran before this service existed
	}
	return s, nil
}

// rmaWriter is an RMA transport that also writes (what a push writer needs of it).
type rmaWriter interface {
	transport.RMA
	transport.RMAWriter
}

// canWrite is whether this side offers a receiver RDMA writes through r: r reaches it and gives
// no reason against the pair (transport.PathRefuser: software_lanes, no_ucx_lane; none for a pair
// the same-host path serves), which the receiver finds and answers with itself.
func canWrite(r transport.RMA) func(transport.InstanceID) bool {
	pr, _ := r.(transport.PathRefuser)
	return func(peer transport.InstanceID) bool {
		return r.CanGet(peer) && (pr == nil || pr.PathRefusal(peer) == "")
	}
}

// peerIncarnation is a peer's incarnation and state as this instance knows them.
func (v *Velo) peerIncarnation(id InstanceID) (uint64, State, bool) {
	for _, p := range v.peers.list() {
		if p.ID == id {
			return p.Incarnation, p.State, true
		}
	}
	return 0, "", false
}
