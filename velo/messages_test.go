package velo

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/velo-go/velo/velo/metrics"
)

func TestRequestAndOneWayShareOneConnection(t *testing.T) {
	a, b := pair(t)
	if err := b.RegisterHandler("echo", func(ctx context.Context, m *Message) ([]byte, error) {
		return append([]byte("echo:"), m.Payload...), nil
	}); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	a.RegisterHandler("note", func(ctx context.Context, m *Message) ([]byte, error) {
		got <- string(m.Payload)
		return nil, nil
	})
	resp, err := a.Request(tctx(t), b.ID(), "echo", []byte("hi"))
	if err != nil || string(resp) != "echo:hi" {
		t.Fatalf("Request = %q, %v", resp, err)
	}
	// b never registered a: it answers over the connection a opened.
	if err := b.Send(tctx(t), a.ID(), "note", []byte("back")); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-got:
		if s != "back" {
			t.Fatalf("got %q", s)
		}
	case <-time.After(testWait):
		t.Fatal("one-way message never arrived")
	}
	if n := metric(t, a, metrics.MessagesSentTotal, map[string]string{"kind": "request"}); n != 1 {
		t.Fatalf("requests sent = %v", n)
	}
}

func TestRemoteErrorsAreTyped(t *testing.T) {
	a, b := pair(t)
	b.RegisterHandler("fail", func(ctx context.Context, m *Message) ([]byte, error) {
		return nil, errors.New("disk full")
	})
	b.RegisterHandler("panic", func(ctx context.Context, m *Message) ([]byte, error) {
		var table []int
		return []byte{byte(table[len(m.Payload)])}, nil // a real bug: index out of range
	})
	b.RegisterHandler("ok", func(ctx context.Context, m *Message) ([]byte, error) { return []byte("fine"), nil })

	_, err := a.Request(tctx(t), b.ID(), "nope", nil)
	if !errors.Is(err, ErrUnknownHandler) || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("unknown handler: %v", err)
	}
	_, err = a.Request(tctx(t), b.ID(), "fail", nil)
	if !errors.Is(err, ErrHandlerFailed) || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("handler error: %v", err)
	}
	_, err = a.Request(tctx(t), b.ID(), "panic", nil)
	if !errors.Is(err, ErrHandlerPanic) || !strings.Contains(err.Error(), "index out of range") {
		t.Fatalf("handler panic: %v", err)
	}
	// The peer survived all of that.
	if r, err := a.Request(tctx(t), b.ID(), "ok", nil); err != nil || string(r) != "fine" {
		t.Fatalf("after failures: %q, %v", r, err)
	}
	if n := metric(t, b, metrics.MessageErrorsTotal, map[string]string{"kind": "handler_panic"}); n != 1 {
		t.Fatalf("panics counted: %v", n)
	}
	if err := a.RegisterHandler("velo.mine", nil); !errors.Is(err, ErrInvalidName) {
		t.Fatalf("reserved name: %v", err)
	}
}

func TestRequestDeadline(t *testing.T) {
	a, b := pair(t)
	release := make(chan struct{})
	b.RegisterHandler("slow", func(ctx context.Context, m *Message) ([]byte, error) {
		<-release
		return []byte("late"), nil
	})
	b.RegisterHandler("ok", func(ctx context.Context, m *Message) ([]byte, error) { return []byte("ok"), nil })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := a.Request(ctx, b.ID(), "slow", nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v", err)
	}
	close(release)
	// The late answer is dropped; the next call on the same (ordered) queue works.
	if r, err := a.Request(tctx(t), b.ID(), "ok", nil); err != nil || string(r) != "ok" {
		t.Fatalf("%q, %v", r, err)
	}
}

func TestPerPeerOrdering(t *testing.T) {
	a, b := pair(t)
	const n = 2000
	var mu sync.Mutex
	var seen []uint32
	done := make(chan struct{})
	b.RegisterHandler("seq", func(ctx context.Context, m *Message) ([]byte, error) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, binary.BigEndian.Uint32(m.Payload))
		if len(seen) == n {
			close(done)
		}
		return nil, nil
	})
	for i := uint32(0); i < n; i++ {
		var p [4]byte
		binary.BigEndian.PutUint32(p[:], i)
		// Alternate one-way and request frames: both share the per-peer order.
		var err error
		if i%10 == 0 {
			_, err = a.Request(tctx(t), b.ID(), "seq", p[:])
		} else {
			err = a.Send(tctx(t), b.ID(), "seq", p[:])
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-done:
	case <-time.After(testWait):
		t.Fatal("not every message arrived")
	}
	for i, s := range seen {
		if s != uint32(i) {
			t.Fatalf("message %d handled at position %d", s, i)
		}
	}
}

