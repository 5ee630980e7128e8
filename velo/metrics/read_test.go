package metrics

import (
	"encoding/binary"
	"math"
	"slices"
	"sort"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readRegistry holds one family of each type the helpers meet, with known contents.
func readRegistry(t *testing.T) prometheus.Gatherer {
	t.Helper()
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "t_ops_total", Help: "x"}, []string{"op"})
	c.WithLabelValues("get").Add(3)
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "t_inflight", Help: "x"})
	g.Set(2)
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "t_seconds", Help: "x", Buckets: []float64{1, 2, 4}}, []string{"op"})
	for _, x := range []float64{0.5, 1.5, 1.5, 3, 10} {
		h.WithLabelValues("get").Observe(x)
	}
	h.WithLabelValues("put") // a child without observations
	s := prometheus.NewSummaryVec(prometheus.SummaryOpts{Name: "t_size_bytes", Help: "x",
		Objectives: map[float64]float64{0.5: 0.05, 0.99: 0.001}}, []string{"op"})
	for i := 1; i <= 100; i++ {
		s.WithLabelValues("get").Observe(float64(i))
	}
	require.NoError(t, reg.Register(c))
	require.NoError(t, reg.Register(g))
	require.NoError(t, reg.Register(h))
	require.NoError(t, reg.Register(s))
	return reg
}

// Each helper reads its own types and refuses the others with ErrWrongType, naming the helper
// that reads them; nothing reads as a silent zero.
func TestReadHelpersByType(t *testing.T) {
	reg := readRegistry(t)
	get := Labels{"op": "get"}
	for _, c := range []struct {
		name    string
		read    func() (any, error)
		want    any
		wrong   bool   // ErrWrongType
		missing bool   // ErrNoSeries
		says    string // in the error
	}{
		{"Value counter", func() (any, error) { return Value(reg, "t_ops_total", get) }, 3.0, false, false, ""},
		{"Value gauge", func() (any, error) { return Value(reg, "t_inflight", nil) }, 2.0, false, false, ""},
		{"Value histogram", func() (any, error) { return Value(reg, "t_seconds", get) }, nil, true, false, `metrics.Histogram(g, "t_seconds", labels)`},
		{"Value histogram count", func() (any, error) { return Value(reg, "t_seconds_count", get) }, 5.0, false, false, ""},
		{"Value histogram sum", func() (any, error) { return Value(reg, "t_seconds_sum", get) }, 16.5, false, false, ""},
		{"Value empty child's count", func() (any, error) { return Value(reg, "t_seconds_count", Labels{"op": "put"}) }, 0.0, false, false, ""},
		{"Value histogram bucket", func() (any, error) { return Value(reg, "t_seconds_bucket", get) }, nil, true, false, "metrics.Histogram"},
		{"Value histogram count, label typo", func() (any, error) { return Value(reg, "t_seconds_count", Labels{"op": "gets"}) }, nil, false, true, "op in [get put]"},
		{"Value summary", func() (any, error) { return Value(reg, "t_size_bytes", get) }, nil, true, false, `metrics.Summary(g, "t_size_bytes", labels)`},
		{"Value summary count", func() (any, error) { return Value(reg, "t_size_bytes_count", get) }, 100.0, false, false, ""},
		{"Value summary sum", func() (any, error) { return Value(reg, "t_size_bytes_sum", get) }, 5050.0, false, false, ""},
		{"Value summary has no bucket", func() (any, error) { return Value(reg, "t_size_bytes_bucket", get) }, nil, false, true, "no family t_size_bytes_bucket"},
		{"Value counter has no count", func() (any, error) { return Value(reg, "t_ops_total_count", get) }, nil, false, true, ""},
		{"Histogram counter", func() (any, error) { return Histogram(reg, "t_ops_total", get) }, nil, true, false, `metrics.Value(g, "t_ops_total", labels)`},
		{"Histogram summary", func() (any, error) { return Histogram(reg, "t_size_bytes", get) }, nil, true, false, "metrics.Summary"},
		{"Histogram typo", func() (any, error) { return Histogram(reg, "t_second", get) }, nil, false, true, "t_second"},
		{"Histogram label typo", func() (any, error) { return Histogram(reg, "t_seconds", Labels{"kind": "get"}) }, nil, false, true, "op in [get put]"},
		{"Summary histogram", func() (any, error) { return Summary(reg, "t_seconds", get) }, nil, true, false, "metrics.Histogram"},
		{"Summary gauge", func() (any, error) { return Summary(reg, "t_inflight", nil) }, nil, true, false, "metrics.Value"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.read()
			switch {
			case c.wrong:
				require.ErrorIs(t, err, ErrWrongType)
			case c.missing:
				require.ErrorIs(t, err, ErrNoSeries)
			default:
				require.NoError(t, err)
				assert.Equal(t, c.want, got)
				return
			}
			assert.Contains(t, err.Error(), c.says)
		})
	}
}

