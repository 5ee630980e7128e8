package velo

// GetBatch, ranged reads and regions through the whole runtime, over the in-process RMA
// (rdmatest, one Get per read) and real TCP; module test (package rdma) runs them over the real
// UCX transport, whose many-read path is the engine's GetMany.

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/rendezvous/rdma/rdmatest"
)

// batchPair is an owner and a consumer that both have the RDMA path, linked both ways.
func batchPair(t *testing.T, ownerOpts ...Option) (owner, cons rnode) {
	f := rdmatest.NewFabric()
	owner = rdmaNode(t, f, true, ownerOpts...)
	cons = rdmaNode(t, f, true)
	link(t, owner, cons, true)
	return owner, cons
}

// stageBlocks stages n pinned payloads of size bytes on v and returns their handles and bytes.
func stageBlocks(t *testing.T, v *Velo, n, size int, seed uint64) ([]Handle, [][]byte) {
	t.Helper()
	sizes := make([]int, n)
	for i := range sizes {
		sizes[i] = size
	}
	return stageSizes(t, v, sizes, seed)
}

// stageSizes stages one pinned payload per size on v and returns the handles and the bytes.
func stageSizes(t *testing.T, v *Velo, sizes []int, seed uint64) ([]Handle, [][]byte) {
	t.Helper()
	hs := make([]Handle, len(sizes))
	data := make([][]byte, len(sizes))
	for i, n := range sizes {
		data[i] = payload(n, seed+uint64(i))
		h, err := v.StageDataPinned(tctx(t), data[i])
		require.NoError(t, err)
		hs[i] = h
	}
	return hs, data
}

// TestGetBatchMixed: blocks from two owners and from the consumer itself, some into the caller's
// buffers, come back whole, each reported once, each counted on the path metric; releasing the
// leases leaves nothing staged or registered anywhere.
func TestGetBatchMixed(t *testing.T) {
	f := rdmatest.NewFabric()
	o1, o2, cons := rdmaNode(t, f, true), rdmaNode(t, f, true), rdmaNode(t, f, true)
	link(t, o1, cons, true)
	link(t, o2, cons, true)
	h1, d1 := stageBlocks(t, o1.Velo, 300, 4<<10, 1) // more than one acquire batch message
	h2, d2 := stageBlocks(t, o2.Velo, 40, 64<<10, 500)
	h3, d3 := stageBlocks(t, cons.Velo, 5, 1000, 900)
	var reqs []GetRequest
	var want [][]byte
	for i, h := range append(append(append([]Handle(nil), h1...), h2...), h3...) {
		q := GetRequest{Handle: h}
		if i%3 == 0 {
			q.Into = make([]byte, h.Size)
		}
		reqs = append(reqs, q)
	}
	want = append(append(append(want, d1...), d2...), d3...)
	seen := make([]int, len(reqs))
	var mu sync.Mutex
	res := cons.GetBatch(tctx(t), reqs, func(r GetResult) {
		mu.Lock()
		seen[r.Index]++
		mu.Unlock()
	})
	require.Len(t, res, len(reqs))
	for i, r := range res {
		require.NoError(t, r.Err, "entry %d", i)
		require.Equal(t, i, r.Index)
		assert.Equal(t, 1, seen[i], "entry %d reported %d times", i, seen[i])
		assert.True(t, bytes.Equal(want[i], r.Lease.Bytes()), "entry %d: payload differs", i)
		if reqs[i].Into != nil {
			assert.Same(t, &reqs[i].Into[0], &r.Lease.Bytes()[0], "entry %d did not land in its Into", i)
		}
	}
	for i, r := range res {
		want := map[bool]metrics.Path{true: metrics.PathInline, false: metrics.PathRDMA}[reqs[i].Handle.Size <= DefaultBatchInlineMax]
		if i < len(h1)+len(h2) {
			assert.Equal(t, want, r.Lease.Path, "entry %d of %d bytes", i, reqs[i].Handle.Size)
		}
	}
	assert.Equal(t, float64(len(h2)), pathCount(t, cons.Velo, metrics.PathRDMA, metrics.ReasonOK), "consumer: one rdma/ok per remote entry above 4 KiB")
	assert.Equal(t, float64(len(h1)), pathCount(t, cons.Velo, metrics.PathInline, metrics.ReasonOK), "consumer: one inline/ok per remote entry of 4 KiB")
	assert.Equal(t, float64(len(h1)), pathCount(t, o1.Velo, metrics.PathInline, metrics.ReasonOK), "owner 1: one per acquire")
	assert.Zero(t, pathCount(t, o1.Velo, metrics.PathRDMA, metrics.ReasonOK), "owner 1 registered nothing")
	for _, r := range res {
		require.NoError(t, r.Lease.Release(tctx(t)))
	}
	for _, o := range []rnode{o1, o2, cons} {
		eventually(t, "every payload freed and every registration gone", func() bool {
			s, l := o.StagedCounts()
			st := o.RDMAStats()
			return s == 0 && l == 0 && st.LeaseRegistrations == 0 && st.Slots == 0
		})
	}
}

