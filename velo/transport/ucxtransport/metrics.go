package ucxtransport

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	velometrics "github.com/velo-go/velo/velo/metrics"
)

// metrics are the transport's collectors. They exist whether or not a Registerer was given, so
// the code never checks for nil. Label values are closed sets, listed with each series, and
// every one is created at zero so a dashboard sees 0 rather than a missing series.
type metrics struct {
	reg        prometheus.Registerer
	collectors []prometheus.Collector

	frames    *prometheus.CounterVec // direction: sent, received
	dropped   *prometheus.CounterVec // reason: see dropReasons
	lost      prometheus.Counter
	endpoints *prometheus.CounterVec // event: see endpointEvents
	open      prometheus.Gauge
	peerDown  prometheus.Counter
}

var (
	frameDirections = []string{"sent", "received"}
	// dropReasons: malformed (undecodable header or hello), unknown_sender (no hello and not
	// registered, or another incarnation), too_large (above EagerMax), stale (an epoch already
	// given up on), rejected_blob (a hello whose address blob is unusable), unauthenticated (the
	// runtime requires authenticated peers and the control plane has not authenticated the
	// sender's incarnation, or a hello's proof does not match its session), bad_seal (with
	// credentials, a data frame or fin in an authenticated peer's name whose seal is missing,
	// wrong, or on an endpoint no proven hello opened: a forgery), replayed (a second hello for
	// an endpoint already opened, or a fin for one already finished: recorded frames played
	// again).
	dropReasons = []string{"malformed", "unknown_sender", "too_large", "stale", "rejected_blob", "unauthenticated", "bad_seal", "replayed"}
	// endpointEvents: opened, reaped (this side's idle reaper retired it), retired_by_peer (the
	// peer's fin), failed (UCX reported the endpoint dead), removed (RemovePeer), closed (this
	// side's Close said goodbye on it), forced (closed with force by ForceClosePeer), evicted
	// (retired, idle, to keep the transport within Config.MaxEndpoints).
	endpointEvents = []string{"opened", "reaped", "retired_by_peer", "failed", "removed", "closed", "forced", "evicted"}
)

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		reg: reg,
		frames: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "velo", Subsystem: "ucx_transport", Name: "frames_total",
			Help: "Frames of the runtime carried over UCX, by direction.",
		}, []string{"direction"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "velo", Subsystem: "ucx_transport", Name: "frames_dropped_total",
			Help: "Received frames not delivered, by reason.",
		}, []string{"reason"}),
		lost: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "velo", Subsystem: "ucx_transport", Name: "frames_lost_total",
			Help: "Frames a peer sent that never arrived (gaps in its sequence numbers); only an endpoint that failed loses frames.",
		}),
		endpoints: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "velo", Subsystem: "ucx_transport", Name: "endpoint_events_total",
			Help: "Endpoint lifecycle events: opened, reaped, retired_by_peer, failed, removed, closed, forced, evicted.",
		}, []string{"event"}),
		open: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "velo", Subsystem: "ucx_transport", Name: "endpoints",
			Help: "Endpoints this instance has open (including retired ones not yet closed).",
		}),
		peerDown: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "velo", Subsystem: "ucx_transport", Name: "peer_down_total",
			Help: "Peers reported down to the runtime because their endpoint failed.",
		}),
	}
	for _, d := range frameDirections {
		m.frames.WithLabelValues(d)
	}
	for _, r := range dropReasons {
		m.dropped.WithLabelValues(r)
	}
	for _, e := range endpointEvents {
		m.endpoints.WithLabelValues(e)
	}
	m.collectors = []prometheus.Collector{m.frames, m.dropped, m.lost, m.endpoints, m.open, m.peerDown}
	if reg == nil {
		return m, nil
	}
	if err := velometrics.Register(reg, m.collectors...); err != nil {
		return nil, fmt.Errorf("ucx: %w", err)
	}
	return m, nil
}

func (m *metrics) unregister() {
	if m.reg == nil {
		return
	}
	for _, c := range m.collectors {
		m.reg.Unregister(c)
	}
}

// Collectors returns the transport's and its UCX engine's metric families when Config.Metrics
// was not set, and nil when it was (they are registered there already). velo registers them on
// the instance's Registerer, so velo.WithRegisterer reaches this transport and its engine too.
func (t *Transport) Collectors() []prometheus.Collector {
	if t.cfg.Metrics != nil {
		return nil
	}
	out := append([]prometheus.Collector(nil), t.m.collectors...)
	if eng, err := t.engine(); err == nil { // created here if nothing did yet (see New)
		out = append(out, eng.Collectors()...)
	}
	return out
}
