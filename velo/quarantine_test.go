package velo

// A consumer that stalls mid-GET (SIGSTOP, a debugger, a frozen VM) holds a read of the owner's
// pinned memory after its lease ended. These tests play that with the in-process RMA's DuringGet
// hook (the same cases run over real UCX with real stopped processes in module test, package
// faults) and check the rule of docs/rendezvous-rdma.md: no page a key may still read is reused
// or unmapped, quarantined bytes stay counted, and everything comes back once the read ends.

import (
	"bytes"
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/rendezvous/rdma"
	"github.com/velo-go/velo/velo/rendezvous/rdma/rdmatest"
)

// stallFirstGet makes the first GET served by owner stop in flight until resume is closed or the
// owner force-closes the consumer. It returns a channel closed once that GET is in flight.
func stallFirstGet(owner rnode, resume <-chan struct{}) <-chan struct{} {
	var n atomic.Int32
	inFlight := make(chan struct{})
	owner.rt.DuringGet = func(ctx context.Context) {
		if n.Add(1) != 1 {
			return
		}
		close(inFlight)
		select {
		case <-resume:
		case <-ctx.Done():
		}
	}
	return inFlight
}

func gaugeValue(t *testing.T, v *Velo, name string) float64 {
	t.Helper()
	x, err := metrics.Value(v.Metrics(), name, nil)
	require.NoError(t, err)
	return x
}

// TestStalledConsumerKeepsMemoryUntilItsReadEnds is the crash of the stalled consumer: the lease
// ends under a stalled read (TTL), a second consumer fetches and releases the same payload, and
// only when the stalled read ends may the payload's dedicated arena be unmapped.
func TestStalledConsumerKeepsMemoryUntilItsReadEnds(t *testing.T) {
	f := rdmatest.NewFabric()
	owner := rdmaNode(t, f, true, WithLeaseTTL(200*time.Millisecond),
		WithRDMA(RDMAConfig{Pool: RDMAPoolConfig{ArenaSize: 1 << 20}, ForceCloseAfter: time.Hour}))
	stalled := rdmaNode(t, f, true)
	second := rdmaNode(t, f, true)
	link(t, owner, stalled, true)
	link(t, owner, second, true)

	data := payload(8<<20, 7) // above the arena size: a dedicated arena, unmapped when freed
	h, err := owner.StageDataPinned(tctx(t), data)
	require.NoError(t, err)
	start := owner.RDMAStats()
	require.Equal(t, 1, start.Arenas)

	resume := make(chan struct{})
	inFlight := stallFirstGet(owner, resume)
	type result struct {
		l   *Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := stalled.Get(context.Background(), h)
		got <- result{l, err}
	}()
	<-inFlight

	// The reaper ends the stalled lease; its key is revoked but the read is still in flight.
	require.Eventually(t, func() bool { return owner.RDMAStats().QuarantinedRegistrations == 1 }, 10*time.Second, 10*time.Millisecond,
		"the TTL reaper did not end the stalled lease")
	st := owner.RDMAStats()
	assert.Equal(t, 0, st.LeaseRegistrations)
	assert.Positive(t, st.QuarantinedBytes)
	assert.Equal(t, st.ArenaBytes+st.QuarantinedBytes, st.PinnedBytes, "quarantined bytes count against the budget")
	assert.Equal(t, float64(1), gaugeValue(t, owner.Velo, rdma.QuarantinedGauge))

	// A second consumer fetches and releases the last reference: the slot is freed, but its pages
	// stay mapped and out of use while the first read may still touch them.
	l2, err := second.Get(tctx(t), h)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(l2.Bytes(), data))
	require.NoError(t, l2.Release(tctx(t)))
	require.Eventually(t, func() bool { return owner.RDMAStats().HeldSlots == 1 }, 5*time.Second, 5*time.Millisecond)
	st = owner.RDMAStats()
	assert.Equal(t, 0, st.Slots)
	assert.Equal(t, 1, st.Arenas, "the arena of a slot a live key may read was unmapped")

	// The stalled consumer resumes: its read completes from memory that is still there, and then
	// everything comes back.
	close(resume)
	r := <-got
	if r.err == nil {
		assert.True(t, bytes.Equal(r.l.Bytes(), data), "the resumed read returned other bytes")
		_ = r.l.Release(tctx(t)) // its lease is gone; the owner refuses, nothing leaks either way
	}
	require.Eventually(t, func() bool {
		st := owner.RDMAStats()
		return st.QuarantinedRegistrations == 0 && st.HeldSlots == 0 && st.Arenas == 0 && st.PinnedBytes == 0
	}, 10*time.Second, 10*time.Millisecond, "memory not back after the stalled read ended: %+v", owner.RDMAStats())
	assert.Equal(t, float64(0), gaugeValue(t, owner.Velo, rdma.QuarantinedBytesGauge))
	assert.Equal(t, float64(0), gaugeValue(t, owner.Velo, rdma.ForcedClosesTotal))
}

