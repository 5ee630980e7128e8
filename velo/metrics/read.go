package metrics

// Reading series back: Value (counters, gauges), Histogram, Summary and Lines find a family and a
// series the same way, here.
//
// Why it is built this way: a test, an example or a health check reads a series to decide
// something, so a read that cannot answer must say so. Each helper reads the types it knows and
// refuses the others with ErrWrongType, naming the helper that reads them, instead of answering
// zero; a name or label that matches nothing is ErrNoSeries, listing what exists.

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// HistogramValue is one histogram series as Histogram read it.
type HistogramValue struct {
	// Count is the number of observations, Sum their sum.
	Count uint64
	Sum   float64
	// Buckets are the cumulative counts by upper bound, ascending, as the exposition's _bucket
	// lines give them; observations above the last bound are in Count only (the +Inf bucket).
	Buckets []Bucket
}

// Bucket is one bucket of a histogram: how many observations were at most UpperBound.
type Bucket struct {
	UpperBound      float64
	CumulativeCount uint64
}

// Quantile estimates the q-quantile (0 <= q <= 1) from the buckets, as Prometheus'
// histogram_quantile does: linear interpolation inside the bucket that holds the rank, from the
// bound of the bucket below (0 for the first). A rank above the last finite bound answers that
// bound. It is NaN when there are no observations, no buckets (a native histogram) or q is NaN.
// The estimate is as fine as the buckets: velo's transfer histogram has three per decade.
func (h HistogramValue) Quantile(q float64) float64 { return quantile(q, h.Count, h.Buckets) }

// SummaryValue is one summary series as Summary read it.
type SummaryValue struct {
	Count uint64
	Sum   float64
	// Quantiles are the ones the summary computes (its Objectives), ascending.
	Quantiles []SummaryQuantile
}

// SummaryQuantile is one quantile a summary computed.
type SummaryQuantile struct {
	Quantile, Value float64
}

// Quantile is the summary's value for the q-quantile; NaN when the summary does not compute that
// one (a summary cannot estimate others: its Quantiles say which it has).
func (s SummaryValue) Quantile(q float64) float64 {
	for _, x := range s.Quantiles {
		if x.Quantile == q {
			return x.Value
		}
	}
	return math.NaN()
}

// Histogram reads the histogram series called name whose labels include all of want (nil: the
// family's first series): its count, sum and buckets, from which Quantile estimates. A name or
// label that matches nothing is an error wrapping ErrNoSeries; a family of another type one
// wrapping ErrWrongType that names the helper that reads it.
//
//	h, err := metrics.Histogram(v.Metrics(), metrics.TransferDurationSeconds, metrics.Labels{"path": "rdma", "size": "le_64k"})
//	fmt.Println(h.Count, h.Sum/float64(h.Count), h.Quantile(0.99))
func Histogram(g prometheus.Gatherer, name string, want Labels) (HistogramValue, error) {
	_, mt, err := lookup(g, name, want, "Histogram", histogramType)
	if err != nil {
		return HistogramValue{}, err
	}
	h := mt.GetHistogram()
	v := HistogramValue{Count: h.GetSampleCount(), Sum: h.GetSampleSum()}
	if h.SampleCountFloat != nil && h.SampleCount == nil { // a float histogram (native)
		v.Count = uint64(h.GetSampleCountFloat())
	}
	for _, b := range h.GetBucket() {
		if math.IsInf(b.GetUpperBound(), +1) {
			continue // the same as Count
		}
		v.Buckets = append(v.Buckets, Bucket{UpperBound: b.GetUpperBound(), CumulativeCount: b.GetCumulativeCount()})
	}
	return v, nil
}

// Summary reads the summary series called name whose labels include all of want: its count, sum
// and the quantiles it computes. Errors as Histogram's. velo itself exports no summary; a
// Gatherer that also holds the Go collector has one (go_gc_duration_seconds).
func Summary(g prometheus.Gatherer, name string, want Labels) (SummaryValue, error) {
	_, mt, err := lookup(g, name, want, "Summary", func(t dto.MetricType) bool { return t == dto.MetricType_SUMMARY })
	if err != nil {
		return SummaryValue{}, err
	}
	s := mt.GetSummary()
	v := SummaryValue{Count: s.GetSampleCount(), Sum: s.GetSampleSum()}
	for _, q := range s.GetQuantile() {
		v.Quantiles = append(v.Quantiles, SummaryQuantile{Quantile: q.GetQuantile(), Value: q.GetValue()})
	}
	sort.Slice(v.Quantiles, func(i, j int) bool { return v.Quantiles[i].Quantile < v.Quantiles[j].Quantile })
	return v, nil
}

