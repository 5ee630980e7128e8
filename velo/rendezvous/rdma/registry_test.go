package rdma_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/rendezvous"
	"github.com/velo-go/velo/velo/rendezvous/rdma"
	"github.com/velo-go/velo/velo/rendezvous/rdma/rdmatest"
)

func newRegistry(t *testing.T, cfg rdma.Config, reg ...prometheus.Registerer) (*rdma.Registry, *rdmatest.Transport) {
	t.Helper()
	var r0 prometheus.Registerer
	if len(reg) > 0 {
		r0 = reg[0]
	}
	rt, err := rdmatest.NewFabric().New("ucx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	r, err := rdma.New(rt, cfg, rdma.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: r0})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.Close()
		if st := r.Stats(); st.PinnedBytes != 0 || st.Arenas != 0 || rt.LiveRegistrations() != 0 {
			t.Errorf("after Close: %+v, %d live registrations", st, rt.LiveRegistrations())
		}
	})
	return r, rt
}

func pinnedSlot(t *testing.T, r *rdma.Registry, n int) rendezvous.Slot {
	t.Helper()
	mem, opts := r.Pin(n, true)
	if mem == nil {
		t.Fatalf("Pin: %s", opts.Reason)
	}
	t.Cleanup(opts.OnFree)
	return rendezvous.Slot{ID: 1, Data: mem, Opts: opts, Lease: rendezvous.LeaseInfo{ID: 1}}
}

func TestServeRegistersExactlyTheSlot(t *testing.T) {
	g := prometheus.NewRegistry()
	r, rt := newRegistry(t, rdma.Config{}, g)
	gauge := func(name string) float64 {
		v, err := metrics.Value(g, name, nil)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	sl := pinnedSlot(t, r, 10_000)
	page := os.Getpagesize()
	region := (10_000 + page - 1) / page * page
	offer, _ := r.Consumer().Offer(0)
	desc, end, reason, err := r.Owner().Serve(context.Background(), sl, offer)
	if err != nil || reason != metrics.ReasonOK {
		t.Fatalf("Serve: %v %s", err, reason)
	}
	if len(desc) == 0 || rt.LiveRegistrations() != 1 {
		t.Fatalf("descriptor %x, %d registrations", desc, rt.LiveRegistrations())
	}
	st := r.Stats()
	if st.LeaseRegistrations != 1 || st.LeaseBytes != int64(region) || st.PinnedBytes != st.ArenaBytes+st.LeaseBytes {
		t.Fatalf("stats while serving: %+v (the registration covers the slot's whole pages, %d bytes)", st, region)
	}
	if gauge(rdma.LeaseRegistrationsGauge) != 1 || gauge(rdma.LeaseBytesGauge) != float64(region) || gauge(rdma.ArenasGauge) != 1 || gauge(rdma.ArenaBytesGauge) != rdma.DefaultArenaSize {
		t.Fatal("the gauges do not show the arena and the registration")
	}
	end()
	end() // a second end is harmless
	if rt.LiveRegistrations() != 0 || r.Stats().LeaseRegistrations != 0 || rt.Deregistrations.Load() != 1 {
		t.Fatal("the lease's registration was not revoked exactly once")
	}
	if gauge(rdma.LeaseRegistrationsGauge) != 0 || gauge(rdma.LeaseBytesGauge) != 0 {
		t.Fatal("the registration gauges did not return to 0")
	}
}

func TestServeRefusals(t *testing.T) {
	r, _ := newRegistry(t, rdma.Config{})
	sl := pinnedSlot(t, r, 100)
	// {1} is what a consumer of the release before the opaque key offers: answered by chunks.
	for _, bad := range [][]byte{{9}, {1}, nil} {
		if _, _, reason, err := r.Owner().Serve(context.Background(), sl, bad); reason != metrics.ReasonDecodeError || !errors.Is(err, rdma.ErrDescriptor) {
			t.Fatalf("offer %x: %s %v", bad, reason, err)
		}
	}
	offer, _ := r.Consumer().Offer(0)
	other, _ := newRegistry(t, rdma.Config{})
	foreign := pinnedSlot(t, other, 100)
	if _, _, reason, err := r.Owner().Serve(context.Background(), foreign, offer); reason != metrics.ReasonNotPinned || err == nil {
		t.Fatalf("another registry's slot: %s %v", reason, err)
	}
}

func TestCloseRevokesLiveRegistrations(t *testing.T) {
	r, rt := newRegistry(t, rdma.Config{})
	sl := pinnedSlot(t, r, 100)
	offer, _ := r.Consumer().Offer(0)
	if _, _, _, err := r.Owner().Serve(context.Background(), sl, offer); err != nil {
		t.Fatal(err)
	}
	r.Close()
	if rt.LiveRegistrations() != 0 {
		t.Fatal("Close left a registration")
	}
	if _, _, reason, err := r.Owner().Serve(context.Background(), sl, offer); err == nil || reason == metrics.ReasonOK {
		t.Fatal("Serve after Close")
	}
}

func TestKillSwitchPinsNothing(t *testing.T) {
	for _, cfg := range []struct {
		c   rdma.Config
		env bool
	}{{rdma.Config{Disabled: true}, false}, {rdma.Config{}, true}} {
		rt, _ := rdmatest.NewFabric().New("ucx")
		r, err := rdma.New(rt, cfg.c, rdma.Options{KillSwitch: cfg.env, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		mem, opts := r.Pin(100, true)
		if mem != nil || opts.Reason != metrics.ReasonKillSwitch || !r.KillSwitch() || r.Stats().Arenas != 0 {
			t.Fatalf("kill switch: %v %+v", mem != nil, opts)
		}
		r.Close()
		rt.Close()
	}
}

func TestReclaimerUnmapsIdleArenas(t *testing.T) {
	r, _ := newRegistry(t, rdma.Config{Pool: rdma.PoolConfig{ArenaSize: 1 << 20, ArenaReclaimAfter: 20 * time.Millisecond}})
	var frees []func()
	for i := 0; i < 3; i++ {
		mem, opts := r.Pin(1<<20, true)
		if mem == nil {
			t.Fatal(opts.Reason)
		}
		frees = append(frees, opts.OnFree)
	}
	if r.Stats().Arenas != 3 {
		t.Fatalf("%d arenas", r.Stats().Arenas)
	}
	for _, f := range frees {
		f()
	}
	deadline := time.Now().Add(time.Minute)
	for r.Stats().Arenas != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("idle arenas not reclaimed: %+v", r.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
}
