package velo

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/messenger"
	"github.com/velo-go/velo/velo/transport"
)

// What this file owns: the instance's view of its peers (Peers), the graceful shutdown
// (Shutdown) and the instance's health (Health, Probe). See docs/velo.md, "Running it".

// ErrDraining: the peer is draining (shutting down gracefully, see Shutdown): it ran nothing of
// the message, and sending it to another instance is safe. It also matches ErrUnavailable.
var ErrDraining = messenger.ErrDraining

// State is the lifecycle state of an instance (Health) or of a peer as this instance sees it
// (Peers).
type State string

// States.
const (
	// StateReady: running and serving.
	StateReady State = "ready"
	// StateUp: a peer this instance can reach.
	StateUp State = "up"
	// StateDraining: shutting down gracefully; no new handler runs there.
	StateDraining State = "draining"
	// StateDegraded: running, with a reason that needs an operator (Health.Reasons).
	StateDegraded State = "degraded"
	// StateDown: a peer a transport reported lost.
	StateDown State = "down"
	// StateUnauthenticated: a peer that failed authentication (another cluster secret, a
	// certificate the cluster CA did not sign, no credentials where this instance requires them).
	// It is never up: nothing is sent to it and PeerStatus.Err says why. It becomes up if a later
	// handshake authenticates it.
	StateUnauthenticated State = "unauthenticated"
	// StateClosed: the instance was closed.
	StateClosed State = "closed"
)

// PeerStatus is one peer as this instance sees it.
type PeerStatus struct {
	ID InstanceID
	// Name is the member name the peer joined with (WithDiscovery's name, or its instance ID in
	// hex when it gave none). It is "" for a peer registered by hand (RegisterPeer) that never
	// said it, such as one that does not use discovery.
	Name        string
	Incarnation uint64 // 0 while only heard from, until its PeerInfo is known
	State       State  // up, draining, down or unauthenticated
	// Transports are the transports that accepted its address at RegisterPeer or, for a peer
	// that reached this instance before it was registered, those it was heard over; they grow
	// as its addresses become known.
	Transports []string
	Since      time.Time
	// LastRTT is the round trip of the last Probe over each transport that answered it (Peers
	// lists an empty map before any did; in a WatchPeers event it is nil then).
	LastRTT map[string]time.Duration
	// Err is why it is down, when it is: the reason of the report that took it down (the down
	// PeerEvent carries the same text), DepartedReason for a peer that drained and then closed;
	// for an unauthenticated peer, why its handshake failed.
	Err string
	// Authenticated: this instance authenticates its peers and the control plane authenticated
	// this one's incarnation; Identity is the name its credentials give (a certificate's common
	// name; empty for a cluster secret).
	Authenticated bool
	Identity      string
	// Rails are the rails (WithRails with Slice) that reads from this peer can use: those on
	// which both sides published an address. Empty with one rail.
	Rails []string
}

// peerTable is the instance's record of its peers.
type peerTable struct {
	mu    sync.Mutex
	peers map[InstanceID]*PeerStatus
	// quiet holds the peers listed because they were heard from, whose up event waits for their
	// PeerInfo (heardFirst): the first change of one is announced as if it were new.
	quiet map[InstanceID]bool
}

// listHeard lists a peer heard from over transport tr, up, when the table has no record of it; it
// reports whether it did.
func (t *peerTable) listHeard(id InstanceID, tr string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.peers[id] != nil {
		return false
	}
	if t.peers == nil {
		t.peers = map[InstanceID]*PeerStatus{}
	}
	if t.quiet == nil {
		t.quiet = map[InstanceID]bool{}
	}
	t.peers[id] = &PeerStatus{ID: id, State: StateUp, Since: time.Now(), Transports: []string{tr}}
	t.quiet[id] = true
	return true
}

