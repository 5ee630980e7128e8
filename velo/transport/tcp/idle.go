package tcp

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/velo-go/velo/velo/internal/wire"
)

// The idle close: the connection budget (Config.MaxConnections) and the idle timeout
// (Config.IdleTimeout).
//
// A member of a large cluster talks to a few peers at a time, yet every peer it ever talked to
// kept a connection: two descriptors, a reader goroutine and its buffers, for as long as both
// lived. So a connection that carried nothing for IdleTimeout is closed, and so are the least
// recently used ones while more than MaxConnections are open.
//
// Closing one must lose nothing and must not read as a lost peer, so the two sides agree on it
// first (wire.TCPControl):
//
//	A → goodbye(frames A read from B)     A sends nothing more until answered
//	B → ack                               B sent exactly that many, and no call of B's waits on it:
//	                                      from here neither sends on it; A closes, B reads EOF
//	B → keep                              otherwise: a frame crossed the goodbye, or B waits for
//	                                      an answer on it; both go on using it
//
// A frame B sent before it read the goodbye arrives at A after the goodbye went out, so B's count
// exceeds the one A sent and B answers keep: a frame that crosses the goodbye cancels it, and A
// never closes with a frame of B's unread. A's own frames all precede the goodbye, which B reads
// after them. Frames count once delivered, so a frame of the same peer on a newer connection
// never overtakes one still being delivered from the old. When both sides ask at once, each
// answers the other's goodbye as above; a side that answered ack sends nothing more there, and
// each closes once its own goodbye is acked (both acks are written before either side reads the
// other's, so neither close cuts anything). A Send that finds the connection waiting for its
// answer waits for it (bounded by its context) and then goes on it, or on a new one.
//
// A goodbye unanswered for IOTimeout means the peer stalls: the connection is dropped as any
// stalled one. A side that answered ack and does not see the close within IOTimeout closes too;
// that close is quiet.

type goodbyeState uint8

const (
	goodbyeNone    goodbyeState = iota
	goodbyeAsked                // this side sent a goodbye and waits for the answer
	goodbyeRetired              // agreed: nothing more is sent on the connection
)

// inUse is how long after its last frame a connection counts as in use for the budget: it covers
// the moment between a Send's dial and its write, and between a request's write and its caller's
// wait for the answer (transport.Awaiter), so that the budget does not close a connection just
// opened or just asked on.
const inUse = 10 * time.Millisecond

// maxRetiredRetries bounds how often one Send moves on from a connection an idle close took.
const maxRetiredRetries = 8

var (
	// errRetired: the connection was closed by agreement; the frame takes another.
	errRetired = errors.New("connection closed as idle")
	// errIdleClosed ends the reader of a connection whose goodbye was acked.
	errIdleClosed = errors.New("closed as idle by agreement with the peer")
)

// Reasons of velo_tcp_closes_total.
const (
	closeIdle    = "idle"    // this side's idle timeout
	closeBudget  = "budget"  // this side's MaxConnections
	closePeer    = "peer"    // the peer's goodbye, acked here
	closeLost    = "lost"    // failed or closed without a goodbye
	closeRemoved = "removed" // RemovePeer or Close
)

var closeReasons = []string{closeIdle, closeBudget, closePeer, closeLost, closeRemoved}

// idleWatch is the goroutine that closes idle connections and keeps the budget: it looks every
// tick, and at once when adopt takes the transport over its budget.
type idleWatch struct {
	kickCh   chan struct{}
	stopCh   chan struct{}
	stopOnce sync.Once
}

func (w *idleWatch) init() {
	w.kickCh = make(chan struct{}, 1)
	w.stopCh = make(chan struct{})
}

func (w *idleWatch) kick() {
	select {
	case w.kickCh <- struct{}{}:
	default:
	}
}

func (w *idleWatch) stop() { w.stopOnce.Do(func() { close(w.stopCh) }) }

// idleTick is how often the watch looks: a quarter of the shortest wait it enforces, within
// [10 ms, 5 s].
func (t *Transport) idleTick() time.Duration {
	d := t.cfg.IOTimeout
	if t.cfg.IdleTimeout > 0 && t.cfg.IdleTimeout < d {
		d = t.cfg.IdleTimeout
	}
	return min(max(d/4, 10*time.Millisecond), 5*time.Second)
}

func (w *idleWatch) run(t *Transport) {
	defer t.wg.Done()
	tick := t.idleTick()
	timer := time.NewTimer(tick)
	defer timer.Stop()
	for {
		select {
		case <-w.stopCh:
			return
		case <-timer.C:
		case <-w.kickCh:
			timer.Stop()
		}
		next := tick
		if t.closeIdle(time.Now()) {
			next = min(tick, 2*inUse) // over the budget with connections in use: look again soon
		}
		timer.Reset(next)
	}
}

