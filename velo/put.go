package velo

import (
	"context"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/velo-go/velo/velo/auth"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/push"
	"github.com/velo-go/velo/velo/transport"
)

// Push: a writer puts bytes into ranges of a region a receiver granted it, and the receiver is told,
// after the bytes are there, that they are (package velo/push; docs/velo.md, "Push").

// WriteGrant is a receiver's grant of ranges of one of its regions to one writer.
type WriteGrant = push.Grant

// GrantHandle names a write grant; the receiver gives it to the writer in a message.
type GrantHandle = push.GrantHandle

// GrantOptions configure GrantWrite.
type GrantOptions = push.GrantOptions

// GrantRange is a range of a receiver's region: Length bytes at Offset.
type GrantRange = push.Range

// Notification is what a writer said after a put: the ranges now written, and its payload.
type Notification = push.Notification

// PutRequest is one entry of PutBatch.
type PutRequest = push.PutRequest

// PutBatchOptions configure PutBatch.
type PutBatchOptions = push.BatchOptions

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

// PutOptions configure Put.
type PutOptions struct {
	// Notify sends Payload as a notification once the bytes are in the receiver's memory.
	Notify  bool
	Payload []byte
}

// GrantWrite grants writer the ranges opts names of region g (all of it by default) until the grant
// ends: Revoke, its TTL, the writer going down or restarting, or this instance draining or closing.
// The writer must be a peer of this instance (RegisterPeer or discovery); the grant is bound to the
// incarnation known now. Hand WriteGrant.Handle to the writer; only that writer gets the key behind
// it, and with credentials configured only once its control plane authenticated it. A pinned region
// (NewRegion, RegisterRegion or RegisterRegionMemory with an RDMA registry) is written by RDMA where
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
	if !ok || state == StateDown {
		return nil, fmt.Errorf("velo: GrantWrite: %w: writer %016x is not a live peer of this instance (RegisterPeer it first)", ErrUnknownPeer, uint64(writer))
	}
	return s.Grant(writer, inc, g, opts)
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
	return s.PutBatch(ctx, h, reqs, o)
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
			cfg.Writer, cfg.CanRMA, cfg.WriterVia = w, r.CanGet, i
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

// peerIncarnation is a peer's incarnation and state as this instance knows them.
func (v *Velo) peerIncarnation(id InstanceID) (uint64, State, bool) {
	for _, p := range v.peers.list() {
		if p.ID == id {
			return p.Incarnation, p.State, true
		}
	}
	return 0, "", false
}