// TestGetBatchBadEntries: a released handle, a foreign one, a forged one, a repeated one, a zero
// one, a wrong-sized Into and one above MaxGetSize each fail with their own error; the good
// entries around them complete; nothing of the failed ones stays leased or registered.
func TestGetBatchBadEntries(t *testing.T) {
	f := rdmatest.NewFabric()
	owner := rdmaNode(t, f, true)
	other := rdmaNode(t, f, true)
	cons := rdmaNode(t, f, true, WithMaxGetSize(1<<20))
	link(t, owner, cons, true)
	link(t, other, cons, true)
	ctx := tctx(t)
	hs, data := stageBlocks(t, owner.Velo, 3, 8<<10, 7)
	released, _ := stageBlocks(t, owner.Velo, 1, 100, 9)
	require.NoError(t, owner.Unref(ctx, released[0]))
	foreign := hs[1]
	foreign.Owner = other.ID() // a real handle rewritten to name another instance: that one never issued it
	forged := hs[2]
	forged.Nonce ^= 0xff
	big, _ := stageBlocks(t, owner.Velo, 1, 2<<20, 11)
	before := owner.RDMAStats()

	reqs := []GetRequest{
		{Handle: hs[0]},
		{Handle: released[0]},
		{Handle: foreign},
		{Handle: forged},
		{Handle: hs[0]}, // repeats entry 0
		{},
		{Handle: hs[1], Into: make([]byte, 10)},
		{Handle: big[0]}, // above this consumer's MaxGetSize
		{Handle: hs[2]},
		{Handle: big[0], Into: make([]byte, 2<<20)}, // the caller's buffer: no limit
	}
	res := cons.GetBatch(ctx, reqs, nil)
	require.NoError(t, res[0].Err)
	assert.Equal(t, data[0], res[0].Lease.Bytes())
	assert.ErrorIs(t, res[1].Err, ErrReleased)
	assert.ErrorIs(t, res[2].Err, ErrBadHandle)
	assert.ErrorIs(t, res[3].Err, ErrBadHandle)
	assert.ErrorIs(t, res[4].Err, ErrDuplicateHandle)
	assert.Contains(t, res[4].Err.Error(), "entry 4 repeats the handle of entry 0")
	assert.ErrorIs(t, res[5].Err, ErrBadHandle)
	assert.ErrorIs(t, res[6].Err, ErrBufferSize)
	assert.ErrorIs(t, res[7].Err, ErrTooLarge)
	require.NoError(t, res[8].Err)
	assert.Equal(t, data[2], res[8].Lease.Bytes())
	require.NoError(t, res[9].Err)
	for i, r := range res {
		if r.Err != nil {
			assert.Nil(t, r.Lease, "failed entry %d carries a lease", i)
		}
	}
	for _, i := range []int{0, 8, 9} {
		require.NoError(t, res[i].Lease.Release(ctx))
	}
	eventually(t, "the owner's registrations back where they started", func() bool {
		st := owner.RDMAStats()
		return st.LeaseRegistrations == 0 && st.PinnedBytes <= before.PinnedBytes
	})
	_, leases := owner.StagedCounts()
	assert.Zero(t, leases, "a failed entry left a lease on the owner")
}