func (t *peerTable) set(id InstanceID, f func(p *PeerStatus)) (before State, after PeerStatus) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.peers == nil {
		t.peers = map[InstanceID]*PeerStatus{}
	}
	p := t.peers[id]
	before = "" // new to the table
	if p == nil {
		// LastRTT is made by the first Probe that answers: a peer that is only known costs no
		// map (list hands out an empty one).
		p = &PeerStatus{ID: id, State: StateUp, Since: time.Now()}
		t.peers[id] = p
	} else if !t.quiet[id] {
		before = p.State
	}
	delete(t.quiet, id)
	f(p)
	if p.State != before {
		p.Since = time.Now()
	}
	after = *p
	after.Transports = append([]string(nil), p.Transports...)
	return before, after
}

// isQuiet reports whether a peer is listed as heard from, its up event waiting for its PeerInfo.
func (t *peerTable) isQuiet(id InstanceID) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.quiet[id]
}

func (t *peerTable) list() []PeerStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]PeerStatus, 0, len(t.peers))
	for _, p := range t.peers {
		c := *p
		c.Transports = append([]string(nil), p.Transports...)
		c.LastRTT = make(map[string]time.Duration, len(p.LastRTT))
		for k, v := range p.LastRTT {
			c.LastRTT[k] = v
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (t *peerTable) counts() map[string]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := map[string]int{}
	for _, p := range t.peers {
		c[string(p.State)]++
	}
	return c
}

// countsBy is counts per transport that took the peers' addresses.
func (t *peerTable) countsBy() map[string]map[string]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := map[string]map[string]int{}
	for _, p := range t.peers {
		for _, tr := range p.Transports {
			if c[tr] == nil {
				c[tr] = map[string]int{}
			}
			c[tr][string(p.State)]++
		}
	}
	return c
}

// peersWithoutUCX counts the peers up or draining whose registration no RMA transport accepted.
func (v *Velo) peersWithoutUCX() int {
	rma := map[string]bool{}
	for _, t := range v.transports {
		if _, ok := t.(transport.RMA); ok {
			rma[t.Name()] = true
		}
	}
	n := 0
	for _, p := range v.peers.list() {
		if v.peers.isQuiet(p.ID) {
			continue // heard from, its PeerInfo on the way
		}
		if p.State == StateDown || p.State == StateUnauthenticated || len(p.Transports) == 0 {
			continue
		}
		has := false
		for _, tr := range p.Transports {
			has = has || rma[tr]
		}
		if !has {
			n++
		}
	}
	return n
}

// Peers lists the peers this instance registered (RegisterPeer), found through discovery, or heard
// from (a peer that sent this instance a message before either), with their state: up, draining
// (it announced a graceful shutdown: user messages to it fail at once with ErrDraining), down (a
// transport reported it lost), or unauthenticated (its handshake failed: Err says why). A peer
// heard from is asked for its PeerInfo and name at once and registered with them, so its UCX
// address and name follow within a round trip.
func (v *Velo) Peers() []PeerStatus {
	ps := v.peers.list()
	for i := range ps {
		if e, ok := v.auth.lookup(ps[i].ID, ps[i].Incarnation); ok {
			ps[i].Authenticated, ps[i].Identity = true, e.identity
		}
		for _, t := range v.transports {
			if rt, ok := t.(interface {
				RailsTo(transport.InstanceID) []string
			}); ok {
				ps[i].Rails = rt.RailsTo(ps[i].ID)
			}
		}
	}
	return ps
}

func (v *Velo) peerChanged(id InstanceID, f func(p *PeerStatus)) {
	before, after := v.peers.set(id, f)
	if after.State != before {
		v.emit(PeerEvent{Kind: PeerEventKind(after.State), Peer: after})
	}
	v.peerMetrics()
}

// peerMetrics sets velo_peers from the table.
func (v *Velo) peerMetrics() {
	by := v.peers.countsBy()
	for _, t := range v.transports {
		v.m.SetPeers(t.Name(), by[t.Name()])
	}
}

// drainNotice is the one-way message a draining instance sends its peers.
const drainNotice = "velo.drain"

