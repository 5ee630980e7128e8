package ucx

import (
	"fmt"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// engineMetrics are the engine's collectors. They exist (and count) whether or not a
// Registerer was configured, so the engine never checks for nil. Label values are closed
// sets: op is one of opNames, result one of ok/error/canceled, reason one of
// no_handler/too_large/bad_guard_reply, outcome served/refused.
type engineMetrics struct {
	reg          prometheus.Registerer
	collectors   []prometheus.Collector
	ops          *prometheus.CounterVec
	opsRejected  prometheus.Counter
	inflight     prometheus.Gauge
	parks        prometheus.Counter
	handoffs     prometheus.Counter
	amReceived   prometheus.Counter
	amDropped    *prometheus.CounterVec
	guardReplies *prometheus.CounterVec
	// The guarded PUT as target: requests by outcome (served, or the refusal's reason), and the
	// bytes written for served ones.
	guardPuts     *prometheus.CounterVec
	guardPutBytes prometheus.Counter
	rmaGuard      *rmaGuardCollector
}

func newEngineMetrics(name string, reg prometheus.Registerer) (*engineMetrics, error) {
	labels := prometheus.Labels{"engine": name}
	m := &engineMetrics{
		reg: reg,
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "ucx", Subsystem: "engine", Name: "operations_total", ConstLabels: labels,
			Help: "Engine operations by kind and result.",
		}, []string{"op", "result"}),
		opsRejected: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "ucx", Subsystem: "engine", Name: "operations_rejected_total", ConstLabels: labels,
			Help: "Operations submitted while the engine was closing; they never reached UCX.",
		}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "ucx", Subsystem: "engine", Name: "operations_in_flight", ConstLabels: labels,
			Help: "Operations started and not finished.",
		}),
		parks: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "ucx", Subsystem: "engine", Name: "parks_total", ConstLabels: labels,
			Help: "Times the progressor slept on the worker event fd.",
		}),
		handoffs: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "ucx", Subsystem: "engine", Name: "progress_handoffs_total", ConstLabels: labels,
			Help: "Times an active-message handler ran so long that another goroutine took over progress.",
		}),
		amReceived: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "ucx", Subsystem: "engine", Name: "am_received_total", ConstLabels: labels,
			Help: "Active messages delivered to handlers.",
		}),
		amDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "ucx", Subsystem: "engine", Name: "am_dropped_total", ConstLabels: labels,
			Help: "Active messages dropped, by reason.",
		}, []string{"reason"}),
		guardReplies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "ucx", Subsystem: "engine", Name: "guarded_get_requests_total", ConstLabels: labels,
			Help: "Guarded GET requests this engine answered as owner, served or refused.",
		}, []string{"outcome"}),
		guardPuts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "ucx", Subsystem: "engine", Name: "guarded_put_requests_total", ConstLabels: labels,
			Help: "Guarded PUT requests this engine answered as target: served, or refused by reason (malformed, revoked, read_only, out_of_range, holder).",
		}, []string{"outcome"}),
		guardPutBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "ucx", Subsystem: "engine", Name: "guarded_put_bytes_total", ConstLabels: labels,
			Help: "Bytes peers wrote into this engine's registrations through served guarded PUTs.",
		}),
	}
	// Closed label sets exist at zero from the start: a reader sees "refused 0", not a family
	// that is missing until the first refusal.
	for _, o := range []string{"served", "refused"} {
		m.guardReplies.WithLabelValues(o)
	}
	for _, r := range []string{"no_handler", "too_large", "bad_guard_reply"} {
		m.amDropped.WithLabelValues(r)
	}
	m.guardPuts.WithLabelValues("served")
	for _, r := range putRefusalReasons {
		m.guardPuts.WithLabelValues(r)
	}
	m.rmaGuard = newRMAGuardCollector(labels)
	m.collectors = []prometheus.Collector{m.ops, m.opsRejected, m.inflight, m.parks, m.handoffs, m.amReceived, m.amDropped, m.guardReplies, m.guardPuts, m.guardPutBytes, m.rmaGuard}
	if reg != nil {
		for i, c := range m.collectors {
			if err := reg.Register(c); err != nil {
				for _, done := range m.collectors[:i] {
					reg.Unregister(done)
				}
				return nil, fmt.Errorf("ucx: registering engine metrics (engine %q): %w (give each engine its own EngineConfig.Name)", name, err)
			}
		}
	}
	return m, nil
}

