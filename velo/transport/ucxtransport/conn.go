package ucxtransport

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/transport"
)

// Slots: how endpoints are numbered, and why.
//
// UCX matches endpoints created through worker addresses (ucp_ep_match): the n-th endpoint this
// worker creates toward a peer's worker and the n-th one the peer creates toward us become one
// connection, whichever side created its endpoint first. That is invisible until one side closes:
// the other side's endpoint then stays "up", short messages may still pass, but messages of more
// than one fragment and reply-carrying ones vanish without an error until keepalive gives up. It is the loss the
// guide describes for its idle reaper, and it also strikes an endpoint created while the peer's
// same-numbered endpoint is being closed.
//
// So endpoints here are numbered, and the number is the slot: the n-th endpoint each side creates
// toward the other (the frame header's epoch). Both sides keep their counts in step: a peer's
// hello for slot n makes us create our n-th endpoint at once (joining the slot: UCX pairs it with
// the peer's), after burning — creating and dropping unused — any numbers we skipped. Each side
// sends on its endpoint of the newest slot. Retiring a slot is a fin exchange: the side that
// starts it (idle reaper, RemovePeer) sends a fin asking the other to follow; the other retires
// its endpoint of that slot with its own fin after everything it sent there. An endpoint closes
// only when its own fin went out, nothing of its own is in flight, and the peer has finished the
// slot (its fin arrived, or a later slot of it superseded this one) — so neither side ever closes
// a connection the other still sends on — or, if the peer never answers, after finWait. A fin is
// held back while a GET is in flight on the endpoint, because the owner closing its side would
// cut the GET's reply, and until the frames sent before it completed, because UCX may deliver a
// short message ahead of a longer one submitted before it on the same endpoint; the receiver's
// order (type inbound) also waits for frames a fin counts that have not arrived.

// outConn is this side's endpoint of one slot to one peer.
type outConn struct {
	p       *peer
	c       *ucx.Conn
	epoch   uint32 // the slot
	helloOp *ucx.Op
	// seal seals the data frames and the fin sent on the endpoint when the runtime requires
	// authenticated peers (nil otherwise): its key comes from the hello's proof (openLocked).
	seal *wire.UCXFrameKey
	// lanes are the transports UCX selected for the endpoint's lanes (lanes.go).
	lanes []string

	// Guarded by p.sendMu.
	seq       uint64 // data frames submitted
	retiredAt time.Time

	mu         sync.Mutex // guards the fields below; taken alone or under p.sendMu
	inflight   int        // operations submitted and not finished (sends, the fin, GETs)
	gets       int        // GETs in flight
	state      connState
	finAsk     bool // the fin to send asks the peer to retire the slot too
	finBye     bool // the fin to send says this transport is closing
	finPending bool // retired, fin not sent yet (see finHeldLocked)
	finSent    bool
}

type connState int

const (
	connOpen connState = iota
	connRetired
	connClosing
)

// slotKey names one incarnation of a peer: UCX counts endpoints per remote worker, and a new
// incarnation is a new worker.
type slotKey struct {
	id  transport.InstanceID
	inc uint64
}

// allocSlot returns the number of the next endpoint toward p. It survives RemovePeer, as UCX's
// own count does.
func (t *Transport) allocSlot(p *peer) uint32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := slotKey{p.id, p.inc}
	t.slots[k]++
	return t.slots[k]
}

func (t *Transport) slotCount(p *peer) uint32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.slots[slotKey{p.id, p.inc}]
}

// connLocked returns p's endpoint of the newest slot, opening a new slot when there is none. The
// caller holds p.sendMu.
func (t *Transport) connLocked(ctx context.Context, p *peer) (*outConn, error) {
	if p.conn != nil {
		return p.conn, nil
	}
	if p.departed {
		return nil, fmt.Errorf("ucx: peer %016x closed its transport: %w", uint64(p.id), transport.ErrPeerUnreachable)
	}
	if p.gone {
		return nil, fmt.Errorf("ucx: %w", transport.ErrClosed)
	}
	t.mu.Lock()
	why := t.laneless(p)
	t.mu.Unlock()
	if why != "" {
		return nil, noLaneErr(p, why) // ucp_ep_create would fail the same way again
	}
	// Before a slot number is taken: a number taken and never used would leave a gap the peer
	// has to burn.
	if err := t.authenticate(ctx, p); err != nil {
		return nil, err
	}
	return t.openLocked(ctx, p, t.allocSlot(p))
}

