package tcp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/transport"
)

// Reading a connection.
//
// One goroutine at a time reads a connection; conn.reader says which kind:
//
//   - readerLoop: a goroutine of the transport's own (readLoop). adopt starts one; it delivers with
//     transport.InlineHost when the runtime has it, so handlers may run on it, and hands reading
//     to a new readLoop when the runtime asks (a slow handler).
//   - readerCaller: a caller waiting in Await for the answer to its request. It reads the
//     connection itself, so the answer completes its call without waking another goroutine: on a
//     two-core machine that wake-up, and the idle thread it starts, cost as much as the rest of a
//     round trip. Frames that are not its answer it delivers with Host.Deliver.
//   - readerNone: nobody. A caller that has its answer leaves the connection unread when nothing
//     else waits on it and the peer has sent nothing of its own accord for quietPeriod: a client
//     that calls in a loop then never hands an answer from one goroutine to another. The
//     background reader likewise stops after an answer under the same conditions. The vacancy
//     watch starts a readLoop on a connection left unread for about vacancyLook (at most 9 ms), so
//     a frame the peer sends into that gap waits at most that long; on a connection where the peer
//     sends of its own accord there is no gap for quietPeriod after each such frame.
//   - readerGone: the connection failed and finish has run.
//
// A caller that reads waits in bufio's Peek for the first byte of the next frame. When its call
// completes some other way, or its context ends, whoever notices moves the read deadline into the
// past ("kicks" it); that is only done while the reader is at that boundary, where waking it loses
// nothing.

type readerRole uint8

const (
	readerNone readerRole = iota
	readerLoop
	readerCaller
	readerGone
)

// quietPeriod is how long after the peer last sent a frame of its own accord (a request, a
// one-way message) a connection keeps a reader between calls.
const quietPeriod = time.Second

// The vacancy watch looks at unread connections every vacancyLook; one it finds unread gets a
// second look vacancyConfirm later and a readLoop if no caller read it in between. So a connection
// stays unread for at most vacancyLook+vacancyConfirm. The first interval is long because a Go timer
// due within a millisecond or two, kept pending while calls flow, slows every round trip in the
// process by several microseconds.
const (
	vacancyLook    = 8 * time.Millisecond
	vacancyConfirm = time.Millisecond
)

// errHandedOff ends readFrames on a goroutine that gave the connection to another reader.
var errHandedOff = errors.New("reading handed off to another goroutine")

// errLeft ends readFrames on a goroutine that left the connection unread.
var errLeft = errors.New("left the connection unread")

// readLoop is the transport's own reader of c. It runs until the connection fails (then finish
// unregisters it and reports the peer down when it was the last connection to it), until it hands
// reading to a new readLoop for the runtime, or until it leaves the connection unread.
func (c *conn) readLoop() {
	err := c.readFrames(nil)
	if err == errHandedOff || err == errLeft {
		return
	}
	c.finish(err)
}

// continueReading is the handOff of transport.InlineHost: the goroutine that reads the connection
// is running a handler that turned out slow, so another one takes over where it stopped. The old
// goroutine read nothing since it delivered its frame, and touches nothing of the connection's
// reading state once DeliverInline has returned false.
func (c *conn) continueReading() { go c.readLoop() }

// finish runs once, on the goroutine that read c when it failed: it unregisters c, reports the
// peer down when c was its last connection, and gives back c's count in t.wg.
func (c *conn) finish(err error) {
	t := c.t
	c.close(err)
	c.rmu.Lock()
	gone := c.reader == readerGone
	c.reader = readerGone
	c.rmu.Unlock()
	if gone {
		return
	}
	c.endGoodbye()

	quiet := c.retired.Load() // closed by agreement: the peer is not lost
	t.mu.Lock()
	closing := t.closed
	t.open--
	p := t.peers[c.peer]
	last := false
	if p != nil {
		if _, ok := p.conns[c]; ok {
			delete(p.conns, c)
			if p.send == c {
				p.send = nil
				for other := range p.conns { // another live connection takes over sending
					if !other.retired.Load() {
						p.send = other
						break
					}
				}
			}
			last = len(p.conns) == 0
		}
	}
	t.mu.Unlock()
	reason := closeLost
	switch {
	case quiet:
		reason = c.reason
	case closing || p == nil:
		reason = closeRemoved
	}
	t.am.closes.WithLabelValues(reason).Inc()
	c.br.release() // this goroutine read c: nobody reads it after finish
	if quiet {
		t.log.Debug("tcp: idle connection closed", "peer", c.peer, "reason", reason)
	}
	if last && !closing && !quiet {
		if !errors.Is(err, io.EOF) {
			t.log.Info("tcp: connection lost", "peer", fmt.Sprintf("%016x", uint64(c.peer)), "err", err)
		}
		t.host.PeerDown(c.peer, fmt.Errorf("tcp: %w: %v", transport.ErrPeerUnreachable, err))
	}
	t.am.conns.Dec()
	t.wg.Done()
}