// closeIdle asks a goodbye on every connection idle for IdleTimeout and on the least recently
// used ones beyond the budget, and drops connections whose goodbye exchange stalled. It reports
// whether the budget is still exceeded by connections in use.
func (t *Transport) closeIdle(now time.Time) (over bool) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return false
	}
	var live []*conn
	for _, p := range t.peers {
		for c := range p.conns {
			live = append(live, c)
		}
	}
	t.mu.Unlock()
	var active []*conn // neither asked nor retired: what the budget counts down
	for _, c := range live {
		c.wmu.Lock()
		gb, since := c.gb, c.gbSince
		c.wmu.Unlock()
		switch {
		case c.closed.Load():
		case gb == goodbyeAsked && now.Sub(since) > t.cfg.IOTimeout:
			c.close(fmt.Errorf("the peer did not answer a goodbye within %v (Config.IOTimeout)", t.cfg.IOTimeout))
			c.ensureReader()
		case gb == goodbyeRetired && now.Sub(since) > t.cfg.IOTimeout:
			c.close(errIdleClosed) // the peer acked our goodbye... or we its, and it never closed
			c.ensureReader()
		case gb == goodbyeNone:
			active = append(active, c)
		}
	}
	sort.Slice(active, func(i, j int) bool { return active[i].lastUse.Load() < active[j].lastUse.Load() })
	excess := len(active) - t.cfg.MaxConnections
	for _, c := range active {
		quiet := now.UnixNano() - c.lastUse.Load()
		switch {
		case t.cfg.IdleTimeout > 0 && quiet >= int64(t.cfg.IdleTimeout):
			if c.goodbye(closeIdle) {
				excess--
			}
		case excess > 0 && quiet >= int64(inUse):
			if c.goodbye(closeBudget) {
				excess--
			}
		}
	}
	return excess > 0
}

// goodbye asks the peer to close c, unless c is in use: a frame being written, a call waiting for
// its answer on it, a goodbye already under way. It reports whether it asked.
func (c *conn) goodbye(reason string) bool {
	if !c.wmu.TryLock() {
		return false // a frame is being written
	}
	defer c.wmu.Unlock()
	if c.gb != goodbyeNone || c.closed.Load() {
		return false
	}
	c.rmu.Lock()
	waiting := c.waiters > 0
	c.rmu.Unlock()
	if waiting {
		return false
	}
	c.gb, c.gbDone, c.gbSince, c.reason = goodbyeAsked, make(chan struct{}), time.Now(), reason
	if err := c.writeControlLocked(wire.TCPControl{Kind: wire.TCPGoodbye, Frames: c.read.Load()}); err != nil {
		c.gb = goodbyeNone
		close(c.gbDone)
		return false
	}
	c.ensureReader() // the answer must be read
	return true
}

// control handles a control frame the reader read. It returns errIdleClosed when the reader is to
// stop and close the connection, an error when the frame is malformed.
func (c *conn) control(body []byte) error {
	ctl, err := wire.DecodeTCPControl(body)
	if err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	switch ctl.Kind {
	case wire.TCPGoodbye:
		if c.gb == goodbyeRetired {
			return nil // already agreed; the close follows
		}
		c.rmu.Lock()
		waiting := c.waiters > 0
		c.rmu.Unlock()
		if waiting || ctl.Frames != c.sent.Load() {
			c.lastUse.Store(time.Now().UnixNano()) // in use: the budget looks elsewhere first
			return c.writeControlLocked(wire.TCPControl{Kind: wire.TCPGoodbyeKeep})
		}
		if err := c.writeControlLocked(wire.TCPControl{Kind: wire.TCPGoodbyeAck}); err != nil {
			return err
		}
		if c.gb != goodbyeAsked {
			c.reason = closePeer
		}
		c.retireLocked()
	case wire.TCPGoodbyeAck:
		if c.gb == goodbyeNone {
			return fmt.Errorf("%w: the peer acked a goodbye this side never sent", wire.ErrMalformed)
		}
		c.retireLocked()
		return errIdleClosed
	case wire.TCPGoodbyeKeep:
		if c.gb == goodbyeAsked {
			c.gb, c.gbSince = goodbyeNone, time.Now()
			close(c.gbDone)
			c.lastUse.Store(time.Now().UnixNano()) // the peer uses it: the budget looks elsewhere first
		}
	}
	return nil
}

// retireLocked marks c agreed closed: the Sends waiting for the answer move on, and the peer's
// next frame goes on another connection.
func (c *conn) retireLocked() {
	if c.gb == goodbyeAsked {
		close(c.gbDone)
	}
	c.gb, c.gbSince = goodbyeRetired, time.Now()
	c.retired.Store(true)
	t := c.t
	t.mu.Lock()
	if p := t.peers[c.peer]; p != nil && p.send == c {
		p.send = nil
		for other := range p.conns {
			if !other.retired.Load() && !other.closed.Load() {
				p.send = other
				break
			}
		}
	}
	t.mu.Unlock()
}

// endGoodbye releases the Sends waiting for the answer to a goodbye on a connection that failed
// before the answer came; they find it closed and go on another. finish calls it.
func (c *conn) endGoodbye() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.gb == goodbyeAsked {
		c.gb, c.gbSince = goodbyeNone, time.Now()
		close(c.gbDone)
	}
}

// writeControlLocked writes one control frame; the caller holds wmu.
func (c *conn) writeControlLocked(ctl wire.TCPControl) error {
	if c.closed.Load() {
		return c.err()
	}
	var b [4 + wire.TCPControlMaxLen]byte
	frame := wire.AppendTCPControl(b[:0], ctl)
	c.dlMu.Lock()
	c.dlGen++
	dl := time.Now().Add(c.t.cfg.IOTimeout)
	c.nc.SetWriteDeadline(dl)
	c.dlSet, c.dlExact = dl, false
	c.dlMu.Unlock()
	if _, err := c.nc.Write(frame); err != nil {
		err = fmt.Errorf("writing a goodbye: %w", err)
		c.close(err)
		return err
	}
	return nil
}