func (m *engineMetrics) unregister() {
	if m.reg == nil {
		return
	}
	for _, c := range m.collectors {
		m.reg.Unregister(c)
	}
	m.reg = nil
}

// Collectors returns the engine's metric families, for a program that registers them itself
// (velo registers them on the instance's Registerer when EngineConfig.Metrics was not set).
func (e *Engine) Collectors() []prometheus.Collector {
	return append([]prometheus.Collector(nil), e.metrics.collectors...)
}

// rmaGuardCollector exports the linked UCX's software RMA guard (rmaguard.go), read when
// gathered: ucx_engine_rma_guard_enforced (1 or 0) always, and
// ucx_engine_rma_refused_total{kind}, ucx_engine_tcp_accept_paused_total and
// ucx_engine_tcp_connections_refused_total when the guard is there. Without the guard these
// families are absent rather than zero: nothing is refused, and a zero would read as "nothing was
// tried". The patch set's counters belong to the process, not to the engine: two engines show
// the same values; kind "holder" is the engine's own.
type rmaGuardCollector struct {
	enforced, refused *prometheus.Desc
	// the tcp listener's refusals (patches 0008 and 0010), process-wide like the guard's kinds
	acceptPaused, connRefused *prometheus.Desc
	// holder is this engine's own count of guarded GETs and PUTs refused because they arrived
	// on no endpoint of the key's holder (RegisterOptions.Holder): kind "holder", which velo's
	// engine decides, not the linked UCX, so it is this engine's alone. It is exported beside
	// the patch set's kinds, where they are.
	holder atomic.Uint64
}

func newRMAGuardCollector(labels prometheus.Labels) *rmaGuardCollector {
	return &rmaGuardCollector{
		enforced: prometheus.NewDesc("ucx_engine_rma_guard_enforced",
			"1 when the linked UCX refuses software-emulated RMA and tcp PUT requests (velo's guard patch set), 0 when it serves them, at any address a peer names.",
			nil, labels),
		refused: prometheus.NewDesc("ucx_engine_rma_refused_total",
			"Software RMA requests refused, by kind: the linked UCX's guard in this process (put, get, atomic, tcp_put, wire_id; process-wide: every engine shows the same counts), and this engine's guarded GETs and PUTs that arrived on no endpoint of the key's holder (holder).",
			[]string{"kind"}, labels),
		acceptPaused: prometheus.NewDesc("ucx_engine_tcp_accept_paused_total",
			"accept() failures on the linked UCX's tcp listener in this process (a full descriptor table), each pausing it for 100 ms instead of closing it (velo's guard patch set; process-wide).",
			nil, labels),
		connRefused: prometheus.NewDesc("ucx_engine_tcp_connections_refused_total",
			"Connections to the linked UCX's tcp port in this process closed as soon as accepted: over 256 live from one source address or 4096 in all (velo's guard patch set; process-wide).",
			nil, labels),
	}
}

func (c *rmaGuardCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.enforced
	ch <- c.refused
	ch <- c.acceptPaused
	ch <- c.connRefused
}

func (c *rmaGuardCollector) Collect(ch chan<- prometheus.Metric) {
	g, err := SoftwareRMAGuard()
	if err != nil {
		return // no UCX in the binary: no engine exists to collect for
	}
	ch <- prometheus.MustNewConstMetric(c.enforced, prometheus.GaugeValue, map[bool]float64{true: 1, false: 0}[g.Enforced])
	if !g.Enforced {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(c.holder.Load()), "holder")
	for i, v := range g.Refused.values() {
		ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(v), GuardRefusalKinds[i])
	}
	ch <- prometheus.MustNewConstMetric(c.acceptPaused, prometheus.CounterValue, float64(g.Refused.TCPAcceptPaused))
	ch <- prometheus.MustNewConstMetric(c.connRefused, prometheus.CounterValue, float64(g.Refused.TCPConnRefused))
}
