package metrics

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// family gathers reg and returns the family called name (nil when absent).
func family(t *testing.T, g prometheus.Gatherer, name string) *dto.MetricFamily {
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

// series returns the metric of family name whose labels are exactly want (nil when absent).
func series(t *testing.T, g prometheus.Gatherer, name string, want map[string]string) *dto.Metric {
	t.Helper()
	mf := family(t, g, name)
	if mf == nil {
		return nil
	}
next:
	for _, m := range mf.GetMetric() {
		if len(m.GetLabel()) != len(want) {
			continue
		}
		for _, lp := range m.GetLabel() {
			if want[lp.GetName()] != lp.GetValue() {
				continue next
			}
		}
		return m
	}
	return nil
}

func TestClassOfBounds(t *testing.T) {
	for _, c := range []struct {
		n    uint64
		want SizeClass
	}{
		{0, SizeLE4K}, {1, SizeLE4K}, {4 << 10, SizeLE4K}, {4<<10 + 1, SizeLE64K},
		{64 << 10, SizeLE64K}, {64<<10 + 1, SizeLE1M}, {1 << 20, SizeLE1M}, {1<<20 + 1, SizeLE16M},
		{8 << 20, SizeLE16M}, {16 << 20, SizeLE16M}, {16<<20 + 1, SizeLE256M}, {64 << 20, SizeLE256M},
		{256 << 20, SizeLE256M}, {256<<20 + 1, SizeGT256M}, {1 << 40, SizeGT256M}, {math.MaxUint64, SizeGT256M},
	} {
		assert.Equal(t, c.want, ClassOf(c.n), "%d bytes", c.n)
	}
	assert.Equal(t, "le_64k", SizeLE64K.String())
	assert.Equal(t, "SizeClass(9)", SizeClass(9).String())
	assert.Equal(t, "peer_down", LeasePeerDown.String())
}

// The transfer buckets cover 1 µs to 10 s at three per decade; the lease buckets are the same
// steps, continued to 1000 s.
func TestBucketsSpanTheRange(t *testing.T) {
	require.Len(t, TransferBuckets, 22)
	assert.InDelta(t, 1e-6, TransferBuckets[0], 1e-12)
	assert.InDelta(t, 10, TransferBuckets[len(TransferBuckets)-1], 1e-9)
	for i := 1; i < len(TransferBuckets); i++ {
		assert.InDelta(t, math.Cbrt(10), TransferBuckets[i]/TransferBuckets[i-1], 1e-9)
	}
	require.Len(t, LeaseBuckets, 28)
	for i, b := range TransferBuckets {
		assert.InEpsilon(t, b, LeaseBuckets[i], 1e-9, "lease bound %d", i)
	}
	assert.InDelta(t, 1000, LeaseBuckets[len(LeaseBuckets)-1], 1e-6)
}

// Every transfer child exists at zero from the start (two paths by six size classes), and every
// lease end; the per-peer family starts empty.
func TestTransferFamiliesExistAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	_, err := New(reg)
	require.NoError(t, err)
	mf := family(t, reg, TransferDurationSeconds)
	require.NotNil(t, mf)
	assert.Len(t, mf.GetMetric(), len(transferPaths)*len(SizeClasses))
	for _, p := range []Path{PathRDMA, PathChunked} {
		for _, c := range SizeClasses {
			m := series(t, reg, TransferDurationSeconds, map[string]string{"path": string(p), "size": c})
			require.NotNil(t, m, "%s %s", p, c)
			assert.Zero(t, m.GetHistogram().GetSampleCount())
			assert.Len(t, m.GetHistogram().GetBucket(), len(TransferBuckets))
		}
	}
	mf = family(t, reg, LeaseDurationSeconds)
	require.NotNil(t, mf)
	assert.Len(t, mf.GetMetric(), len(LeaseEnds))
	assert.Nil(t, family(t, reg, PeerBytesTotal), "no peer, no series")
}

