package ucxtransport

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/transport"
)

// onAM receives every frame, where the engine runs handlers (one message at a time, in the
// order the worker received them). admit decides whether the frame may be believed at all; it
// is the one place where a hello's proof or a frame's seal is checked, and nothing before it
// touches any state, so a frame it refuses moves no sequence, no epoch, no liveness.
func (t *Transport) onAM(m ucx.AMMessage) {
	if t.isClosed() {
		return // messages the engine queued before Close removed the handler
	}
	f, ok := t.admit(m)
	if !ok {
		return
	}
	if f.h.Kind == kindHello {
		t.onHello(f)
		return
	}
	t.onFrame(f)
}

// admitted is a frame admit let through.
type admitted struct {
	h frameHeader
	// payload is a data frame's payload, or a hello's body without its proof.
	payload []byte
	// key, on a hello when the runtime requires authenticated peers, seals the frames that
	// follow the hello; onHello keeps it once it accepted the hello.
	key *wire.UCXFrameKey
}

// admit decodes m's header and, when the runtime requires authenticated peers, checks that
// the frame comes from the authenticated session of the peer it names: a hello by its proof
// (and only the first hello of an endpoint), a data frame or fin by its seal under the key of
// the endpoint that peer's proven hello opened. It reads state but changes none; what it
// refuses is counted by reason and logged (at most once per sender per 10 s with a count of
// the lines held back).
func (t *Transport) admit(m ucx.AMMessage) (admitted, bool) {
	h, err := decodeHeader(m.Header)
	if err != nil {
		t.m.dropped.WithLabelValues("malformed").Inc()
		t.warnRemote("", "ucx: dropping a malformed frame", "err", err)
		return admitted{}, false
	}
	if t.gate == nil {
		// No credentials: a seal, if a peer sent one, cannot be checked, and the frame is
		// taken as before (the runtime warned at start that nothing is authenticated).
		return admitted{h: h, payload: m.Payload}, true
	}
	if !t.gate.Authenticated(h.Sender, h.Incarnation) {
		t.refuse(h, "unauthenticated", "ucx: dropping frames from a peer the control plane has not authenticated", nil)
		return admitted{}, false
	}
	if h.Kind == kindHello {
		return t.admitHello(h, m)
	}
	k := t.recvKey(h.Sender, h.Incarnation, h.Epoch)
	if k == nil {
		t.refuse(h, "bad_seal", "ucx: dropping a frame in an authenticated peer's name on an endpoint no proven hello opened", nil)
		return admitted{}, false
	}
	if _, err := k.Open(m.Header, m.Payload); err != nil {
		t.refuse(h, "bad_seal", "ucx: dropping a frame whose seal does not prove it comes from the peer's authenticated session", err)
		return admitted{}, false
	}
	return admitted{h: h, payload: m.Payload}, true
}

// admitHello checks a hello's proof and that it is the first hello of its endpoint: a second
// one, with a valid proof, is a recorded hello played again.
func (t *Transport) admitHello(h frameHeader, m ucx.AMMessage) (admitted, bool) {
	body, proof, err := splitHelloProof(m.Payload)
	var key []byte
	ok := false
	if err == nil {
		key, ok = t.gate.HelloKey(h.Sender, h.Incarnation, helloProofMsg(m.Header, body, t.self, t.inc), proof)
	}
	if !ok {
		t.refuse(h, "unauthenticated", "ucx: dropping a hello whose proof does not match the control plane's session with its sender", err)
		return admitted{}, false
	}
	if t.helloSeen(h.Sender, h.Incarnation, h.Epoch) {
		t.refuse(h, "replayed", "ucx: dropping a second hello for an endpoint already opened (a recorded hello played again)", nil)
		return admitted{}, false
	}
	k, err := wire.NewUCXFrameKey(key, wire.UCXEndpoint{
		Sender: uint64(h.Sender), SenderInc: h.Incarnation, Receiver: uint64(t.self), ReceiverInc: t.inc, Epoch: h.Epoch,
	})
	if err != nil {
		t.refuse(h, "unauthenticated", "ucx: dropping a hello: the runtime's frame key is unusable", err)
		return admitted{}, false
	}
	return admitted{h: h, payload: body, key: k}, true
}

