//go:build cgo && linux

package ucxtransport

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/velo/transport"
)

// TestRemovePeer: a removed peer is unreachable at once; its endpoint is retired with a fin the
// peer answers, and then closed; registering it again works (endpoint numbering continues where
// UCX's does).
func TestRemovePeer(t *testing.T) {
	a, b := newNode(t, nil), newNode(t, nil)
	link(t, a, b)
	for i := 0; i < 2; i++ {
		if err := a.Send(testCtx(t), b.h.id, []byte("x")); err != nil {
			t.Fatal(err)
		}
		b.h.waitFrames(t, i+1)
		a.RemovePeer(b.h.id)
		if a.Reaches(b.h.id) || a.CanGet(b.h.id) {
			t.Fatal("a removed peer is reachable")
		}
		if err := a.Send(testCtx(t), b.h.id, []byte("y")); !errors.Is(err, transport.ErrUnknownPeer) {
			t.Fatalf("send to a removed peer: %v", err)
		}
		eventually(t, "both endpoints of the slot closed", func() bool {
			return testutil.ToFloat64(a.m.open)+testutil.ToFloat64(b.m.open) == 0
		})
		if err := a.AddPeer(testCtx(t), b.addr()); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Send(testCtx(t), b.h.id, []byte("again")); err != nil {
		t.Fatal(err)
	}
	if f := b.h.waitFrames(t, 3)[2]; string(f.frame) != "again" {
		t.Fatalf("after re-registering: %q", f.frame)
	}
	for _, n := range []node{a, b} {
		if v := testutil.ToFloat64(n.m.dropped.WithLabelValues("unknown_sender")); v != 0 {
			t.Errorf("%v frames dropped from an unknown sender", v)
		}
	}
}

// TestCloseWithSendsInFlight: Close while several goroutines send returns, every Send returns
// (taken, or an error), and nothing panics; Close itself waits for the transport's goroutines.
func TestCloseWithSendsInFlight(t *testing.T) {
	a, b := newNode(t, nil), newNode(t, nil)
	link(t, a, b)
	var wg sync.WaitGroup
	started := make(chan struct{}, 4)
	for s := 0; s < 4; s++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			frame := make([]byte, 64<<10)
			for i := 0; ; i++ {
				err := a.Send(testCtx(t), b.h.id, frame)
				if i == 10 {
					started <- struct{}{}
				}
				if err != nil {
					if !errors.Is(err, transport.ErrClosed) && !errors.Is(err, transport.ErrPeerUnreachable) {
						t.Errorf("send during Close: %v", err)
					}
					return
				}
			}
		}()
	}
	for s := 0; s < 4; s++ {
		<-started
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(wait):
		t.Fatal("senders still blocked after Close")
	}
}

// TestKeepaliveSetting: Config.KeepaliveInterval becomes UCX_KEEPALIVE_INTERVAL when the variable
// is unset, and the environment wins when it is set.
func TestKeepaliveSetting(t *testing.T) {
	unsetenv(t, "UCX_KEEPALIVE_INTERVAL")
	n := newNode(t, func(c *Config) { c.KeepaliveInterval = 3 * time.Second })
	s, ok := n.setting("KEEPALIVE_INTERVAL")
	if !ok || s.Source != ucx.SourceProgram || !strings.HasPrefix(s.Value, "3") {
		t.Fatalf("KEEPALIVE_INTERVAL %+v, want 3 s from the program", s)
	}
	t.Setenv("UCX_KEEPALIVE_INTERVAL", "7s")
	n = newNode(t, func(c *Config) { c.KeepaliveInterval = 3 * time.Second })
	if s, _ := n.setting("KEEPALIVE_INTERVAL"); s.Source != ucx.SourceEnvironment || !strings.HasPrefix(s.Value, "7") {
		t.Fatalf("KEEPALIVE_INTERVAL %+v, want 7 s from the environment", s)
	}
	if _, err := New(Config{KeepaliveInterval: -time.Second}); err == nil {
		t.Fatal("a negative keepalive interval was accepted")
	}
	if _, err := New(Config{EPIdleTimeout: -time.Second}); err == nil {
		t.Fatal("a negative idle timeout was accepted")
	}
}