// TestUnresponsiveConsumerIsForceClosed: a consumer that never resumes has its endpoints closed
// with force after ForceCloseAfter, which ends its read; the memory then comes back, and the
// consumer's get falls back to the chunked path with the right bytes.
func TestUnresponsiveConsumerIsForceClosed(t *testing.T) {
	f := rdmatest.NewFabric()
	owner := rdmaNode(t, f, true, WithLeaseTTL(200*time.Millisecond),
		WithRDMA(RDMAConfig{ForceCloseAfter: 300 * time.Millisecond}))
	cons := rdmaNode(t, f, true)
	link(t, owner, cons, true)
	data := payload(3<<20, 9)
	h, err := owner.StageDataPinned(tctx(t), data)
	require.NoError(t, err)
	arenaOnly := owner.RDMAStats().PinnedBytes

	inFlight := stallFirstGet(owner, nil) // resumes only when force-closed
	var wg sync.WaitGroup
	wg.Add(1)
	var l *Lease
	var gerr error
	go func() {
		defer wg.Done()
		l, gerr = cons.Get(context.Background(), h)
	}()
	<-inFlight
	begin := time.Now()
	require.Eventually(t, func() bool { return owner.rt.ForcedCloses.Load() >= 1 }, 10*time.Second, 10*time.Millisecond)
	assert.GreaterOrEqual(t, time.Since(begin), 300*time.Millisecond, "force-closed before the bound")
	wg.Wait()
	require.NoError(t, gerr)
	assert.True(t, bytes.Equal(l.Bytes(), data))
	assert.Equal(t, float64(1), pathCount(t, cons.Velo, metrics.PathChunked, metrics.ReasonGetFailed))
	require.NoError(t, l.Release(tctx(t)))
	require.Eventually(t, func() bool {
		st := owner.RDMAStats()
		return st.QuarantinedRegistrations == 0 && st.PinnedBytes == arenaOnly && st.Slots == 0
	}, 10*time.Second, 10*time.Millisecond, "%+v", owner.RDMAStats())
	assert.Equal(t, float64(1), gaugeValue(t, owner.Velo, rdma.ForcedClosesTotal))
}

// TestCloseUnderStalledRead: Close does not wait for a stalled consumer beyond its bound; closing
// the transport kills the key, and every byte is back when Close returns.
func TestCloseUnderStalledRead(t *testing.T) {
	f := rdmatest.NewFabric()
	owner := rdmaNode(t, f, true, WithRDMA(RDMAConfig{ForceCloseAfter: time.Hour}))
	cons := rdmaNode(t, f, true)
	link(t, owner, cons, true)
	h, err := owner.StageDataPinned(tctx(t), payload(2<<20, 3))
	require.NoError(t, err)
	inFlight := stallFirstGet(owner, nil)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if l, err := cons.Get(context.Background(), h); err == nil {
			_ = l.Release(context.Background())
		}
	}()
	<-inFlight
	begin := time.Now()
	require.NoError(t, owner.Close())
	assert.Less(t, time.Since(begin), 10*time.Second, "Close blocked on a stalled consumer")
	st := owner.RDMAStats()
	assert.Zero(t, st.PinnedBytes, "%+v", st)
	assert.Zero(t, st.QuarantinedRegistrations)
	assert.Zero(t, st.Arenas)
	<-done
}

// TestReleaseAfterTheLeaseExpired: a get slower than the lease TTL loses its lease to the reaper;
// releasing it afterwards still drops the handle's reference, so the payload does not stay staged
// on the owner until it closes.
func TestReleaseAfterTheLeaseExpired(t *testing.T) {
	f := rdmatest.NewFabric()
	owner := rdmaNode(t, f, true, WithLeaseTTL(150*time.Millisecond))
	cons := rdmaNode(t, f, true)
	link(t, owner, cons, true)
	data := payload(1<<20, 5)
	h, err := owner.StageDataPinned(tctx(t), data)
	require.NoError(t, err)
	// The GET stays in flight until the reaper has ended its lease, however late the reaper's
	// turn comes on a loaded machine (a fixed sleep past the TTL lost that race under -race in CI).
	owner.rt.DuringGet = func(ctx context.Context) {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		deadline := time.After(10 * time.Second)
		for {
			if _, leases := owner.StagedCounts(); leases == 0 {
				return
			}
			select {
			case <-tick.C:
			case <-deadline:
				return
			case <-ctx.Done():
				return
			}
		}
	}
	l, err := cons.Get(tctx(t), h)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(l.Bytes(), data))
	_, leases := owner.StagedCounts()
	require.Zero(t, leases, "the reaper did not end the slow lease; the test proves nothing")
	require.NoError(t, l.Release(tctx(t)))
	require.Eventually(t, func() bool {
		slots, _ := owner.StagedCounts()
		st := owner.RDMAStats()
		return slots == 0 && st.Slots == 0 && st.QuarantinedRegistrations == 0
	}, 5*time.Second, 5*time.Millisecond, "the payload stayed staged after its release")
}

