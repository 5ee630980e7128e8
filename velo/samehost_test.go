//go:build linux

package velo

// The same-host path through the whole runtime: two instances of this process, each with a TCP
// control plane, an in-process RMA named "ucx" (rdmatest) and WithSameHost. Every rendezvous
// between them must move its bytes through the shm transport and say so on both sides; a pair in
// which one side has the path off must keep the RDMA path.

import (
	"bytes"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/rendezvous/rdma/rdmatest"
)

func sameHostDir(t *testing.T) SameHostConfig {
	t.Helper()
	d, err := os.MkdirTemp("", "velo-shm-") // short: a socket path has at most 107 bytes
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(d) })
	return SameHostConfig{Dir: d, ChunkSize: 256 << 10}
}

// sameHostPair links an owner and a consumer that both have the path, and waits for the
// consumer's channel to the owner.
func sameHostPair(t *testing.T, opts ...func(*SameHostConfig)) (owner, consumer rnode) {
	t.Helper()
	f := rdmatest.NewFabric()
	cfg := sameHostDir(t)
	for _, o := range opts {
		o(&cfg)
	}
	owner = rdmaNode(t, f, true, WithSameHost(cfg))
	consumer = rdmaNode(t, f, true, WithSameHost(cfg))
	link(t, owner, consumer, true)
	eventually(t, "the consumer's same-host channel", func() bool { ok, _ := consumer.SameHost(owner.ID()); return ok })
	return owner, consumer
}

func TestSameHostGetTakesThePathOnBothSides(t *testing.T) {
	owner, consumer := sameHostPair(t)
	ctx := tctx(t)
	data := payload(3<<20+17, 1)
	h, err := owner.StageDataPinned(ctx, data)
	require.NoError(t, err)

	l, err := consumer.Get(ctx, h)
	require.NoError(t, err)
	assert.Equal(t, metrics.PathSameHost, l.Path)
	assert.True(t, bytes.Equal(data, l.Bytes()))
	require.NoError(t, l.Detach(ctx)) // keeps the handle's reference for the GetInto below

	dst := make([]byte, len(data))
	l, err = consumer.GetInto(ctx, h, dst)
	require.NoError(t, err)
	assert.Equal(t, metrics.PathSameHost, l.Path)
	assert.True(t, bytes.Equal(data, dst))
	require.NoError(t, l.Release(ctx))

	assert.EqualValues(t, 2, pathCount(t, consumer.Velo, metrics.PathSameHost, metrics.ReasonOK), "consumer side")
	assert.EqualValues(t, 2, pathCount(t, owner.Velo, metrics.PathSameHost, metrics.ReasonOK), "owner side")
	assert.Zero(t, pathCount(t, consumer.Velo, metrics.PathRDMA, metrics.ReasonOK))
	assert.Zero(t, pathCount(t, owner.Velo, metrics.PathRDMA, metrics.ReasonOK))
	assert.Zero(t, owner.rt.LiveRegistrations(), "no lease went through the UCX stand-in")
	assert.EqualValues(t, 2*len(data), metric(t, consumer.Velo, metrics.RendezvousBytesTotal, map[string]string{"direction": "received", "path": "shm"}))
	eventually(t, "the owner's per-lease registrations to end", func() bool { return owner.RDMAStats().LeaseRegistrations == 0 })
}

// TestSameHostBatchAndRanges: GetBatch and ReadRanges through the ring, and with single-copy
// payloads on the owner, where the entries and ranges of at least 1 MiB are read out of the
// payload's own file (counted) and the others through the ring.
func TestSameHostBatchAndRanges(t *testing.T) {
	t.Run("ring", func(t *testing.T) { batchAndRanges(t, "0") })
	t.Run("single_copy", func(t *testing.T) { batchAndRanges(t, "2", singleCopy) })
}

func batchAndRanges(t *testing.T, fileReads string, opts ...func(*SameHostConfig)) {
	owner, consumer := sameHostPair(t, opts...)
	ctx := tctx(t)
	var reqs []GetRequest
	var want [][]byte
	for i, n := range []int{4 << 10, 64 << 10, 1 << 20, 5000} {
		d := payload(n, uint64(10+i))
		h, err := owner.StageDataPinned(ctx, d)
		require.NoError(t, err)
		reqs = append(reqs, GetRequest{Handle: h})
		want = append(want, d)
	}
	res := consumer.GetBatch(ctx, reqs, nil)
	for i, r := range res {
		require.NoError(t, r.Err, "entry %d", i)
		if len(want[i]) > 16<<10 { // small entries may come inline in the answer
			assert.Equal(t, metrics.PathSameHost, r.Lease.Path, "entry %d", i)
		}
		assert.True(t, bytes.Equal(want[i], r.Lease.Bytes()), "entry %d", i)
		require.NoError(t, r.Lease.Release(ctx))
	}

	big := payload(2<<20, 99)
	h, err := owner.StageDataPinned(ctx, big)
	require.NoError(t, err)
	rl, err := consumer.Acquire(ctx, h)
	require.NoError(t, err)
	assert.Equal(t, metrics.PathSameHost, rl.Path)
	ranges := []Range{{Offset: 0, Length: 100, Dst: make([]byte, 100)}, {Offset: 1 << 20, Length: 300 << 10, Dst: make([]byte, 300<<10)},
		{Offset: 256 << 10, Length: 3 << 19, Dst: make([]byte, 3<<19)}}
	require.NoError(t, rl.ReadRanges(ctx, ranges))
	for _, r := range ranges {
		require.NoError(t, r.Err)
		assert.True(t, bytes.Equal(big[r.Offset:r.Offset+r.Length], r.Dst))
	}
	require.NoError(t, rl.Release(ctx))
	assert.Zero(t, owner.rt.LiveRegistrations())
	assert.Equal(t, fileReads, shmSetting(t, consumer, "single_copy_reads"), "the 1 MiB entry and the 1.5 MiB range")
}

