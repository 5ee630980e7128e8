package velo

// ReleaseLeases and DetachLeases: the leases of a batch end in one message per owner part, each
// lease fails alone, and an owner of an earlier release still sees every lease end.

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/messenger"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/rendezvous/rdma/rdmatest"
)

// handlerCount is how many requests v's handler name answered with outcome ok.
func handlerCount(t *testing.T, v *Velo, name string) float64 {
	t.Helper()
	n, err := metrics.Value(v.Metrics(), metrics.HandlerRequestsTotal, map[string]string{"handler": name, "outcome": "ok"})
	require.NoError(t, err)
	return n
}

// batchLeases fetches hs on cons with one GetBatch and returns the leases.
func batchLeases(t *testing.T, cons *Velo, hs []Handle) []*Lease {
	t.Helper()
	reqs := make([]GetRequest, len(hs))
	for i, h := range hs {
		reqs[i] = GetRequest{Handle: h}
	}
	leases := make([]*Lease, len(hs))
	for i, r := range cons.GetBatch(tctx(t), reqs, nil) {
		require.NoError(t, r.Err, "entry %d", i)
		leases[i] = r.Lease
	}
	return leases
}

// TestReleaseLeasesEndsABatch: the leases of a GetBatch from two owners and from the consumer
// itself end in one call; every payload is freed where it was staged, and an owner answers one
// end-batch message per wire.MaxEndBatch of its leases instead of one release per lease.
func TestReleaseLeasesEndsABatch(t *testing.T) {
	f := rdmatest.NewFabric()
	a, b, cons := rdmaNode(t, f, true), rdmaNode(t, f, true), rdmaNode(t, f, true)
	link(t, a, cons, true)
	link(t, b, cons, true)
	hsA, _ := stageBlocks(t, a.Velo, wire.MaxEndBatch+100, 64, 1)
	hsB, _ := stageBlocks(t, b.Velo, 10, 64, 2)
	hsC, _ := stageBlocks(t, cons.Velo, 5, 64, 3)
	leases := batchLeases(t, cons.Velo, append(append(append([]Handle(nil), hsA...), hsB...), hsC...))

	for i, err := range cons.ReleaseLeases(tctx(t), leases) {
		require.NoError(t, err, "lease %d", i)
	}
	for _, n := range []rnode{a, b, cons} {
		slots, open := n.StagedCounts()
		assert.Zero(t, slots, "a released payload is still staged")
		assert.Zero(t, open, "a lease is still open")
	}
	assert.Equal(t, 2.0, handlerCount(t, a.Velo, opName("rv.end_batch")), "4196 leases: two messages")
	assert.Equal(t, 1.0, handlerCount(t, b.Velo, opName("rv.end_batch")))
	assert.Zero(t, handlerCount(t, a.Velo, opName("rv.release")), "no lease ended alone")

	// Ending them again: each fails alone, and says why.
	for _, err := range cons.DetachLeases(tctx(t), leases[:3]) {
		assert.ErrorIs(t, err, ErrBadLease)
		assert.Contains(t, err.Error(), "already ended")
	}
}

// TestDetachLeasesBadEntries: detached payloads stay staged for another Get; a nil entry, a
// lease listed twice and a lease of another instance fail alone while the others end; a lease
// the owner already reaped, released in a batch, still spends its handle's reference.
func TestDetachLeasesBadEntries(t *testing.T) {
	owner, cons := batchPair(t, WithLeaseTTL(2*time.Second))
	other := rdmaNode(t, rdmatest.NewFabric(), true)
	hs, data := stageBlocks(t, owner.Velo, 6, 4096, 7)
	leases := batchLeases(t, cons.Velo, hs[:4])
	foreignOther := batchLeases(t, other.Velo, mustStage(t, other.Velo, 1))[0]

	errs := cons.DetachLeases(tctx(t), []*Lease{leases[0], nil, leases[1], leases[0], foreignOther, leases[2], leases[3]})
	require.Len(t, errs, 7)
	assert.NoError(t, errs[0])
	assert.ErrorIs(t, errs[1], ErrBadLease, "a nil entry")
	assert.NoError(t, errs[2])
	assert.ErrorIs(t, errs[3], ErrBadLease, "the same lease twice")
	assert.ErrorIs(t, errs[4], ErrBadLease, "a lease of another instance")
	assert.Contains(t, errs[4].Error(), "another instance")
	assert.NoError(t, errs[5])
	assert.NoError(t, errs[6])
	require.NoError(t, foreignOther.Release(tctx(t)), "the other instance's lease is untouched")
	slots, open := owner.StagedCounts()
	assert.Equal(t, 6, slots, "detached payloads stay staged")
	assert.Zero(t, open)
	again := batchLeases(t, cons.Velo, hs[:4])
	for i, l := range again {
		assert.Equal(t, data[i], l.Bytes(), "fetched again after the detach")
	}

	// Let the owner's reaper end all four, then release them in one batch: each still gives its
	// handle's reference back.
	require.Eventually(t, func() bool { _, open := owner.StagedCounts(); return open == 0 }, 10*time.Second, 10*time.Millisecond)
	for i, err := range cons.ReleaseLeases(tctx(t), again) {
		assert.NoError(t, err, "lease %d: a reaped lease's release spends the handle's reference", i)
	}
	slots, _ = owner.StagedCounts()
	assert.Equal(t, 2, slots, "only the two payloads never fetched stay staged")
}

// opName is the messenger name of the rendezvous protocol message op.
func opName(op string) string { return messenger.InternalPrefix + op }

// mustStage stages n payloads of 64 bytes on v.
func mustStage(t *testing.T, v *Velo, n int) []Handle {
	hs, _ := stageBlocks(t, v, n, 64, 99)
	return hs
}

// TestEndLeasesToAnOlderOwner: an owner without the end-batch message (an earlier release) gets
// one release per lease, and every lease ends.
func TestEndLeasesToAnOlderOwner(t *testing.T) {
	owner, cons := batchPair(t)
	owner.msgr.HandleInternal(opName("rv.end_batch"), nil)
	hs, _ := stageBlocks(t, owner.Velo, 40, 64, 5)
	for i, err := range cons.ReleaseLeases(tctx(t), batchLeases(t, cons.Velo, hs)) {
		require.NoError(t, err, "lease %d", i)
	}
	slots, open := owner.StagedCounts()
	assert.Zero(t, slots)
	assert.Zero(t, open)
	assert.Equal(t, 40.0, handlerCount(t, owner.Velo, opName("rv.release")), "one release per lease")
}
