package velo

// The transfer telemetry through the whole runtime: two real instances over TCP (and the
// in-process RMA of rdmatest for the RDMA path; transfer_metrics_ucx_test.go runs it over real
// UCX), a known set of transfers, and the histograms and byte counters read back exactly.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/rendezvous/rdma/rdmatest"
)

// gatherFamily returns the family called name from g (nil when it has no series).
func gatherFamily(t testing.TB, g prometheus.Gatherer, name string) *dto.MetricFamily {
	t.Helper()
	mfs, err := g.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf
		}
	}
	return nil
}

// transferCounts is v's transfer histogram as "path/size" -> transfers, children with at least one.
func transferCounts(t testing.TB, v *Velo) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	mf := gatherFamily(t, v.Metrics(), metrics.TransferDurationSeconds)
	require.NotNil(t, mf, "the transfer histogram is registered")
	for _, m := range mf.GetMetric() {
		if n := m.GetHistogram().GetSampleCount(); n > 0 {
			out[label(m, "path")+"/"+label(m, "size")] = n
		}
	}
	return out
}

// leaseCounts is v's lease histogram as end -> leases, ends with at least one.
func leaseCounts(t testing.TB, v *Velo) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	mf := gatherFamily(t, v.Metrics(), metrics.LeaseDurationSeconds)
	require.NotNil(t, mf, "the lease histogram is registered")
	for _, m := range mf.GetMetric() {
		if n := m.GetHistogram().GetSampleCount(); n > 0 {
			out[label(m, "end")] = n
		}
	}
	return out
}

// leaseHistogram is the lease histogram's child for end.
func leaseHistogram(t testing.TB, v *Velo, end metrics.LeaseEnd) *dto.Histogram {
	t.Helper()
	for _, m := range gatherFamily(t, v.Metrics(), metrics.LeaseDurationSeconds).GetMetric() {
		if label(m, "end") == end.String() {
			return m.GetHistogram()
		}
	}
	t.Fatalf("no lease child %s", end)
	return nil
}

// peerBytes is v's per-peer byte counters as "peer/direction/path" -> bytes, every series.
func peerBytes(t testing.TB, v *Velo) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, m := range gatherFamily(t, v.Metrics(), metrics.PeerBytesTotal).GetMetric() {
		out[label(m, "peer")+"/"+label(m, "direction")+"/"+label(m, "path")] = m.GetCounter().GetValue()
	}
	return out
}

// pathBytes are the bytes one direction of a peer's series holds, by path.
type pathBytes struct{ rdma, chunked, inline, shm int }

// peerSeries is what peerBytes holds for one peer: the eight series with the given bytes.
func peerSeries(peer *Velo, received, served pathBytes) map[string]float64 {
	id := metrics.PeerLabel(uint64(peer.ID()))
	out := map[string]float64{}
	for dir, b := range map[string]pathBytes{"received": received, "served": served} {
		out[id+"/"+dir+"/rdma"] = float64(b.rdma)
		out[id+"/"+dir+"/chunked"] = float64(b.chunked)
		out[id+"/"+dir+"/inline"] = float64(b.inline)
		out[id+"/"+dir+"/shm"] = float64(b.shm)
	}
	return out
}