// TestFailedSendFreesItsStagedPayload: a large message to a peer that just died is staged (in
// pinned memory once an arena is mapped) before the send; the send fails, and the staged payload
// must be freed then, not after the stage TTL, or a sender retrying to a dead peer fills the
// arena and the budget.
func TestFailedSendFreesItsStagedPayload(t *testing.T) {
	f := rdmatest.NewFabric()
	owner := rdmaNode(t, f, true, WithStagingTTL(time.Hour))
	dead := rdmaNode(t, f, true)
	link(t, owner, dead, true)
	// Map the pooled arena, so the transparent stager stages in pinned memory.
	h, err := owner.StageDataPinned(tctx(t), payload(4096, 1))
	require.NoError(t, err)
	require.NoError(t, owner.Unref(tctx(t), h))
	base := owner.RDMAStats()
	require.NoError(t, dead.Close())

	big := payload(300<<10, 2)
	for i := range 20 {
		var err error
		if i%2 == 0 {
			_, err = owner.Request(tctx(t), dead.ID(), "echo", big)
		} else {
			err = owner.Send(tctx(t), dead.ID(), "echo", big)
		}
		require.Error(t, err, "a send to a closed peer succeeded")
		slots, _ := owner.StagedCounts()
		require.Zero(t, slots, "send %d: the payload of a failed send stayed staged", i)
	}
	assert.Equal(t, base.Slots, owner.RDMAStats().Slots)
	assert.Equal(t, base.PinnedBytes, owner.RDMAStats().PinnedBytes)
	assert.Equal(t, float64(20), metricValue(t, owner.Velo, metrics.StagedMessagesTotal, map[string]string{"direction": "unstaged"}))
}

func metricValue(t *testing.T, v *Velo, name string, labels map[string]string) float64 {
	t.Helper()
	x, err := metrics.Value(v.Metrics(), name, labels)
	require.NoError(t, err)
	return x
}

// TestStalledReadOfARunHoldsTheRun: the blocks of one batch, staged one after another, are one
// registration (a run). One read of it stalls; the reaper ends every lease of the batch, and the
// run is quarantined whole: each of its slots stays out of use after its payload is released,
// until the stalled read ends.
func TestStalledReadOfARunHoldsTheRun(t *testing.T) {
	f := rdmatest.NewFabric()
	owner := rdmaNode(t, f, true, WithLeaseTTL(200*time.Millisecond), WithRDMA(RDMAConfig{ForceCloseAfter: time.Hour}))
	cons := rdmaNode(t, f, true)
	link(t, owner, cons, true)

	const blocks, size = 4, 64 << 10
	var reqs []GetRequest
	var data [][]byte
	for i := range blocks {
		d := payload(size, uint64(20+i))
		h, err := owner.StageDataPinned(tctx(t), d)
		require.NoError(t, err)
		reqs, data = append(reqs, GetRequest{Handle: h}), append(data, d)
	}
	resume := make(chan struct{})
	inFlight := stallFirstGet(owner, resume)
	got := make(chan []GetResult, 1)
	go func() { got <- cons.GetBatch(context.Background(), reqs, nil) }()
	<-inFlight
	assert.Equal(t, int64(1), owner.rt.Registrations.Load(), "the batch's four neighbouring blocks are one registration")

	require.Eventually(t, func() bool { return owner.RDMAStats().QuarantinedRegistrations == 1 }, 10*time.Second, 10*time.Millisecond,
		"the TTL reaper did not end the batch's leases")
	st := owner.RDMAStats()
	assert.Equal(t, 0, st.LeaseRegistrations)
	assert.Equal(t, int64(blocks*size), st.QuarantinedBytes, "the whole run is quarantined")

	// The owner releases every payload: the slots are freed, their pages held by the run.
	for _, q := range reqs {
		require.NoError(t, owner.Unref(tctx(t), q.Handle))
	}
	require.Eventually(t, func() bool { return owner.RDMAStats().HeldSlots == blocks }, 5*time.Second, 5*time.Millisecond,
		"held slots: %+v", owner.RDMAStats())
	assert.Equal(t, 0, owner.RDMAStats().Slots)

	close(resume)
	for i, r := range <-got {
		if r.Err == nil {
			assert.True(t, bytes.Equal(r.Lease.Bytes(), data[i]), "entry %d: the resumed read returned other bytes", i)
			_ = r.Lease.Release(tctx(t))
		}
	}
	require.Eventually(t, func() bool {
		st := owner.RDMAStats()
		return st.QuarantinedRegistrations == 0 && st.HeldSlots == 0 && st.LeaseRegistrations == 0
	}, 10*time.Second, 10*time.Millisecond, "memory not back after the stalled read ended: %+v", owner.RDMAStats())
}
