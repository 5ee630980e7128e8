package velo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/velo-go/velo/velo/discovery"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/transport"
)

// Discovery is a membership backend: it publishes this instance's record under a cluster name
// and watches the other members. Package velo/discovery has the backends (Filesystem).
type Discovery interface {
	// Publish announces (or re-announces, to say it drains) this instance and keeps the entry
	// alive until Close.
	Publish(ctx context.Context, r discovery.Record) error
	// Watch delivers the members there are (Joined), then each change, until ctx ends or Close.
	Watch(ctx context.Context) (<-chan discovery.Event, error)
	// Close withdraws this instance's entry and stops the watches. The instance calls it (Close,
	// Shutdown, a New that failed), and may call it after the application did: it must be safe
	// to call more than once, as both backends of velo/discovery are.
	Close() error
}

// WithDiscovery makes the instance a cluster member: it publishes its PeerInfo through d and
// registers every member d reports (RegisterPeer with all its transports, UCX included), marks
// draining members as such, treats a member whose name comes back with a new instance as a
// restart (the old instance is removed, so its handles fail at once), and removes members that
// leave — unless a connection to them is still up: a live connection is better evidence than a
// missing entry (a backend can lose entries while the member is fine), so the connection wins,
// and the member goes when its transport reports it down. WatchPeers delivers the resulting
// events. name is the member's stable name (a pod or host name; empty: the instance ID), which is
// what makes a restart recognisable. The instance owns d from here on: Close and Shutdown close
// it, and a New that fails closes it before it returns, published or not, so the caller never
// closes d itself (closing it again does no harm).
func WithDiscovery(d Discovery, name string) Option {
	return func(o *options) error {
		if d == nil {
			return errors.New("velo: WithDiscovery(nil)")
		}
		o.discovery, o.memberName = d, name
		return nil
	}
}

// PeerEventKind says what happened to a peer.
type PeerEventKind string

// Peer event kinds.
const (
	PeerUp        PeerEventKind = "up"
	PeerDraining  PeerEventKind = "draining"
	PeerDown      PeerEventKind = "down"
	PeerRestarted PeerEventKind = "restarted" // Previous is the instance that went
	// PeerUnauthenticated: the peer failed authentication; it is not up, and Peer.Err says why.
	PeerUnauthenticated PeerEventKind = "unauthenticated"
)

// PeerEvent is one change of a peer's state. Peer.Name is the member's name (PeerStatus.Name).
type PeerEvent struct {
	Kind     PeerEventKind
	Peer     PeerStatus
	Previous InstanceID // the instance a restart replaced
}

// watchers fans peer events out to WatchPeers subscribers.
type watchers struct {
	mu   sync.Mutex
	subs map[chan PeerEvent]struct{}
}

// WatchPeers delivers every change of a peer's state — up (registered, found by discovery, or
// heard from: a peer that sent this instance a message first is asked for its PeerInfo and name,
// and comes up with them), draining, down (a transport lost it, or it left discovery with no
// connection up), restarted, unauthenticated (its handshake failed; it never comes up then) —
// until ctx ends or the instance closes; then the channel is closed. This is the hook to learn
// that a peer went away. A subscriber that falls more than 256 events behind loses the oldest
// ones (logged).
func (v *Velo) WatchPeers(ctx context.Context) <-chan PeerEvent {
	ch := make(chan PeerEvent, 256)
	v.watch.mu.Lock()
	if v.watch.subs == nil {
		v.watch.subs = map[chan PeerEvent]struct{}{}
	}
	if v.closed.Load() {
		v.watch.mu.Unlock()
		close(ch)
		return ch
	}
	v.watch.subs[ch] = struct{}{}
	v.watch.mu.Unlock()
	go func() {
		select {
		case <-ctx.Done():
		case <-v.closing:
		}
		v.watch.mu.Lock()
		if _, ok := v.watch.subs[ch]; ok {
			delete(v.watch.subs, ch)
			close(ch)
		}
		v.watch.mu.Unlock()
	}()
	return ch
}

func (v *Velo) emit(ev PeerEvent) {
	v.pushPeerEvent(ev)
	v.watch.mu.Lock()
	defer v.watch.mu.Unlock()
	for ch := range v.watch.subs {
		select {
		case ch <- ev:
		default:
			v.log.Warn("velo: a WatchPeers subscriber is 256 events behind; dropping one", "event", ev.Kind, "peer", fmt.Sprintf("%016x", uint64(ev.Peer.ID)))
		}
	}
}

// record is what this instance publishes.
func (v *Velo) record() (discovery.Record, error) {
	info, err := json.Marshal(v.PeerInfo())
	if err != nil {
		return discovery.Record{}, err
	}
	return discovery.Record{Name: v.publishedName(), ID: uint64(v.id), Incarnation: v.incarnation, Info: info, Draining: v.draining.Load(), Started: v.started}, nil
}

// startDiscovery publishes this instance and follows the others.
func (v *Velo) startDiscovery() error {
	r, err := v.record()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := v.discovery.Publish(ctx, r); err != nil {
		return fmt.Errorf("velo: publishing this instance: %w", err)
	}
	wctx, wcancel := context.WithCancel(context.Background())
	events, err := v.discovery.Watch(wctx)
	if err != nil {
		wcancel()
		return fmt.Errorf("velo: watching the cluster: %w", err)
	}
	if st, ok := v.discovery.(StatusReporter); ok {
		v.m.FollowDiscovery(func() metrics.DiscoveryStatus {
			s := st.Status()
			return metrics.DiscoveryStatus{Up: s.Err == nil, PublishErrors: s.PublishErrors, WatchErrors: s.WatchErrors}
		})
	}
	v.stopDiscovery = wcancel
	v.discoveryDone = make(chan struct{})
	go func() {
		defer close(v.discoveryDone)
		for ev := range events {
			v.onMember(ev)
		}
	}()
	return nil
}

