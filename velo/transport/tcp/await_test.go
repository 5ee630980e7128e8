package tcp

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/velo-go/velo/velo/transport"
)

// A tiny request/answer protocol over the transport, as the messenger speaks it in spirit: 'Q' +
// 8-byte id asks the other side to answer 'A' + id; 'N' is a note the peer sends of its own accord.

// callerHost is the calling side: like the messenger, it completes a call (closes its channel,
// then fires its waiter) when the answer arrives, wherever it is read, and records the notes.
type callerHost struct {
	*testHost
	mu    sync.Mutex
	calls map[uint64]*testCall
	notes chan []byte
}

type testCall struct {
	done chan struct{}
	w    transport.Waiter
}

func newCallerHost() *callerHost {
	return &callerHost{testHost: newHost(), calls: map[uint64]*testCall{}, notes: make(chan []byte, 64)}
}

func (h *callerHost) Answers(frame []byte) bool { return len(frame) > 0 && frame[0] == 'A' }

func (h *callerHost) Deliver(from transport.InstanceID, frame []byte) {
	if h.Answers(frame) && len(frame) == 9 {
		id := binary.BigEndian.Uint64(frame[1:])
		h.mu.Lock()
		c := h.calls[id]
		delete(h.calls, id)
		h.mu.Unlock()
		if c != nil {
			close(c.done)
			c.w.Fire()
		}
		return
	}
	h.notes <- frame
}

func (h *callerHost) DeliverInline(from transport.InstanceID, frame []byte, handOff func()) bool {
	h.Deliver(from, frame)
	return true
}

// call sends a request and waits for its answer the way the messenger does: Await, then the
// call's own completion.
func (h *callerHost) call(ctx context.Context, t *testing.T, tr *Transport, to transport.InstanceID, id uint64) error {
	c := &testCall{done: make(chan struct{})}
	h.mu.Lock()
	h.calls[id] = c
	h.mu.Unlock()
	if err := tr.Send(ctx, to, binary.BigEndian.AppendUint64([]byte{'Q'}, id)); err != nil {
		return err
	}
	tr.Await(ctx, to, &c.w)
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// answeringHost answers every 'Q' at once, from the reader.
type answeringHost struct {
	*testHost
	tr *Transport
}

func (h *answeringHost) Answers([]byte) bool { return false }
func (h *answeringHost) DeliverInline(from transport.InstanceID, frame []byte, handOff func()) bool {
	h.Deliver(from, frame)
	return true
}
func (h *answeringHost) Deliver(from transport.InstanceID, frame []byte) {
	if len(frame) == 9 && frame[0] == 'Q' {
		h.tr.Send(context.Background(), from, append([]byte{'A'}, frame[1:]...))
		return
	}
	h.frames <- frameFrom{from, frame}
}

// callPair starts a calling transport a and an answering one b. look, when not zero, replaces a's
// vacancy look interval, so that a connection left unread stays so for the test.
func callPair(t *testing.T, look time.Duration) (ha *callerHost, a *Transport, hb *answeringHost, b *Transport) {
	ha = newCallerHost()
	hb = &answeringHost{testHost: newHost()}
	a = start(t, ha, Config{})
	if look != 0 {
		a.vacant.look = look
	}
	b = start(t, hb, Config{})
	hb.tr = b
	addPeer(t, a, b, hb.testHost)
	return ha, a, hb, b
}

func sendConn(t *testing.T, tr *Transport, id transport.InstanceID) *conn {
	t.Helper()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	p := tr.peers[id]
	if p == nil || p.send == nil {
		t.Fatal("no connection")
	}
	return p.send
}

func roleOf(c *conn) (readerRole, uint64) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	return c.reader, c.takes
}

