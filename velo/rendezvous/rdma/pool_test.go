package rdma

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/verbs"
	"github.com/velo-go/velo/verbs/verbstest"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func testPool(t *testing.T, cfg PoolConfig) *pool {
	t.Helper()
	cfg, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	g, _ := newGauges(nil)
	p := newPool(cfg, quiet(), g)
	t.Cleanup(func() {
		p.close()
		if st := p.stats(); st.pinned != 0 || st.arenas != 0 {
			t.Errorf("after close: %d arenas, %d bytes pinned", st.arenas, st.pinned)
		}
	})
	return p
}

func mustAlloc(t *testing.T, p *pool, n int, mayMap bool) *Slot {
	t.Helper()
	s, reason, err := p.alloc(n, mayMap)
	if err != nil {
		t.Fatalf("alloc(%d): %v (reason %s)", n, err, reason)
	}
	return s
}

func TestSlotsArePageAlignedAndOwnTheirPages(t *testing.T) {
	p := testPool(t, PoolConfig{ArenaSize: 16 * pageSize})
	a := mustAlloc(t, p, 100, true)
	b := mustAlloc(t, p, pageSize+1, true)
	for _, s := range []*Slot{a, b} {
		r := s.PinnedRegion()
		if addr := uintptrOf(r); addr%uintptr(pageSize) != 0 || len(r)%pageSize != 0 {
			t.Fatalf("slot region at %#x, %d bytes: not whole pages", addr, len(r))
		}
		if len(s.Bytes()) != s.n || cap(s.Bytes()) != s.n {
			t.Fatalf("Bytes is %d/%d bytes for a %d-byte slot", len(s.Bytes()), cap(s.Bytes()), s.n)
		}
	}
	if uintptrOf(a.PinnedRegion())+uintptr(len(a.PinnedRegion())) > uintptrOf(b.PinnedRegion()) {
		t.Fatal("slots overlap")
	}
	// A freed slot's bytes never show through the padding of the next one in the same pages.
	copy(a.PinnedRegion(), bytes.Repeat([]byte{0xAB}, len(a.PinnedRegion())))
	p.free(a)
	c := mustAlloc(t, p, 10, false)
	if c.start != a.start {
		t.Fatalf("the freed pages were not reused first (start %d, freed %d)", c.start, a.start)
	}
	if !bytes.Equal(c.PinnedRegion()[10:], make([]byte, len(c.PinnedRegion())-10)) {
		t.Fatal("the padding after a reused slot still holds the previous payload's bytes")
	}
	p.free(b)
	p.free(c)
	p.free(c) // idempotent
	if st := p.stats(); st.slots != 0 {
		t.Fatalf("%d slots outstanding", st.slots)
	}
}

func TestFreeRunsCoalesce(t *testing.T) {
	p := testPool(t, PoolConfig{ArenaSize: 8 * pageSize})
	var s []*Slot
	for i := 0; i < 8; i++ {
		s = append(s, mustAlloc(t, p, pageSize, true))
	}
	if st := p.stats(); st.arenas != 1 {
		t.Fatalf("%d arenas for 8 one-page slots in an 8-page arena", st.arenas)
	}
	for _, i := range []int{1, 3, 2, 0, 6, 4, 7, 5} {
		p.free(s[i])
	}
	a := p.arenas[0]
	if len(a.free) != 1 || a.free[0] != (pageRun{0, 8}) {
		t.Fatalf("free runs %v, want one run of 8 pages", a.free)
	}
	whole := mustAlloc(t, p, 8*pageSize, false)
	p.free(whole)
}

func TestTransparentStagingNeverMapsAnArena(t *testing.T) {
	p := testPool(t, PoolConfig{ArenaSize: 4 * pageSize})
	_, reason, err := p.alloc(100, false)
	if reason != metrics.ReasonPoolExhausted || !errors.Is(err, ErrPoolExhausted) || !strings.Contains(err.Error(), "StageDataPinned") {
		t.Fatalf("no arena mapped: reason %q, err %v", reason, err)
	}
	if st := p.stats(); st.arenas != 0 {
		t.Fatal("a stager that may not map mapped an arena")
	}
	first := mustAlloc(t, p, 3*pageSize, true)
	small := mustAlloc(t, p, 100, false) // fits the last page
	if _, reason, err := p.alloc(100, false); reason != metrics.ReasonPoolExhausted || !errors.Is(err, ErrPoolExhausted) {
		t.Fatalf("full arena: reason %q, err %v", reason, err)
	}
	p.free(first)
	p.free(small)
}

func TestBudget(t *testing.T) {
	p := testPool(t, PoolConfig{ArenaSize: 4 * pageSize, RegisteredBytesBudget: int64(6 * pageSize)})
	s := mustAlloc(t, p, 4*pageSize, true) // fills the first arena: 4 pages pinned
	_, reason, err := p.alloc(10, true)    // a second arena would pin 8 pages
	if reason != metrics.ReasonBudget || !errors.Is(err, ErrBudget) || !strings.Contains(err.Error(), "RegisteredBytesBudget") {
		t.Fatalf("over budget: reason %q, err %v", reason, err)
	}
	// Lease registrations count too.
	if err := p.reserve(2 * pageSize); err != nil {
		t.Fatal(err)
	}
	if err := p.reserve(1); !errors.Is(err, ErrBudget) {
		t.Fatalf("reserve past the budget: %v", err)
	}
	p.unreserve(2 * pageSize)
	p.free(s)
}