// warnRemote logs a warning that a peer's frames caused (peer is its hex ID, or "" when the frame
// named none): at most one line per peer and message per remoteLogInterval, with the count of the
// lines held back, so that a stream of bad frames costs a counter, not the log.
func (t *Transport) warnRemote(peer, msg string, args ...any) {
	if ok, n := t.remoteLogs.Allow(peer+"\x00"+msg, time.Now()); ok {
		if peer != "" {
			args = append([]any{"peer", peer}, args...)
		}
		t.log.Warn(msg, append(args, "suppressed_since_last", n)...)
	}
}

// refuse counts a frame admit refused and logs it, once per sender per gateLogs.Interval.
func (t *Transport) refuse(h frameHeader, reason, msg string, err error) {
	t.m.dropped.WithLabelValues(reason).Inc()
	peer := fmt.Sprintf("%016x", uint64(h.Sender))
	if ok, n := t.gateLogs.Allow(peer, time.Now()); ok {
		args := []any{"peer", peer, "kind", h.Kind, "epoch", h.Epoch, "seq", h.Seq, "reason", reason, "suppressed_since_last", n}
		if err != nil {
			args = append(args, "err", err)
		}
		t.log.Warn(msg, args...)
	}
}

// onHello handles an admitted hello: the sender opened (or joined) an endpoint slot and tells
// us its address and the slot before it.
func (t *Transport) onHello(f admitted) {
	h := f.h
	prev, b, err := decodeHelloBody(f.payload)
	switch {
	case errors.Is(err, errBlobVersion):
		t.m.dropped.WithLabelValues("rejected_blob").Inc()
		t.warnRemote(fmt.Sprintf("%016x", uint64(h.Sender)), fmt.Sprintf("ucx: rejecting peer blob: unsupported ucx blob version %d (expected %d)", b.Version, BlobVersion))
		return
	case err != nil:
		t.m.dropped.WithLabelValues("rejected_blob").Inc()
		t.warnRemote(fmt.Sprintf("%016x", uint64(h.Sender)), "ucx: dropping a hello with an unusable address", "err", err)
		return
	case !t.build.Meets(b.Build):
		// Only AddPeer marks a peer as mismatched: a hello is the peer's word, and this one
		// is not acted on at all.
		t.refuse(h, "rejected_blob", "ucx: dropping a hello from a UCX build that cannot talk to this one ("+b.Build.String()+
			", this instance "+t.build.String()+")", nil)
		return
	case b.Incarnation != h.Incarnation:
		t.m.dropped.WithLabelValues("rejected_blob").Inc()
		t.warnRemote(fmt.Sprintf("%016x", uint64(h.Sender)), "ucx: dropping a hello whose address names another incarnation")
		return
	}
	if t.registeredAsOther(h) {
		// A registered peer of another incarnation: AddPeer decides who that peer is.
		t.m.dropped.WithLabelValues("unknown_sender").Inc()
		t.warnRemote(fmt.Sprintf("%016x", uint64(h.Sender)), "ucx: dropping a hello from another incarnation of a registered peer")
		return
	}
	p := t.removedJoining(h)
	if p == nil {
		if p, err = t.record(h.Sender, b, false); err != nil {
			return // closed
		}
	}
	if f.key != nil {
		t.addRecvKey(f.key)
	}
	// First: a read of ours refused until the peer's endpoint of this slot was bound goes
	// again now.
	t.heardHello(p, h.Epoch)
	v := t.receive(p, h, inFrame{kind: h.Kind, epoch: h.Epoch, seq: h.Seq, prevEpoch: prev})
	if hook := t.timings.beforeJoin; hook != nil && !hook(h.Epoch) {
		t.closeRetired(p, v)
		return
	}
	// The peer opened (or joined) a slot: be in it too, so that UCX pairs our endpoint with
	// the peer's while both are alive.
	ctx, cancel := context.WithTimeout(context.Background(), t.cfg.SendTimeout)
	p.sendMu.Lock()
	t.joinLocked(ctx, p, h.Epoch)
	p.sendMu.Unlock()
	cancel()
	t.closeRetired(p, v)
}