// authenticate has the control plane authenticate p when the runtime requires it: the peer
// accepts our frames only then, and our hello's proof needs the session key.
func (t *Transport) authenticate(ctx context.Context, p *peer) error {
	if t.gate == nil {
		return nil
	}
	if err := t.gate.Authenticate(ctx, p.id); err != nil {
		return fmt.Errorf("ucx: connect to %016x: %w", uint64(p.id), err)
	}
	return nil
}

// openLocked creates this side's endpoint of slot and sends its hello, which is the first thing
// on it. The caller holds p.sendMu.
func (t *Transport) openLocked(ctx context.Context, p *peer, slot uint32) (*outConn, error) {
	t.mu.Lock()
	closed := t.closed
	worker, getv, putv := p.addr.worker, p.addr.getv, p.addr.putv
	t.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("ucx: %w", transport.ErrClosed)
	}
	hdr := appendHeader(make([]byte, 0, frameHeaderLen), frameHeader{Incarnation: t.inc, Sender: t.self, Kind: kindHello, Epoch: slot, Seq: p.prevSeq})
	body := appendHelloBody(nil, p.prevEpoch, t.blob)
	oc := &outConn{p: p, epoch: slot}
	if t.gate != nil {
		// The hello carries a proof under the session key of the control plane's handshake with
		// the peer (connLocked and joinLocked had the handshake run before taking the slot), and
		// the frames after it a seal under the key that proof yields.
		msg := helloProofMsg(hdr, body, p.id, p.inc)
		proof, err := t.gate.HelloProof(p.id, msg)
		if err != nil {
			return nil, fmt.Errorf("ucx: connect to %016x: %w", uint64(p.id), err)
		}
		key, ok := t.gate.HelloKey(p.id, p.inc, msg, proof)
		if !ok {
			return nil, fmt.Errorf("ucx: connect to %016x: %w: the control plane's session is with another incarnation than %016x (the peer restarted: register its new peer info)",
				uint64(p.id), transport.ErrPeerUnreachable, p.inc)
		}
		if oc.seal, err = wire.NewUCXFrameKey(key, wire.UCXEndpoint{
			Sender: uint64(t.self), SenderInc: t.inc, Receiver: uint64(p.id), ReceiverInc: p.inc, Epoch: slot,
		}); err != nil {
			return nil, fmt.Errorf("ucx: connect to %016x: %w", uint64(p.id), err)
		}
		body = insertHelloProof(body, proof)
	}
	c, err := t.eng.Connect(ctx, worker, ucx.ConnectOptions{
		ErrorMode: ucx.ErrorModePeer,
		// Keys this transport gives to the peer (RegisterMemoryFor) are served on this
		// endpoint and the others to the same peer, and on no other.
		Holder:      uint64(p.id),
		OnError:     func(err error) { t.connFailed(oc, err) },
		VectoredGet: getv,
		VectoredPut: putv,
	})
	if err != nil {
		if errors.Is(err, ucx.ErrClosed) {
			return nil, fmt.Errorf("ucx: connect to %016x: %w", uint64(p.id), transport.ErrClosed)
		}
		t.noteConnectFailed(p, err)
		return nil, fmt.Errorf("ucx: connect to %016x: %w: %w", uint64(p.id), transport.ErrPeerUnreachable, err)
	}
	oc.c = c
	if oc.lanes, err = c.Lanes(ctx); err != nil {
		t.log.Debug("ucx: could not read the endpoint's lanes", "peer", fmt.Sprintf("%016x", uint64(p.id)), "err", err)
	}
	t.m.endpoints.WithLabelValues("opened").Inc()
	t.m.open.Inc()
	if t.openEPs.Add(1) > int64(t.cfg.MaxEndpoints) {
		t.kickEviction()
	}
	t.wg.Add(1)
	go func() {
		// Count the endpoint closed exactly once, however it ends.
		defer t.wg.Done()
		<-c.Done()
		t.m.open.Dec()
		t.openEPs.Add(-1)
	}()
	oc.helloOp = t.submit(oc, hdr, [][]byte{body})
	t.settle(oc, oc.helloOp)
	p.conn = oc
	return oc, nil
}

