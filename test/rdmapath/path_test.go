package rdmapath_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/velo-go/velo/velo"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/rendezvous/rdma/rdmatest"
	"github.com/velo-go/velo/velo/transport/ucxtransport"
)

// TestPathReasonsOverUCX reaches every reason of the path table over the real UCX transport and
// checks the series on both sides.
func TestPathReasonsOverUCX(t *testing.T) {
	data := randomBytes(3<<20+77, 1)
	pinned := func(t *testing.T, o node) velo.Handle {
		h, err := o.StageDataPinned(tctx(t), data)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	unpinned := func(t *testing.T, o node) velo.Handle {
		h, err := o.StageData(tctx(t), data)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	ok := pr(metrics.PathRDMA, metrics.ReasonOK)
	ch := func(r metrics.Reason) rdmatest.Pair { return pr(metrics.PathChunked, r) }
	one := func(k rdmatest.Pair) map[rdmatest.Pair]float64 { return map[rdmatest.Pair]float64{k: 1} }
	cases := []struct {
		name              string
		ownerReg, consReg bool
		consUCX           bool
		ownerOpts         []velo.Option
		consEnv, ownerEnv string
		stage             func(*testing.T, node) velo.Handle
		before            func(o, c node)
		owner, cons       map[rdmatest.Pair]float64
	}{
		{name: "ok", ownerReg: true, consReg: true, consUCX: true, stage: pinned, owner: one(ok), cons: one(ok)},
		{name: "not_configured: UCX added with WithTransport", consUCX: true, stage: pinned,
			owner: one(ch(metrics.ReasonNotConfigured)), cons: one(ch(metrics.ReasonNotConfigured))},
		{name: "no_offer on the owner: the consumer has no registry", ownerReg: true, consUCX: true, stage: pinned,
			owner: one(ch(metrics.ReasonNoOffer)), cons: one(ch(metrics.ReasonNotConfigured))},
		{name: "no_offer: the owner is not registered over UCX", ownerReg: true, consReg: true, stage: pinned,
			owner: one(ch(metrics.ReasonNoOffer)), cons: one(ch(metrics.ReasonNoOffer))},
		{name: "kill_switch on the consumer", ownerReg: true, consReg: true, consUCX: true, consEnv: "1", stage: pinned,
			owner: one(ch(metrics.ReasonNoOffer)), cons: one(ch(metrics.ReasonKillSwitch))},
		{name: "kill_switch on the owner", ownerReg: true, consReg: true, consUCX: true, ownerEnv: "true", stage: pinned,
			owner: one(ch(metrics.ReasonKillSwitch)), cons: one(ch(metrics.ReasonKillSwitch))},
		{name: "kill_switch by RDMAConfig.Disabled", ownerReg: true, consReg: true, consUCX: true, stage: pinned,
			ownerOpts: []velo.Option{velo.WithRDMA(velo.RDMAConfig{Disabled: true})},
			owner:     one(ch(metrics.ReasonKillSwitch)), cons: one(ch(metrics.ReasonKillSwitch))},
		{name: "draining", ownerReg: true, consReg: true, consUCX: true, stage: pinned, before: func(o, _ node) { o.BeginDrain() },
			owner: one(ch(metrics.ReasonDraining)), cons: one(ch(metrics.ReasonDraining))},
		{name: "not_pinned", ownerReg: true, consReg: true, consUCX: true, stage: unpinned,
			owner: one(ch(metrics.ReasonNotPinned)), cons: one(ch(metrics.ReasonNotPinned))},
		{name: "budget: no room for an arena", ownerReg: true, consReg: true, consUCX: true, stage: pinned,
			ownerOpts: []velo.Option{velo.WithRDMA(velo.RDMAConfig{Pool: velo.RDMAPoolConfig{ArenaSize: 1 << 20, RegisteredBytesBudget: 2 << 20}})},
			owner:     one(ch(metrics.ReasonBudget)), cons: one(ch(metrics.ReasonBudget))},
		{name: "budget: no room for the lease's registration", ownerReg: true, consReg: true, consUCX: true, stage: pinned,
			ownerOpts: []velo.Option{velo.WithRDMA(velo.RDMAConfig{Pool: velo.RDMAPoolConfig{ArenaSize: 4 << 20, RegisteredBytesBudget: 6 << 20}})},
			owner:     one(ch(metrics.ReasonBudget)), cons: one(ch(metrics.ReasonBudget))},
		{name: "get_failed: UCX refuses a forged key", ownerReg: true, consReg: true, consUCX: true, stage: pinned,
			before: func(_, c node) { c.ucx.setForge() },
			owner:  map[rdmatest.Pair]float64{ok: 1, ch(metrics.ReasonNoOffer): 1}, cons: one(ch(metrics.ReasonGetFailed))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(velo.RDMAKillSwitchEnv, c.ownerEnv)
			owner := startNode(t, c.ownerReg, c.ownerOpts...)
			t.Setenv(velo.RDMAKillSwitchEnv, c.consEnv)
			cons := startNode(t, c.consReg)
			t.Setenv(velo.RDMAKillSwitchEnv, "")
			link(t, owner, cons, c.consUCX)
			if c.before != nil {
				c.before(owner, cons)
			}
			h := c.stage(t, owner)
			ctx := tctx(t)
			l, err := cons.Get(ctx, h)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(l.Bytes(), data) {
				t.Fatal("payload differs")
			}
			rdmatest.ExpectPaths(t, "owner", owner.Metrics(), c.owner)
			rdmatest.ExpectPaths(t, "consumer", cons.Metrics(), c.cons)
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			// The release is answered after the owner ended the lease, so its key is revoked by now.
			// The slot itself is freed once the owner's last chunk write has returned, which can be
			// a moment after the consumer read it.
			if st := owner.RDMAStats(); st.LeaseRegistrations != 0 {
				t.Fatalf("after release the owner holds %+v", st)
			}
			eventually(t, "the owner to free the slot", func() bool { return owner.RDMAStats().Slots == 0 })
		})
	}
}

// TestTransparentStagingOverUCX: a large message uses pinned memory once an arena is mapped,
// and not before (pool_exhausted on both sides).
func TestTransparentStagingOverUCX(t *testing.T) {
	sender, recv := startNode(t, true), startNode(t, true)
	link(t, sender, recv, true)
	link(t, recv, sender, true)
	big := randomBytes(2<<20, 2)
	got := make(chan []byte, 1)
	recv.RegisterHandler("big", func(ctx context.Context, m *velo.Message) ([]byte, error) {
		got <- append([]byte(nil), m.Payload...)
		return nil, nil
	})
	ctx := tctx(t)
	send := func() {
		t.Helper()
		if _, err := sender.Request(ctx, recv.ID(), "big", big); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(<-got, big) {
			t.Fatal("payload differs")
		}
	}
	send()
	for who, v := range map[string]*velo.Velo{"sender": sender.Velo, "receiver": recv.Velo} {
		if n := pathCount(t, v, metrics.PathChunked, metrics.ReasonPoolExhausted); n != 1 {
			t.Fatalf("%s chunked/pool_exhausted = %v before any arena", who, n)
		}
	}
	keep, err := sender.StageDataPinned(ctx, []byte("maps the first arena"))
	if err != nil {
		t.Fatal(err)
	}
	send()
	for who, v := range map[string]*velo.Velo{"sender": sender.Velo, "receiver": recv.Velo} {
		if n := pathCount(t, v, metrics.PathRDMA, metrics.ReasonOK); n != 1 {
			t.Fatalf("%s rdma/ok = %v once an arena is mapped", who, n)
		}
	}
	if err := sender.Unref(ctx, keep); err != nil {
		t.Fatal(err)
	}
}

// TestGetPinnedOverUCX fetches into the consumer's pinned memory by GET.
func TestGetPinnedOverUCX(t *testing.T) {
	owner, cons := startNode(t, true), startNode(t, true)
	link(t, owner, cons, true)
	ctx := tctx(t)
	data := randomBytes(8<<20, 3)
	h, err := owner.StageDataPinned(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	pl, err := cons.GetPinned(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	if pl.Path != metrics.PathRDMA || !bytes.Equal(pl.Bytes(), data) {
		t.Fatalf("GetPinned: path %s/%s, payload equal %v", pl.Path, pl.Reason, bytes.Equal(pl.Bytes(), data))
	}
	if st := cons.RDMAStats(); st.Slots != 1 {
		t.Fatalf("the consumer's pinned memory: %+v", st)
	}
	if err := pl.Release(ctx); err != nil {
		t.Fatal(err)
	}
	pl.Free()
	if st := cons.RDMAStats(); st.Slots != 0 {
		t.Fatalf("after Free: %+v", st)
	}
}

// TestDirectGetOverUCX: a consumer configured for ucxtransport.RMADirect reads a pinned payload with
// ucp_get_nbx even over tcp, where RMAAuto would take the guarded GET. This is the GET the
// RDMA path makes on InfiniBand (RC/DC lanes pick it on their own), so the whole path — per-lease
// registration, descriptor, sealed key, the GET, the detach that revokes the key — runs here as
// it runs there, short of the NIC. The owner's engine counts no guarded request, which shows the
// GET really went around the guard; payloads are checked byte for byte.
func TestDirectGetOverUCX(t *testing.T) {
	if g, refused := softwareGuard(t); refused {
		t.Skipf("the linked UCX (%s) refuses ucp_get_nbx over tcp, a software GET: TestDirectGetIsRefusedByTheGuard checks that; make test-rendezvous-rdma runs this test on the system UCX too", g.Version)
	}
	ownerReg := prometheus.NewRegistry()
	owner := startNodeWith(t, ucxtransport.Config{Metrics: ownerReg}, true)
	cons := startNodeWith(t, ucxtransport.Config{RMA: ucxtransport.RMADirect}, true)
	link(t, owner, cons, true)
	ctx := tctx(t)
	for i, n := range []int{1, 4096 + 1, 8 << 20} {
		data := randomBytes(n, uint64(40+i))
		h, err := owner.StageDataPinned(ctx, data)
		if err != nil {
			t.Fatal(err)
		}
		dst := make([]byte, n)
		l, err := cons.GetInto(ctx, h, dst)
		if err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		if l.Path != metrics.PathRDMA || l.Reason != metrics.ReasonOK || !bytes.Equal(dst, data) {
			t.Fatalf("%d bytes: path %s/%s, payload equal %v", n, l.Path, l.Reason, bytes.Equal(dst, data))
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := pathCount(t, cons.Velo, metrics.PathRDMA, metrics.ReasonOK); got != 3 {
		t.Fatalf("the consumer counted %v rdma/ok gets, want 3", got)
	}
	var guarded float64
	for _, outcome := range []string{"served", "refused"} {
		x, err := metrics.Value(ownerReg, "ucx_engine_guarded_get_requests_total", map[string]string{"outcome": outcome})
		if err != nil {
			t.Fatal(err)
		}
		guarded += x
	}
	if guarded != 0 {
		t.Fatalf("the owner's engine answered %v guarded GET requests: the consumer did not read directly", guarded)
	}
	// The same owner still serves a consumer that keeps the default (guarded over tcp), and then
	// its engine does count the request, so the zero above was not a metric that never moves.
	plain := startNode(t, true)
	link(t, owner, plain, true)
	data := randomBytes(1<<20, 50)
	h, err := owner.StageDataPinned(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, len(data))
	l, err := plain.GetInto(ctx, h, dst)
	if err != nil || l.Path != metrics.PathRDMA || !bytes.Equal(dst, data) {
		t.Fatalf("guarded get: %v, path %s/%s", err, l.Path, l.Reason)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	x, err := metrics.Value(ownerReg, "ucx_engine_guarded_get_requests_total", map[string]string{"outcome": "served"})
	if err != nil || x < 1 {
		t.Fatalf("after a guarded get the owner's engine counts %v served requests (%v)", x, err)
	}
}

// TestRMAModeIsValidated: a value outside the ucxtransport.RMAMode constants is refused by ucxtransport.New with an
// error that names the field and the valid values.
func TestRMAModeIsValidated(t *testing.T) {
	_, err := ucxtransport.New(ucxtransport.Config{RMA: ucxtransport.RMAMode(7)})
	if err == nil || !strings.Contains(err.Error(), "Config.RMA") || !strings.Contains(err.Error(), "RMADirect") {
		t.Fatalf("ucxtransport.New with RMA 7: %v", err)
	}
}