// onDrainNotice marks the sender as draining.
func (v *Velo) onDrainNotice(_ context.Context, from InstanceID, payload []byte) ([][]byte, func(), error) {
	n, err := wire.DecodeDrainNotice(payload)
	if err != nil {
		return nil, nil, fmt.Errorf("velo: %w", err)
	}
	inc := n.Incarnation
	v.msgr.PeerDraining(from)
	v.peerChanged(from, func(p *PeerStatus) {
		if p.State == StateDown {
			// The notice of a peer of an earlier release, which sends it one way, ran after its
			// connection closed: the peer departed, and does not come back as draining.
			p.Err = DepartedReason
			return
		}
		p.State, p.Incarnation = StateDraining, inc
	})
	v.log.Info("velo: a peer is draining; user messages to it now fail with ErrDraining", "peer", fmt.Sprintf("%016x", uint64(from)))
	return nil, nil, nil
}

// Shutdown shuts the instance down gracefully, like http.Server.Shutdown:
//
//  1. it tells its peers it is draining (they fail new user messages to it at once with
//     ErrDraining and show it as draining in Peers), and Health turns draining;
//  2. new user requests are answered at once with an error matching ErrDraining, and new one-way
//     messages are refused and counted (velo_messenger_errors_total{kind="draining"}) — a peer
//     that had the notice does not send them any more;
//  3. handlers already running finish, answers to this instance's own calls still arrive, new
//     rendezvous offers are answered on the chunked path (reason draining), and gets in flight
//     complete: leases are released, or reaped by their TTL;
//  4. once nothing runs, no call of its own waits for an answer and no lease is open, or when ctx
//     ends, it closes (Close).
//
// It returns Close's error, or ctx's when ctx ended first (Close has still run). Close stays the
// immediate way down.
func (v *Velo) Shutdown(ctx context.Context) error {
	v.beginDrain()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	var waitErr error
wait:
	for {
		_, leases := v.rv.Counts()
		if v.msgr.Busy() == 0 && v.msgr.Pending() == 0 && leases == 0 {
			break
		}
		select {
		case <-ctx.Done():
			waitErr = fmt.Errorf("velo: Shutdown: closing with %d handlers running, %d calls of its own waiting and %d leases open: %w",
				v.msgr.Busy(), v.msgr.Pending(), leases, ctx.Err())
			break wait
		case <-tick.C:
		}
	}
	return errors.Join(waitErr, v.Close())
}

// beginDrain turns the instance draining and tells its peers, once.
func (v *Velo) beginDrain() {
	if !v.draining.CompareAndSwap(false, true) {
		return
	}
	v.rv.BeginDrain()
	v.drainPush()
	v.msgr.BeginDrain()
	v.announceDraining()
	peers := map[InstanceID]bool{}
	for _, p := range v.peers.list() {
		if p.State != StateDown && p.State != StateUnauthenticated {
			peers[p.ID] = true
		}
	}
	for _, p := range v.msgr.InboxPeers() {
		peers[p] = true
	}
	for _, p := range v.heardPeers() {
		peers[p] = true
	}
	notice := wire.AppendDrainNotice(nil, wire.DrainNotice{Incarnation: v.incarnation})
	var wg sync.WaitGroup
	for id := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			// A request, not a one-way message: its answer says the peer has marked this
			// instance draining, so the connections that Close ends afterwards cannot reach the
			// peer first and read as a lost peer (the notice runs on a goroutine of its own there).
			if _, err := v.msgr.Request(ctx, id, drainNotice, notice); err != nil {
				v.log.Debug("velo: could not tell a peer this instance drains", "peer", fmt.Sprintf("%016x", uint64(id)), "err", err)
			}
		}()
	}
	wg.Wait()
	v.log.Info("velo: draining: no new handler runs; closing once running handlers and open leases are done", "peers_told", len(peers))
}

// Health is the instance's state for probes and dashboards.
type Health struct {
	State State // ready, draining, degraded or closed
	// Reasons say why the state is not ready: what an operator should look at.
	Reasons []string
}

// HealthReporter is what a transport may implement to add reasons to Health: a state an operator
// must see that does not stop the instance serving. Each reason makes the instance degraded (still
// ready). The UCX transport reports one when it runs, because VELO_UCX_TRUST_NETWORK or
// ucxtransport.Config.TrustNetwork said so, on a UCX without velo's software RMA guard
// (docs/security.md).
type HealthReporter interface {
	HealthReasons() []string
}