// joinLocked follows the peer into slot: it retires our endpoints of older slots and creates our
// endpoint of slot (burning any numbers we skipped), so that UCX pairs it with the peer's. The
// caller holds p.sendMu.
func (t *Transport) joinLocked(ctx context.Context, p *peer, slot uint32) {
	if oc := p.conn; oc != nil && oc.epoch < slot {
		t.retireLocked(p, oc, "retired_by_peer", false)
	}
	if p.gone || t.slotCount(p) >= slot {
		return
	}
	if err := t.authenticate(ctx, p); err != nil {
		t.log.Debug("ucx: not joining the peer's endpoint slot", "peer", fmt.Sprintf("%016x", uint64(p.id)), "slot", slot, "err", err)
		return
	}
	for t.slotCount(p)+1 < slot {
		n := t.allocSlot(p)
		t.burn(ctx, p, n)
	}
	if _, err := t.openLocked(ctx, p, t.allocSlot(p)); err != nil {
		t.log.Debug("ucx: joining the peer's endpoint slot failed; the next send opens a new one", "peer", fmt.Sprintf("%016x", uint64(p.id)), "slot", slot, "err", err)
	}
}

// burn creates endpoint number n toward p and drops it unused: the peer has left that slot
// behind, and an endpoint of ours numbered n could be paired with its dying one.
func (t *Transport) burn(ctx context.Context, p *peer, n uint32) {
	t.mu.Lock()
	worker := p.addr.worker
	t.mu.Unlock()
	c, err := t.eng.Connect(ctx, worker, ucx.ConnectOptions{ErrorMode: ucx.ErrorModePeer})
	if err != nil {
		return
	}
	t.log.Debug("ucx: burning an endpoint number the peer left behind", "peer", fmt.Sprintf("%016x", uint64(p.id)), "slot", n)
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), t.timings.finWait)
		defer cancel()
		_ = c.Close(ctx, ucx.CloseForce)
	}()
}

// submit starts one active message on oc and counts it in flight until UCX is done with it;
// the caller hands the Op to settle. The message is copied into UCX-owned memory first, so the
// caller's buffers are free at once and a caller that stops waiting leaves nothing behind.
func (t *Transport) submit(oc *outConn, hdr []byte, parts [][]byte) *ucx.Op {
	oc.mu.Lock()
	oc.inflight++
	oc.mu.Unlock()
	return oc.c.SendAMAsync(context.Background(), amID, hdr, parts, ucx.SendOptions{Copy: true})
}

// settle ends op's count on oc once it completed: now, when it already has (the common case,
// with no goroutine), or in the background.
func (t *Transport) settle(oc *outConn, op *ucx.Op) {
	select {
	case <-op.Done():
		t.opDone(oc, false)
		return
	default:
	}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		<-op.Done()
		t.opDone(oc, false)
	}()
}

// header is the header of a data frame or fin on oc: sealed over it and parts when the endpoint
// has a key, the plain header otherwise.
func (oc *outConn) header(h frameHeader, parts [][]byte) []byte {
	if oc.seal != nil {
		return oc.seal.Seal(make([]byte, 0, wire.UCXSealedHeaderLen), h.Kind, h.Flags, h.Seq, parts...)
	}
	return appendHeader(make([]byte, 0, frameHeaderLen), h)
}