// onFrame handles an admitted data frame or fin.
func (t *Transport) onFrame(f admitted) {
	h := f.h
	p := t.sender(h)
	if p == nil {
		t.m.dropped.WithLabelValues("unknown_sender").Inc()
		t.log.Debug("ucx: dropping a frame from an unknown sender", "peer", fmt.Sprintf("%016x", uint64(h.Sender)), "kind", h.Kind)
		return
	}
	in := inFrame{kind: h.Kind, epoch: h.Epoch, seq: h.Seq}
	if h.Kind == kindData {
		if len(f.payload) > t.cfg.EagerMax {
			t.m.dropped.WithLabelValues("too_large").Inc()
			t.warnRemote(fmt.Sprintf("%016x", uint64(h.Sender)), "ucx: dropping a frame above the eager limit",
				"bytes", len(f.payload), "limit", t.cfg.EagerMax, "err", transport.ErrFrameTooLarge)
			// The sequence still advances: count it as received-and-dropped, not lost.
		} else {
			in.payload = f.payload
			if in.payload == nil {
				in.payload = []byte{} // an empty frame is still a frame; nil marks a dropped one
			}
		}
	}
	v := t.receive(p, h, in)
	switch {
	case h.Kind == kindFin && h.Flags&finBye != 0:
		t.peerDeparted(p)
	case h.Kind == kindFin && h.Flags&finAsk != 0:
		// The peer retires the slot: retire ours too (our fin follows what we sent there),
		// and reconnect on our next send.
		p.sendMu.Lock()
		if oc := p.conn; oc != nil && oc.epoch == h.Epoch {
			t.retireLocked(p, oc, "retired_by_peer", false)
		}
		p.sendMu.Unlock()
	}
	t.closeRetired(p, v)
}

// receive puts an admitted frame of p into its sender's receive order and delivers what that
// allows; it returns what we know of the sender's endpoints afterwards.
func (t *Transport) receive(p *peer, h frameHeader, f inFrame) peerView {
	p.touch()
	t.recvMu.Lock()
	defer t.recvMu.Unlock()
	st := t.inbound[h.Sender]
	if st == nil || st.inc != h.Incarnation {
		st = &inboundState{inc: h.Incarnation}
		t.inbound[h.Sender] = st
	}
	t.deliver(h.Sender, st.accept(f, time.Now()))
	return st.view()
}

// peerDeparted handles a peer's goodbye: its transport is closing, so its endpoint to us ends
// next. Our endpoint to it retires (its failure is then expected, not a warning), nothing new
// opens to it, and the host hears at once that the peer is down, so its leases end now rather
// than when keepalive notices.
func (t *Transport) peerDeparted(p *peer) {
	p.sendMu.Lock()
	first := !p.departed
	p.departed = true
	if oc := p.conn; oc != nil {
		t.retireLocked(p, oc, "retired_by_peer", false)
	}
	p.sendMu.Unlock()
	if !first {
		return
	}
	t.m.peerDown.Inc()
	t.log.Info("ucx: peer closed its transport; reporting it down", "peer", fmt.Sprintf("%016x", uint64(p.id)))
	t.host.PeerDown(p.id, fmt.Errorf("ucx: peer %016x closed its transport: %w", uint64(p.id), transport.ErrPeerUnreachable))
}

// removedJoining returns the forgotten peer whose hello h is when that hello joins a slot this side
// retired in RemovePeer: the peer opened its end before it read our fin. The hello belongs to the
// retired slot (its fin follows) and must not make the removed peer known again; a hello for a
// newer slot is new contact and returns nil.
func (t *Transport) removedJoining(h frameHeader) *peer {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, known := t.peers[h.Sender]; known {
		return nil
	}
	for p := range t.orphans {
		if p.id == h.Sender && p.inc == h.Incarnation && h.Epoch <= p.removedThrough {
			return p
		}
	}
	return nil
}