func TestSameHostRegionAndPinnedGet(t *testing.T) {
	owner, consumer := sameHostPair(t)
	ctx := tctx(t)
	g, err := owner.NewRegion(1 << 20)
	require.NoError(t, err)
	require.True(t, g.Pinned())
	copy(g.Bytes(), payload(1<<20, 7))
	h, err := owner.StageRegion(ctx, g)
	require.NoError(t, err)
	pl, err := consumer.GetPinned(ctx, h)
	require.NoError(t, err)
	assert.Equal(t, metrics.PathSameHost, pl.Path)
	assert.True(t, bytes.Equal(g.Bytes(), pl.Bytes()), "a region is read as written, through the path, into pinned memory")
	require.NoError(t, pl.Release(ctx))
	pl.Free()
	g.Free()
	eventually(t, "the region's memory back", func() bool {
		select {
		case <-g.Done():
			return true
		default:
			return false
		}
	})
}

func TestSameHostOffOnOneSideKeepsTheRDMAPath(t *testing.T) {
	f := rdmatest.NewFabric()
	cfg := sameHostDir(t)
	singleCopy(&cfg)
	owner := rdmaNode(t, f, true, WithSameHost(cfg))
	consumer := rdmaNode(t, f, true)
	link(t, owner, consumer, true)
	ctx := tctx(t)
	data := payload(1<<20, 3)
	h, err := owner.StageDataPinned(ctx, data)
	require.NoError(t, err)
	assert.Equal(t, "1", shmSetting(t, owner, "payload_files"), "the payload lives in a file of its own, which the RDMA path serves as any memory")
	l, err := consumer.Get(ctx, h)
	require.NoError(t, err)
	assert.Equal(t, metrics.PathRDMA, l.Path)
	assert.True(t, bytes.Equal(data, l.Bytes()))
	require.NoError(t, l.Release(ctx))
	ok, why := consumer.SameHost(owner.ID())
	assert.False(t, ok)
	assert.Contains(t, why, "off on this instance")
	assert.EqualValues(t, 1, pathCount(t, owner.Velo, metrics.PathRDMA, metrics.ReasonOK))
}

func TestSameHostNeedsTheUCXTransport(t *testing.T) {
	_, err := New(tctx(t), WithLogger(quietLogger()), WithSameHost(sameHostDir(t)))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "WithUCXTransport")
}

func TestSameHostShowsOnTheIntrospectionPage(t *testing.T) {
	owner, consumer := sameHostPair(t)
	var found bool
	for _, ti := range consumer.Introspect().Transports {
		if ti.Name == "shm" {
			found = true
			assert.Equal(t, owner.ID().String(), ti.Settings["peers"], "the page lists the peers the path is taken to")
		}
	}
	assert.True(t, found, "the shm transport must be listed")
	assert.Equal(t, StateReady, consumer.Health().State, "a pair that took the path adds no health reason")
}

// shmSetting is one of the shm transport's settings on v's introspection page.
func shmSetting(t *testing.T, v rnode, key string) string {
	t.Helper()
	for _, ti := range v.Introspect().Transports {
		if ti.Name == "shm" {
			return ti.Settings[key]
		}
	}
	t.Fatal("the shm transport is not on the introspection page")
	return ""
}

// singleCopy turns single-copy payloads on from 1 MiB.
func singleCopy(c *SameHostConfig) { c.SingleCopyMin = 1 << 20 }

// TestSameHostSingleCopy: a pinned payload of at least SingleCopyMin lives in a file of its own
// and is read with one copy (both sides count it on the introspection page, and the path stays
// shm); a smaller one goes through the ring; the file goes when the payload is freed.
func TestSameHostSingleCopy(t *testing.T) {
	owner, consumer := sameHostPair(t, singleCopy)
	ctx := tctx(t)
	big, small := payload(8<<20+5, 21), payload(512<<10, 22)
	hb, err := owner.StageDataPinned(ctx, big)
	require.NoError(t, err)
	hs, err := owner.StageDataPinned(ctx, small)
	require.NoError(t, err)
	assert.Equal(t, "1", shmSetting(t, owner, "payload_files"), "the large payload has a file of its own, the small one not")

	for _, c := range []struct {
		h     Handle
		want  []byte
		files string
	}{{hb, big, "1"}, {hs, small, "1"}} {
		l, err := consumer.Get(ctx, c.h)
		require.NoError(t, err)
		assert.Equal(t, metrics.PathSameHost, l.Path)
		assert.True(t, bytes.Equal(c.want, l.Bytes()))
		require.NoError(t, l.Release(ctx))
		assert.Equal(t, c.files, shmSetting(t, consumer, "single_copy_reads"))
		assert.Equal(t, c.files, shmSetting(t, owner, "single_copy_served"))
	}
	eventually(t, "the payload's file closed once the payload was freed", func() bool { return shmSetting(t, owner, "payload_files") == "0" })
}