func TestOversizedPayloadGetsItsOwnArenaUnmappedOnFree(t *testing.T) {
	p := testPool(t, PoolConfig{ArenaSize: 4 * pageSize})
	s := mustAlloc(t, p, 10*pageSize+5, true)
	st := p.stats()
	if st.arenas != 1 || st.arenaBytes != int64(11*pageSize) {
		t.Fatalf("dedicated arena: %+v", st)
	}
	if _, _, err := p.alloc(10*pageSize, false); !errors.Is(err, ErrPoolExhausted) {
		t.Fatalf("the transparent stager got an oversized slot: %v", err)
	}
	p.free(s)
	if st := p.stats(); st.arenas != 0 || st.pinned != 0 {
		t.Fatalf("after freeing the oversized slot: %+v", st)
	}
}

func TestReclaimKeepsTheLastPooledArena(t *testing.T) {
	p := testPool(t, PoolConfig{ArenaSize: 2 * pageSize, ArenaReclaimAfter: time.Minute})
	a := mustAlloc(t, p, 2*pageSize, true)
	b := mustAlloc(t, p, 2*pageSize, true)
	c := mustAlloc(t, p, 2*pageSize, true)
	p.free(a)
	p.free(c)
	now := time.Now()
	if n := p.reclaim(now); n != 0 {
		t.Fatalf("reclaimed %d arenas idle for less than ArenaReclaimAfter", n)
	}
	if n := p.reclaim(now.Add(2 * time.Minute)); n != 1 {
		t.Fatalf("reclaimed %d arenas, want 1 (the newest idle one; the oldest is kept)", n)
	}
	p.free(b)
	if n := p.reclaim(now.Add(4 * time.Minute)); n != 1 {
		t.Fatalf("reclaimed %d, want the middle arena", n)
	}
	if st := p.stats(); st.arenas != 1 {
		t.Fatalf("%d arenas left, want the floor of one", st.arenas)
	}
}

func TestCloseWaitsForOutstandingSlots(t *testing.T) {
	p := testPool(t, PoolConfig{ArenaSize: 2 * pageSize})
	s := mustAlloc(t, p, 10, true)
	s.Bytes()[0] = 1
	if n := p.close(); n != 1 {
		t.Fatalf("close reported %d outstanding slots", n)
	}
	if st := p.stats(); st.arenas != 1 {
		t.Fatal("close unmapped an arena that a caller still uses")
	}
	s.Bytes()[1] = 2 // still mapped
	if _, _, err := p.alloc(10, true); !errors.Is(err, ErrClosed) {
		t.Fatalf("alloc after close: %v", err)
	}
	p.free(s)
	if st := p.stats(); st.arenas != 0 || st.pinned != 0 {
		t.Fatalf("after the last free: %+v", st)
	}
}

func TestPoolConfigValidation(t *testing.T) {
	for _, c := range []PoolConfig{{ArenaSize: -1}, {RegisteredBytesBudget: -1}, {ArenaReclaimAfter: -time.Second}} {
		if _, err := c.withDefaults(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	c, _ := PoolConfig{ArenaSize: 1}.withDefaults()
	if c.ArenaSize != pageSize || c.RegisteredBytesBudget != DefaultRegisteredBytesBudget {
		t.Fatalf("defaults: %+v", c)
	}
}

func TestAffirmative(t *testing.T) {
	for _, s := range []string{"1", "true", "TRUE", "Yes", "on", " ON "} {
		if !Affirmative(s) {
			t.Errorf("%q should switch on", s)
		}
	}
	for _, s := range []string{"", "0", "false", "no", "off", "2", "enable", "y"} {
		if Affirmative(s) {
			t.Errorf("%q should not switch on", s)
		}
	}
}

// TestArenaAboveMemlockLimit maps an arena in a child process that has no CAP_IPC_LOCK and an
// 8 MiB RLIMIT_MEMLOCK (root here holds the capability, which would lift the limit): the map
// fails with an error that names the limit and the fix, and the pool pins nothing.
func TestArenaAboveMemlockLimit(t *testing.T) {
	if verbstest.InChild() {
		m, err := verbs.ReadMemlock()
		if err != nil {
			t.Fatal(err)
		}
		if m.Bypassed() || m.Soft != 8<<20 {
			t.Fatalf("the child is not constrained: %+v", m)
		}
		p := testPool(t, PoolConfig{ArenaSize: 32 << 20})
		_, reason, err := p.alloc(1<<20, true)
		t.Logf("error: %v", err)
		if reason != metrics.ReasonPoolExhausted || !errors.Is(err, ErrMemlock) || !errors.Is(err, ErrArenaMap) || !errors.Is(err, verbs.ErrMemlock) {
			t.Fatalf("reason %q, err %v", reason, err)
		}
		for _, want := range []string{"8 MiB", "ulimit -l unlimited", "IPC_LOCK"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the error does not say %q", want)
			}
		}
		if st := p.stats(); st.pinned != 0 || st.arenas != 0 || st.lastFail == nil {
			t.Fatalf("after the failed map: %+v", st)
		}
		// An arena under the limit still maps.
		small := testPool(t, PoolConfig{ArenaSize: 1 << 20})
		s := mustAlloc(t, small, 100, true)
		small.free(s)
		return
	}
	verbstest.RunTest(t, verbstest.Constraints{MemlockSoft: 8 << 20})
}