// sender returns the registered peer a non-hello frame claims to come from, or nil when the
// sender never introduced itself (or is another incarnation than the one we know).
//
// A fin may also come from a peer this side forgot (RemovePeer, or replaced by a new
// incarnation): it answers our own fin, and our retired endpoint may close once it arrived.
func (t *Transport) sender(h frameHeader) *peer {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.peers[h.Sender]; p != nil && p.inc == h.Incarnation {
		return p
	}
	if h.Kind == kindFin {
		for p := range t.orphans {
			if p.id == h.Sender && p.inc == h.Incarnation {
				return p
			}
		}
	}
	return nil
}

// registeredAsOther reports whether AddPeer registered the frame's sender with another
// incarnation.
func (t *Transport) registeredAsOther(h frameHeader) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.peers[h.Sender]
	return p != nil && p.added && p.inc != h.Incarnation
}

// deliver hands payloads to the runtime and counts what inbound reported. The caller holds
// recvMu, which keeps one sender's frames in order between the engine's handlers and the
// maintenance loop.
func (t *Transport) deliver(from transport.InstanceID, r inResult) {
	for _, b := range r.deliver {
		if b == nil {
			continue // a frame dropped as too large keeps its place in the sequence only
		}
		t.m.frames.WithLabelValues("received").Inc()
		t.host.Deliver(from, b)
	}
	if r.lost > 0 {
		t.m.lost.Add(float64(r.lost))
		t.warnRemote(fmt.Sprintf("%016x", uint64(from)), "ucx: frames from peer were lost with a failed endpoint", "frames", r.lost)
	}
	if r.stale > 0 {
		t.m.dropped.WithLabelValues("stale").Add(float64(r.stale))
		t.warnRemote(fmt.Sprintf("%016x", uint64(from)), "ucx: dropping frames of an endpoint already given up on", "frames", r.stale)
	}
	if r.finsAgain > 0 {
		t.m.dropped.WithLabelValues("replayed").Add(float64(r.finsAgain))
		t.warnRemote(fmt.Sprintf("%016x", uint64(from)), "ucx: dropping a fin for an endpoint already finished (a recorded fin played again)", "fins", r.finsAgain)
	}
}

// peerView snapshots what we know of id's endpoints to us.
func (t *Transport) peerView(id transport.InstanceID) peerView {
	t.recvMu.Lock()
	defer t.recvMu.Unlock()
	if st := t.inbound[id]; st != nil {
		return st.view()
	}
	return peerView{}
}

// maintain runs the idle reaper, closes retired endpoints whose peer never answered their fin,
// and releases frames held for an endpoint that will not finish.
func (t *Transport) maintain() {
	defer t.wg.Done()
	tick := time.NewTicker(t.cfg.tick())
	defer tick.Stop()
	for {
		select {
		case <-t.stop:
			return
		case <-t.evict:
			t.evictIdle()
			continue
		case <-tick.C:
		}
		if t.openEPs.Load() > int64(t.cfg.MaxEndpoints) {
			t.evictIdle() // what was busy when the budget was passed may be idle now
		}
		t.mu.Lock()
		peers := make([]*peer, 0, len(t.peers)+len(t.orphans))
		for _, p := range t.peers {
			peers = append(peers, p)
		}
		for p := range t.orphans {
			peers = append(peers, p)
		}
		t.mu.Unlock()
		now := time.Now()
		for _, p := range peers {
			if t.cfg.EPIdleTimeout > 0 && now.Sub(time.Unix(0, p.lastUse.Load())) >= t.cfg.EPIdleTimeout {
				p.sendMu.Lock()
				if oc := p.conn; oc != nil && !oc.busy() {
					t.retireLocked(p, oc, "reaped", true)
				}
				p.sendMu.Unlock()
			}
			p.sendMu.Lock()
			pending := len(p.retired) > 0
			orphaned := p.gone && !pending
			p.sendMu.Unlock()
			if pending {
				t.closeRetired(p, t.peerView(p.id))
			}
			if orphaned {
				t.mu.Lock()
				delete(t.orphans, p)
				known := t.peers[p.id] != nil
				t.mu.Unlock()
				if !known {
					t.recvMu.Lock()
					delete(t.inbound, p.id)
					t.recvMu.Unlock()
					t.forgetRecvKeys(p.id)
				}
			}
		}
		t.recvMu.Lock()
		for id, st := range t.inbound {
			t.deliver(id, st.expire(now, t.timings.holdTimeout))
		}
		t.recvMu.Unlock()
	}
}