func bytesTotal(t testing.TB, v *Velo, direction, path string) float64 {
	t.Helper()
	for _, m := range gatherFamily(t, v.Metrics(), metrics.RendezvousBytesTotal).GetMetric() {
		if label(m, "direction") == direction && label(m, "path") == path {
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no %s series %s/%s", metrics.RendezvousBytesTotal, direction, path)
	return 0
}

// stage stages data on owner (pinned when asked) and returns its handle.
func stage(t *testing.T, owner *Velo, data []byte, pinned bool) Handle {
	t.Helper()
	var h Handle
	var err error
	if pinned {
		h, err = owner.StageDataPinned(tctx(t), data)
	} else {
		h, err = owner.StageData(tctx(t), data)
	}
	require.NoError(t, err)
	return h
}

// TestTransferTelemetryChunked: a consumer moves a known set of payloads from an owner over TCP
// with each API (Get, GetInto, GetBatch, ReadRanges), and a local Get of its own; its histogram
// counts each transfer once under its size class and the chunked path, the byte counters on
// both sides say exactly how many bytes moved with whom, and the owner's lease histogram says
// how each lease ended.
func TestTransferTelemetryChunked(t *testing.T) {
	cons, owner := pair(t)
	ctx := tctx(t)
	var moved int
	get := func(n int, seed uint64) {
		data := payload(n, seed)
		l, err := cons.Get(ctx, stage(t, owner, data, false))
		require.NoError(t, err)
		require.Equal(t, sum(data), sum(l.Bytes()))
		require.Equal(t, metrics.PathChunked, l.Path)
		require.NoError(t, l.Release(ctx))
		moved += n
	}
	get(100, 1)                // le_4k
	get(4096, 2)               // le_4k: the bound is inclusive
	get(1<<20, 3)              // le_1m
	get(3<<20, 4)              // le_16m, two pulls of the default 2 MiB chunk
	into := payload(10_000, 5) // le_64k
	dst := make([]byte, len(into))
	l, err := cons.GetInto(ctx, stage(t, owner, into, false), dst)
	require.NoError(t, err)
	require.Equal(t, sum(into), sum(dst))
	require.NoError(t, l.Release(ctx))
	moved += len(into)

	// A batch: each entry is a transfer of its own size; the one of at most 4 KiB comes inside
	// the acquire's answer (path inline).
	sizes := []int{2 << 10, 50 << 10, 70 << 10} // inline le_4k, le_64k, le_1m
	var reqs []GetRequest
	for i, n := range sizes {
		reqs = append(reqs, GetRequest{Handle: stage(t, owner, payload(n, uint64(10+i)), false)})
		moved += n
	}
	inline := sizes[0]
	moved -= inline
	var leases []*Lease
	for _, r := range cons.GetBatch(ctx, reqs, nil) {
		require.NoError(t, r.Err)
		leases = append(leases, r.Lease)
	}
	for _, err := range cons.ReleaseLeases(ctx, leases) {
		require.NoError(t, err)
	}

	// ReadRanges: each call is one transfer of the bytes it read.
	big := payload(5<<20, 20)
	hb := stage(t, owner, big, false)
	ranges := []Range{{Offset: 7, Length: 1 << 10, Dst: make([]byte, 1<<10)}, {Offset: 3 << 20, Length: 3 << 10, Dst: make([]byte, 3<<10)}}
	require.NoError(t, cons.ReadRanges(ctx, hb, ranges)) // 4 KiB: le_4k
	assert.Equal(t, big[7:7+1<<10], ranges[0].Dst)
	ranges = []Range{{Offset: 1 << 20, Length: 2 << 20, Dst: make([]byte, 2<<20)}}
	require.NoError(t, cons.ReadRanges(ctx, hb, ranges)) // 2 MiB: le_16m
	assert.Equal(t, big[1<<20:3<<20], ranges[0].Dst)
	moved += 4<<10 + 2<<20

	// A payload the consumer owns itself is a copy, not a transfer.
	ll, err := cons.Get(ctx, stage(t, cons, payload(1000, 30), false))
	require.NoError(t, err)
	require.NoError(t, ll.Release(ctx))

	assert.Equal(t, map[string]uint64{
		"chunked/le_4k": 3, "inline/le_4k": 1, "chunked/le_64k": 2, "chunked/le_1m": 2, "chunked/le_16m": 2,
	}, transferCounts(t, cons))
	assert.Empty(t, transferCounts(t, owner), "the owner moved nothing in")
	assert.Equal(t, peerSeries(owner, pathBytes{chunked: moved, inline: inline}, pathBytes{}), peerBytes(t, cons))
	assert.Equal(t, peerSeries(cons, pathBytes{}, pathBytes{chunked: moved, inline: inline}), peerBytes(t, owner))
	assert.EqualValues(t, moved, bytesTotal(t, cons, "received", "chunked"), "the per-peer bytes add up to the total")
	assert.EqualValues(t, moved, bytesTotal(t, owner, "sent", "chunked"))
	assert.EqualValues(t, inline, bytesTotal(t, cons, "received", "inline"))
	assert.EqualValues(t, inline, bytesTotal(t, owner, "sent", "inline"))

	// The owner's leases: 5 gets and 3 batch entries released, 2 ReadRanges detached. The
	// consumer's own lease (the local get) is its own.
	assert.Equal(t, map[string]uint64{"released": 8, "detached": 2}, leaseCounts(t, owner))
	assert.Equal(t, map[string]uint64{"released": 1}, leaseCounts(t, cons))
}

// TestTransferTelemetryRDMAPath: the same over the RDMA path (rdmatest's RMA below the registry):
// transfers count under rdma, a GET that fails and falls back to chunks counts once, under
// chunked; the owner's served rdma bytes are what each lease made readable.
func TestTransferTelemetryRDMAPath(t *testing.T) {
	f := rdmatest.NewFabric()
	owner, cons := rdmaNode(t, f, true), rdmaNode(t, f, true)
	link(t, owner, cons, true)
	ctx := tctx(t)

	l, err := cons.Get(ctx, stage(t, owner.Velo, payload(1<<20, 1), true))
	require.NoError(t, err)
	require.Equal(t, metrics.PathRDMA, l.Path)
	require.NoError(t, l.Release(ctx))

	var reqs []GetRequest
	for i, n := range []int{4 << 10, 64 << 10} {
		reqs = append(reqs, GetRequest{Handle: stage(t, owner.Velo, payload(n, uint64(2+i)), true)})
	}
	var leases []*Lease
	for i, r := range cons.GetBatch(ctx, reqs, nil) {
		require.NoError(t, r.Err)
		require.Equal(t, []metrics.Path{metrics.PathInline, metrics.PathRDMA}[i], r.Lease.Path, "4 KiB inside the acquire's answer, 64 KiB read")
		leases = append(leases, r.Lease)
	}
	for _, err := range cons.DetachLeases(ctx, leases) {
		require.NoError(t, err)
	}

	big := payload(8<<20, 4)
	ranges := []Range{{Offset: 0, Length: 4 << 10, Dst: make([]byte, 4<<10)}, {Offset: 5 << 20, Length: 8 << 10, Dst: make([]byte, 8<<10)}}
	require.NoError(t, cons.ReadRanges(ctx, stage(t, owner.Velo, big, true), ranges)) // 12 KiB: le_64k
	assert.Equal(t, big[5<<20:5<<20+8<<10], ranges[1].Dst)

	// One GET fails: the get re-acquires without an offer and pulls the chunks.
	cons.rt.FailGets.Store(1)
	fb := payload(200<<10, 5)
	l, err = cons.Get(ctx, stage(t, owner.Velo, fb, true))
	require.NoError(t, err)
	require.Equal(t, metrics.PathChunked, l.Path)
	require.Equal(t, metrics.ReasonGetFailed, l.Reason)
	require.Equal(t, sum(fb), sum(l.Bytes()))
	require.NoError(t, l.Release(ctx))

	assert.Equal(t, map[string]uint64{
		"rdma/le_1m": 1, "inline/le_4k": 1, "rdma/le_64k": 2, "chunked/le_1m": 1,
	}, transferCounts(t, cons.Velo))
	recvRDMA := 1<<20 + 64<<10 + 12<<10
	servedRDMA := 1<<20 + 64<<10 + 8<<20 + 200<<10 // whole payloads, one lease each, the failed GET's included
	assert.Equal(t, peerSeries(owner.Velo, pathBytes{rdma: recvRDMA, chunked: len(fb), inline: 4 << 10}, pathBytes{}), peerBytes(t, cons.Velo))
	assert.Equal(t, peerSeries(cons.Velo, pathBytes{}, pathBytes{rdma: servedRDMA, chunked: len(fb), inline: 4 << 10}), peerBytes(t, owner.Velo))
	assert.EqualValues(t, recvRDMA, bytesTotal(t, cons.Velo, "received", "rdma"))
	// Released: the Get and the fallback's lease; detached: the batch's two, ReadRanges', and the
	// lease whose GET failed (given up before the fallback's acquire). The abandon is sent in the
	// background: wait for it.
	eventually(t, "the failed GET's lease given up", func() bool { return leaseCounts(t, owner.Velo)["detached"] == 4 })
	assert.Equal(t, map[string]uint64{"released": 2, "detached": 4}, leaseCounts(t, owner.Velo))
}

// TestLeaseTelemetryByEnd: the owner's lease histogram tells a release from a TTL expiry from a
// consumer that went down, and the lifetimes it holds are the leases' own.
func TestLeaseTelemetryByEnd(t *testing.T) {
	const ttl = time.Second
	cons, owner := pair(t, WithLeaseTTL(ttl))
	ctx := tctx(t)

	l, err := cons.Get(ctx, stage(t, owner, payload(1000, 1), false))
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))

	// Held and never ended: the reaper expires it after the TTL.
	_, err = cons.Get(ctx, stage(t, owner, payload(1000, 2), false))
	require.NoError(t, err)
	eventually(t, "the lease expired", func() bool { return leaseCounts(t, owner)["expired"] == 1 })
	assert.GreaterOrEqual(t, leaseHistogram(t, owner, metrics.LeaseExpired).GetSampleSum(), ttl.Seconds(), "an expired lease lived at least the TTL")

	// A consumer that goes down with a lease open: peer_down (a second owner with the default
	// TTL, so that only the consumer's departure can end it in time).
	down, keeper := pair(t)
	_, err = down.Get(ctx, stage(t, keeper, payload(5000, 3), false))
	require.NoError(t, err)
	require.NoError(t, down.Close())
	eventually(t, "the lease of the consumer that went down ended", func() bool { return leaseCounts(t, keeper)["peer_down"] == 1 })

	assert.Equal(t, map[string]uint64{"released": 1, "expired": 1}, leaseCounts(t, owner))
	assert.Equal(t, map[string]uint64{"peer_down": 1}, leaseCounts(t, keeper))
}

