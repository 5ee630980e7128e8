package rendezvous_test

// The RDMA path's decision logic, exercised end to end over real TCP with an in-process RMA
// below the seam (RDMAServer/RDMAClient). The same behaviour is tested again over real UCX by the
// RDMA path's own suite; this one pins the decision order of docs/architecture.md so the chunked
// runtime cannot drift from it.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/velo-go/velo/velo/messenger"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/rendezvous"
	"github.com/velo-go/velo/velo/transport"
	"github.com/velo-go/velo/velo/transport/tcp"
)

// node is a minimal runtime: one TCP transport, a messenger and a rendezvous service.
type node struct {
	id   transport.InstanceID
	reg  *prometheus.Registry
	tr   *tcp.Transport
	msgr *messenger.Messenger
	rv   *rendezvous.Rendezvous
}

func (n *node) LocalID() transport.InstanceID               { return n.id }
func (n *node) Incarnation() uint64                         { return 1 }
func (n *node) Logger() *slog.Logger                        { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
func (n *node) Deliver(from transport.InstanceID, f []byte) { n.msgr.Deliver(0, from, f) }
func (n *node) PeerDown(p transport.InstanceID, err error) {
	n.msgr.PeerDown(0, p, err)
	n.rv.PeerDown(p)
}
func (n *node) ClaimPrefix() int                                     { return n.msgr.ClaimPrefix() }
func (n *node) Claim(f transport.InstanceID, p []byte, s int) []byte { return n.msgr.Claim(f, p, s) }
func (n *node) Claimed(f transport.InstanceID, p []byte, err error)  { n.msgr.Claimed(f, p, err) }

func newNode(t *testing.T, srv rendezvous.RDMAServer, cli rendezvous.RDMAClient) *node {
	t.Helper()
	return newNodeWith(t, srv, cli, nil)
}

// newNodeWith is newNode with a change to the rendezvous configuration.
func newNodeWith(t *testing.T, srv rendezvous.RDMAServer, cli rendezvous.RDMAClient, mod func(*rendezvous.Config)) *node {
	t.Helper()
	n := &node{id: transport.InstanceID(rand.Uint64() | 1), reg: prometheus.NewRegistry()}
	m, err := metrics.New(n.reg)
	if err != nil {
		t.Fatal(err)
	}
	n.msgr = messenger.New(messenger.Config{Metrics: m, Logger: n.Logger()})
	rc := rendezvous.Config{Self: n.id, Messenger: n.msgr, Metrics: m, Logger: n.Logger(), Server: srv, Client: cli}
	if mod != nil {
		mod(&rc)
	}
	n.rv = rendezvous.New(rc)
	if n.tr, err = tcp.New(tcp.Config{}); err != nil {
		t.Fatal(err)
	}
	n.msgr.AddTransport(n.tr)
	if err := n.tr.Start(n); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.msgr.Close(context.Background()); n.rv.Close(); n.tr.Close() })
	return n
}

func (n *node) register(t *testing.T, peer *node) {
	t.Helper()
	if err := n.tr.AddPeer(context.Background(), transport.PeerAddress{ID: peer.id, Incarnation: 1, Blob: peer.tr.Address()}); err != nil {
		t.Fatal(err)
	}
}