// await is one Await call on one connection.
type await struct {
	c       *conn
	ctx     context.Context
	done    bool // the call completed (guarded by c.rmu)
	reading bool // this caller reads c (guarded by c.rmu)
}

// Await is transport.Awaiter: when nobody reads the connection the request to peer went out on, the
// calling goroutine reads it until w fires or ctx ends. Otherwise it returns at once and the caller
// waits for its call as usual; the connection's reader keeps reading while any such caller waits.
func (t *Transport) Await(ctx context.Context, id transport.InstanceID, w *transport.Waiter) {
	if t.inline == nil {
		return // without Answers every connection keeps its reader: nothing to take over
	}
	t.mu.Lock()
	var c *conn
	if p := t.peers[id]; p != nil {
		c = p.send
	}
	t.mu.Unlock()
	if c == nil {
		return
	}
	a := &await{c: c, ctx: ctx}
	c.rmu.Lock()
	if c.reader == readerGone || !w.SetInterrupt(a.fired) {
		c.rmu.Unlock()
		return // the connection failed (the call fails with it), or the answer is already here
	}
	c.waiters++
	if c.reader != readerNone {
		c.rmu.Unlock()
		return
	}
	c.reader, a.reading = readerCaller, true
	c.takes++
	c.rmu.Unlock()

	stop := func() bool { return true }
	if ctx.Done() != nil {
		stop = context.AfterFunc(ctx, a.cancelled)
	}
	err := c.readFrames(a)
	stop()
	if err != nil {
		c.finish(err)
		return
	}
	c.rmu.Lock()
	a.reading = false
	if c.waiters > 0 || !c.quiet() || t.closing.Load() {
		c.reader = readerLoop
		c.rmu.Unlock()
		go c.readLoop()
		return
	}
	c.leaveLocked()
	c.rmu.Unlock()
}

// fired is the Waiter's interrupt: the call is complete.
func (a *await) fired() {
	c := a.c
	c.rmu.Lock()
	a.done = true
	c.waiters--
	if a.reading {
		c.kickLocked()
	}
	c.rmu.Unlock()
}

// cancelled runs when the caller's context ends.
func (a *await) cancelled() {
	c := a.c
	c.rmu.Lock()
	if a.reading {
		c.kickLocked()
	}
	c.rmu.Unlock()
}

// kickLocked wakes a reader that waits for the start of a frame by moving the read deadline into
// the past; a reader anywhere else looks at its call before it waits again.
func (c *conn) kickLocked() {
	if c.atBoundary && !c.kicked {
		c.kicked = true
		c.nc.SetReadDeadline(longAgo)
	}
}

// quiet reports whether the peer sent nothing of its own accord for quietPeriod.
func (c *conn) quiet() bool {
	return time.Now().UnixNano()-c.lastUnsolicited.Load() > int64(quietPeriod)
}

// leaveLocked leaves c unread and has the vacancy watch look at it.
func (c *conn) leaveLocked() {
	c.reader = readerNone
	if !c.listed {
		c.listed = true
		c.seenTakes = c.takes
		c.t.vacant.add(c)
	}
}

// ensureReader starts a readLoop when nobody reads c.
func (c *conn) ensureReader() {
	c.rmu.Lock()
	start := c.reader == readerNone
	if start {
		c.reader = readerLoop
	}
	c.rmu.Unlock()
	if start {
		go c.readLoop()
	}
}