func TestHistogramAndSummaryRead(t *testing.T) {
	reg := readRegistry(t)
	h, err := Histogram(reg, "t_seconds", Labels{"op": "get"})
	require.NoError(t, err)
	assert.Equal(t, HistogramValue{Count: 5, Sum: 16.5, Buckets: []Bucket{{1, 1}, {2, 3}, {4, 4}}}, h)
	assert.InDelta(t, 1.75, h.Quantile(0.5), 1e-9, "rank 2.5 is half-way through (1, 2]'s two observations")
	assert.InDelta(t, 4, h.Quantile(0.99), 1e-9, "above every finite bound: the largest")
	// The same histogram through its alias name, and the empty child.
	alias, err := Histogram(reg, "t_seconds_count", Labels{"op": "get"})
	require.NoError(t, err)
	assert.Equal(t, h, alias)
	empty, err := Histogram(reg, "t_seconds", Labels{"op": "put"})
	require.NoError(t, err)
	assert.Zero(t, empty.Count)
	assert.True(t, math.IsNaN(empty.Quantile(0.5)), "no observations: no quantile, not 0")

	s, err := Summary(reg, "t_size_bytes", Labels{"op": "get"})
	require.NoError(t, err)
	assert.EqualValues(t, 100, s.Count)
	assert.Equal(t, 5050.0, s.Sum)
	require.Len(t, s.Quantiles, 2)
	assert.Equal(t, 0.5, s.Quantiles[0].Quantile)
	assert.InDelta(t, 50, s.Quantile(0.5), 5)
	assert.InDelta(t, 99, s.Quantile(0.99), 1)
	assert.True(t, math.IsNaN(s.Quantile(0.9)), "a quantile the summary does not compute")
}

func TestLinesOfEachType(t *testing.T) {
	reg := readRegistry(t)
	for _, c := range []struct {
		name string
		want []string
	}{
		{"t_ops_total", []string{`t_ops_total{op="get"} 3`}},
		{"t_seconds", []string{`t_seconds_count{op="get"} 5`, `t_seconds_count{op="put"} 0`, `t_seconds_sum{op="get"} 16.5`, `t_seconds_sum{op="put"} 0`}},
		{"t_seconds_count", []string{`t_seconds_count{op="get"} 5`, `t_seconds_count{op="put"} 0`}},
		{"t_size_bytes_sum", []string{`t_size_bytes_sum{op="get"} 5050`}},
	} {
		l, err := Lines(reg, c.name)
		require.NoError(t, err)
		assert.Equal(t, c.want, l, c.name)
	}
	l, err := Lines(reg, "t_size_bytes")
	require.NoError(t, err)
	require.Len(t, l, 4)
	assert.Equal(t, []string{`t_size_bytes_count{op="get"} 100`, `t_size_bytes_sum{op="get"} 5050`}, l[:2])
	assert.Regexp(t, `^t_size_bytes\{op="get",quantile="0.5"\} \d+$`, l[2])
	assert.Regexp(t, `^t_size_bytes\{op="get",quantile="0.99"\} \d+$`, l[3])
}

// A series whose exposition lacks its value (a Gatherer of another making) is an error, never 0.
func TestMalformedSeriesIsAnError(t *testing.T) {
	name, typ := "t_broken_total", dto.MetricType_COUNTER
	g := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		return []*dto.MetricFamily{{Name: &name, Type: &typ, Metric: []*dto.Metric{{}}}}, nil
	})
	_, err := Value(g, name, nil)
	require.ErrorIs(t, err, ErrWrongType)
	_, err = Lines(g, name)
	require.ErrorIs(t, err, ErrWrongType)
}

// FuzzHistogramRead observes what the fuzzer gives into a real histogram and holds the readers
// to it: Histogram's count and sum are the observations', Value refuses the family and reads its
// _count, and each quantile estimate lies inside the bucket that holds the observation of that
// rank, never decreasing with q.
func FuzzHistogramRead(f *testing.F) {
	f.Add([]byte{0, 1, 0, 2, 0, 3})
	f.Add([]byte{0xff, 0xff, 0, 0})
	f.Add([]byte{})
	f.Add([]byte{0x10, 0, 0x10, 0, 0x10, 0, 0x10, 0})
	bounds := fuzzBounds()
	f.Fuzz(func(t *testing.T, data []byte) {
		reg := prometheus.NewRegistry()
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "f_seconds", Help: "x", Buckets: bounds})
		require.NoError(t, reg.Register(h))
		var obs []float64
		var sum float64
		for i := 0; i+2 <= len(data); i += 2 {
			x := float64(binary.BigEndian.Uint16(data[i:])) / 1000 // 0 to 65.5 s: past the top bound too
			h.Observe(x)
			obs = append(obs, x)
			sum += x
		}
		hv, err := Histogram(reg, "f_seconds", nil)
		require.NoError(t, err)
		require.EqualValues(t, len(obs), hv.Count)
		require.InDelta(t, sum, hv.Sum, 1e-6*max(1, sum))
		_, err = Value(reg, "f_seconds", nil)
		require.ErrorIs(t, err, ErrWrongType)
		c, err := Value(reg, "f_seconds_count", nil)
		require.NoError(t, err)
		require.EqualValues(t, len(obs), c)
		if len(obs) == 0 {
			require.True(t, math.IsNaN(hv.Quantile(0.5)))
			return
		}
		sort.Float64s(obs)
		prev := math.Inf(-1)
		for _, q := range []float64{0, 0.01, 0.25, 0.5, 0.9, 0.99, 0.999, 1} {
			est := hv.Quantile(q)
			require.GreaterOrEqual(t, est, prev, "q %g", q)
			prev = est
			k := max(1, int(math.Ceil(q*float64(len(obs)))))
			x := obs[k-1]
			i, _ := slices.BinarySearch(bounds, x) // the bucket holding x: the first bound >= x
			if i == len(bounds) {
				require.Equal(t, bounds[len(bounds)-1], est, "q %g: rank above every bound", q)
				continue
			}
			lower := 0.0
			if i > 0 {
				lower = bounds[i-1]
			}
			require.True(t, est >= lower-1e-12 && est <= bounds[i]+1e-12, "q %g: estimate %g outside (%g, %g], the bucket of %g", q, est, lower, bounds[i], x)
		}
	})
}

// fuzzBounds are the fuzz histogram's bounds: 1 ms to 10 s, three per decade like the transfer
// histogram's.
func fuzzBounds() []float64 { return prometheus.ExponentialBucketsRange(1e-3, 10, 13) }