func (n *node) count(t *testing.T, p metrics.Path, r metrics.Reason) float64 {
	t.Helper()
	v, err := metrics.Value(n.reg, metrics.RDMAPathTotal, map[string]string{"path": string(p), "reason": string(r)})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// fakeRMA is an in-process stand-in for a one-sided read: the server "registers" a slot by putting
// its bytes in a table under a random key, the client reads from the table. Revoking removes the
// key, so a stale descriptor reads nothing.
type fakeRMA struct {
	mu       sync.Mutex
	regs     map[uint64][]byte
	killSrv  bool
	killCli  bool
	canGet   bool
	refuse   metrics.Reason
	failGets atomic.Int32
	revoked  atomic.Int32
}

func newFake() *fakeRMA { return &fakeRMA{regs: map[uint64][]byte{}, canGet: true} }

type server struct{ f *fakeRMA }
type client struct{ f *fakeRMA }

func (s server) Backend() string  { return "fake" }
func (s server) KillSwitch() bool { return s.f.killSrv }
func (s server) Serve(ctx context.Context, sl rendezvous.Slot, offer []byte) ([]byte, func(), metrics.Reason, error) {
	if s.f.refuse != "" {
		return nil, nil, s.f.refuse, fmt.Errorf("refused: %s", s.f.refuse)
	}
	if string(offer) != "offer-blob" {
		return nil, nil, metrics.ReasonDecodeError, errors.New("bad offer blob")
	}
	key := rand.Uint64()
	s.f.mu.Lock()
	s.f.regs[key] = sl.Data
	s.f.mu.Unlock()
	return binary.BigEndian.AppendUint64(nil, key), func() {
		s.f.mu.Lock()
		delete(s.f.regs, key)
		s.f.mu.Unlock()
		s.f.revoked.Add(1)
	}, metrics.ReasonOK, nil
}

func (c client) Backend() string                            { return "fake" }
func (c client) KillSwitch() bool                           { return c.f.killCli }
func (c client) CanGet(transport.InstanceID) bool           { return c.f.canGet }
func (c client) Offer(transport.InstanceID) ([]byte, error) { return []byte("offer-blob"), nil }
func (c client) Get(ctx context.Context, owner transport.InstanceID, desc, dst []byte) error {
	if c.f.failGets.Load() > 0 {
		c.f.failGets.Add(-1)
		return errors.New("simulated GET failure")
	}
	c.f.mu.Lock()
	src, ok := c.f.regs[binary.BigEndian.Uint64(desc)]
	c.f.mu.Unlock()
	if !ok {
		return errors.New("stale descriptor")
	}
	copy(dst, src)
	return nil
}

func (c client) GetMany(ctx context.Context, owner transport.InstanceID, reads []rendezvous.RemoteRead, window int, done func(int, error)) {
	for i, rd := range reads {
		if c.f.failGets.Load() > 0 {
			c.f.failGets.Add(-1)
			done(i, errors.New("simulated GET failure"))
			continue
		}
		c.f.mu.Lock()
		src, ok := c.f.regs[binary.BigEndian.Uint64(rd.Descriptor)]
		c.f.mu.Unlock()
		switch {
		case !ok:
			done(i, errors.New("stale descriptor"))
		case rd.Offset+uint64(len(rd.Dst)) > uint64(len(src)):
			done(i, errors.New("read past the registration"))
		default:
			copy(rd.Dst, src[rd.Offset:])
			done(i, nil)
		}
	}
}

func TestPathDecision(t *testing.T) {
	data := bytes.Repeat([]byte("velo"), 300_000)
	type setup struct {
		server, client bool
		pinned         bool
		tweak          func(f *fakeRMA, owner *rendezvous.Rendezvous)
	}
	cases := []struct {
		name          string
		s             setup
		owner, cons   metrics.Reason
		ownerPath     metrics.Path
		consumerPath  metrics.Path
		wantRevokes   int32
		secondAcquire metrics.Reason // owner's reason for the fallback acquire, if any
	}{
		{"rdma ok", setup{server: true, client: true, pinned: true}, metrics.ReasonOK, metrics.ReasonOK, metrics.PathRDMA, metrics.PathRDMA, 1, ""},
		{"nothing configured", setup{}, metrics.ReasonNotConfigured, metrics.ReasonNotConfigured, metrics.PathChunked, metrics.PathChunked, 0, ""},
		{"owner without registry", setup{client: true, pinned: true}, metrics.ReasonNotConfigured, metrics.ReasonNotConfigured, metrics.PathChunked, metrics.PathChunked, 0, ""},
		{"consumer without registry", setup{server: true, pinned: true}, metrics.ReasonNoOffer, metrics.ReasonNotConfigured, metrics.PathChunked, metrics.PathChunked, 0, ""},
		{"unpinned slot", setup{server: true, client: true}, metrics.ReasonNotPinned, metrics.ReasonNotPinned, metrics.PathChunked, metrics.PathChunked, 0, ""},
		{"consumer kill switch", setup{server: true, client: true, pinned: true, tweak: func(f *fakeRMA, _ *rendezvous.Rendezvous) { f.killCli = true }},
			metrics.ReasonNoOffer, metrics.ReasonKillSwitch, metrics.PathChunked, metrics.PathChunked, 0, ""},
		{"owner kill switch", setup{server: true, client: true, pinned: true, tweak: func(f *fakeRMA, _ *rendezvous.Rendezvous) { f.killSrv = true }},
			metrics.ReasonKillSwitch, metrics.ReasonKillSwitch, metrics.PathChunked, metrics.PathChunked, 0, ""},
		{"owner draining", setup{server: true, client: true, pinned: true, tweak: func(_ *fakeRMA, o *rendezvous.Rendezvous) { o.BeginDrain() }},
			metrics.ReasonDraining, metrics.ReasonDraining, metrics.PathChunked, metrics.PathChunked, 0, ""},
		{"owner not registered on RMA", setup{server: true, client: true, pinned: true, tweak: func(f *fakeRMA, _ *rendezvous.Rendezvous) { f.canGet = false }},
			metrics.ReasonNoOffer, metrics.ReasonNoOffer, metrics.PathChunked, metrics.PathChunked, 0, ""},
		{"budget spent", setup{server: true, client: true, pinned: true, tweak: func(f *fakeRMA, _ *rendezvous.Rendezvous) { f.refuse = metrics.ReasonBudget }},
			metrics.ReasonBudget, metrics.ReasonBudget, metrics.PathChunked, metrics.PathChunked, 0, ""},
		{"get failed falls back once", setup{server: true, client: true, pinned: true, tweak: func(f *fakeRMA, _ *rendezvous.Rendezvous) { f.failGets.Store(1) }},
			metrics.ReasonOK, metrics.ReasonGetFailed, metrics.PathRDMA, metrics.PathChunked, 1, metrics.ReasonNoOffer},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFake()
			var srv rendezvous.RDMAServer
			var cli rendezvous.RDMAClient
			if c.s.server {
				srv = server{f}
			}
			if c.s.client {
				cli = client{f}
			}
			owner, cons := newNode(t, srv, nil), newNode(t, nil, cli)
			cons.register(t, owner)
			if c.s.tweak != nil {
				c.s.tweak(f, owner.rv)
			}
			h, err := owner.rv.Stage(data, rendezvous.StageOptions{Pinned: pinnedIf(c.s.pinned)})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			l, err := cons.rv.Get(ctx, h)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(l.Bytes(), data) {
				t.Fatal("payload differs")
			}
			if got := cons.count(t, c.consumerPath, c.cons); got != 1 {
				t.Errorf("consumer %s/%s = %v, want 1", c.consumerPath, c.cons, got)
			}
			if got := owner.count(t, c.ownerPath, c.owner); got != 1 {
				t.Errorf("owner %s/%s = %v, want 1", c.ownerPath, c.owner, got)
			}
			if c.secondAcquire != "" {
				if got := owner.count(t, metrics.PathChunked, c.secondAcquire); got != 1 {
					t.Errorf("owner fallback acquire chunked/%s = %v, want 1", c.secondAcquire, got)
				}
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			// Every registration made for a lease is revoked once the lease ends.
			deadline := time.Now().Add(time.Minute)
			for f.revoked.Load() != c.wantRevokes || len(f.regs) != 0 {
				if time.Now().After(deadline) {
					t.Fatalf("revoked %d registrations (want %d), %d left", f.revoked.Load(), c.wantRevokes, len(f.regs))
				}
				time.Sleep(5 * time.Millisecond)
			}
			if s, l := owner.rv.Counts(); s != 0 || l != 0 {
				t.Fatalf("owner holds %d slots, %d leases after release", s, l)
			}
		})
	}
}