// readFrames reads and delivers frames while this goroutine reads c: as the transport's readLoop
// (a == nil) or as the caller of a. It returns nil when a's call completed or its context ended,
// errHandedOff or errLeft when the readLoop stopped reading, and the error that broke the
// connection otherwise.
func (c *conn) readFrames(a *await) error {
	var lenBuf [4]byte
	var prefixLen int
	if c.t.claimer != nil {
		prefixLen = c.t.claimer.ClaimPrefix()
	}
	for {
		if err := c.waitFrame(a); err != nil || (a != nil && c.callOver(a)) {
			return err
		}
		if _, err := io.ReadFull(c.br, lenBuf[:]); err != nil {
			return c.readErr(err)
		}
		word := binary.BigEndian.Uint32(lenBuf[:])
		if word&wire.TCPControlBit != 0 {
			if err := c.readControl(int(word &^ wire.TCPControlBit)); err != nil {
				return err
			}
			continue
		}
		size := int(word)
		if size > c.t.cfg.MaxFrameSize {
			err := fmt.Errorf("%w: peer announced a %d-byte frame, this side reads at most %d (Config.MaxFrameSize)",
				transport.ErrFrameTooLarge, size, c.t.cfg.MaxFrameSize)
			c.t.log.Warn("tcp: dropping connection", "peer", fmt.Sprintf("%016x", uint64(c.peer)), "err", err)
			return err
		}
		timed := c.br.Buffered() < size
		if timed {
			c.nc.SetReadDeadline(time.Now().Add(c.t.cfg.IOTimeout))
		}
		frame, claimed, err := c.readOne(size, prefixLen)
		if err != nil {
			return err
		}
		// Clear the deadline before delivering: the handler may run on this goroutine, for longer
		// than the I/O timeout, and whichever goroutine reads next must not inherit a stale one.
		if timed {
			c.nc.SetReadDeadline(time.Time{})
		}
		// A claimed frame is already where it belongs: an answer in its caller's buffer, or a
		// request (a bulk write) in its destination and answered by the claimer.
		answer := frame == nil && (c.t.inline == nil || c.t.inline.Answers(claimed))
		if frame == nil && !answer {
			c.lastUnsolicited.Store(time.Now().UnixNano())
		}
		if frame != nil {
			if answer = c.t.inline != nil && c.t.inline.Answers(frame); !answer {
				c.lastUnsolicited.Store(time.Now().UnixNano())
			}
			switch {
			case a != nil || c.t.inline == nil:
				c.t.host.Deliver(c.peer, frame)
			case !c.t.inline.DeliverInline(c.peer, frame, c.handOff):
				c.delivered()
				return errHandedOff
			}
		}
		c.delivered()
		if a == nil && answer && c.mayLeave() {
			return errLeft
		}
	}
}

// delivered counts a frame read and handed to the runtime (the goodbye compares the count).
func (c *conn) delivered() {
	c.lastUse.Store(time.Now().UnixNano())
	c.read.Add(1)
}

// readControl reads the body of a control frame of n bytes and acts on it.
func (c *conn) readControl(n int) error {
	if n > wire.TCPControlMaxLen {
		return fmt.Errorf("%w: a control frame of %d bytes (at most %d)", wire.ErrMalformed, n, wire.TCPControlMaxLen)
	}
	var b [wire.TCPControlMaxLen]byte
	if _, err := io.ReadFull(c.br, b[:n]); err != nil {
		return c.readErr(fmt.Errorf("truncated control frame: %w", err))
	}
	return c.control(b[:n])
}

// waitFrame waits until the next frame's first byte is here. A caller that reads returns early,
// with nil, when it is kicked.
func (c *conn) waitFrame(a *await) error {
	if c.br.Buffered() > 0 {
		return nil
	}
	c.rmu.Lock()
	if a != nil && (a.done || a.ctx.Err() != nil) {
		c.rmu.Unlock()
		return nil
	}
	c.atBoundary = true
	c.rmu.Unlock()
	_, err := c.br.Peek(1)
	c.rmu.Lock()
	c.atBoundary = false
	kicked := c.kicked
	c.kicked = false
	c.rmu.Unlock()
	if kicked {
		c.nc.SetReadDeadline(time.Time{})
		var ne net.Error
		if err != nil && errors.As(err, &ne) && ne.Timeout() {
			return nil
		}
	}
	if err != nil {
		return c.readErr(err)
	}
	return nil
}

