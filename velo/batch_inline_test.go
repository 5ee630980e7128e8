package velo

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/rendezvous/rdma/rdmatest"
	"github.com/velo-go/velo/velo/transport"
	"github.com/velo-go/velo/velo/transport/tcp"
)

// Small payloads of a GetBatch come inside the owner's answer to the batched acquire (path
// inline): no registration, no read. These tests fetch them next to payloads that take the RDMA
// and the chunked paths, with the limit set on either side, from an owner without the message, and
// through answers whose frames are too small for all of them.

// fetchAll fetches hs with one GetBatch (every third entry into a buffer of the caller's), checks
// every payload byte for byte and returns the leases' paths.
func fetchAll(t *testing.T, cons *Velo, hs []Handle, data [][]byte) ([]metrics.Path, []*Lease) {
	t.Helper()
	reqs := make([]GetRequest, len(hs))
	for i, h := range hs {
		reqs[i] = GetRequest{Handle: h}
		if i%3 == 0 {
			reqs[i].Into = make([]byte, h.Size)
		}
	}
	paths := make([]metrics.Path, len(hs))
	leases := make([]*Lease, len(hs))
	for i, r := range cons.GetBatch(tctx(t), reqs, nil) {
		require.NoError(t, r.Err, "entry %d (%d bytes)", i, hs[i].Size)
		require.Equal(t, data[i], r.Lease.Bytes(), "entry %d (%d bytes)", i, hs[i].Size)
		if reqs[i].Into != nil && len(data[i]) > 0 {
			require.Same(t, &reqs[i].Into[0], &r.Lease.Bytes()[0], "entry %d did not land in its Into", i)
		}
		paths[i], leases[i] = r.Lease.Path, r.Lease
	}
	return paths, leases
}

// TestGetBatchInline: payloads up to the default 4 KiB come inline, larger ones by RDMA reads, in
// one batch; the owner registers only the larger ones; both sides count each path; ending the
// leases leaves nothing staged or registered.
func TestGetBatchInline(t *testing.T) {
	owner, cons := batchPair(t)
	var sizes []int
	for range 40 {
		sizes = append(sizes, 1, 100, 4095, DefaultBatchInlineMax, DefaultBatchInlineMax+1, 64<<10)
	}
	hs, data := stageSizes(t, owner.Velo, sizes, 1)
	paths, leases := fetchAll(t, cons.Velo, hs, data)
	inline, rdma, rdmaPages := 0, 0, 0
	page := os.Getpagesize()
	for i, p := range paths {
		if sizes[i] <= DefaultBatchInlineMax {
			assert.Equal(t, metrics.PathInline, p, "entry %d of %d bytes", i, sizes[i])
			inline++
		} else {
			assert.Equal(t, metrics.PathRDMA, p, "entry %d of %d bytes", i, sizes[i])
			rdma++
			rdmaPages += (sizes[i] + page - 1) / page * page
		}
	}
	st := owner.RDMAStats()
	assert.EqualValues(t, rdmaPages, st.LeaseBytes, "the owner registered the RDMA entries' pages alone")
	// The two RDMA payloads of each group of six were staged one after the other: one run each.
	assert.EqualValues(t, rdma/2, st.LeaseRegistrations, "one registration per run of neighbouring slots")
	for _, v := range []*Velo{owner.Velo, cons.Velo} {
		assert.EqualValues(t, inline, pathCount(t, v, metrics.PathInline, metrics.ReasonOK))
		assert.EqualValues(t, rdma, pathCount(t, v, metrics.PathRDMA, metrics.ReasonOK))
	}
	inlineBytes := 0
	for _, n := range sizes {
		if n <= DefaultBatchInlineMax {
			inlineBytes += n
		}
	}
	assert.EqualValues(t, inlineBytes, bytesTotal(t, cons.Velo, "received", "inline"))
	assert.EqualValues(t, inlineBytes, bytesTotal(t, owner.Velo, "sent", "inline"))

	for i, err := range cons.ReleaseLeases(tctx(t), leases) {
		require.NoError(t, err, "lease %d", i)
	}
	slots, open := owner.StagedCounts()
	assert.Zero(t, slots, "every payload freed")
	assert.Zero(t, open, "every lease ended")
	eventually(t, "every registration gone", func() bool { return owner.RDMAStats().LeaseRegistrations == 0 })
}

