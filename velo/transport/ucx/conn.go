package ucxt

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/velo/transport"
)

// outConn is one endpoint from this instance to a peer: one epoch.
//
// Its life: open (frames go on it) → retired (its fin went out last; it waits until its own
// operations finished and the peer has stopped its endpoint to us, or finWait passed) → closed
// with a flush. It can fail at any point (UCX calls the error handler); a failure of an open
// endpoint is a peer failure and reaches the runtime as PeerDown, a failure of a retired one is
// the expected end of a conversation that both sides finished.
type outConn struct {
	p       *peer
	c       *ucx.Conn
	epoch   uint32
	helloOp *ucx.Op

	// Guarded by p.sendMu.
	seq       uint64 // data frames submitted
	retiredAt time.Time
	// peerEpoch is the peer's newest endpoint to us when this one was retired: this one closes
	// once the peer finished every endpoint up to it (they are the ones UCX may have paired with
	// this one; closing this endpoint under them could cost their frames in flight).
	peerEpoch uint32

	mu       sync.Mutex // guards the fields below; taken without p.sendMu or under it
	inflight int        // operations submitted and not finished
	state    connState
}

type connState int

const (
	connOpen connState = iota
	connRetired
	connClosing
)

// connLocked returns p's open endpoint, opening one (and sending its hello) when there is none.
// The caller holds p.sendMu, so the hello is the first thing submitted on a new endpoint.
func (t *Transport) connLocked(ctx context.Context, p *peer) (*outConn, error) {
	if p.conn != nil {
		return p.conn, nil
	}
	if p.gone {
		return nil, fmt.Errorf("ucx: %w", transport.ErrClosed)
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, fmt.Errorf("ucx: %w", transport.ErrClosed)
	}
	worker := p.addr.worker
	t.nextEpoch++
	epoch := t.nextEpoch
	t.mu.Unlock()
	oc := &outConn{p: p, epoch: epoch}
	c, err := t.eng.Connect(ctx, worker, ucx.ConnectOptions{
		ErrorMode: ucx.ErrorModePeer,
		OnError:   func(err error) { t.connFailed(oc, err) },
	})
	if err != nil {
		if errors.Is(err, ucx.ErrClosed) {
			return nil, fmt.Errorf("ucx: connect to %016x: %w", uint64(p.id), transport.ErrClosed)
		}
		return nil, fmt.Errorf("ucx: connect to %016x: %w: %w", uint64(p.id), transport.ErrPeerUnreachable, err)
	}
	oc.c = c
	t.m.endpoints.WithLabelValues("opened").Inc()
	t.m.open.Inc()
	t.wg.Add(1)
	go func() {
		// Count the endpoint closed exactly once, however it ends.
		defer t.wg.Done()
		<-c.Done()
		t.m.open.Dec()
	}()
	hdr := appendHeader(make([]byte, 0, frameHeaderLen), frameHeader{Incarnation: t.inc, Sender: t.self, Kind: kindHello, Epoch: epoch, Seq: p.prevSeq})
	oc.helloOp = t.submit(oc, hdr, [][]byte{appendHelloBody(nil, p.prevEpoch, t.blob)})
	p.conn = oc
	return oc, nil
}

// submit starts one active message on oc and counts it in flight until UCX is done with it. The
// message is copied into UCX-owned memory first, so the caller's buffers are free at once and a
// caller that stops waiting leaves nothing behind.
func (t *Transport) submit(oc *outConn, hdr []byte, parts [][]byte) *ucx.Op {
	oc.mu.Lock()
	oc.inflight++
	oc.mu.Unlock()
	op := oc.c.SendAMAsync(context.Background(), amID, hdr, parts, ucx.SendOptions{Copy: true})
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		<-op.Done()
		t.opDone(oc)
	}()
	return op
}

// begin counts an operation that is not an active message (a GET) in flight on oc.
func (oc *outConn) begin() {
	oc.mu.Lock()
	oc.inflight++
	oc.mu.Unlock()
}