// TestDepartedPeerSeriesGo: when a peer goes down its byte series go on both sides of the pair
// that remain, so a long-lived instance in a cluster with churn keeps series for live peers only;
// the other peers' series stay.
func TestDepartedPeerSeriesGo(t *testing.T) {
	vs := mesh(t, 3)
	hub, a, b := vs[0], vs[1], vs[2]
	ctx := tctx(t)
	for _, owner := range []*Velo{a, b} {
		l, err := hub.Get(ctx, stage(t, owner, payload(3000, 1), false))
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
	}
	l, err := a.Get(ctx, stage(t, hub, payload(700, 2), false))
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	want := peerSeries(a, pathBytes{chunked: 3000}, pathBytes{chunked: 700})
	for k, v := range peerSeries(b, pathBytes{chunked: 3000}, pathBytes{}) {
		want[k] = v
	}
	require.Equal(t, want, peerBytes(t, hub))

	require.NoError(t, a.Close())
	eventually(t, "the departed peer's series gone", func() bool { return len(peerBytes(t, hub)) == len(peerSeries(b, pathBytes{}, pathBytes{})) })
	assert.Equal(t, peerSeries(b, pathBytes{chunked: 3000}, pathBytes{}), peerBytes(t, hub), "the live peer's series stay")
	page := debugPage200(t, hub)
	i := strings.Index(page, `id="peer-bytes"`) // the peers table above lists the departed peer, down
	require.GreaterOrEqual(t, i, 0, "the page has the peer-bytes table")
	page = page[i:]
	assert.NotContains(t, page, "<code>"+metrics.PeerLabel(uint64(a.ID()))+"</code></td><td>", "the page drops the departed peer's bytes")
	assert.Contains(t, page, "<code>"+metrics.PeerLabel(uint64(b.ID()))+"</code></td><td>")
}