// TestGetBatchInlineLimits: the smaller of the two sides' limits applies; 0 on either side turns
// it off; a consumer without the RDMA path still gets its small payloads inline and the others by
// chunks.
func TestGetBatchInlineLimits(t *testing.T) {
	sizes := []int{1 << 10, 4 << 10, 16 << 10, 20 << 10}
	cases := []struct {
		name            string
		owner, consumer []Option
		inlineUpTo      int
	}{
		{"defaults", nil, nil, 4 << 10},
		{"consumer off", nil, []Option{WithBatchInlineMax(0)}, 0},
		{"owner off", []Option{WithBatchInlineMax(0)}, nil, 0},
		{"both 16 KiB", []Option{WithBatchInlineMax(16 << 10)}, []Option{WithBatchInlineMax(16 << 10)}, 16 << 10},
		{"owner 1 KiB", []Option{WithBatchInlineMax(1 << 10)}, nil, 1 << 10},
		{"consumer 64 KiB, owner default", nil, []Option{WithBatchInlineMax(64 << 10)}, 4 << 10},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := rdmatest.NewFabric()
			owner, cons := rdmaNode(t, f, true, c.owner...), rdmaNode(t, f, true, c.consumer...)
			link(t, owner, cons, true)
			hs, data := stageSizes(t, owner.Velo, sizes, 7)
			paths, leases := fetchAll(t, cons.Velo, hs, data)
			for i, p := range paths {
				want := metrics.PathRDMA
				if sizes[i] <= c.inlineUpTo {
					want = metrics.PathInline
				}
				assert.Equal(t, want, p, "%d bytes", sizes[i])
			}
			for _, err := range cons.ReleaseLeases(tctx(t), leases) {
				require.NoError(t, err)
			}
		})
	}

	t.Run("chunked consumer", func(t *testing.T) {
		cons, owner := pair(t)
		hs := make([]Handle, len(sizes))
		data := make([][]byte, len(sizes))
		for i, n := range sizes {
			data[i] = payload(n, uint64(i))
			hs[i] = stage(t, owner, data[i], false)
		}
		paths, leases := fetchAll(t, cons, hs, data)
		assert.Equal(t, []metrics.Path{metrics.PathInline, metrics.PathInline, metrics.PathChunked, metrics.PathChunked}, paths)
		for _, err := range cons.ReleaseLeases(tctx(t), leases) {
			require.NoError(t, err)
		}
	})

	for _, n := range []int{-1, 64<<10 + 1} {
		_, err := New(tctx(t), WithBatchInlineMax(n))
		assert.ErrorContains(t, err, fmt.Sprintf("batch inline limit %d: want 0 (off) to 65536 bytes", n))
	}
}

// TestGetBatchInlineFromAnOlderOwner: an owner without the inline acquire (an earlier release)
// answers it as an unknown handler; the consumer asks again without inline, and asks that owner
// without it from then on.
func TestGetBatchInlineFromAnOlderOwner(t *testing.T) {
	owner, cons := batchPair(t)
	owner.msgr.HandleInternal(opName("rv.acquire_batch_inline"), nil)
	for round := range 2 {
		hs, data := stageBlocks(t, owner.Velo, 50, 1<<10, uint64(round*100))
		paths, leases := fetchAll(t, cons.Velo, hs, data)
		for i, p := range paths {
			assert.Equal(t, metrics.PathRDMA, p, "round %d entry %d", round, i)
		}
		for _, err := range cons.ReleaseLeases(tctx(t), leases) {
			require.NoError(t, err)
		}
	}
	unknown, err := metrics.Value(owner.Metrics(), metrics.MessageErrorsTotal, map[string]string{"kind": "unknown_handler"})
	require.NoError(t, err)
	assert.EqualValues(t, 1, unknown, "asked once with inline, then never again")
}