// callOver reports whether the caller of a should stop reading: its call completed or its context
// ended, and no frame is buffered (a frame already in the buffer is read first, so that nothing
// waits in it unread).
func (c *conn) callOver(a *await) bool {
	if c.br.Buffered() > 0 {
		return false
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	return a.done || a.ctx.Err() != nil
}

// mayLeave decides, after the readLoop delivered an answer, whether it stops reading: when no
// other call waits and the peer has been quiet, the next caller reads for itself.
func (c *conn) mayLeave() bool {
	if !c.quiet() || c.t.closing.Load() {
		return false
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if c.waiters > 0 || c.br.Buffered() > 0 {
		return false
	}
	c.leaveLocked()
	return true
}

// readErr is the error to report for a failed read: the reason the connection was closed, when
// this side closed it.
func (c *conn) readErr(err error) error {
	if c.closed.Load() {
		return c.err()
	}
	return err
}

// readOne reads the frame that follows a length prefix: into a buffer a claimer provides (and
// returns the frame's prefix as claimed), or into a new frame that it returns for delivery.
func (c *conn) readOne(size, prefixLen int) (frame, claimed []byte, err error) {
	if prefixLen > 0 && size > 0 {
		k := min(prefixLen, size)
		prefix := make([]byte, k)
		if _, err := io.ReadFull(c.br, prefix); err != nil {
			return nil, nil, fmt.Errorf("truncated frame: %w", err)
		}
		if dst := c.t.claimer.Claim(c.peer, prefix, size); dst != nil {
			var err error
			if len(dst) != size-k {
				err = fmt.Errorf("tcp: claim returned %d bytes for a %d-byte body", len(dst), size-k)
			} else if _, err = io.ReadFull(c.br, dst); err != nil {
				err = fmt.Errorf("truncated frame: %w", err)
			}
			c.t.claimer.Claimed(c.peer, prefix, err)
			return nil, prefix, err
		}
		frame := make([]byte, size)
		copy(frame, prefix)
		if _, err := io.ReadFull(c.br, frame[k:]); err != nil {
			return nil, nil, fmt.Errorf("truncated frame: %w", err)
		}
		return frame, nil, nil
	}
	frame = make([]byte, size)
	if _, err := io.ReadFull(c.br, frame); err != nil {
		return nil, nil, fmt.Errorf("truncated frame: %w", err)
	}
	return frame, nil, nil
}

// vacancyWatch starts a readLoop on connections that stay unread. Its goroutine runs while some
// connection is on its list.
type vacancyWatch struct {
	look   time.Duration // vacancyLook; tests lengthen it to keep a connection unread
	mu     sync.Mutex
	conns  map[*conn]struct{}
	active bool
}

// add puts c on the list; the caller holds c.rmu and has set c.listed.
func (w *vacancyWatch) add(c *conn) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.conns == nil {
		w.conns = map[*conn]struct{}{}
	}
	w.conns[c] = struct{}{}
	if !w.active {
		w.active = true
		go w.run()
	}
}

func (w *vacancyWatch) run() {
	var list []*conn
	look := w.look
	if look <= 0 {
		look = vacancyLook
	}
	pause := look
	for {
		time.Sleep(pause)
		w.mu.Lock()
		if len(w.conns) == 0 {
			w.active = false
			w.mu.Unlock()
			return
		}
		list = list[:0]
		for c := range w.conns {
			list = append(list, c)
		}
		w.mu.Unlock()
		pause = look
		for _, c := range list {
			c.rmu.Lock()
			start := false
			switch {
			case c.reader != readerNone:
				w.drop(c) // read again; listed anew when it is next left unread
			case c.takes == c.seenTakes || c.t.closing.Load():
				c.reader = readerLoop
				start = true
				w.drop(c)
			default:
				c.seenTakes = c.takes
				pause = vacancyConfirm
			}
			c.rmu.Unlock()
			if start {
				go c.readLoop()
			}
		}
	}
}

// drop takes c off the list; the caller holds c.rmu (the lock order is c.rmu, then w.mu).
func (w *vacancyWatch) drop(c *conn) {
	c.listed = false
	w.mu.Lock()
	delete(w.conns, c)
	w.mu.Unlock()
}