// TestGetBatchCanceled: a context that ends mid-batch fails the entries not done yet; every lease
// they took is ended before GetBatch returns.
func TestGetBatchCanceled(t *testing.T) {
	owner, cons := batchPair(t)
	hs, _ := stageBlocks(t, owner.Velo, 200, 16<<10, 3)
	ctx, cancel := context.WithCancel(tctx(t))
	var n atomic.Int32
	cons.rt.BeforeGet = func(context.Context) {
		if n.Add(1) == 20 {
			cancel()
		}
	}
	reqs := make([]GetRequest, len(hs))
	for i, h := range hs {
		reqs[i] = GetRequest{Handle: h}
	}
	res := cons.GetBatch(ctx, reqs, nil)
	cons.rt.BeforeGet = nil
	var ok, canceled int
	for i, r := range res {
		switch {
		case r.Err == nil:
			ok++
			require.NoError(t, r.Lease.Release(tctx(t)))
		case errors.Is(r.Err, context.Canceled):
			canceled++
		default:
			t.Errorf("entry %d: %v", i, r.Err)
		}
	}
	assert.Positive(t, canceled)
	assert.Equal(t, len(hs), ok+canceled)
	eventually(t, "no lease left on the owner", func() bool {
		_, l := owner.StagedCounts()
		return l == 0 && owner.RDMAStats().LeaseRegistrations == 0
	})
}

// TestGetBatchFallsBackPerEntry: entries whose GET fails are fetched by chunks (get_failed); the
// others stay on the RDMA path.
func TestGetBatchFallsBackPerEntry(t *testing.T) {
	owner, cons := batchPair(t)
	hs, data := stageBlocks(t, owner.Velo, 20, 32<<10, 13)
	cons.rt.FailGets.Store(3)
	reqs := make([]GetRequest, len(hs))
	for i, h := range hs {
		reqs[i] = GetRequest{Handle: h}
	}
	res := cons.GetBatch(tctx(t), reqs, nil)
	var rdmaN, chunkedN int
	for i, r := range res {
		require.NoError(t, r.Err, "entry %d", i)
		assert.Equal(t, data[i], r.Lease.Bytes())
		switch r.Lease.Path {
		case metrics.PathRDMA:
			rdmaN++
		default:
			chunkedN++
			assert.Equal(t, metrics.ReasonGetFailed, r.Lease.Reason)
		}
		require.NoError(t, r.Lease.Release(tctx(t)))
	}
	assert.Equal(t, 3, chunkedN)
	assert.Equal(t, 17, rdmaN)
	assert.Equal(t, 3.0, pathCount(t, cons.Velo, metrics.PathChunked, metrics.ReasonGetFailed))
}

// TestGetBatchChunked: without the RDMA path the batch pulls many payloads with many pulls in
// flight at once (a window of 4 here), not one payload after another.
func TestGetBatchChunked(t *testing.T) {
	owner, cons := pair(t, WithBatchWindow(4), WithChunkSize(8<<10))
	require.NoError(t, cons.RegisterPeer(tctx(t), owner.PeerInfo()))
	hs := make([]Handle, 50)
	data := make([][]byte, len(hs))
	for i := range hs {
		data[i] = payload(20<<10, uint64(i))
		h, err := owner.StageData(tctx(t), data[i])
		require.NoError(t, err)
		hs[i] = h
	}
	reqs := make([]GetRequest, len(hs))
	for i, h := range hs {
		reqs[i] = GetRequest{Handle: h}
	}
	res := cons.GetBatch(tctx(t), reqs, nil)
	for i, r := range res {
		require.NoError(t, r.Err, "entry %d", i)
		assert.Equal(t, data[i], r.Lease.Bytes())
		assert.Equal(t, metrics.PathChunked, r.Lease.Path)
		require.NoError(t, r.Lease.Release(tctx(t)))
	}
	assert.Equal(t, float64(len(hs)), metric(t, cons, "velo_rendezvous_rdma_path_total", map[string]string{"path": "chunked", "reason": "not_configured"}))
}