// HistogramQuantile estimates the q-quantile of a histogram from its buckets, as
// HistogramValue.Quantile does, for a series already gathered.
func HistogramQuantile(q float64, h *dto.Histogram) float64 {
	bs := make([]Bucket, 0, len(h.GetBucket()))
	for _, b := range h.GetBucket() {
		if !math.IsInf(b.GetUpperBound(), +1) {
			bs = append(bs, Bucket{UpperBound: b.GetUpperBound(), CumulativeCount: b.GetCumulativeCount()})
		}
	}
	return quantile(q, h.GetSampleCount(), bs)
}

func quantile(q float64, count uint64, buckets []Bucket) float64 {
	if count == 0 || len(buckets) == 0 || math.IsNaN(q) {
		return math.NaN()
	}
	q = min(max(q, 0), 1)
	rank := q * float64(count)
	lower, below := 0.0, uint64(0)
	for _, b := range buckets {
		upper, cum := b.UpperBound, b.CumulativeCount
		if float64(cum) >= rank && cum > below {
			return lower + (upper-lower)*(rank-float64(below))/float64(cum-below)
		}
		lower, below = upper, cum
	}
	return lower // the rank is above every finite bound
}

// lookup finds the family called name (or the histogram or summary whose exposition line name is)
// and its first series whose labels include want, for helper, which reads the types ok accepts.
func lookup(g prometheus.Gatherer, name string, want Labels, helper string, ok func(dto.MetricType) bool) (*dto.MetricFamily, *dto.Metric, error) {
	mfs, err := g.Gather()
	if err != nil {
		return nil, nil, err
	}
	mf, _ := findFamily(mfs, name)
	if mf == nil {
		return nil, nil, fmt.Errorf("metrics: %w: no family %s is registered here", ErrNoSeries, name)
	}
	if !ok(mf.GetType()) {
		return nil, nil, wrongType(mf, helper)
	}
	mt, err := pick(mf, mf.GetName(), want)
	return mf, mt, err
}

// findFamily returns the family called name, or, when there is none, the histogram or summary
// whose exposition has a line of that name, with the line's part ("count", "sum", "bucket").
func findFamily(mfs []*dto.MetricFamily, name string) (*dto.MetricFamily, string) {
	byName := func(n string) *dto.MetricFamily {
		for _, mf := range mfs {
			if mf.GetName() == n {
				return mf
			}
		}
		return nil
	}
	if mf := byName(name); mf != nil {
		return mf, ""
	}
	for _, part := range []string{"count", "sum", "bucket"} {
		stem, found := strings.CutSuffix(name, "_"+part)
		if !found {
			continue
		}
		mf := byName(stem)
		if mf != nil && (histogramType(mf.GetType()) || (mf.GetType() == dto.MetricType_SUMMARY && part != "bucket")) {
			return mf, part
		}
	}
	return nil, ""
}

// pick returns the family's first series whose labels include all of want, or an error wrapping
// ErrNoSeries that lists the label values the family has.
func pick(mf *dto.MetricFamily, name string, want Labels) (*dto.Metric, error) {
	seen := map[string]map[string]bool{} // label name -> values present
next:
	for _, mt := range mf.GetMetric() {
		have := map[string]string{}
		for _, lp := range mt.GetLabel() {
			have[lp.GetName()] = lp.GetValue()
			if seen[lp.GetName()] == nil {
				seen[lp.GetName()] = map[string]bool{}
			}
			seen[lp.GetName()][lp.GetValue()] = true
		}
		for k, v := range want {
			if got, ok := have[k]; !ok || got != v {
				continue next
			}
		}
		return mt, nil
	}
	return nil, fmt.Errorf("metrics: %w: %s has no series with %s (its labels: %s)", ErrNoSeries, name, formatLabels(want), describeLabels(seen))
}