func eventuallyTrue(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// leftUnread makes one call so that the reader leaves the quiet connection, with the vacancy watch
// slowed so that it stays unread, and returns that connection.
func leftUnread(t *testing.T) (ha *callerHost, a *Transport, hb *answeringHost, b *Transport, c *conn) {
	ha, a, hb, b = callPair(t, time.Hour)
	if err := ha.call(ctx(t), t, a, hb.id, 1); err != nil {
		t.Fatal(err)
	}
	c = sendConn(t, a, hb.id)
	eventuallyTrue(t, "the connection left unread", func() bool { r, _ := roleOf(c); return r == readerNone })
	return ha, a, hb, b, c
}

// readingAwait starts an Await for a call whose answer never comes and waits until the caller
// reads c and waits there for a frame. returned closes when Await returns.
func readingAwait(t *testing.T, ctx context.Context, a *Transport, to transport.InstanceID, c *conn) (w *transport.Waiter, returned chan struct{}) {
	w, returned = &transport.Waiter{}, make(chan struct{})
	go func() { a.Await(ctx, to, w); close(returned) }()
	eventuallyTrue(t, "the caller reading", func() bool {
		c.rmu.Lock()
		defer c.rmu.Unlock()
		return c.reader == readerCaller && c.atBoundary
	})
	return w, returned
}

func returns(t *testing.T, returned chan struct{}, what string) {
	t.Helper()
	select {
	case <-returned:
	case <-time.After(wait):
		t.Fatal(what)
	}
}

// Calls in a loop end up reading their own answers: after the first answer the transport's reader
// leaves the quiet connection, and later callers take it. Between calls it is unread; the vacancy
// watch gives it a reader again, which a note from the peer then reaches.
func TestCallersReadTheirOwnAnswers(t *testing.T) {
	ha, a, hb, b := callPair(t, 0)
	for id := uint64(1); id <= 200; id++ {
		if err := ha.call(ctx(t), t, a, hb.id, id); err != nil {
			t.Fatalf("call %d: %v", id, err)
		}
	}
	c := sendConn(t, a, hb.id)
	if _, takes := roleOf(c); takes == 0 {
		t.Fatal("no caller ever read its own answer")
	}
	eventuallyTrue(t, "a reader on the connection left unread", func() bool { r, _ := roleOf(c); return r == readerLoop })
	if err := b.Send(ctx(t), ha.id, []byte("N1")); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-ha.notes:
		if string(n) != "N1" {
			t.Fatalf("note %q", n)
		}
	case <-time.After(wait):
		t.Fatal("a note sent after the calls never arrived")
	}
	// The peer sent something of its own accord: the connection keeps its reader between calls.
	for id := uint64(1000); id < 1010; id++ {
		if err := ha.call(ctx(t), t, a, hb.id, id); err != nil {
			t.Fatal(err)
		}
		if r, _ := roleOf(c); r == readerNone {
			t.Fatal("a connection the peer sends notes on was left unread")
		}
	}
}

// A note that the peer sends while a caller reads reaches the host through Deliver, and the
// caller's own answer still completes its call.
func TestCallerDeliversWhatItReadsForOthers(t *testing.T) {
	ha, a, hb, b, _ := leftUnread(t)
	// The note is sent before the request, so a caller that reads sees it first.
	if err := b.Send(ctx(t), ha.id, []byte("N-before")); err != nil {
		t.Fatal(err)
	}
	if err := ha.call(ctx(t), t, a, hb.id, 2); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-ha.notes:
		if string(n) != "N-before" {
			t.Fatalf("note %q", n)
		}
	case <-time.After(wait):
		t.Fatal("the note was not delivered")
	}
}

// A caller that reads and waits for a frame is woken when its call completes some other way, and
// when its context ends; the connection stays usable.
func TestReadingCallerIsWokenByCompletionAndCancel(t *testing.T) {
	ha, a, hb, _, c := leftUnread(t)
	// No request goes out, so no answer comes: only Fire (or the context) can end the wait.
	w, returned := readingAwait(t, ctx(t), a, hb.id, c)
	w.Fire()
	returns(t, returned, "a reading caller whose call completed elsewhere did not return")

	cctx, cancel := context.WithCancel(context.Background())
	w, returned = readingAwait(t, cctx, a, hb.id, c)
	cancel()
	returns(t, returned, "a reading caller whose context ended did not return")
	w.Fire()
	if err := ha.call(ctx(t), t, a, hb.id, 2); err != nil {
		t.Fatalf("after the interrupted waits: %v", err)
	}
	select {
	case p := <-ha.downs:
		t.Fatalf("peer %v reported down", p)
	default:
	}
}

// The connection fails while a caller reads it: the caller reports the peer down and returns;
// Close does not wait for anything left behind.
func TestConnectionLostWhileACallerReads(t *testing.T) {
	ha, a, hb, b, c := leftUnread(t)
	w, returned := readingAwait(t, ctx(t), a, hb.id, c)
	b.Close()
	ha.waitDown(t, hb.id)
	w.Fire() // the runtime fails the call on PeerDown
	returns(t, returned, "the reading caller did not return after the connection failed")
	if r, _ := roleOf(c); r != readerGone {
		t.Fatalf("reader role %d after the failure", r)
	}
}

// Close returns while a connection is left unread (nobody would otherwise notice it closed).
func TestCloseWithAConnectionLeftUnread(t *testing.T) {
	_, a, _, _, _ := leftUnread(t)
	closed := make(chan error, 1)
	go func() { closed <- a.Close() }()
	select {
	case err := <-closed:
		if err != nil && !errors.Is(err, transport.ErrClosed) {
			t.Fatal(err)
		}
	case <-time.After(wait):
		t.Fatal("Close hangs on a connection nobody reads")
	}
}