func TestObservationsLandInTheirChildren(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	require.NoError(t, err)
	m.ObserveTransfer(PathRDMA, 1<<20, 300*time.Microsecond)
	m.ObserveTransfer(PathRDMA, 1<<20, 500*time.Microsecond)
	m.ObserveTransfer(PathChunked, 100, time.Millisecond)
	m.ObserveTransfer("tcp", 100, time.Millisecond) // not a path: ignored
	m.ObserveLease(LeaseExpired, 31*time.Second)
	m.ObserveLease(LeaseEnd(77), time.Second) // not an end: ignored
	h := series(t, reg, TransferDurationSeconds, map[string]string{"path": "rdma", "size": "le_1m"}).GetHistogram()
	assert.EqualValues(t, 2, h.GetSampleCount())
	assert.InDelta(t, 800e-6, h.GetSampleSum(), 1e-12)
	assert.EqualValues(t, 1, series(t, reg, TransferDurationSeconds, map[string]string{"path": "chunked", "size": "le_4k"}).GetHistogram().GetSampleCount())
	var total uint64
	for _, s := range family(t, reg, TransferDurationSeconds).GetMetric() {
		total += s.GetHistogram().GetSampleCount()
	}
	assert.EqualValues(t, 3, total)
	l := series(t, reg, LeaseDurationSeconds, map[string]string{"end": "expired"}).GetHistogram()
	assert.EqualValues(t, 1, l.GetSampleCount())
	// 31 s lands in a finite bucket, (21.5 s, 46.4 s], not in +Inf.
	p50 := HistogramQuantile(0.5, l)
	assert.True(t, p50 > 21.5 && p50 < 46.5, "p50 %g", p50)
}

// A peer's series appear with its first bytes, count exactly, and go with ForgetPeer; the next
// transfer with it starts them again from zero.
func TestPeerSeriesComeAndGo(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	require.NoError(t, err)
	const a, b = 0xa1, 0xb2
	m.PeerReceived(a, PathChunked, 1000)
	m.PeerReceived(a, PathChunked, 24)
	m.PeerReceived(a, PathRDMA, 7)
	m.PeerServed(b, PathRDMA, 4096)
	m.PeerServed(b, "local", 5) // not a path: ignored
	m.PeerServed(b, PathChunked, 0)
	val := func(peer uint64, dir string, p Path) float64 {
		s := series(t, reg, PeerBytesTotal, map[string]string{"peer": PeerLabel(peer), "direction": dir, "path": string(p)})
		require.NotNil(t, s, "%x %s %s", peer, dir, p)
		return s.GetCounter().GetValue()
	}
	assert.EqualValues(t, 1024, val(a, "received", PathChunked))
	assert.EqualValues(t, 7, val(a, "received", PathRDMA))
	assert.EqualValues(t, 0, val(a, "served", PathRDMA))
	assert.EqualValues(t, 4096, val(b, "served", PathRDMA))
	m.PeerReceived(a, PathInline, 4096)
	assert.EqualValues(t, 4096, val(a, "received", PathInline))
	assert.Len(t, family(t, reg, PeerBytesTotal).GetMetric(), 16, "eight series per peer: two directions, four paths")
	assert.Equal(t, "00000000000000a1", PeerLabel(a))

	m.ForgetPeer(a)
	m.ForgetPeer(0xdead) // never seen: nothing to do
	for _, s := range family(t, reg, PeerBytesTotal).GetMetric() {
		for _, lp := range s.GetLabel() {
			if lp.GetName() == "peer" {
				assert.Equal(t, PeerLabel(b), lp.GetValue(), "a forgotten peer's series are gone")
			}
		}
	}
	m.PeerReceived(a, PathChunked, 5)
	assert.EqualValues(t, 5, val(a, "received", PathChunked), "a peer that is back starts from zero")
}

