package rdmapath_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/rendezvous/rdma"
	"github.com/velo-go/velo/velo/rendezvous/rdma/rdmatest"
	"github.com/velo-go/velo/verbs"
	"github.com/velo-go/velo/verbs/verbstest"
)

// TestArenaAboveMemlockFallsBackToChunked runs in a child process with an 8 MiB RLIMIT_MEMLOCK
// and without CAP_IPC_LOCK (root holds the capability, and it lifts the limit: without dropping
// it the test would prove nothing). The owner's first 64 MiB arena cannot be locked: it logs an
// error that names the limit and the fix, stages in plain memory, and the transfer takes the
// chunked path with reason pool_exhausted on both sides.
func TestArenaAboveMemlockFallsBackToChunked(t *testing.T) {
	if !verbstest.InChild() {
		verbstest.RunTest(t, verbstest.Constraints{MemlockSoft: 8 << 20})
		return
	}
	m, err := verbs.ReadMemlock()
	if err != nil {
		t.Fatal(err)
	}
	if m.Bypassed() || m.Soft != 8<<20 {
		t.Fatalf("the child is not constrained: %+v", m)
	}
	owner, cons := startNode(t, true), startNode(t, true)
	link(t, owner, cons, true)
	ctx := tctx(t)
	data := randomBytes(4<<20, 6)
	h, err := owner.StageDataPinned(ctx, data)
	if err != nil {
		t.Fatalf("StageDataPinned must not fail for want of pinned memory: %v", err)
	}
	st := owner.RDMAStats()
	if st.Arenas != 0 || st.PinnedBytes != 0 || !errors.Is(st.LastArenaError, rdma.ErrMemlock) {
		t.Fatalf("after the failed arena: %+v", st)
	}
	for _, want := range []string{"RLIMIT_MEMLOCK", "soft limit 8 MiB", "ulimit -l unlimited", "IPC_LOCK"} {
		if !strings.Contains(owner.logs.String(), want) {
			t.Errorf("the owner's log does not say %q:\n%s", want, owner.logs.String())
		}
	}
	l, err := cons.Get(ctx, h)
	if err != nil || !bytes.Equal(l.Bytes(), data) {
		t.Fatalf("get: %v", err)
	}
	want := map[rdmatest.Pair]float64{pr(metrics.PathChunked, metrics.ReasonPoolExhausted): 1}
	rdmatest.ExpectPaths(t, "owner", owner.Metrics(), want)
	rdmatest.ExpectPaths(t, "consumer", cons.Metrics(), want)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
