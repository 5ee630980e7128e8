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
	if err := b.Handle("echo", func(ctx context.Context, m *Message) ([]byte, error) {
		return append([]byte("echo:"), m.Payload...), nil
	}); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	a.Handle("note", func(ctx context.Context, m *Message) ([]byte, error) {
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
	b.Handle("fail", func(ctx context.Context, m *Message) ([]byte, error) {
		return nil, errors.New("disk full")
	})
	b.Handle("panic", func(ctx context.Context, m *Message) ([]byte, error) {
		var table []int
		return []byte{byte(table[len(m.Payload)])}, nil // a real bug: index out of range
	})
	b.Handle("ok", func(ctx context.Context, m *Message) ([]byte, error) { return []byte("fine"), nil })

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
	if err := a.Handle("velo.mine", nil); !errors.Is(err, ErrInvalidName) {
		t.Fatalf("reserved name: %v", err)
	}
}

func TestRequestDeadline(t *testing.T) {
	a, b := pair(t)
	release := make(chan struct{})
	b.Handle("slow", func(ctx context.Context, m *Message) ([]byte, error) {
		<-release
		return []byte("late"), nil
	})
	b.Handle("ok", func(ctx context.Context, m *Message) ([]byte, error) { return []byte("ok"), nil })
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
	b.Handle("seq", func(ctx context.Context, m *Message) ([]byte, error) {
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
	b.Handle("big", func(ctx context.Context, m *Message) ([]byte, error) {
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
	b.Handle("drop", func(ctx context.Context, m *Message) ([]byte, error) {
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
			t.Fatalf("%x staged %v payloads", v.ID(), n)
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
	b.Handle("hang", func(ctx context.Context, m *Message) ([]byte, error) {
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
	HandleJSON(b, "add", func(ctx context.Context, from InstanceID, r add) (int, error) { return r.X + r.Y, nil })
	n, err := RequestJSON[int](tctx(t), a, b.ID(), "add", add{2, 3})
	if err != nil || n != 5 {
		t.Fatalf("%d, %v", n, err)
	}
	_, err = RequestJSON[int](tctx(t), a, b.ID(), "add", "not an object")
	if !errors.Is(err, ErrHandlerFailed) {
		t.Fatalf("bad JSON: %v", err)
	}
}