// The observations on the transfer path allocate nothing: the children are resolved up front (a
// peer's on its first bytes).
func TestObservationsDoNotAllocate(t *testing.T) {
	m, err := New(prometheus.NewRegistry())
	require.NoError(t, err)
	m.PeerReceived(1, PathRDMA, 1)
	assert.Zero(t, testing.AllocsPerRun(1000, func() {
		m.ObserveTransfer(PathChunked, 3<<20, 2*time.Millisecond)
		m.ObserveLease(LeaseReleased, time.Millisecond)
		m.PeerReceived(1, PathRDMA, 4096)
		m.PeerServed(1, PathChunked, 4096)
	}))
}

func BenchmarkObserveTransfer(b *testing.B) {
	m, err := New(prometheus.NewRegistry())
	require.NoError(b, err)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.ObserveTransfer(PathRDMA, 64<<10, 20*time.Microsecond)
			m.PeerReceived(7, PathRDMA, 64<<10)
		}
	})
}

// The transfer families, with observations and a peer's series in them, pass promlint.
func TestTransferFamiliesLint(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	require.NoError(t, err)
	m.ObserveTransfer(PathRDMA, 1<<20, time.Millisecond)
	m.ObserveLease(LeaseReleased, time.Millisecond)
	m.PeerReceived(1, PathChunked, 10)
	m.PeerServed(2, PathRDMA, 10)
	var sb strings.Builder
	for _, name := range []string{TransferDurationSeconds, LeaseDurationSeconds, PeerBytesTotal} {
		mf := family(t, reg, name)
		require.NotNil(t, mf, name)
		_, err := expfmt.MetricFamilyToText(&sb, mf)
		require.NoError(t, err)
	}
	problems, err := promlint.New(strings.NewReader(sb.String())).Lint()
	require.NoError(t, err)
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

func TestHistogramQuantile(t *testing.T) {
	bucket := func(upper float64, cum uint64) *dto.Bucket {
		return &dto.Bucket{UpperBound: &upper, CumulativeCount: &cum}
	}
	hist := func(count uint64, bs ...*dto.Bucket) *dto.Histogram {
		return &dto.Histogram{SampleCount: &count, Bucket: bs}
	}
	assert.True(t, math.IsNaN(HistogramQuantile(0.5, hist(0, bucket(1, 0)))), "no observations")
	// 10 observations: 4 in (0,1], 4 in (1,2], 2 in (2,4].
	h := hist(10, bucket(1, 4), bucket(2, 8), bucket(4, 10))
	assert.InDelta(t, 1.25, HistogramQuantile(0.5, h), 1e-9)
	assert.InDelta(t, 0.5, HistogramQuantile(0.2, h), 1e-9)
	assert.InDelta(t, 3.9, HistogramQuantile(0.99, h), 1e-9)
	assert.InDelta(t, 4, HistogramQuantile(1, h), 1e-9)
	// A rank above every finite bound answers the largest one.
	h = hist(10, bucket(1, 1), bucket(2, 2), bucket(math.Inf(+1), 10))
	assert.InDelta(t, 2, HistogramQuantile(0.99, h), 1e-9)
	// Against a real histogram: 99 fast observations and one slow one.
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	require.NoError(t, err)
	for range 99 {
		m.ObserveTransfer(PathChunked, 1, 50*time.Microsecond)
	}
	m.ObserveTransfer(PathChunked, 1, 3*time.Second)
	rh := series(t, reg, TransferDurationSeconds, map[string]string{"path": "chunked", "size": "le_4k"}).GetHistogram()
	p50 := HistogramQuantile(0.5, rh)
	assert.True(t, p50 > 21.5e-6 && p50 <= 100e-6, "p50 %g in the bucket of 50 µs", p50)
	p999 := HistogramQuantile(0.999, rh)
	assert.True(t, p999 > 2.15 && p999 <= 4.65, "p99.9 %g in the bucket of 3 s", p999)
}