// beginGet counts a GET in flight on oc.
func (oc *outConn) beginGet() {
	oc.mu.Lock()
	oc.inflight++
	oc.gets++
	oc.mu.Unlock()
}

// opDone ends one in-flight operation. The last one a retired endpoint's fin waited for sends
// the fin; the last operation of one whose fin went out may let it close.
func (t *Transport) opDone(oc *outConn, get bool) {
	oc.mu.Lock()
	oc.inflight--
	if get {
		oc.gets--
	}
	sendFin := oc.finPending && !oc.finHeldLocked()
	if sendFin {
		oc.finPending = false
	}
	idle := oc.inflight == 0 && oc.state == connRetired && oc.finSent
	oc.mu.Unlock()
	if sendFin {
		t.sendFin(oc)
		return
	}
	if idle {
		t.closeRetired(oc.p, t.peerView(oc.p.id))
	}
}

// finHeldLocked reports whether oc's fin must wait. It waits for the endpoint's GETs, because
// the owner closing its side would cut a GET's reply; and for the frames sent before it, because
// the fin tells the peer how many frames the endpoint carried, and UCX may put a short message
// on the wire ahead of a multi-fragment one submitted before it (while a fresh endpoint's wireup
// is pending); a completed send is on the wire, in order, ahead of anything sent after it. A
// goodbye (Close) does not wait for frames: the engine closes right behind it, and the peer's
// receive order tolerates the reordering. The caller holds oc.mu.
func (oc *outConn) finHeldLocked() bool {
	return oc.gets > 0 || (!oc.finBye && oc.inflight > 0)
}

func (oc *outConn) busy() bool {
	oc.mu.Lock()
	defer oc.mu.Unlock()
	return oc.inflight > 0
}

// retireLocked takes oc out of use: the next frame to the peer opens (or joins) a newer slot. Its
// fin — after every frame already submitted on it — goes out now, or when what it waits for
// finished (finHeldLocked).
// ask sets finAsk (this side started the retirement). The caller holds p.sendMu and oc is p.conn.
func (t *Transport) retireLocked(p *peer, oc *outConn, event string, ask bool) {
	oc.retiredAt = time.Now()
	p.conn = nil
	p.prevEpoch, p.prevSeq = oc.epoch, oc.seq
	p.retired = append(p.retired, oc)
	oc.mu.Lock()
	if oc.state == connOpen {
		oc.state = connRetired
	}
	oc.finAsk = ask
	now := !oc.finHeldLocked()
	oc.finPending = !now
	oc.mu.Unlock()
	if now {
		t.sendFin(oc)
	}
	t.m.endpoints.WithLabelValues(event).Inc()
	t.log.Debug("ucx: endpoint retired", "peer", fmt.Sprintf("%016x", uint64(p.id)), "slot", oc.epoch, "frames", oc.seq, "why", event)
}

// sendFin sends oc's fin. oc is retired, so nothing is submitted on it after this.
func (t *Transport) sendFin(oc *outConn) {
	oc.mu.Lock()
	h := frameHeader{Incarnation: t.inc, Sender: t.self, Kind: kindFin, Epoch: oc.epoch, Seq: oc.seq}
	if oc.finAsk {
		h.Flags = finAsk
	}
	if oc.finBye {
		h.Flags |= finBye
	}
	oc.mu.Unlock()
	t.settle(oc, t.submit(oc, oc.header(h, nil), nil))
	oc.mu.Lock()
	oc.finSent = true
	oc.mu.Unlock()
}

// retireAll retires p's endpoint (if any), asking the peer to follow, and stops p from opening
// new ones; used when the peer is forgotten or replaced.
func (t *Transport) retireAll(p *peer, event string) {
	p.sendMu.Lock()
	p.gone = true
	if p.conn != nil {
		t.retireLocked(p, p.conn, event, true)
	}
	p.sendMu.Unlock()
	t.mu.Lock()
	t.orphans[p] = struct{}{}
	t.mu.Unlock()
	t.closeRetired(p, t.peerView(p.id))
}