// TestReadRangesOfARegion: the owner writes a region in place and stages it without a copy; a
// consumer reads ranges of it with one lease and one key, sees what the owner wrote before it
// announced a range, and every bad range fails alone before anything is posted.
func TestReadRangesOfARegion(t *testing.T) {
	owner, cons := batchPair(t)
	ctx := tctx(t)
	g, err := owner.NewRegion(1 << 20)
	require.NoError(t, err)
	require.True(t, g.Pinned())
	copy(g.Bytes(), payload(1<<20, 42))
	h, err := owner.StageRegion(ctx, g)
	require.NoError(t, err)
	stagedPinned := owner.RDMAStats().Slots

	l, err := cons.Acquire(ctx, h)
	require.NoError(t, err)
	assert.Equal(t, metrics.PathRDMA, l.Path)
	regs := owner.rt.Registrations.Load()

	ranges := []Range{
		{Offset: 0, Length: 4096, Dst: make([]byte, 4096)},
		{Offset: 1<<20 - 100, Length: 200, Dst: make([]byte, 200)}, // past the end
		{Offset: 5000, Length: 0, Dst: make([]byte, 10)},           // empty
		{Offset: 8192, Length: 4096, Dst: make([]byte, 100)},       // destination too short
		{Offset: 12345, Length: 7000, Dst: make([]byte, 8000)},     // Dst longer than Length: fine
	}
	err = l.ReadRanges(ctx, ranges)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "3 of 5 ranges failed")
	require.NoError(t, ranges[0].Err)
	assert.Equal(t, g.Bytes()[:4096], ranges[0].Dst)
	assert.ErrorIs(t, ranges[1].Err, ErrRange)
	assert.ErrorIs(t, ranges[2].Err, ErrRange)
	assert.ErrorIs(t, ranges[3].Err, ErrBufferSize)
	require.NoError(t, ranges[4].Err)
	assert.Equal(t, g.Bytes()[12345:12345+7000], ranges[4].Dst[:7000])
	assert.Equal(t, make([]byte, 1000), ranges[4].Dst[7000:], "bytes past Length were written")

	// The owner writes in place and then announces: a read after the announcement sees it.
	copy(g.Bytes()[500000:], []byte("written after staging"))
	got := []Range{{Offset: 500000, Length: 21, Dst: make([]byte, 21)}}
	require.NoError(t, l.ReadRanges(ctx, got))
	assert.Equal(t, "written after staging", string(got[0].Dst))
	assert.Equal(t, regs, owner.rt.Registrations.Load(), "a ranged read registered memory again")

	require.NoError(t, l.Detach(ctx))
	assert.Equal(t, stagedPinned, owner.RDMAStats().Slots, "the region was copied")
	require.NoError(t, owner.Unref(ctx, h))
	g.Free()
	select {
	case <-g.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the region's Done did not close after Free and the end of its staging")
	}
	eventually(t, "the region's memory back in the pool", func() bool { return owner.RDMAStats().Slots == 0 })
}

// TestReadRangesPaths: the same ranges read on the chunked path, from the owner itself, and after
// a failed GET (the lease falls back to chunks and the failed ranges are pulled).
func TestReadRangesPaths(t *testing.T) {
	owner, cons := batchPair(t, WithChunkSize(4<<10))
	ctx := tctx(t)
	data := payload(256<<10, 5)
	h, err := owner.StageData(ctx, data) // plain memory: chunked
	require.NoError(t, err)
	hp, err := owner.StageDataPinned(ctx, data)
	require.NoError(t, err)
	mk := func() []Range {
		return []Range{{Offset: 1, Length: 10000, Dst: make([]byte, 10000)}, {Offset: 200 << 10, Length: 56 << 10, Dst: make([]byte, 56<<10)}}
	}
	check := func(what string, rs []Range) {
		t.Helper()
		for _, r := range rs {
			require.NoError(t, r.Err, what)
			assert.Equal(t, data[r.Offset:r.Offset+r.Length], r.Dst, what)
		}
	}

	rs := mk()
	require.NoError(t, cons.ReadRanges(ctx, h, rs))
	check("chunked", rs)

	rs = mk()
	require.NoError(t, owner.ReadRanges(ctx, hp, rs))
	check("local", rs)

	l, err := cons.Acquire(ctx, hp)
	require.NoError(t, err)
	require.Equal(t, metrics.PathRDMA, l.Path)
	cons.rt.FailGets.Store(1)
	rs = mk()
	require.NoError(t, l.ReadRanges(ctx, rs))
	check("after a failed GET", rs)
	assert.Equal(t, metrics.PathChunked, l.Path)
	assert.Equal(t, 1.0, pathCount(t, cons.Velo, metrics.PathChunked, metrics.ReasonGetFailed))
	rs = mk()
	require.NoError(t, l.ReadRanges(ctx, rs))
	check("the fallen-back lease", rs)
	require.NoError(t, l.Release(ctx))
	// Every lease ended and every registration revoked.
	eventually(t, "no lease or registration left", func() bool {
		_, leases := owner.StagedCounts()
		return leases == 0 && owner.RDMAStats().LeaseRegistrations == 0
	})
}