// StatusReporter is what a discovery backend may implement to say whether it reaches its store
// (Health reports "discovery lost" while it does not) and how many of its tries failed (the
// velo_discovery_errors_total series). Both backends of velo/discovery implement it.
type StatusReporter interface {
	Status() discovery.Status
}

// onMember applies one membership event.
func (v *Velo) onMember(ev discovery.Event) {
	id := InstanceID(ev.Record.ID)
	if id == v.id {
		return
	}
	v.m.DiscoveryEvent(ev.Kind.String())
	switch ev.Kind {
	case discovery.Joined, discovery.Updated:
		if ev.Record.Draining {
			v.msgr.PeerDraining(id)
			v.peerChanged(id, func(p *PeerStatus) { p.State = StateDraining })
			return
		}
		// A member that left (its entry expired: killed, say) and now comes back under its name
		// with a new instance restarted, though the backend saw a departure and an arrival.
		v.membersMu.Lock()
		prev, known := v.members[ev.Record.Name]
		v.members[ev.Record.Name] = id
		v.membersMu.Unlock()
		v.registerMember(ev.Record)
		if known && prev != id && ev.Kind == discovery.Joined {
			v.forget(prev, "restarted as "+fmt.Sprintf("%016x", uint64(id)))
			if st, ok := v.peerStatus(id); ok {
				v.emit(PeerEvent{Kind: PeerRestarted, Peer: st, Previous: prev})
			}
		}
	case discovery.Restarted:
		old := InstanceID(ev.Previous.ID)
		v.membersMu.Lock()
		v.members[ev.Record.Name] = id
		v.membersMu.Unlock()
		if old != id {
			v.forget(old, "restarted as "+fmt.Sprintf("%016x", uint64(id)))
		}
		v.registerMember(ev.Record)
		if st, ok := v.peerStatus(id); ok {
			v.emit(PeerEvent{Kind: PeerRestarted, Peer: st, Previous: old})
		}
	case discovery.Left:
		for _, t := range v.transports {
			if c, ok := t.(interface{ Connected(InstanceID) bool }); ok && c.Connected(id) {
				v.log.Info("velo: a member left discovery but its connection is up; keeping it until its transport reports it down",
					"peer", fmt.Sprintf("%016x", uint64(id)), "member", ev.Record.Name)
				return
			}
		}
		v.forget(id, "left the cluster")
	}
}

func (v *Velo) registerMember(r discovery.Record) {
	var info PeerInfo
	if err := json.Unmarshal(r.Info, &info); err != nil {
		v.log.Warn("velo: a member published a PeerInfo this instance cannot read", "member", r.Name, "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := v.registerPeer(ctx, info, r.Name, false)
	var partial *PartialPeerError
	switch {
	case errors.Is(err, transport.ErrUnauthenticated):
		return // listed as unauthenticated, and logged once
	case err != nil && !errors.As(err, &partial):
		v.log.Warn("velo: could not register a member", "member", r.Name, "err", err)
		return
	}
	if !r.Started.IsZero() {
		v.m.MemberRegistered(time.Since(r.Started))
	}
}

// discoveryReason is Health's reason while the backend cannot reach its store.
func (v *Velo) discoveryReason() string {
	st, ok := v.discovery.(StatusReporter)
	if !ok {
		return ""
	}
	s := st.Status()
	if s.Err == nil {
		return ""
	}
	return fmt.Sprintf("discovery lost (%s) for %s: %v; the members known stay registered, new ones are not seen",
		s.Backend, time.Since(s.Since).Round(time.Second), s.Err)
}

// forget removes a peer from every transport and marks it down.
func (v *Velo) forget(id InstanceID, why string) {
	for _, t := range v.transports {
		t.RemovePeer(id)
	}
	v.rv.PeerDown(id)
	// Authentication belongs to a control-plane session, and the peer has none left: a peer
	// that comes back authenticates again on its new connection.
	v.auth.remove(id)
	v.peerDown(id, why)
}

func (v *Velo) peerStatus(id InstanceID) (PeerStatus, bool) {
	for _, p := range v.peers.list() {
		if p.ID == id {
			return p, true
		}
	}
	return PeerStatus{}, false
}

// announceDraining re-publishes this instance as draining.
func (v *Velo) announceDraining() {
	if v.discovery == nil {
		return
	}
	r, err := v.record()
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = v.discovery.Publish(ctx, r)
		cancel()
	}
	if err != nil {
		v.log.Warn("velo: could not announce the drain through discovery", "err", err)
	}
}

// closeDiscovery withdraws this instance and stops following the others.
func (v *Velo) closeDiscovery() {
	if v.discovery == nil {
		return
	}
	if err := v.discovery.Close(); err != nil {
		v.log.Warn("velo: withdrawing from discovery", "err", err)
	}
	if v.stopDiscovery != nil {
		v.stopDiscovery()
		<-v.discoveryDone
	}
}
