package ucx

import (
	"context"
	"errors"
	"fmt"
	"time"

	ucp "github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/velo/transport"
)

// onAM receives every frame, where the engine runs handlers (one message at a time, in the
// order the worker received them).
func (t *Transport) onAM(m ucp.AMMessage) {
	if t.isClosed() {
		return // messages the engine queued before Close removed the handler
	}
	h, err := decodeHeader(m.Header)
	if err != nil {
		t.m.dropped.WithLabelValues("malformed").Inc()
		t.log.Warn("ucx: dropping a malformed frame", "err", err)
		return
	}
	if t.gate != nil && !t.gate.Authenticated(h.Sender, h.Incarnation) {
		t.m.dropped.WithLabelValues("unauthenticated").Inc()
		if ok, n := t.gateLogs.Allow(fmt.Sprintf("%016x", uint64(h.Sender)), time.Now()); ok {
			t.log.Warn("ucx: dropping frames from a peer the control plane has not authenticated",
				"peer", fmt.Sprintf("%016x", uint64(h.Sender)), "kind", h.Kind, "suppressed_since_last", n)
		}
		return
	}
	f := inFrame{kind: h.Kind, epoch: h.Epoch, seq: h.Seq}
	var p *peer
	switch h.Kind {
	case kindHello:
		payload := m.Payload
		if t.gate != nil {
			body, proof, err := splitHelloProof(payload)
			if err != nil || !t.gate.HelloValid(h.Sender, h.Incarnation, helloProofMsg(m.Header, body, t.self, t.inc), proof) {
				t.m.dropped.WithLabelValues("unauthenticated").Inc()
				if ok, n := t.gateLogs.Allow(fmt.Sprintf("%016x", uint64(h.Sender)), time.Now()); ok {
					t.log.Warn("ucx: dropping a hello whose proof does not match the control plane's session with its sender",
						"peer", fmt.Sprintf("%016x", uint64(h.Sender)), "suppressed_since_last", n)
				}
				return
			}
			payload = body
			t.markProven(h.Sender, h.Incarnation, h.Epoch)
		}
		prev, b, err := decodeHelloBody(payload)
		switch {
		case errors.Is(err, errBlobVersion):
			t.m.dropped.WithLabelValues("rejected_blob").Inc()
			t.log.Warn(fmt.Sprintf("ucx: rejecting peer blob: unsupported ucx blob version %d (expected %d)", b.Version, BlobVersion),
				"peer", fmt.Sprintf("%016x", uint64(h.Sender)))
			return
		case err != nil:
			t.m.dropped.WithLabelValues("rejected_blob").Inc()
			t.log.Warn("ucx: dropping a hello with an unusable address", "peer", fmt.Sprintf("%016x", uint64(h.Sender)), "err", err)
			return
		case b.Incarnation != h.Incarnation:
			t.m.dropped.WithLabelValues("rejected_blob").Inc()
			t.log.Warn("ucx: dropping a hello whose address names another incarnation", "peer", fmt.Sprintf("%016x", uint64(h.Sender)))
			return
		}
		if t.registeredAsOther(h) {
			// A registered peer of another incarnation: AddPeer decides who that peer is.
			t.m.dropped.WithLabelValues("unknown_sender").Inc()
			t.log.Warn("ucx: dropping a hello from another incarnation of a registered peer", "peer", fmt.Sprintf("%016x", uint64(h.Sender)))
			return
		}
		if p = t.removedJoining(h); p == nil {
			if p, err = t.record(h.Sender, b, false); err != nil {
				return // closed
			}
		}
		f.prevEpoch = prev
	default:
		if t.gate != nil && !t.isProven(h.Sender, h.Incarnation, h.Epoch) {
			// An epoch no proven hello opened: someone sending in an authenticated peer's name.
			t.m.dropped.WithLabelValues("unauthenticated").Inc()
			return
		}
		if p = t.sender(h); p == nil {
			t.m.dropped.WithLabelValues("unknown_sender").Inc()
			t.log.Debug("ucx: dropping a frame from an unknown sender", "peer", fmt.Sprintf("%016x", uint64(h.Sender)), "kind", h.Kind)
			return
		}
		if h.Kind == kindData {
			if len(m.Payload) > t.cfg.EagerMax {
				t.m.dropped.WithLabelValues("too_large").Inc()
				t.log.Warn("ucx: dropping a frame above the eager limit", "peer", fmt.Sprintf("%016x", uint64(h.Sender)),
					"bytes", len(m.Payload), "limit", t.cfg.EagerMax, "err", transport.ErrFrameTooLarge)
				// The sequence still advances: count it as received-and-dropped, not lost.
			} else {
				f.payload = m.Payload
				if f.payload == nil {
					f.payload = []byte{} // an empty frame is still a frame; nil marks a dropped one
				}
			}
		}
	}
	p.touch()

	t.recvMu.Lock()
	st := t.inbound[h.Sender]
	if st == nil || st.inc != h.Incarnation {
		st = &inboundState{inc: h.Incarnation}
		t.inbound[h.Sender] = st
	}
	t.deliver(h.Sender, st.accept(f, time.Now()))
	v := st.view()
	t.recvMu.Unlock()

	switch {
	case h.Kind == kindHello:
		// The peer opened (or joined) a slot: be in it too, so that UCX pairs our endpoint
		// with the peer's while both are alive.
		ctx, cancel := context.WithTimeout(context.Background(), t.cfg.SendTimeout)
		p.sendMu.Lock()
		t.joinLocked(ctx, p, h.Epoch)
		p.sendMu.Unlock()
		cancel()
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
		t.log.Warn("ucx: frames from peer were lost with a failed endpoint", "peer", fmt.Sprintf("%016x", uint64(from)), "frames", r.lost)
	}
	if r.stale > 0 {
		t.m.dropped.WithLabelValues("stale").Add(float64(r.stale))
		t.log.Warn("ucx: dropping frames of an endpoint already given up on", "peer", fmt.Sprintf("%016x", uint64(from)), "frames", r.stale)
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
		case <-tick.C:
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

// provenEpochs are one peer incarnation's epochs opened by a hello with a valid proof.
type provenEpochs struct {
	inc    uint64
	epochs map[uint32]struct{}
}

// maxProvenEpochs bounds the epochs remembered per peer; the oldest go first (an epoch that old
// has long been retired).
const maxProvenEpochs = 256

func (t *Transport) markProven(id transport.InstanceID, inc uint64, epoch uint32) {
	t.provenMu.Lock()
	defer t.provenMu.Unlock()
	if t.proven == nil {
		t.proven = map[transport.InstanceID]*provenEpochs{}
	}
	pe := t.proven[id]
	if pe == nil || pe.inc != inc {
		pe = &provenEpochs{inc: inc, epochs: map[uint32]struct{}{}}
		t.proven[id] = pe
	}
	pe.epochs[epoch] = struct{}{}
	if len(pe.epochs) > maxProvenEpochs {
		oldest := epoch
		for e := range pe.epochs {
			oldest = min(oldest, e)
		}
		delete(pe.epochs, oldest)
	}
}

func (t *Transport) isProven(id transport.InstanceID, inc uint64, epoch uint32) bool {
	t.provenMu.Lock()
	defer t.provenMu.Unlock()
	pe := t.proven[id]
	if pe == nil || pe.inc != inc {
		return false
	}
	_, ok := pe.epochs[epoch]
	return ok
}