func TestTransparentStagingBothWays(t *testing.T) {
	a, b := pair(t)
	big := payload(3<<20+7, 1)
	answer := payload(1<<20, 2)
	b.RegisterHandler("big", func(ctx context.Context, m *Message) ([]byte, error) {
		if !m.Staged || !bytes.Equal(m.Payload, big) {
			return nil, fmt.Errorf("staged=%v, %d bytes, equal=%v", m.Staged, len(m.Payload), bytes.Equal(m.Payload, big))
		}
		return answer, nil
	})
	resp, err := a.Request(tctx(t), b.ID(), "big", big)
	if err != nil {
		t.Fatal(err)
	}
	if sum(resp) != sum(answer) {
		t.Fatal("staged answer differs")
	}
	// Fire-and-forget staging too.
	got := make(chan [32]byte, 1)
	b.RegisterHandler("drop", func(ctx context.Context, m *Message) ([]byte, error) {
		got <- sum(m.Payload)
		return nil, nil
	})
	if err := a.Send(tctx(t), b.ID(), "drop", big); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-got:
		if s != sum(big) {
			t.Fatal("one-way staged payload differs")
		}
	case <-time.After(testWait):
		t.Fatal("staged one-way never handled")
	}
	for _, v := range []*Velo{a, b} {
		if n := metric(t, v, metrics.StagedMessagesTotal, map[string]string{"direction": "sent"}); n < 1 {
			t.Fatalf("%v staged %v payloads", v.ID(), n)
		}
		eventually(t, "staged slots freed after the handlers ran", func() bool {
			s, l := v.StagedCounts()
			return s == 0 && l == 0
		})
	}
	// A payload just at the threshold still travels inline.
	if _, err := a.Request(tctx(t), b.ID(), "big", payload(DefaultStagingThreshold, 3)); !errors.Is(err, ErrHandlerFailed) {
		t.Fatalf("inline payload: %v", err)
	}
	if n := metric(t, a, metrics.StagedMessagesTotal, map[string]string{"direction": "sent"}); n != 2 {
		t.Fatalf("a staged %v payloads, want 2 (the request and the one-way)", n)
	}
}

func TestPendingRequestFailsWhenPeerGoesAway(t *testing.T) {
	a, b := pair(t)
	entered := make(chan struct{})
	b.RegisterHandler("hang", func(ctx context.Context, m *Message) ([]byte, error) {
		close(entered)
		<-ctx.Done() // returns when b closes
		return nil, ctx.Err()
	})
	errc := make(chan error, 1)
	go func() {
		_, err := a.Request(tctx(t), b.ID(), "hang", nil)
		errc <- err
	}()
	<-entered
	b.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, ErrPeerUnreachable) && !errors.Is(err, ErrHandlerFailed) {
			t.Fatalf("got %v", err)
		}
	case <-time.After(testWait):
		t.Fatal("request hung after the peer closed")
	}
}

func TestJSONHelpers(t *testing.T) {
	a, b := pair(t)
	type add struct{ X, Y int }
	RegisterJSONHandler(b, "add", func(ctx context.Context, from InstanceID, r add) (int, error) { return r.X + r.Y, nil })
	n, err := RequestJSON[int](tctx(t), a, b.ID(), "add", add{2, 3})
	if err != nil || n != 5 {
		t.Fatalf("%d, %v", n, err)
	}
	_, err = RequestJSON[int](tctx(t), a, b.ID(), "add", "not an object")
	if !errors.Is(err, ErrHandlerFailed) {
		t.Fatalf("bad JSON: %v", err)
	}
}

