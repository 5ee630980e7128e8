//go:build cgo && linux

package ucxtransport

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/velo-go/velo/velo/transport"
)

// testTLS is pinned in code; UCX_TLS in the environment wins, so the same suite runs on
// InfiniBand when UCX_TLS and UCX_NET_DEVICES are set (see transport_test.go).
const testTLS = "tcp"

// wait bounds every wait of a test: generous, for a loaded 2-core machine.
const wait = 60 * time.Second

func testCtx(t testing.TB) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return c
}

// testHost is the runtime side of the seam: it records frames and peer-down reports.
type testHost struct {
	id     transport.InstanceID
	inc    uint64
	log    *slog.Logger
	logBuf *syncBuffer

	mu     sync.Mutex
	frames []frameFrom
	notify chan struct{}
	downs  chan downReport
}

type frameFrom struct {
	from  transport.InstanceID
	frame []byte
}

type downReport struct {
	peer transport.InstanceID
	err  error
}

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newHost() *testHost {
	buf := &syncBuffer{}
	var w io.Writer = buf
	if os.Getenv("UCXT_TEST_LOG") != "" {
		w = io.MultiWriter(buf, os.Stderr)
	}
	return &testHost{
		id:     transport.InstanceID(rand.Uint64() | 1),
		inc:    rand.Uint64(),
		log:    slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug})),
		logBuf: buf,
		notify: make(chan struct{}, 1),
		downs:  make(chan downReport, 64),
	}
}

func (h *testHost) LocalID() transport.InstanceID { return h.id }
func (h *testHost) Incarnation() uint64           { return h.inc }
func (h *testHost) Logger() *slog.Logger          { return h.log }
func (h *testHost) Deliver(from transport.InstanceID, frame []byte) {
	h.mu.Lock()
	h.frames = append(h.frames, frameFrom{from, frame})
	h.mu.Unlock()
	select {
	case h.notify <- struct{}{}:
	default:
	}
}
func (h *testHost) PeerDown(p transport.InstanceID, err error) { h.downs <- downReport{p, err} }

// waitFrames waits until n frames arrived in total and returns them all.
func (h *testHost) waitFrames(t testing.TB, n int) []frameFrom {
	t.Helper()
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		h.mu.Lock()
		got := len(h.frames)
		if got >= n {
			out := append([]frameFrom(nil), h.frames...)
			h.mu.Unlock()
			return out
		}
		h.mu.Unlock()
		select {
		case <-h.notify:
		case <-deadline.C:
			t.Fatalf("%d of %d frames delivered within %v", got, n, wait)
		}
	}
}

func (h *testHost) waitDown(t testing.TB, want transport.InstanceID) downReport {
	t.Helper()
	select {
	case d := <-h.downs:
		if d.peer != want {
			t.Fatalf("PeerDown(%016x), want %016x", uint64(d.peer), uint64(want))
		}
		return d
	case <-time.After(wait):
		t.Fatalf("no PeerDown within %v", wait)
	}
	return downReport{}
}

// eventually polls cond until it holds, failing the test after wait.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, wait)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// node is one transport with its host.
type node struct {
	*Transport
	h *testHost
}

// newNode starts a transport over testTLS (unless the environment says otherwise).
func newNode(t testing.TB, mod func(*Config)) node {
	t.Helper()
	h := newHost()
	cfg := Config{TLS: testTLS, Logger: h.log}
	if mod != nil {
		mod(&cfg)
	}
	tr, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := tr.Start(h); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := tr.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		// A failed protocol test is read from both sides' debug logs.
		if t.Failed() {
			t.Logf("log of node %016x:\n%s", uint64(h.id), h.logBuf.String())
		}
	})
	return node{tr, h}
}

// addr is n as a peer address for AddPeer.
func (n node) addr() transport.PeerAddress {
	return transport.PeerAddress{ID: n.h.id, Incarnation: n.h.inc, Blob: n.Address()}
}

// link registers each node with the other.
func link(t testing.TB, a, b node) {
	t.Helper()
	if err := a.AddPeer(testCtx(t), b.addr()); err != nil {
		t.Fatal(err)
	}
	if err := b.AddPeer(testCtx(t), a.addr()); err != nil {
		t.Fatal(err)
	}
}

// deregister revokes reg's key and waits until the transport confirms that nothing can read the
// region any more.
func deregister(t testing.TB, reg transport.Registration) {
	t.Helper()
	if err := reg.Revoke(testCtx(t)); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	select {
	case <-reg.Dead():
	case <-time.After(30 * time.Second):
		t.Fatalf("the registration of %d bytes was not dead 30 s after Revoke", reg.Len())
	}
}