// opDone ends one in-flight operation; the last one of a retired endpoint may let it close.
func (t *Transport) opDone(oc *outConn) {
	oc.mu.Lock()
	oc.inflight--
	idle := oc.inflight == 0 && oc.state == connRetired
	oc.mu.Unlock()
	if idle {
		t.closeRetired(oc.p, t.peerView(oc.p.id))
	}
}

func (oc *outConn) busy() bool {
	oc.mu.Lock()
	defer oc.mu.Unlock()
	return oc.inflight > 0
}

// retireLocked makes oc's fin the last message on it and takes it out of use: the next frame to
// the peer opens a new endpoint. ask sets finAsk (this side started the retirement); peerEpoch is
// the peer's newest endpoint to us now. The caller holds p.sendMu and oc is p.conn.
func (t *Transport) retireLocked(p *peer, oc *outConn, event string, ask bool, peerEpoch uint32) {
	h := frameHeader{Incarnation: t.inc, Sender: t.self, Kind: kindFin, Epoch: oc.epoch, Seq: oc.seq}
	if ask {
		h.Flags = finAsk
	}
	hdr := appendHeader(make([]byte, 0, frameHeaderLen), h)
	t.submit(oc, hdr, nil)
	oc.mu.Lock()
	if oc.state == connOpen {
		oc.state = connRetired
	}
	oc.mu.Unlock()
	oc.retiredAt = time.Now()
	oc.peerEpoch = peerEpoch
	p.conn = nil
	p.prevEpoch, p.prevSeq = oc.epoch, oc.seq
	p.retired = append(p.retired, oc)
	t.m.endpoints.WithLabelValues(event).Inc()
	t.log.Debug("ucx: endpoint retired", "peer", fmt.Sprintf("%016x", uint64(p.id)), "epoch", oc.epoch, "frames", oc.seq, "why", event)
}

// retireAll retires p's open endpoint (if any) and stops p from opening new ones; used when the
// peer is forgotten.
func (t *Transport) retireAll(p *peer, event string) {
	v := t.peerView(p.id)
	p.sendMu.Lock()
	p.gone = true
	if p.conn != nil {
		t.retireLocked(p, p.conn, event, true, v.latest)
	}
	p.sendMu.Unlock()
	t.closeRetired(p, v)
}

// closeRetired closes p's retired endpoints that are done: no operation of theirs in flight, and
// the peer has finished the endpoints it had open when each was retired (v says), or finWait has
// passed.
func (t *Transport) closeRetired(p *peer, v peerView) {
	now := time.Now()
	p.sendMu.Lock()
	keep := p.retired[:0]
	var closing []*outConn
	for _, oc := range p.retired {
		if oc.busy() || (!v.finishedThrough(oc.peerEpoch) && now.Sub(oc.retiredAt) < t.timings.finWait) {
			keep = append(keep, oc)
			continue
		}
		oc.mu.Lock()
		oc.state = connClosing
		oc.mu.Unlock()
		closing = append(closing, oc)
	}
	clear(p.retired[len(keep):])
	p.retired = keep
	p.sendMu.Unlock()
	for _, oc := range closing {
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), t.timings.finWait)
			defer cancel()
			if err := oc.c.Close(ctx, ucx.CloseFlush); err != nil && !errors.Is(err, ucx.ErrClosed) {
				t.log.Debug("ucx: closing a retired endpoint", "peer", fmt.Sprintf("%016x", uint64(p.id)), "epoch", oc.epoch, "err", err)
			}
		}()
	}
}

// connFailed is the endpoint's error handler (on the engine's delivery goroutine).
func (t *Transport) connFailed(oc *outConn, err error) {
	p := oc.p
	oc.mu.Lock()
	expected := oc.state != connOpen
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
		t.log.Debug("ucx: retired endpoint ended with an error", "peer", fmt.Sprintf("%016x", uint64(p.id)), "epoch", oc.epoch, "err", err)
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
	t.log.Warn("ucx: endpoint to peer failed; reporting it down", "peer", fmt.Sprintf("%016x", uint64(p.id)), "epoch", oc.epoch, "err", err)
	t.host.PeerDown(p.id, fmt.Errorf("ucx: endpoint to %016x failed: %w: %w", uint64(p.id), transport.ErrPeerUnreachable, err))
}