// TestGetBatchInlineWithinTheFrame: answers travel in frames of 64 KiB here, so a part's inline
// payloads fit a few to an answer: the consumer cuts its parts to fit, and what an owner cannot
// fit goes by its path.
func TestGetBatchInlineWithinTheFrame(t *testing.T) {
	small := func(opts ...Option) *Velo {
		ctl, err := tcp.New(tcp.Config{MaxFrameSize: 64 << 10})
		require.NoError(t, err)
		return newInstance(t, append([]Option{WithTransport(ctl)}, opts...)...)
	}
	cons, owner := small(), small(WithBatchInlineMax(16<<10))
	require.NoError(t, cons.RegisterPeer(tctx(t), owner.PeerInfo()))
	hs, data := stageBlocks(t, owner, 100, 4<<10, 3)
	paths, leases := fetchAll(t, cons, hs, data)
	inline := 0
	for _, p := range paths {
		if p == metrics.PathInline {
			inline++
		}
	}
	assert.Equal(t, len(hs), inline, "the consumer's parts fit their answers")
	for _, err := range cons.ReleaseLeases(tctx(t), leases) {
		require.NoError(t, err)
	}

	// The owner keeps its answer within its own frames whatever the request asks: twenty 16 KiB
	// payloads asked for inline in one request fit one to a 64 KiB answer (room for twenty entries
	// besides), and the others are answered for chunks.
	hs, _ = stageBlocks(t, owner, 20, 16<<10, 9)
	wh := make([]wire.Handle, len(hs))
	for i, h := range hs {
		wh[i] = wire.Handle{Owner: uint64(h.Owner), Slot: h.Slot, Nonce: h.Nonce, Size: h.Size}
	}
	req, err := wire.AppendAcquireBatchRequest(nil, wire.AcquireBatchRequest{InlineMax: 16 << 10, Handles: wh})
	require.NoError(t, err)
	ans, err := cons.msgr.Request(tctx(t), owner.ID(), opName("rv.acquire_batch_inline"), req)
	require.NoError(t, err)
	entries, err := wire.DecodeAcquireBatchResponse(ans)
	require.NoError(t, err)
	counts := map[string]int{}
	for _, e := range entries {
		require.False(t, e.Failed(), "%s: %s", e.ErrKind, e.ErrText)
		counts[e.Response.Path]++
		if e.Inline != nil {
			assert.Len(t, e.Inline, 16<<10)
		}
	}
	assert.Equal(t, map[string]int{"inline": 1, "chunked": 19}, counts)
	assert.LessOrEqual(t, len(ans), 64<<10)
}

// TestGetBatchInlineFromALyingOwner: an owner whose answers break the inline rules (the inline
// path without the bytes, bytes under another path, bytes of the wrong size) fails each such
// entry with ErrProtocol and gives its lease back; the honest entry of the same answer lands.
func TestGetBatchInlineFromALyingOwner(t *testing.T) {
	cons, owner := pair(t)
	hs, data := stageBlocks(t, owner, 4, 64, 11)
	lease := uint64(1000)
	owner.msgr.HandleInternal(opName("rv.acquire_batch_inline"), func(_ context.Context, _ transport.InstanceID, p []byte) ([][]byte, func(), error) {
		req, err := wire.DecodeAcquireBatchRequest(p)
		if err != nil {
			return nil, nil, err
		}
		entries := make([]wire.AcquireBatchEntry, len(req.Handles))
		for i, h := range req.Handles {
			lease++
			resp := wire.AcquireResponse{Path: "inline", Reason: "ok", Lease: lease, TTLMillis: 30000, Size: h.Size, ChunkSize: 1 << 20}
			var body []byte
			for k, want := range hs {
				if want.Slot == h.Slot {
					body = data[k]
				}
			}
			switch i {
			case 0: // honest
				entries[i] = wire.AcquireBatchEntry{Response: resp, Inline: body}
			case 1: // the inline path, no bytes
				entries[i] = wire.AcquireBatchEntry{Response: resp}
			case 2: // bytes under the chunked path
				resp.Path, resp.Reason = "chunked", "no_offer"
				entries[i] = wire.AcquireBatchEntry{Response: resp, Inline: body}
			case 3: // fewer bytes than the handle says
				resp.Size = h.Size - 1
				entries[i] = wire.AcquireBatchEntry{Response: resp, Inline: body[1:]}
			}
		}
		parts, err := wire.AcquireBatchResponseParts(entries, nil)
		return parts, nil, err
	})
	reqs := make([]GetRequest, len(hs))
	for i, h := range hs {
		reqs[i] = GetRequest{Handle: h}
	}
	res := cons.GetBatch(tctx(t), reqs, nil)
	require.NoError(t, res[0].Err)
	assert.Equal(t, data[0], res[0].Lease.Bytes())
	for i, want := range map[int]string{1: "path inline without the payload", 2: `the payload inside the answer with path "chunked"`, 3: "payload of 63 bytes, the handle says 64"} {
		require.ErrorIs(t, res[i].Err, ErrProtocol, "entry %d", i)
		assert.ErrorContains(t, res[i].Err, want, "entry %d", i)
	}
	assert.EqualValues(t, 3, pathCount(t, cons, metrics.PathChunked, metrics.ReasonDecodeError), "each lie counted")
}