// Ready reports whether the instance should get new work: ready or degraded.
func (h Health) Ready() bool { return h.State == StateReady || h.State == StateDegraded }

// Health reports the instance's state. Degraded means it serves, with a reason to look at: the
// RDMA registry's budget is spent (transfers go chunked), keys are quarantined behind a stalled
// consumer, an arena could not be mapped (memlock), peers are down, or a transport reports a
// reason of its own (HealthReporter: the UCX transport running, by the operator's opt-in, on a
// UCX that does not enforce keys on software RMA).
func (v *Velo) Health() Health {
	switch {
	case v.closed.Load():
		return Health{State: StateClosed, Reasons: []string{"Close was called"}}
	case v.draining.Load():
		return Health{State: StateDraining, Reasons: []string{"Shutdown was called"}}
	}
	var reasons []string
	if v.rdma == nil {
		reasons = append(reasons, "no UCX transport (WithUCXTransport): every rendezvous get takes the chunked path over the control plane")
	} else if n := v.peersWithoutUCX(); n > 0 {
		reasons = append(reasons, fmt.Sprintf("no UCX to %d peers (they offered no usable UCX address): their gets take the chunked path", n))
	}
	if r := v.discoveryReason(); r != "" {
		reasons = append(reasons, r)
	}
	if v.rdma != nil {
		st := v.rdma.Stats()
		if st.Budget > 0 && st.PinnedBytes >= st.Budget {
			reasons = append(reasons, fmt.Sprintf("the RDMA registered-bytes budget is spent (%d of %d bytes): transfers take the chunked path", st.PinnedBytes, st.Budget))
		}
		if st.QuarantinedRegistrations > 0 {
			reasons = append(reasons, fmt.Sprintf("%d RDMA keys quarantined behind consumers still reading them (%d bytes)", st.QuarantinedRegistrations, st.QuarantinedBytes))
		}
		if st.LastArenaError != nil && st.Arenas == 0 {
			reasons = append(reasons, "no pinned arena could be mapped: "+st.LastArenaError.Error())
		}
		if v.rdma.KillSwitch() {
			reasons = append(reasons, "the RDMA path is switched off (VELO_RDMA_RENDEZVOUS_DISABLE or RDMAConfig.Disabled): every transfer takes the chunked path")
		}
	}
	counts := v.peers.counts()
	if down := counts[string(StateDown)]; down > 0 {
		reasons = append(reasons, fmt.Sprintf("%d peers down", down))
	}
	if n := counts[string(StateUnauthenticated)]; n > 0 {
		reasons = append(reasons, fmt.Sprintf("%d peers failed authentication (Peers says why): check that every member has the same credentials", n))
	}
	for _, t := range v.transports {
		if hr, ok := t.(HealthReporter); ok {
			reasons = append(reasons, hr.HealthReasons()...)
		}
	}
	if len(reasons) > 0 {
		return Health{State: StateDegraded, Reasons: reasons}
	}
	return Health{State: StateReady}
}

// ProbeResult is one transport's answer to Probe.
type ProbeResult struct {
	Transport string
	RTT       time.Duration
	Err       error
}

// pingName is the internal request Probe sends.
const pingName = "velo.ping"

// Probe measures the round trip to peer over each transport that reaches it (a small internal
// request; it runs no user handler and works while the peer drains). The RTTs show in Peers.
func (v *Velo) Probe(ctx context.Context, peer InstanceID) []ProbeResult {
	var out []ProbeResult
	for i, t := range v.transports {
		if !t.Reaches(peer) {
			continue
		}
		began := time.Now()
		_, err := v.msgr.RequestOver(ctx, i, peer, pingName, nil)
		r := ProbeResult{Transport: t.Name(), RTT: time.Since(began), Err: err}
		if err == nil {
			v.peerChanged(peer, func(p *PeerStatus) {
				if p.LastRTT == nil {
					p.LastRTT = map[string]time.Duration{}
				}
				p.LastRTT[t.Name()] = r.RTT
			})
		}
		out = append(out, r)
	}
	return out
}

func onPing(context.Context, transport.InstanceID, []byte) ([][]byte, func(), error) {
	return nil, nil, nil
}