// TestReadRangesRenewsTheLease: an RDMA lease read now and then for several TTLs stays alive (a
// one-sided read leaves no trace on the owner; ReadRanges renews the lease).
func TestReadRangesRenewsTheLease(t *testing.T) {
	owner, cons := batchPair(t, WithLeaseTTL(300*time.Millisecond))
	ctx := tctx(t)
	data := payload(64<<10, 9)
	h, err := owner.StageDataPinned(ctx, data)
	require.NoError(t, err)
	l, err := cons.Acquire(ctx, h)
	require.NoError(t, err)
	for i := 0; i < 8; i++ {
		time.Sleep(100 * time.Millisecond) // the pace of a slow reader, the subject of the test
		rs := []Range{{Offset: uint64(i) * 1000, Length: 1000, Dst: make([]byte, 1000)}}
		require.NoError(t, l.ReadRanges(ctx, rs), "read %d", i)
		assert.Equal(t, metrics.PathRDMA, l.Path, "read %d fell back", i)
	}
	require.NoError(t, l.Release(ctx))
}

// TestWrapRegion: memory the owner already has is staged without a copy, read by RDMA, and
// Done closes only after Free, the end of every staging and the end of every registration.
func TestWrapRegion(t *testing.T) {
	owner, cons := batchPair(t)
	ctx := tctx(t)
	mem := payload(300<<10, 77)
	g, err := owner.WrapRegion(mem)
	require.NoError(t, err)
	h, err := owner.StageRegion(ctx, g)
	require.NoError(t, err)
	h2, err := owner.StageRegion(ctx, g) // a second handle on the same memory
	require.NoError(t, err)
	l, err := cons.Get(ctx, h)
	require.NoError(t, err)
	assert.Equal(t, mem, l.Bytes())
	assert.Equal(t, metrics.PathRDMA, l.Path)
	g.Free()
	_, err = owner.StageRegion(ctx, g)
	assert.ErrorIs(t, err, ErrRegionFreed)
	select {
	case <-g.Done():
		t.Fatal("Done closed while a staging is live")
	default:
	}
	require.NoError(t, l.Release(ctx))
	l2, err := cons.Get(ctx, h2)
	require.NoError(t, err)
	require.NoError(t, l2.Release(ctx))
	select {
	case <-g.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done did not close")
	}
	assert.Zero(t, owner.RDMAStats().LeaseRegistrations)
}

// TestRegionWithoutRDMA: a TCP-only instance still stages regions without a copy; consumers read
// them by chunks, and the reason says why.
func TestRegionWithoutRDMA(t *testing.T) {
	a, b := pair(t)
	require.NoError(t, b.RegisterPeer(tctx(t), a.PeerInfo()))
	g, err := a.NewRegion(100 << 10)
	require.NoError(t, err)
	assert.False(t, g.Pinned())
	assert.Equal(t, metrics.ReasonNotConfigured, g.Reason())
	copy(g.Bytes(), payload(100<<10, 3))
	h, err := a.StageRegion(tctx(t), g)
	require.NoError(t, err)
	rs := []Range{{Offset: 4096, Length: 50000, Dst: make([]byte, 50000)}}
	require.NoError(t, b.ReadRanges(tctx(t), h, rs))
	assert.Equal(t, g.Bytes()[4096:54096], rs[0].Dst)
	_, err = a.NewRegion(0)
	assert.Error(t, err)
}