func TestLeaseHookRunsOnEveryEnding(t *testing.T) {
	f := newFake()
	owner := newNode(t, server{f}, nil)
	ctx := context.Background()
	for _, end := range []string{"detach", "peer down", "shutdown"} {
		t.Run(end, func(t *testing.T) {
			cons := newNode(t, nil, client{f})
			cons.register(t, owner)
			before := f.revoked.Load()
			h, _ := owner.rv.Stage([]byte("pinned bytes"), rendezvous.StageOptions{Pinned: pinnedIf(true)})
			l, err := cons.rv.Get(ctx, h)
			if err != nil || l.Path != metrics.PathRDMA {
				t.Fatalf("get: %v, path %v", err, l)
			}
			switch end {
			case "detach":
				l.Detach(ctx)
			case "peer down":
				owner.rv.PeerDown(cons.id)
			case "shutdown":
				owner.rv.Close()
			}
			if f.revoked.Load() != before+1 {
				t.Fatalf("%s: the lease's registration was not revoked", end)
			}
		})
	}
}

// fakePinned stands for memory a pool pinned; fakeRMA serves Slot.Data and never asks for the region.
type fakePinned struct{}

func (fakePinned) PinnedRegion() []byte { return nil }

func pinnedIf(pinned bool) rendezvous.PinnedMemory {
	if pinned {
		return fakePinned{}
	}
	return nil
}