func debugPage200(t *testing.T, v *Velo) string {
	t.Helper()
	srv := httptest.NewServer(v.DebugHandler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// TestDebugPageShowsTransfers: the introspection page has the transfer table (count, p50 and p99
// per path and size class), the lease table and the per-peer bytes, in HTML and in JSON.
func TestDebugPageShowsTransfers(t *testing.T) {
	cons, owner := pair(t)
	ctx := tctx(t)
	for i := range 3 {
		l, err := cons.Get(ctx, stage(t, owner, payload(50<<10, uint64(i)), false))
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
	}
	page := debugPage200(t, cons)
	assert.Contains(t, page, `<table id="transfers">`)
	assert.Contains(t, page, "<td>chunked</td><td>le_64k</td><td>3</td>")
	assert.Contains(t, page, fmt.Sprintf("<td><code>%s</code></td><td>0</td><td>%d</td><td>0</td><td>0</td>", metrics.PeerLabel(uint64(owner.ID())), 3*50<<10))
	assert.NotContains(t, page, "<td>rdma</td>", "children without transfers are left out")
	opage := debugPage200(t, owner)
	assert.Contains(t, opage, "<td>released</td><td>3</td>")
	assert.NotContains(t, opage, "<td>chunked</td><td>le_64k</td>", "the owner moved nothing in")

	in := cons.Introspect()
	require.Len(t, in.Transfers, 1)
	tr := in.Transfers[0]
	assert.Equal(t, TransferInfo{Path: "chunked", Size: "le_64k", Count: 3, P50Micros: tr.P50Micros, P99Micros: tr.P99Micros}, tr)
	assert.True(t, tr.P50Micros > 0 && tr.P50Micros <= tr.P99Micros && tr.P99Micros <= 10e6, "p50 %v p99 %v", tr.P50Micros, tr.P99Micros)
	assert.Contains(t, page, micros(tr.P50Micros))
	require.Len(t, in.PeerBytes, 1)
	assert.Equal(t, PeerBytesInfo{Peer: metrics.PeerLabel(uint64(owner.ID())), ReceivedChunked: 3 * 50 << 10}, in.PeerBytes[0])

	var js Introspection
	srv := httptest.NewServer(owner.DebugHandler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "?format=json")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&js))
	require.Len(t, js.LeaseEnds, 1)
	assert.Equal(t, "released", js.LeaseEnds[0].End)
	assert.EqualValues(t, 3, js.LeaseEnds[0].Count)
	require.Len(t, js.PeerBytes, 1)
	assert.EqualValues(t, 3*50<<10, js.PeerBytes[0].ServedChunked)
	assert.Empty(t, js.Transfers)
}

func TestMicros(t *testing.T) {
	for us, want := range map[float64]string{
		12.34: "12.3µs", 999: "999µs", 4560: "4.56ms", 1.2e6: "1.2s", 315e6: "315s", 2500e6: "2500s",
	} {
		assert.Equal(t, want, micros(us), "%v µs", us)
	}
	assert.True(t, strings.HasSuffix(micros(0), "µs"))
}
