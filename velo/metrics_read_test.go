package velo

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/metrics"
)

// TestMetricsReadTheTransferHistogram: after a GetBatch of 512 × 64 KiB between two instances,
// the consumer's transfer histogram holds 512 observations, and every reading helper says so or
// refuses: Value on the histogram is an error naming metrics.Histogram (never a zero), Histogram
// reads the count, sum and a quantile, Value reads the _count and _sum lines, and Lines prints
// them.
func TestMetricsReadTheTransferHistogram(t *testing.T) {
	const n, size = 512, 64 << 10
	cons, owner := pair(t)
	ctx := tctx(t)
	reqs := make([]GetRequest, n)
	for i := range reqs {
		reqs[i] = GetRequest{Handle: stage(t, owner, payload(size, uint64(i)), false)}
	}
	var leases []*Lease
	for i, r := range cons.GetBatch(ctx, reqs, nil) {
		require.NoError(t, r.Err, "entry %d", i)
		leases = append(leases, r.Lease)
	}
	for _, err := range cons.ReleaseLeases(ctx, leases) {
		require.NoError(t, err)
	}

	name := metrics.TransferDurationSeconds
	labels := metrics.Labels{"path": "chunked", "size": "le_64k"}

	v, err := metrics.Value(cons.Metrics(), name, labels)
	require.ErrorIs(t, err, metrics.ErrWrongType, "a histogram has no single value (read %v)", v)
	assert.Contains(t, err.Error(), "metrics.Histogram(")
	assert.Contains(t, err.Error(), name+"_count")

	h, err := metrics.Histogram(cons.Metrics(), name, labels)
	require.NoError(t, err)
	assert.EqualValues(t, n, h.Count)
	// The same child as the exposition holds it.
	var raw float64
	for _, m := range gatherFamily(t, cons.Metrics(), name).GetMetric() {
		if label(m, "path") == "chunked" && label(m, "size") == "le_64k" {
			raw = m.GetHistogram().GetSampleSum()
		}
	}
	assert.Equal(t, raw, h.Sum)
	assert.Positive(t, h.Sum)
	assert.Len(t, h.Buckets, len(metrics.TransferBuckets))
	p50, p99 := h.Quantile(0.5), h.Quantile(0.99)
	assert.Positive(t, p50)
	assert.LessOrEqual(t, p50, p99)
	assert.LessOrEqual(t, p99, metrics.TransferBuckets[len(metrics.TransferBuckets)-1])

	count, err := metrics.Value(cons.Metrics(), name+"_count", labels)
	require.NoError(t, err)
	assert.EqualValues(t, n, count)
	s, err := metrics.Value(cons.Metrics(), name+"_sum", labels)
	require.NoError(t, err)
	assert.Equal(t, h.Sum, s)
	_, err = metrics.Value(cons.Metrics(), name+"_bucket", labels)
	require.ErrorIs(t, err, metrics.ErrWrongType)

	lines, err := metrics.Lines(cons.Metrics(), name)
	require.NoError(t, err)
	assert.Contains(t, lines, fmt.Sprintf(`%s_count{path="chunked",size="le_64k"} %d`, name, n))
	assert.Contains(t, lines, fmt.Sprintf(`%s_sum{path="chunked",size="le_64k"} %g`, name, h.Sum))
	paths := []metrics.Path{metrics.PathRDMA, metrics.PathChunked, metrics.PathInline, metrics.PathSameHost}
	assert.Len(t, lines, 2*len(paths)*len(metrics.SizeClasses), "count and sum of each child: every path by every size")

	// A label typo in Histogram is ErrNoSeries with the values that exist.
	_, err = metrics.Histogram(cons.Metrics(), name, metrics.Labels{"path": "chunked", "size": "le_64K"})
	require.ErrorIs(t, err, metrics.ErrNoSeries)
	assert.Contains(t, err.Error(), "size in [gt_256m le_16m le_1m le_256m le_4k le_64k]")
}
