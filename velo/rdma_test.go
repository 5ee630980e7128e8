package velo

// The RDMA path through the whole runtime, with an in-process RMA (rdmatest) below the
// transport.RMA seam and real TCP for every message. Module test (package rdma) runs the same
// behaviours over the real UCX transport.

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/rendezvous/rdma"
	"github.com/velo-go/velo/velo/rendezvous/rdma/rdmatest"
	"github.com/velo-go/velo/velo/transport/tcp"
)

type rnode struct {
	*Velo
	rt *rdmatest.Transport
}

// rdmaNode starts an instance with a TCP control plane and an rdmatest transport named "ucx":
// added with WithUCXTransport when registry is true, with WithTransport otherwise. When the test
// ends it closes the instance and checks that nothing stays pinned or registered.
func rdmaNode(t *testing.T, f *rdmatest.Fabric, registry bool, opts ...Option) rnode {
	t.Helper()
	ctl, err := tcp.New(tcp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := f.New("ucx")
	if err != nil {
		t.Fatal(err)
	}
	add := WithTransport(rt)
	if registry {
		add = WithUCXTransport(rt)
	}
	v, err := New(context.Background(), append([]Option{WithLogger(quietLogger()), WithTransport(ctl), add}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	n := rnode{Velo: v, rt: rt}
	t.Cleanup(func() {
		v.Close()
		if st := v.RDMAStats(); st.PinnedBytes != 0 || st.Arenas != 0 || st.Slots != 0 || st.LeaseRegistrations != 0 {
			t.Errorf("after Close the registry still holds %+v", st)
		}
		if live := rt.LiveRegistrations(); live != 0 {
			t.Errorf("after Close the transport still has %d registrations", live)
		}
	})
	return n
}

// link registers each node with the other. Without ucx, b registers a with its TCP address only.
func link(t *testing.T, a, b rnode, ucx bool) {
	t.Helper()
	ctx := tctx(t)
	if err := a.RegisterPeer(ctx, b.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	info := a.PeerInfo()
	if !ucx {
		delete(info.Addresses, "ucx")
	}
	if err := b.RegisterPeer(ctx, info); err != nil {
		t.Fatal(err)
	}
}

func pathCount(t *testing.T, v *Velo, p metrics.Path, r metrics.Reason) float64 {
	t.Helper()
	return rdmatest.PathCount(t, v.Metrics(), rdmatest.Pair{Path: p, Reason: r})
}

func pr(p metrics.Path, r metrics.Reason) rdmatest.Pair { return rdmatest.Pair{Path: p, Reason: r} }

// TestRDMAPathReasons reaches every reason of the path table and checks the series on both sides.
func TestRDMAPathReasons(t *testing.T) {
	data := payload(3<<20+123, 1)
	type setup struct {
		ownerReg, consReg bool
		consUCX           bool // the consumer registers the owner's UCX address
		ownerOpts         []Option
		consEnv           string // VELO_RDMA_RENDEZVOUS_DISABLE for the consumer
		ownerEnv          string
		stage             func(t *testing.T, o rnode) Handle
		before            func(o, c rnode)
	}
	pinned := func(t *testing.T, o rnode) Handle {
		h, err := o.StageDataPinned(tctx(t), data)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	rdmaOK := pr(metrics.PathRDMA, metrics.ReasonOK)
	ch := func(r metrics.Reason) rdmatest.Pair { return pr(metrics.PathChunked, r) }
	cases := []struct {
		name        string
		s           setup
		owner, cons map[rdmatest.Pair]float64
		wantPath    metrics.Path
	}{
		{"ok", setup{ownerReg: true, consReg: true, consUCX: true, stage: pinned},
			map[rdmatest.Pair]float64{rdmaOK: 1}, map[rdmatest.Pair]float64{rdmaOK: 1}, metrics.PathRDMA},
		{"not_configured on both", setup{consUCX: true, stage: pinned},
			map[rdmatest.Pair]float64{ch(metrics.ReasonNotConfigured): 1}, map[rdmatest.Pair]float64{ch(metrics.ReasonNotConfigured): 1}, metrics.PathChunked},
		{"not_configured consumer, no_offer owner", setup{ownerReg: true, consUCX: true, stage: pinned},
			map[rdmatest.Pair]float64{ch(metrics.ReasonNoOffer): 1}, map[rdmatest.Pair]float64{ch(metrics.ReasonNotConfigured): 1}, metrics.PathChunked},
		{"no_offer: owner not registered over UCX", setup{ownerReg: true, consReg: true, stage: pinned},
			map[rdmatest.Pair]float64{ch(metrics.ReasonNoOffer): 1}, map[rdmatest.Pair]float64{ch(metrics.ReasonNoOffer): 1}, metrics.PathChunked},
		{"kill_switch on the consumer (environment)", setup{ownerReg: true, consReg: true, consUCX: true, consEnv: "Yes", stage: pinned},
			map[rdmatest.Pair]float64{ch(metrics.ReasonNoOffer): 1}, map[rdmatest.Pair]float64{ch(metrics.ReasonKillSwitch): 1}, metrics.PathChunked},
		{"kill_switch on the owner (environment)", setup{ownerReg: true, consReg: true, consUCX: true, ownerEnv: "ON", stage: pinned},
			map[rdmatest.Pair]float64{ch(metrics.ReasonKillSwitch): 1}, map[rdmatest.Pair]float64{ch(metrics.ReasonKillSwitch): 1}, metrics.PathChunked},
		{"kill_switch on the owner (Disabled)", setup{ownerReg: true, consReg: true, consUCX: true, ownerOpts: []Option{WithRDMA(RDMAConfig{Disabled: true})}, stage: pinned},
			map[rdmatest.Pair]float64{ch(metrics.ReasonKillSwitch): 1}, map[rdmatest.Pair]float64{ch(metrics.ReasonKillSwitch): 1}, metrics.PathChunked},
		{"draining", setup{ownerReg: true, consReg: true, consUCX: true, stage: pinned, before: func(o, _ rnode) { o.BeginDrain() }},
			map[rdmatest.Pair]float64{ch(metrics.ReasonDraining): 1}, map[rdmatest.Pair]float64{ch(metrics.ReasonDraining): 1}, metrics.PathChunked},
		{"not_pinned", setup{ownerReg: true, consReg: true, consUCX: true, stage: func(t *testing.T, o rnode) Handle {
			h, err := o.StageData(tctx(t), data)
			if err != nil {
				t.Fatal(err)
			}
			return h
		}}, map[rdmatest.Pair]float64{ch(metrics.ReasonNotPinned): 1}, map[rdmatest.Pair]float64{ch(metrics.ReasonNotPinned): 1}, metrics.PathChunked},
		{"budget: no room for an arena", setup{ownerReg: true, consReg: true, consUCX: true, stage: pinned,
			ownerOpts: []Option{WithRDMA(RDMAConfig{Pool: RDMAPoolConfig{ArenaSize: 1 << 20, RegisteredBytesBudget: 2 << 20}})}},
			map[rdmatest.Pair]float64{ch(metrics.ReasonBudget): 1}, map[rdmatest.Pair]float64{ch(metrics.ReasonBudget): 1}, metrics.PathChunked},
		{"budget: no room for the lease's registration", setup{ownerReg: true, consReg: true, consUCX: true, stage: pinned,
			ownerOpts: []Option{WithRDMA(RDMAConfig{Pool: RDMAPoolConfig{ArenaSize: 4 << 20, RegisteredBytesBudget: 6 << 20}})}},
			map[rdmatest.Pair]float64{ch(metrics.ReasonBudget): 1}, map[rdmatest.Pair]float64{ch(metrics.ReasonBudget): 1}, metrics.PathChunked},
		{"budget: the transport refuses the registration", setup{ownerReg: true, consReg: true, consUCX: true, stage: pinned, before: func(o, _ rnode) {
			err := errors.New("ibv_reg_mr: Cannot allocate memory")
			o.rt.RegisterErr.Store(&err)
		}}, map[rdmatest.Pair]float64{ch(metrics.ReasonBudget): 1}, map[rdmatest.Pair]float64{ch(metrics.ReasonBudget): 1}, metrics.PathChunked},
		{"get_failed re-acquires without an offer", setup{ownerReg: true, consReg: true, consUCX: true, stage: pinned, before: func(_, c rnode) { c.rt.FailGets.Store(1) }},
			map[rdmatest.Pair]float64{rdmaOK: 1, ch(metrics.ReasonNoOffer): 1}, map[rdmatest.Pair]float64{ch(metrics.ReasonGetFailed): 1}, metrics.PathChunked},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := rdmatest.NewFabric()
			t.Setenv(rdma.KillSwitchEnv, c.s.ownerEnv)
			owner := rdmaNode(t, f, c.s.ownerReg, c.s.ownerOpts...)
			t.Setenv(rdma.KillSwitchEnv, c.s.consEnv)
			cons := rdmaNode(t, f, c.s.consReg)
			t.Setenv(rdma.KillSwitchEnv, "") // read once at New: changing it now changes nothing
			link(t, owner, cons, c.s.consUCX)
			if c.s.before != nil {
				c.s.before(owner, cons)
			}
			h := c.s.stage(t, owner)
			ctx := tctx(t)
			l, err := cons.Get(ctx, h)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(l.Bytes(), data) {
				t.Fatal("payload differs")
			}
			if l.Path != c.wantPath {
				t.Errorf("lease path %s/%s, want %s", l.Path, l.Reason, c.wantPath)
			}
			rdmatest.ExpectPaths(t, "owner", owner.Metrics(), c.owner)
			rdmatest.ExpectPaths(t, "consumer", cons.Metrics(), c.cons)
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			// The release is answered after the owner ended the lease, so its registration is gone.
			// The slot itself is freed once the owner's last chunk write has returned, which can be
			// a moment after the consumer read it.
			if st := owner.RDMAStats(); st.LeaseRegistrations != 0 || st.LeaseBytes != 0 {
				t.Fatalf("after release the owner holds %+v", st)
			}
			eventually(t, "the owner to free the slot", func() bool { return owner.RDMAStats().Slots == 0 })
			if r, d := owner.rt.Registrations.Load(), owner.rt.Deregistrations.Load(); r != d {
				t.Fatalf("%d registrations, %d revoked", r, d)
			}
		})
	}
}

// TestRDMAKillSwitchValues: every affirmative spelling switches the path off, read once at New.
func TestRDMAKillSwitchValues(t *testing.T) {
	f := rdmatest.NewFabric()
	for _, val := range []string{"1", "true", "TRUE", "yes", "On", "0", "off", "no", ""} {
		t.Setenv(rdma.KillSwitchEnv, val)
		n := rdmaNode(t, f, true)
		if got, want := n.rdma.KillSwitch(), rdma.Affirmative(val); got != want {
			t.Errorf("%s=%q: kill switch %v, want %v", rdma.KillSwitchEnv, val, got, want)
		}
	}
}

// TestRDMARevokedOnEveryLeaseEnding: however a lease ends, its registration is revoked and its
// descriptor reads nothing afterwards.
func TestRDMARevokedOnEveryLeaseEnding(t *testing.T) {
	data := payload(1<<20, 2)
	for _, end := range []string{"release", "detach", "ttl", "peer down", "shutdown"} {
		t.Run(end, func(t *testing.T) {
			f := rdmatest.NewFabric()
			var ownerOpts []Option
			if end == "ttl" {
				ownerOpts = append(ownerOpts, WithLeaseTTL(time.Second))
			}
			owner := rdmaNode(t, f, true, ownerOpts...)
			cons := rdmaNode(t, f, true)
			link(t, owner, cons, true)
			ctx := tctx(t)
			h, err := owner.StageDataPinned(ctx, data)
			if err != nil {
				t.Fatal(err)
			}
			l, err := cons.Get(ctx, h)
			if err != nil || l.Path != metrics.PathRDMA || !bytes.Equal(l.Bytes(), data) {
				t.Fatalf("get: %v on %v", err, l)
			}
			if st := owner.RDMAStats(); st.LeaseRegistrations != 1 {
				t.Fatalf("while the lease is open the owner has %d registrations", st.LeaseRegistrations)
			}
			reaped := func(cause string) float64 {
				return metric(t, owner.Velo, metrics.LeasesReapedTotal, map[string]string{"cause": cause})
			}
			switch end {
			case "release":
				err = l.Release(ctx)
			case "detach":
				err = l.Detach(ctx)
			case "ttl":
				eventually(t, "the TTL reaper", func() bool { return reaped("ttl") == 1 })
			case "peer down":
				cons.Close()
				eventually(t, "the owner to see the consumer down", func() bool { return reaped("peer_down") == 1 })
			case "shutdown":
				owner.Close()
				if reaped("shutdown") != 1 {
					t.Error("the lease was not ended by the shutdown")
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			if st := owner.RDMAStats(); st.LeaseRegistrations != 0 || owner.rt.LiveRegistrations() != 0 {
				t.Fatalf("after %s: %+v, %d live registrations", end, st, owner.rt.LiveRegistrations())
			}
			// The consumer's last descriptor is dead: replaying it reads nothing.
			last := cons.rt.LastGet()
			if end != "peer down" && end != "shutdown" {
				dst := make([]byte, last.Len)
				if err := cons.rt.Get(ctx, last.Peer, last.Key, last.Offset, dst); !errors.Is(err, rdmatest.ErrRevoked) {
					t.Fatalf("a revoked descriptor: %v", err)
				}
				if !bytes.Equal(dst, make([]byte, len(dst))) {
					t.Fatal("a revoked descriptor yielded owner bytes")
				}
			}
		})
	}
}

// TestRDMALeaseExpiresDuringGet: the owner's TTL reaper revokes the key before the GET runs; the
// GET fails without reading, and the get falls back to chunks once.
func TestRDMALeaseExpiresDuringGet(t *testing.T) {
	f := rdmatest.NewFabric()
	owner := rdmaNode(t, f, true, WithLeaseTTL(time.Second))
	cons := rdmaNode(t, f, true)
	link(t, owner, cons, true)
	data := payload(2<<20, 3)
	ctx := tctx(t)
	h, _ := owner.StageDataPinned(ctx, data)
	cons.rt.BeforeGet = func(context.Context) {
		eventually(t, "the lease to expire", func() bool { return owner.RDMAStats().LeaseRegistrations == 0 })
		cons.rt.BeforeGet = nil
	}
	l, err := cons.Get(ctx, h)
	if err != nil || !bytes.Equal(l.Bytes(), data) {
		t.Fatalf("get: %v", err)
	}
	if pathCount(t, cons.Velo, metrics.PathChunked, metrics.ReasonGetFailed) != 1 || cons.rt.Gets.Load() != 0 {
		t.Fatal("the GET with an expired key was not refused")
	}
	l.Release(ctx)
}

// TestRDMATransparentStaging: large messages use pinned memory only once an arena is mapped.
func TestRDMATransparentStaging(t *testing.T) {
	f := rdmatest.NewFabric()
	sender := rdmaNode(t, f, true)
	recv := rdmaNode(t, f, true)
	link(t, sender, recv, true)
	link(t, recv, sender, true)
	big := payload(1<<20, 4)
	got := make(chan []byte, 2)
	recv.RegisterHandler("big", func(ctx context.Context, m *Message) ([]byte, error) {
		got <- append([]byte(nil), m.Payload...)
		return nil, nil
	})
	ctx := tctx(t)
	send := func() {
		if _, err := sender.Request(ctx, recv.ID(), "big", big); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(<-got, big) {
			t.Fatal("payload differs")
		}
	}
	send()
	if n := pathCount(t, recv.Velo, metrics.PathChunked, metrics.ReasonPoolExhausted); n != 1 {
		t.Fatalf("receiver chunked/pool_exhausted = %v before any arena", n)
	}
	if n := pathCount(t, sender.Velo, metrics.PathChunked, metrics.ReasonPoolExhausted); n != 1 {
		t.Fatalf("sender chunked/pool_exhausted = %v before any arena", n)
	}
	if st := sender.RDMAStats(); st.Arenas != 0 {
		t.Fatal("the transparent stager mapped an arena")
	}
	keep, err := sender.StageDataPinned(ctx, []byte("maps the first arena"))
	if err != nil {
		t.Fatal(err)
	}
	send()
	if n := pathCount(t, recv.Velo, metrics.PathRDMA, metrics.ReasonOK); n != 1 {
		t.Fatalf("receiver rdma/ok = %v once an arena is mapped", n)
	}
	eventually(t, "the staged message to be freed", func() bool { return sender.RDMAStats().Slots == 1 })
	sender.Unref(ctx, keep)
}

// TestGetPinned fetches into the consumer's pinned memory on both paths.
func TestGetPinned(t *testing.T) {
	f := rdmatest.NewFabric()
	owner := rdmaNode(t, f, true)
	cons := rdmaNode(t, f, true, WithRDMA(RDMAConfig{Pool: RDMAPoolConfig{ArenaSize: 1 << 20, RegisteredBytesBudget: 4 << 20}}))
	link(t, owner, cons, true)
	ctx := tctx(t)
	data := payload(3<<20, 5)
	for _, stage := range []func(context.Context, []byte) (Handle, error){owner.StageDataPinned, owner.StageData} {
		h, err := stage(ctx, data)
		if err != nil {
			t.Fatal(err)
		}
		pl, err := cons.GetPinned(ctx, h)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(pl.Bytes(), data) {
			t.Fatal("payload differs")
		}
		if st := cons.RDMAStats(); st.Slots != 1 || st.ArenaBytes < int64(len(data)) {
			t.Fatalf("the bytes are not in the consumer's pinned memory: %+v", st)
		}
		if err := pl.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(pl.Bytes(), data) {
			t.Fatal("the bytes changed when the lease ended")
		}
		pl.Free()
		pl.Free()
		if st := cons.RDMAStats(); st.Slots != 0 || st.PinnedBytes != 0 {
			t.Fatalf("after Free the consumer holds %+v (the oversized arena is unmapped at once)", st)
		}
	}
	// Past the consumer's budget: a clear error, nothing fetched, nothing pinned.
	h, _ := owner.StageDataPinned(ctx, payload(5<<20, 6))
	if _, err := cons.GetPinned(ctx, h); !errors.Is(err, ErrNoPinnedMemory) || !errors.Is(err, rdma.ErrBudget) {
		t.Fatalf("GetPinned over budget: %v", err)
	}
	if md, err := cons.Metadata(ctx, h); err != nil || md.Leases != 0 {
		t.Fatalf("a refused GetPinned left a lease: %+v %v", md, err)
	}
	// Without a registry.
	plain := newInstance(t)
	if _, err := plain.GetPinned(ctx, h); !errors.Is(err, ErrNoPinnedMemory) || !strings.Contains(err.Error(), "WithUCXTransport") {
		t.Fatalf("GetPinned without a registry: %v", err)
	}
}

// TestRDMAManyConsumersEachGetTheirOwnKey: concurrent leases on one slot each register it apart.
func TestRDMAManyConsumersEachGetTheirOwnKey(t *testing.T) {
	f := rdmatest.NewFabric()
	owner := rdmaNode(t, f, true)
	ctx := tctx(t)
	data := payload(512<<10, 7)
	h, _ := owner.StageDataPinned(ctx, data)
	const n = 4
	if err := owner.Ref(ctx, h); err != nil { // refs for the others; one came with the handle
		t.Fatal(err)
	}
	for i := 2; i < n; i++ {
		owner.Ref(ctx, h)
	}
	var leases []*Lease
	keys := map[string]bool{}
	for i := 0; i < n; i++ {
		c := rdmaNode(t, f, true)
		link(t, owner, c, true)
		l, err := c.Get(ctx, h)
		if err != nil || l.Path != metrics.PathRDMA || !bytes.Equal(l.Bytes(), data) {
			t.Fatalf("consumer %d: %v", i, err)
		}
		keys[string(c.rt.LastGet().Key)] = true
		leases = append(leases, l)
	}
	if len(keys) != n || owner.RDMAStats().LeaseRegistrations != n {
		t.Fatalf("%d distinct keys, %d registrations for %d leases", len(keys), owner.RDMAStats().LeaseRegistrations, n)
	}
	for _, l := range leases {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if st := owner.RDMAStats(); st.LeaseRegistrations != 0 || st.Slots != 0 {
		t.Fatalf("after every release: %+v", st)
	}
}

func TestWithUCXTransportNeedsRMA(t *testing.T) {
	tr, _ := tcp.New(tcp.Config{})
	defer tr.Close()
	if _, err := New(context.Background(), WithUCXTransport(tr)); err == nil || !strings.Contains(err.Error(), "WithTransport") {
		t.Fatalf("a transport without RMA: %v", err)
	}
}