// closeRetired closes p's retired endpoints that are done: their fin went out, nothing of theirs
// is in flight, and the peer finished their slot (v says) — or finWait passed since retirement.
func (t *Transport) closeRetired(p *peer, v peerView) {
	now := time.Now()
	p.sendMu.Lock()
	keep := p.retired[:0]
	type toClose struct {
		oc       *outConn
		finished bool // the peer finished the slot: it sends nothing more on it
	}
	var closing []toClose
	for _, oc := range p.retired {
		oc.mu.Lock()
		finished := v.finishedThrough(oc.epoch)
		ready := oc.finSent && oc.inflight == 0 && (finished || now.Sub(oc.retiredAt) >= t.timings.finWait)
		if ready {
			oc.state = connClosing
		}
		oc.mu.Unlock()
		if !ready {
			keep = append(keep, oc)
			continue
		}
		closing = append(closing, toClose{oc, finished})
	}
	clear(p.retired[len(keep):])
	p.retired = keep
	p.sendMu.Unlock()
	for _, cl := range closing {
		oc := cl.oc
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), t.timings.finWait)
			defer cancel()
			// UCP never destroys an endpoint closed in flush mode while the peer's endpoint
			// is connected to it (ucp_ep_disconnected keeps it "to enable remote endpoints
			// keep sending", until the worker goes), so over tcp both sockets of every
			// retired slot stayed open. The fin exchange is the negotiated disconnect UCP
			// lacks: once the peer finished the slot it sends nothing more on it, so flush
			// what this side sent and close by force, which destroys the endpoint and its
			// sockets. A peer that never answered keeps the old way: its endpoint may still
			// send, and a forced close would read to it as this side failing.
			mode := ucx.CloseFlush
			if cl.finished {
				mode = ucx.CloseForce
				if err := oc.c.Flush(ctx); err != nil && !errors.Is(err, ucx.ErrClosed) {
					// A failed endpoint: nothing more reaches the peer, and the forced
					// close is the right one for it.
					t.log.Debug("ucx: flushing a retired endpoint", "peer", fmt.Sprintf("%016x", uint64(p.id)), "slot", oc.epoch, "err", err)
				}
			}
			err := oc.c.Close(ctx, mode)
			if err != nil && !errors.Is(err, ucx.ErrClosed) {
				t.log.Debug("ucx: closing a retired endpoint", "peer", fmt.Sprintf("%016x", uint64(p.id)), "slot", oc.epoch, "err", err)
			}
		}()
	}
}

// connFailed is the endpoint's error handler (run where the engine runs handlers).
func (t *Transport) connFailed(oc *outConn, err error) {
	p := oc.p
	oc.mu.Lock()
	expected := oc.state != connOpen
	oc.state = connClosing
	oc.mu.Unlock()
	p.sendMu.Lock()
	if p.conn == oc {
		p.conn = nil
		p.prevEpoch, p.prevSeq = oc.epoch, oc.seq
	}
	for i, r := range p.retired {
		if r == oc {
			p.retired = append(p.retired[:i], p.retired[i+1:]...)
			break
		}
	}
	p.sendMu.Unlock()
	if expected || t.isClosed() {
		t.log.Debug("ucx: retired endpoint ended with an error", "peer", fmt.Sprintf("%016x", uint64(p.id)), "slot", oc.epoch, "err", err)
		return
	}
	t.m.endpoints.WithLabelValues("failed").Inc()
	t.m.peerDown.Inc()
	t.mu.Lock()
	if !p.added {
		// A peer we only know from its hello is reachable again once it says hello again.
		p.learned = false
	}
	t.mu.Unlock()
	t.log.Warn("ucx: endpoint to peer failed; reporting it down", "peer", fmt.Sprintf("%016x", uint64(p.id)), "slot", oc.epoch, "err", err)
	t.host.PeerDown(p.id, fmt.Errorf("ucx: endpoint to %016x failed: %w: %w", uint64(p.id), transport.ErrPeerUnreachable, err))
}