// A handler that blocks (here on something velo cannot see) holds up only the messages of its own
// peer, which still run in order once it returns. The connection it arrived on keeps being read:
// answers to this side's own requests, the rendezvous protocol and other peers all go on.
func TestSlowHandlerHoldsUpOnlyItsPeersQueue(t *testing.T) {
	a, b := pair(t)
	c := newInstance(t)
	if err := c.RegisterPeer(tctx(t), b.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []string
	record := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	handled := func() int { mu.Lock(); defer mu.Unlock(); return len(order) }
	b.RegisterHandler("seq", func(ctx context.Context, m *Message) ([]byte, error) {
		record(string(m.Payload))
		return nil, nil
	})
	echo := func(ctx context.Context, m *Message) ([]byte, error) { return m.Payload, nil }
	a.RegisterHandler("echo", echo)
	b.RegisterHandler("echo", echo)
	releaseOnce := blockHandlers(t, a, b, func() { record("block") })
	const queued = 20
	for i := 0; i < queued; i++ {
		if err := a.Send(tctx(t), b.ID(), "seq", []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	// b's own request to a: its answer arrives on the connection whose reader ran "block".
	if r, err := b.Request(tctx(t), a.ID(), "echo", []byte("ping")); err != nil || string(r) != "ping" {
		t.Fatalf("b's request to a while its handler for a blocks: %q, %v", r, err)
	}
	// The rendezvous protocol between the same two instances.
	data := payload(3<<20, 9)
	h, err := b.StageData(tctx(t), data)
	if err != nil {
		t.Fatal(err)
	}
	l, err := a.Get(tctx(t), h)
	if err != nil || sum(l.Bytes()) != sum(data) {
		t.Fatalf("get while b's handler for a blocks: %v", err)
	}
	if err := l.Release(tctx(t)); err != nil {
		t.Fatal(err)
	}
	// Another peer.
	if r, err := c.Request(tctx(t), b.ID(), "echo", []byte("from c")); err != nil || string(r) != "from c" {
		t.Fatalf("another peer while b's handler for a blocks: %q, %v", r, err)
	}
	if n := handled(); n != 1 {
		t.Fatalf("%d of a's messages handled while the first one's handler blocks; per-peer order allows 1", n)
	}
	releaseOnce()
	eventually(t, "a's queued messages handled", func() bool { return handled() == queued+1 })
	mu.Lock()
	defer mu.Unlock()
	for i, s := range order[1:] {
		if s != fmt.Sprint(i) {
			t.Fatalf("handled in order %v", order)
		}
	}
}

// A handler may call back the peer that called it, on the same connection, whether it passes its
// own context along or not.
func TestHandlerCallsBackItsCaller(t *testing.T) {
	a, b := pair(t)
	a.RegisterHandler("leaf", func(ctx context.Context, m *Message) ([]byte, error) { return []byte("leaf"), nil })
	b.RegisterHandler("with-ctx", func(ctx context.Context, m *Message) ([]byte, error) {
		r, err := b.Request(ctx, a.ID(), "leaf", nil)
		return append([]byte("outer:"), r...), err
	})
	b.RegisterHandler("own-ctx", func(_ context.Context, m *Message) ([]byte, error) {
		ctx, cancel := context.WithTimeout(context.Background(), testWait)
		defer cancel()
		r, err := b.Request(ctx, a.ID(), "leaf", nil)
		return append([]byte("outer:"), r...), err
	})
	for _, name := range []string{"with-ctx", "own-ctx", "with-ctx"} {
		if r, err := a.Request(tctx(t), b.ID(), name, nil); err != nil || string(r) != "outer:leaf" {
			t.Fatalf("%s: %q, %v", name, r, err)
		}
	}
}

// A one-way handler that panics is recovered like a request's: the peer's next message is handled.
func TestPanickingOneWayHandlerLosesNothing(t *testing.T) {
	a, b := pair(t)
	b.RegisterHandler("boom", func(ctx context.Context, m *Message) ([]byte, error) { panic("boom") })
	b.RegisterHandler("ok", func(ctx context.Context, m *Message) ([]byte, error) { return []byte("ok"), nil })
	for i := 0; i < 3; i++ {
		if err := a.Send(tctx(t), b.ID(), "boom", nil); err != nil {
			t.Fatal(err)
		}
		if r, err := a.Request(tctx(t), b.ID(), "ok", nil); err != nil || string(r) != "ok" {
			t.Fatalf("after a panicking one-way handler: %q, %v", r, err)
		}
	}
	if n := metric(t, b, metrics.MessageErrorsTotal, map[string]string{"kind": "handler_panic"}); n != 3 {
		t.Fatalf("panics counted: %v", n)
	}
}

// Close returns after the shutdown grace even while a handler ignores its context, and closes the
// transports under it.
func TestCloseReturnsWhileAHandlerIgnoresItsContext(t *testing.T) {
	a := newInstance(t)
	b := newInstance(t, WithShutdownGrace(50*time.Millisecond))
	if err := a.RegisterPeer(tctx(t), b.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	stuck, entered := make(chan struct{}), make(chan struct{})
	defer close(stuck)
	b.RegisterHandler("stuck", func(ctx context.Context, m *Message) ([]byte, error) {
		close(entered)
		<-stuck
		return nil, nil
	})
	if err := a.Send(tctx(t), b.ID(), "stuck", nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(testWait):
		t.Fatal("the handler never ran")
	}
	closed := make(chan error, 1)
	go func() { closed <- b.Close() }()
	select {
	case err := <-closed:
		if err == nil || !strings.Contains(err.Error(), "still running") {
			t.Fatalf("Close with a stuck handler: %v", err)
		}
	case <-time.After(testWait):
		t.Fatal("Close hangs on a handler that ignores its context")
	}
	if _, err := a.Request(tctx(t), b.ID(), "stuck", nil); !errors.Is(err, ErrPeerUnreachable) {
		t.Fatalf("request to the closed instance: %v", err)
	}
}

// TestFullInboxRefusesInsteadOfGrowing: a peer that sends faster than its handler runs fills its
// inbox up to WithInboxLimit and no further. Beyond it, its requests fail at once with
// ErrUnavailable (naming the full inbox) and its one-way messages are dropped and counted; what
// was queued is handled, in order, once the handler catches up, and the peer is served again.
func TestFullInboxRefusesInsteadOfGrowing(t *testing.T) {
	const limit = 64 << 10
	a := newInstance(t)
	b := newInstance(t, WithInboxLimit(limit))
	if err := a.RegisterPeer(tctx(t), b.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []int
	b.RegisterHandler("seq", func(ctx context.Context, m *Message) ([]byte, error) {
		mu.Lock()
		got = append(got, int(binary.BigEndian.Uint32(m.Payload)))
		mu.Unlock()
		return []byte("ok"), nil
	})
	releaseOnce := blockHandlers(t, a, b, nil)
	// 4 KiB messages: about 15 fit the 64 KiB limit (each also counts 256 bytes).
	const sent = 200
	for i := 0; i < sent; i++ {
		p := make([]byte, 4<<10)
		binary.BigEndian.PutUint32(p, uint32(i))
		if err := a.Send(tctx(t), b.ID(), "seq", p); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "b refuses a's one-way messages", func() bool {
		return metric(t, b, "velo_messenger_errors_total", map[string]string{"kind": "inbox_full"}) > 0
	})
	// A request now: refused at once, not queued behind the blocked handler.
	p := make([]byte, 4<<10)
	binary.BigEndian.PutUint32(p, 999999)
	_, err := a.Request(tctx(t), b.ID(), "seq", p)
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "inbox full") {
		t.Fatalf("request to a full inbox: %v, want ErrUnavailable naming the full inbox", err)
	}
	releaseOnce()
	// Everything sent has either been handled or refused (and counted), and more was refused than
	// the limit could ever have held.
	eventually(t, "a's messages handled or refused", func() bool {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		return float64(n)+metric(t, b, "velo_messenger_errors_total", map[string]string{"kind": "inbox_full"}) == sent+1
	})
	mu.Lock()
	handled := append([]int(nil), got...)
	mu.Unlock()
	if max := limit/(4<<10+256) + 1; len(handled) > max+1 || len(handled) == 0 {
		t.Fatalf("%d of %d queued messages were handled; the inbox holds at most about %d", len(handled), sent, max)
	}
	for i := 1; i < len(handled); i++ {
		if handled[i] <= handled[i-1] {
			t.Fatalf("handled out of order: %v", handled)
		}
	}
	// With room again, the peer is served.
	binary.BigEndian.PutUint32(p, 1<<20)
	if r, err := a.Request(tctx(t), b.ID(), "seq", p); err != nil || string(r) != "ok" {
		t.Fatalf("request after the inbox drained: %q, %v", r, err)
	}
}

// blockHandlers makes from's messages to to wait: it registers a "block" handler on to that runs
// entered (when not nil) and then waits, sends it one message from from, and returns once it
// runs. The returned function lets it finish; it is idempotent and also runs when the test ends.
func blockHandlers(t *testing.T, from, to *Velo, entered func()) (release func()) {
	t.Helper()
	gate, running := make(chan struct{}), make(chan struct{})
	release = sync.OnceFunc(func() { close(gate) })
	t.Cleanup(release)
	to.RegisterHandler("block", func(ctx context.Context, m *Message) ([]byte, error) {
		if entered != nil {
			entered()
		}
		close(running)
		<-gate
		return nil, nil
	})
	if err := from.Send(tctx(t), to.ID(), "block", nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-running:
	case <-time.After(testWait):
		t.Fatal("the blocking handler never ran")
	}
	return release
}
