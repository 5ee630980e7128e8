package velo

import (
	"context"
	"fmt"
	"sync"
	"time"

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
// The writer must be a live peer of this instance (RegisterPeer or discovery; not down, not
// unauthenticated); the grant is bound to the incarnation known now. Hand WriteGrant.Handle to the
// writer; only that writer gets the key behind it, and with credentials configured only once its
// control plane authenticated it. A pinned region
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
	if state == StateUnauthenticated {
		return nil, fmt.Errorf("velo: GrantWrite: %w: writer %016x failed authentication (Peers says why): give it this cluster's credentials", ErrUnknownPeer, uint64(writer))
	}
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
	st, ok := pushes.Load(v)
	if !ok {
		return 0
	}
	ps := st.(*pushState)
	if ps.s == nil {
		return 0
	}
	return ps.s.Grants()
}

// pushes holds each instance's push service, made by its first grant or put. It lives beside the
// instance rather than in it so that push stays in files of its own; it is removed when the
// instance closes.
var pushes sync.Map // *Velo -> *pushState

type pushState struct {
	once sync.Once
	s    *push.Service
	err  error
}

// pushCheckEvery is how often the push service looks at whether its instance drains or closed.
const pushCheckEvery = 20 * time.Millisecond

func (v *Velo) pushService() (*push.Service, error) {
	if v.closed.Load() {
		return nil, fmt.Errorf("velo: %w", ErrClosed)
	}
	st, _ := pushes.LoadOrStore(v, &pushState{})
	ps := st.(*pushState)
	ps.once.Do(func() { ps.s, ps.err = v.startPush() })
	return ps.s, ps.err
}

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
	ctx, cancel := context.WithCancel(context.Background())
	events := v.WatchPeers(ctx)
	go func() {
		defer cancel()
		tick := time.NewTicker(pushCheckEvery)
		defer tick.Stop()
		for {
			select {
			case ev, ok := <-events:
				if !ok {
					s.Close()
					pushes.Delete(v)
					return
				}
				switch ev.Kind {
				case PeerDown:
					s.WriterGone(ev.Peer.ID, "went down: "+ev.Peer.Err)
				case PeerRestarted:
					s.WriterGone(ev.Previous, "restarted")
				}
			case <-tick.C:
				if v.draining.Load() {
					s.Drain()
				}
				if v.closed.Load() {
					// Close ended the rendezvous service and the registry; grants end here, and the
					// watch above sees the instance closed.
					s.Close()
				}
			}
		}
	}()
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
