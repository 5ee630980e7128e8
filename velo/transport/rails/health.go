package rails

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/velo-go/velo/velo/transport"
)

// State is a rail's health.
type State string

// The states of a rail. A rail is up until a read on it fails; it is then paused for its
// cool-down and carries nothing; once the cool-down has passed it is probing: the next transfer
// gives it one read, which takes it back up or pauses it again for twice as long (up to
// MaxCoolDown). A read that succeeds resets the cool-down to CoolDown.
const (
	StateUp      State = "up"
	StatePaused  State = "paused"
	StateProbing State = "probing"
)

// rail is one member transport and its health.
type rail struct {
	idx  int
	name string
	t    transport.Transport
	rma  transport.RMA
	many transport.ManyReader // nil when the member reads one Get at a time

	mu      sync.Mutex
	paused  bool
	until   time.Time     // end of the pause
	cool    time.Duration // the next pause
	probe   bool          // a probing read is out
	lastErr string

	forcing  atomic.Bool  // the rail set is closing the rail's endpoints to a peer (forceClose)
	forcedAt atomic.Int64 // when it last did (Unix nanoseconds)

	bytes, slices, failures atomic.Uint64
	inflight                atomic.Int64 // bytes of reads in flight
	readNanos               atomic.Int64 // moving average of one read's time, 0 before the first

	mBytes, mSlices, mFailures prometheus.Counter
	mPaused                    prometheus.Gauge
}

// RailStatus is one rail as Status reports it.
type RailStatus struct {
	Index  int
	Device string
	State  State
	// Until is the end of the pause (State paused).
	Until time.Time
	// Bytes and Slices were read over the rail; Failures counts its failed reads.
	Bytes, Slices, Failures uint64
	LastError               string
}

// Status reports every rail.
func (t *Transport) Status() []RailStatus {
	out := make([]RailStatus, len(t.rails))
	now := time.Now()
	for i, r := range t.rails {
		r.mu.Lock()
		st := RailStatus{Index: i, Device: r.name, State: r.stateLocked(now), Until: r.until, LastError: r.lastErr}
		r.mu.Unlock()
		st.Bytes, st.Slices, st.Failures = r.bytes.Load(), r.slices.Load(), r.failures.Load()
		out[i] = st
	}
	return out
}

func (r *rail) stateLocked(now time.Time) State {
	switch {
	case !r.paused:
		return StateUp
	case now.Before(r.until):
		return StatePaused
	}
	return StateProbing
}

// usable says whether the rail may take a read now; probe is true when that read is the probe
// of a rail whose pause ended (only one such read is out at a time).
func (r *rail) usable(now time.Time) (ok, probe bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch r.stateLocked(now) {
	case StateUp:
		return true, false
	case StateProbing:
		if r.probe {
			return false, false
		}
		r.probe = true
		return true, true
	}
	return false, false
}

// up reports whether the rail is up (neither paused nor probing).
func (r *rail) up() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stateLocked(time.Now()) == StateUp
}

// endProbe gives back a probe that was taken but not used.
func (r *rail) endProbe() {
	r.mu.Lock()
	r.probe = false
	r.mu.Unlock()
}

// succeeded records a read of n bytes that took d. Only a probe takes a paused rail back up: a
// read that was already in flight when the rail was paused proves nothing about the fault that
// paused it (a link that failed under one read may still finish another).
func (t *Transport) succeeded(r *rail, n int, d time.Duration, probe bool) {
	r.bytes.Add(uint64(n))
	r.slices.Add(1)
	r.mBytes.Add(float64(n))
	r.mSlices.Inc()
	old := r.readNanos.Load()
	if old == 0 {
		r.readNanos.Store(int64(d))
	} else {
		r.readNanos.Store(old - old/8 + int64(d)/8)
	}
	r.mu.Lock()
	back := false
	switch {
	case !r.paused:
		r.cool = t.cfg.CoolDown // a success in a row of failures ends the row
	case probe:
		back = true
		r.paused, r.probe, r.cool = false, false, t.cfg.CoolDown
	}
	r.mu.Unlock()
	if back {
		r.mPaused.Set(0)
		t.log.Info("rails: a paused rail answered its probe and carries data again", "rail", r.idx, "device", r.name)
	}
}

// railFailed pauses r after a failed read (or a lost peer): for its cool-down, which doubles
// for the next failure.
func (t *Transport) railFailed(r *rail, err error) {
	r.failures.Add(1)
	r.mFailures.Inc()
	now := time.Now()
	r.mu.Lock()
	if r.paused && now.Before(r.until) {
		// Reads that were already in flight when it was paused: one pause is enough.
		r.mu.Unlock()
		return
	}
	pause := r.cool
	r.paused, r.probe, r.until, r.lastErr = true, false, now.Add(pause), err.Error()
	r.cool = min(2*r.cool, t.cfg.MaxCoolDown)
	r.mu.Unlock()
	r.mPaused.Set(1)
	t.log.Warn("rails: a rail failed; it is paused and its reads go over the other rails", "rail", r.idx, "device", r.name, "pause", pause, "err", err)
}

// sliceTimeout is how long one read may take on r before it counts as the rail's failure.
func (t *Transport) sliceTimeout(r *rail) time.Duration {
	if t.cfg.SliceTimeout > 0 {
		return t.cfg.SliceTimeout
	}
	avg := time.Duration(r.readNanos.Load())
	if avg == 0 {
		return maxSliceTimeout
	}
	return min(max(8*avg, minSliceTimeout), maxSliceTimeout)
}

// isCallerEnd reports whether err is the caller's context ending: neither the rail's fault nor
// the read's, and the read is given up.
func isCallerEnd(ctx context.Context, err error) bool {
	return ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ctx.Err()))
}

func (r *rail) label() string { return strconv.Itoa(r.idx) }

// railMetrics are the per-rail series.
type railMetrics struct {
	bytes, slices, failures *prometheus.CounterVec
	state                   *prometheus.GaugeVec
}

// The rails' series.
const (
	MetricBytes    = "velo_rails_bytes_total"
	MetricSlices   = "velo_rails_reads_total"
	MetricFailures = "velo_rails_failures_total"
	MetricState    = "velo_rails_paused"
)

func newRailMetrics(t *Transport) *railMetrics {
	m := &railMetrics{
		bytes:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricBytes, Help: "Bytes read over each rail (rail: its index; device: its UCX_NET_DEVICES)."}, []string{"rail", "device"}),
		slices:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricSlices, Help: "Reads (slices of large transfers, or whole small ones) completed over each rail."}, []string{"rail", "device"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricFailures, Help: "Failed reads and lost peers of each rail; each pauses the rail."}, []string{"rail", "device"}),
		state:    prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricState, Help: "1 while a rail is paused after a failure (or probing), 0 while it is up."}, []string{"rail", "device"}),
	}
	for _, r := range t.rails {
		// Every rail's series exist from the start, so a rail that never carried a byte shows 0.
		r.mBytes = m.bytes.WithLabelValues(r.label(), r.name)
		r.mSlices = m.slices.WithLabelValues(r.label(), r.name)
		r.mFailures = m.failures.WithLabelValues(r.label(), r.name)
		r.mPaused = m.state.WithLabelValues(r.label(), r.name)
	}
	return m
}

func (m *railMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.bytes, m.slices, m.failures, m.state}
}
