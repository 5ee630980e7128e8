package rdmapath_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo"
	"github.com/velo-go/velo/velo/metrics"
)

// TestGetBatchOverUCX: 2,000 blocks of 4 KiB and 100 of 64 KiB, one GetBatch, over the real UCX
// transport. A consumer with the defaults gets the 4 KiB blocks inside the acquires' answers
// (inline/ok) and the 64 KiB ones by the transport's many-read path (the engine's GetMany,
// rdma/ok); one that asks for no inline payloads gets every block by RDMA. Every block arrives
// whole, and once the leases are ended (DetachLeases, then ReleaseLeases: one call each) the owner
// holds no registration and no more pinned bytes than before the batch.
func TestGetBatchOverUCX(t *testing.T) {
	owner, cons, rdmaCons := startNode(t, true), startNode(t, true), startNode(t, true, velo.WithBatchInlineMax(0))
	link(t, owner, cons, true)
	link(t, owner, rdmaCons, true)
	ctx := tctx(t)
	var reqs []velo.GetRequest
	var want [][]byte
	for i := 0; i < 2100; i++ {
		size := 4 << 10
		if i >= 2000 {
			size = 64 << 10
		}
		b := randomBytes(size, uint64(i))
		h, err := owner.StageDataPinned(ctx, b)
		require.NoError(t, err)
		reqs = append(reqs, velo.GetRequest{Handle: h})
		want = append(want, b)
	}
	before := owner.RDMAStats()
	fetch := func(c node, inline int) []*velo.Lease {
		res := c.GetBatch(ctx, reqs, nil)
		leases := make([]*velo.Lease, len(res))
		for i, r := range res {
			require.NoError(t, r.Err, "entry %d", i)
			require.Equal(t, want[i], r.Lease.Bytes(), "entry %d", i)
			if int(r.Lease.Handle().Size) <= inline {
				assert.Equal(t, metrics.PathInline, r.Lease.Path, "entry %d", i)
			} else {
				assert.Equal(t, metrics.PathRDMA, r.Lease.Path, "entry %d", i)
			}
			leases[i] = r.Lease
		}
		return leases
	}
	leases := fetch(cons, velo.DefaultBatchInlineMax)
	assert.Equal(t, 2000.0, pathCount(t, cons.Velo, metrics.PathInline, metrics.ReasonOK))
	assert.Equal(t, 100.0, pathCount(t, cons.Velo, metrics.PathRDMA, metrics.ReasonOK))
	for i, err := range cons.DetachLeases(ctx, leases) {
		require.NoError(t, err, "lease %d", i)
	}
	leases = fetch(rdmaCons, 0)
	assert.Equal(t, float64(len(reqs)), pathCount(t, rdmaCons.Velo, metrics.PathRDMA, metrics.ReasonOK))
	for i, err := range rdmaCons.ReleaseLeases(ctx, leases) {
		require.NoError(t, err, "lease %d", i)
	}
	eventually(t, "every lease registration gone and the pinned bytes back where they were", func() bool {
		st := owner.RDMAStats()
		return st.LeaseRegistrations == 0 && st.QuarantinedRegistrations == 0 && st.PinnedBytes <= before.PinnedBytes
	})
}

// TestReadRangesOverUCX: the owner writes a region in place and stages it without a copy; the
// consumer reads 1,000 ranges of it with one lease (one key, registered once) over real UCX, and
// a range past the end fails alone.
func TestReadRangesOverUCX(t *testing.T) {
	owner, cons := startNode(t, true), startNode(t, true)
	link(t, owner, cons, true)
	ctx := tctx(t)
	g, err := owner.NewRegion(16 << 20)
	require.NoError(t, err)
	require.True(t, g.Pinned())
	copy(g.Bytes(), randomBytes(16<<20, 99))
	h, err := owner.StageRegion(ctx, g)
	require.NoError(t, err)
	l, err := cons.Acquire(ctx, h)
	require.NoError(t, err)
	require.Equal(t, metrics.PathRDMA, l.Path)
	ranges := make([]velo.Range, 1001)
	for i := 0; i < 1000; i++ {
		off := uint64(i) * 16 << 10
		ranges[i] = velo.Range{Offset: off, Length: 4096 + uint64(i), Dst: make([]byte, 4096+i)}
	}
	ranges[1000] = velo.Range{Offset: 16<<20 - 10, Length: 20, Dst: make([]byte, 20)}
	err = l.ReadRanges(ctx, ranges)
	require.Error(t, err)
	for i := 0; i < 1000; i++ {
		rg := ranges[i]
		require.NoError(t, rg.Err, "range %d", i)
		require.Equal(t, g.Bytes()[rg.Offset:rg.Offset+rg.Length], rg.Dst, "range %d", i)
	}
	assert.ErrorIs(t, ranges[1000].Err, velo.ErrRange)
	st := owner.RDMAStats()
	assert.Equal(t, 1, st.LeaseRegistrations, "one registration for the lease")
	require.NoError(t, l.Release(ctx))
	g.Free()
	eventually(t, "the region's memory back", func() bool {
		st := owner.RDMAStats()
		return st.LeaseRegistrations == 0 && st.Slots == 0
	})
}