func scalarType(t dto.MetricType) bool {
	return t == dto.MetricType_COUNTER || t == dto.MetricType_GAUGE || t == dto.MetricType_UNTYPED
}

func histogramType(t dto.MetricType) bool {
	return t == dto.MetricType_HISTOGRAM || t == dto.MetricType_GAUGE_HISTOGRAM
}

// wrongType is the error of helper asked for a family it does not read: it names the helper that
// does.
func wrongType(mf *dto.MetricFamily, helper string) error {
	name := mf.GetName()
	var use string
	switch t := mf.GetType(); {
	case histogramType(t):
		use = fmt.Sprintf("metrics.Histogram(g, %q, labels) reads its Count, Sum, Buckets and Quantile(q); metrics.Value reads %s_count and %s_sum", name, name, name)
	case t == dto.MetricType_SUMMARY:
		use = fmt.Sprintf("metrics.Summary(g, %q, labels) reads its Count, Sum and Quantiles; metrics.Value reads %s_count and %s_sum", name, name, name)
	case scalarType(t):
		use = fmt.Sprintf("metrics.Value(g, %q, labels) reads it", name)
	default:
		use = "no helper of this package reads it"
	}
	return fmt.Errorf("metrics: %w: %s is a %s, which %s does not read: %s", ErrWrongType, name, typeName(mf.GetType()), helper, use)
}

func typeName(t dto.MetricType) string {
	switch t {
	case dto.MetricType_GAUGE_HISTOGRAM:
		return "gauge histogram"
	case dto.MetricType_UNTYPED:
		return "untyped series"
	}
	return strings.ToLower(t.String())
}

// scalar is a counter's, gauge's or untyped series' value; a series that lacks it (a malformed
// exposition) is an error, not a zero.
func scalar(mf *dto.MetricFamily, m *dto.Metric) (float64, error) {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue(), nil
	case m.Gauge != nil:
		return m.Gauge.GetValue(), nil
	case m.Untyped != nil:
		return m.Untyped.GetValue(), nil
	}
	return 0, fmt.Errorf("metrics: %w: a series of %s carries no %s value", ErrWrongType, mf.GetName(), typeName(mf.GetType()))
}

func sampleCount(m *dto.Metric) uint64 {
	if h := m.GetHistogram(); h != nil {
		if h.SampleCount == nil && h.SampleCountFloat != nil {
			return uint64(h.GetSampleCountFloat())
		}
		return h.GetSampleCount()
	}
	return m.GetSummary().GetSampleCount()
}

func sampleSum(m *dto.Metric) float64 {
	if h := m.GetHistogram(); h != nil {
		return h.GetSampleSum()
	}
	return m.GetSummary().GetSampleSum()
}

// line is one exposition line of a series; suffix is "count" or "sum" for those lines of a
// histogram or summary, "" for the others.
type line struct {
	suffix, text string
}

// exposition renders the lines Lines prints for one series.
func exposition(mf *dto.MetricFamily, m *dto.Metric) ([]line, error) {
	name := mf.GetName()
	labels := make([]string, 0, len(m.GetLabel())+1)
	for _, lp := range m.GetLabel() {
		labels = append(labels, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
	}
	render := func(n string, extra ...string) string {
		ls := append(labels[:len(labels):len(labels)], extra...)
		if len(ls) > 0 {
			n += "{" + strings.Join(ls, ",") + "}"
		}
		return n
	}
	switch t := mf.GetType(); {
	case histogramType(t) || t == dto.MetricType_SUMMARY:
		out := []line{
			{"count", fmt.Sprintf("%s %d", render(name+"_count"), sampleCount(m))},
			{"sum", fmt.Sprintf("%s %g", render(name+"_sum"), sampleSum(m))},
		}
		for _, q := range m.GetSummary().GetQuantile() {
			out = append(out, line{"", fmt.Sprintf("%s %g", render(name, fmt.Sprintf("quantile=%q", fmt.Sprint(q.GetQuantile()))), q.GetValue())})
		}
		return out, nil
	}
	v, err := scalar(mf, m)
	if err != nil {
		return nil, err
	}
	return []line{{"", fmt.Sprintf("%s %g", render(name), v)}}, nil
}