// TestGetBatchInlineTypedMemory: a destination described as device memory (host memory that takes
// the device paths here, as a CUDA buffer would) receives its inline payload through the
// transport's copy; a payload the owner holds as such memory is never sent inline: it keeps its
// path (chunked, through the owner's bounce buffers, without an RDMA registry).
func TestGetBatchInlineTypedMemory(t *testing.T) {
	ctx := tctx(t)
	cons, owner := pair(t)
	small := payload(1<<10, 5)
	h := stage(t, owner, small, false)
	dst := make([]byte, len(small))
	m := HostMemory(dst)
	m.bounce = true

	typedSrc := payload(1<<10, 6)
	tm := HostMemory(typedSrc)
	tm.bounce = true
	g, err := owner.WrapRegionMemory(tm)
	require.NoError(t, err)
	defer g.Free()
	th, err := owner.StageRegion(ctx, g)
	require.NoError(t, err)

	res := cons.GetBatch(ctx, []GetRequest{GetRequestInto(h, m), {Handle: th}}, nil)
	require.NoError(t, res[0].Err)
	assert.Equal(t, metrics.PathInline, res[0].Lease.Path, "into device-typed memory")
	assert.Equal(t, small, dst)
	require.NoError(t, res[1].Err)
	assert.Equal(t, metrics.PathChunked, res[1].Lease.Path, "a device-typed payload is not sent inline")
	assert.Equal(t, typedSrc, res[1].Lease.Bytes())
	for _, err := range cons.DetachLeases(ctx, []*Lease{res[0].Lease, res[1].Lease}) {
		require.NoError(t, err)
	}
}

// TestGetBatchInlineAnswersAtOnce: three consumers fetch the same small payloads inline, over and
// over at once, so that the owner answers many batched acquires together and reuses the memory of
// answers already sent for the next ones. Every payload arrives byte for byte in every round, and
// once the leases are detached the owner holds none and every payload is still staged.
func TestGetBatchInlineAnswersAtOnce(t *testing.T) {
	f := rdmatest.NewFabric()
	owner := rdmaNode(t, f, true)
	conss := []rnode{rdmaNode(t, f, true), rdmaNode(t, f, true), rdmaNode(t, f, true)}
	sizes := make([]int, 1500)
	for i := range sizes {
		sizes[i] = 1 + (i*977)%DefaultBatchInlineMax
	}
	hs, data := stageSizes(t, owner.Velo, sizes, 7)
	slots, _ := owner.StagedCounts()
	var wg sync.WaitGroup
	for _, cons := range conss {
		link(t, owner, cons, true)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range 4 {
				reqs := make([]GetRequest, len(hs))
				for i, h := range hs {
					reqs[i] = GetRequest{Handle: h}
				}
				leases := make([]*Lease, 0, len(hs))
				for i, r := range cons.GetBatch(tctx(t), reqs, nil) {
					if !assert.NoError(t, r.Err, "round %d, entry %d", round, i) {
						return
					}
					leases = append(leases, r.Lease)
					if !assert.Equal(t, metrics.PathInline, r.Lease.Path, "round %d, entry %d", round, i) ||
						!assert.Equal(t, data[i], r.Lease.Bytes(), "round %d, entry %d", round, i) {
						return
					}
				}
				for i, err := range cons.DetachLeases(tctx(t), leases) {
					assert.NoError(t, err, "round %d: detach %d", round, i)
				}
			}
		}()
	}
	wg.Wait()
	eventually(t, "no lease left on the owner", func() bool { _, l := owner.StagedCounts(); return l == 0 })
	left, _ := owner.StagedCounts()
	assert.Equal(t, slots, left, "every payload still staged")
}