// recvKeys are the frame keys of one peer incarnation's endpoints to us: one per epoch whose
// hello carried a valid proof. With a gate, a data frame or fin counts only when the key of its
// epoch opens its seal.
type recvKeys struct {
	inc  uint64
	keys map[uint32]*wire.UCXFrameKey
	// floor: the keys of epochs below it were let go (the oldest, beyond maxRecvKeys, or all of
	// them once the peer was forgotten); a hello for such an epoch is a replay.
	floor uint32
}

// maxRecvKeys bounds the keys kept per peer; the oldest go first (an endpoint that old has long
// been retired: a peer has one or two at a time).
const maxRecvKeys = 64

// addRecvKey keeps the key of an endpoint a proven hello opened.
func (t *Transport) addRecvKey(k *wire.UCXFrameKey) {
	ep := k.Endpoint()
	id := transport.InstanceID(ep.Sender)
	t.keysMu.Lock()
	defer t.keysMu.Unlock()
	if t.rkeys == nil {
		t.rkeys = map[transport.InstanceID]*recvKeys{}
	}
	rk := t.rkeys[id]
	if rk == nil || rk.inc != ep.SenderInc {
		rk = &recvKeys{inc: ep.SenderInc}
		t.rkeys[id] = rk
	}
	if rk.keys == nil {
		rk.keys = map[uint32]*wire.UCXFrameKey{}
	}
	rk.keys[ep.Epoch] = k
	if len(rk.keys) > maxRecvKeys {
		oldest := ep.Epoch
		for e := range rk.keys {
			oldest = min(oldest, e)
		}
		delete(rk.keys, oldest)
		rk.floor = max(rk.floor, oldest+1)
	}
}

// recvKey is the key of the sender incarnation's endpoint epoch, or nil when no proven hello
// opened it (or it was let go).
func (t *Transport) recvKey(id transport.InstanceID, inc uint64, epoch uint32) *wire.UCXFrameKey {
	t.keysMu.Lock()
	defer t.keysMu.Unlock()
	rk := t.rkeys[id]
	if rk == nil || rk.inc != inc {
		return nil
	}
	return rk.keys[epoch]
}

// helloSeen reports whether a proven hello for the endpoint was taken already (or its key let
// go): the sender sends one hello per endpoint, so another is a replay.
func (t *Transport) helloSeen(id transport.InstanceID, inc uint64, epoch uint32) bool {
	t.keysMu.Lock()
	defer t.keysMu.Unlock()
	rk := t.rkeys[id]
	if rk == nil || rk.inc != inc {
		return false
	}
	return epoch < rk.floor || rk.keys[epoch] != nil
}

// forgetRecvKeys lets go of a forgotten peer's keys. The floor stays above every epoch they
// covered, so that its recorded hellos cannot open those endpoints again.
func (t *Transport) forgetRecvKeys(id transport.InstanceID) {
	t.keysMu.Lock()
	defer t.keysMu.Unlock()
	rk := t.rkeys[id]
	if rk == nil {
		return
	}
	for e := range rk.keys {
		rk.floor = max(rk.floor, e+1)
	}
	rk.keys = nil
}
