// Package metrics declares every Prometheus series the velo runtime exports and registers them on
// the Registerer the user passes (never the global registry).
//
// Why it is built this way: the path metric is the operator's proof of which lane a transfer took,
// so its label values are closed enums (Path, Reason) and every valid (path, reason) pair is created
// at zero when an instance starts. A dashboard or a test then sees "chunked/not_configured 0" rather
// than a missing series, and a typo cannot invent a new label value. The other series follow
// Prometheus naming (velo_<subsystem>_<name>_<unit>, _total on counters).
package metrics

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Path is the lane a rendezvous transfer took.
type Path string

// Paths.
const (
	PathRDMA    Path = "rdma"
	PathChunked Path = "chunked"
	// PathInline: a payload small enough that the owner sent its bytes inside the answer to the
	// batched acquire (GetBatch, Config.BatchInlineMax), with neither a registration nor a pull.
	PathInline Path = "inline"
	// PathSameHost: the registry path between two instances of one host, read through shared
	// memory (package velo/transport/shm) instead of UCX. On the wire it is the RDMA path (the
	// owner answers with a descriptor); the label says which backend moved the bytes.
	PathSameHost Path = "shm"
)

// Reason says why a transfer took its path. The set is closed; see docs/architecture.md for the
// decision order that picks one.
type Reason string

// Reasons.
const (
	ReasonOK            Reason = "ok"
	ReasonNoOffer       Reason = "no_offer"
	ReasonKillSwitch    Reason = "kill_switch"
	ReasonNotConfigured Reason = "not_configured"
	ReasonDraining      Reason = "draining"
	ReasonPoolExhausted Reason = "pool_exhausted"
	ReasonBudget        Reason = "budget"
	ReasonNotPinned     Reason = "not_pinned"
	ReasonGetFailed     Reason = "get_failed"
	ReasonDecodeError   Reason = "decode_error"
	// ReasonDeviceBounce: device memory (the owner's payload or the consumer's destination)
	// moved by chunks, copied through a bounded host bounce buffer on the side that holds it.
	// The side whose memory it is counts it in place of the reason that kept the transfer off
	// the RDMA path; an owner sends it only to a consumer whose offer says it knows it.
	ReasonDeviceBounce Reason = "device_bounce"
	// ReasonReleaseMismatch: the two sides link UCX builds that cannot talk (another minor
	// release, or one with velo's guard and one without), so no UCX endpoint is opened between
	// them; the log line of the side that found it names both builds.
	ReasonReleaseMismatch Reason = "release_mismatch"
	// ReasonNoUCXLane: the two sides' UCX found no lane between them (ucp_ep_create answered
	// UCS_ERR_UNREACHABLE: UCX_TLS names no transport that gives velo's endpoints peer failure
	// handling, sm,self for one), so no UCX endpoint is opened to the peer; the side that found
	// it logs UCX's words and the fix once per peer.
	ReasonNoUCXLane Reason = "no_ucx_lane"
	// ReasonSoftwareLanes: every lane UCX selected for the pair's endpoint is a software one (tcp;
	// ud without rc), where the chunked path moves bulk bytes at least as fast as UCX's emulated
	// RMA, and the side that counts it did not opt in to RDMA over such lanes
	// (ucxtransport.Config.RMAOverSoftwareLanes). Said once per pair in the log, with the lanes.
	ReasonSoftwareLanes Reason = "software_lanes"
)

// ChunkedReasons are the reasons that go with PathChunked; ReasonOK is the only one for PathRDMA,
// PathInline and PathSameHost.
var ChunkedReasons = []Reason{
	ReasonNoOffer, ReasonKillSwitch, ReasonNotConfigured, ReasonDraining, ReasonPoolExhausted,
	ReasonBudget, ReasonNotPinned, ReasonGetFailed, ReasonDecodeError, ReasonDeviceBounce,
	ReasonReleaseMismatch, ReasonNoUCXLane, ReasonSoftwareLanes,
}

// Valid reports whether (p, r) is one of the pre-declared pairs.
func Valid(p Path, r Reason) bool {
	if p == PathRDMA || p == PathInline || p == PathSameHost {
		return r == ReasonOK
	}
	if p == PathChunked {
		for _, c := range ChunkedReasons {
			if c == r {
				return true
			}
		}
	}
	return false
}

// Names of the series, for tests and docs.
const (
	RDMAPathTotal        = "velo_rendezvous_rdma_path_total"
	RendezvousBytesTotal = "velo_rendezvous_bytes_total"
	ActiveSlots          = "velo_rendezvous_active_slots"
	StagedBytes          = "velo_rendezvous_staged_bytes"
	ActiveLeases         = "velo_rendezvous_active_leases"
	LeasesReapedTotal    = "velo_rendezvous_leases_reaped_total"
	MessagesSentTotal    = "velo_messenger_messages_sent_total"
	MessagesRecvTotal    = "velo_messenger_messages_received_total"
	MessageErrorsTotal   = "velo_messenger_errors_total"
	StagedMessagesTotal  = "velo_messenger_staged_total"
	// HandlerRequestsTotal, HandlerDurationSeconds, HandlerBytesTotal: per handler.
	HandlerRequestsTotal   = "velo_messenger_handler_requests_total"
	HandlerDurationSeconds = "velo_messenger_handler_duration_seconds"
	HandlerBytesTotal      = "velo_messenger_handler_bytes_total"
	// InboxMessages, InboxBytes: queued user messages, all peers together.
	InboxMessages = "velo_messenger_inbox_messages"
	InboxBytes    = "velo_messenger_inbox_bytes"
	// PeersGauge: known peers by state.
	PeersGauge = "velo_peers"
	// DiscoveryEventsTotal: membership events by kind; DiscoveryErrorsTotal: failed publishes and
	// watches; DiscoveryUp: 1 while the backend reaches its store; DiscoveryRegistrationSeconds:
	// from a member's start to its registration here.
	DiscoveryEventsTotal = "velo_discovery_events_total"
	DiscoveryErrorsTotal = "velo_discovery_errors_total"
	DiscoveryUp          = "velo_discovery_up"
	// AuthRefusalsTotal counts requests this instance refused because the peer was not
	// authenticated on its control plane (label op: acquire).
	AuthRefusalsTotal            = "velo_auth_refusals_total"
	DiscoveryRegistrationSeconds = "velo_discovery_registration_delay_seconds"
)

// Label values of the bounded labels below.
var (
	// Directions of velo_rendezvous_bytes_total: bytes this instance served as owner ("sent") or
	// moved in as consumer ("received"); local covers the owner == consumer fast path.
	ByteDirections = []string{"sent", "received"}
	BytePaths      = []string{string(PathRDMA), string(PathChunked), string(PathInline), string(PathSameHost), "local"}
	// ReapCauses of velo_rendezvous_leases_reaped_total.
	ReapCauses = []string{"ttl", "peer_down", "shutdown"}
	// MessageKinds of the messenger counters.
	MessageKinds = []string{"one_way", "request", "response", "error"}
	// ErrorKinds of velo_messenger_errors_total.
	ErrorKinds = []string{"unknown_handler", "handler_error", "handler_panic", "bad_request", "malformed_frame", "send_failed", "staging_failed", "inbox_full", "draining"}
	// HandlerOutcomes of velo_messenger_handler_requests_total: ok (the handler answered), error
	// (it returned an error), panic, timeout (it returned a context deadline error), refused (the
	// message never reached it: this instance is draining, or the peer's inbox was full).
	HandlerOutcomes = []string{"ok", "error", "panic", "timeout", "refused"}
	// PeerStates of velo_peers.
	PeerStates = []string{"up", "draining", "down", "unauthenticated"}
	// DiscoveryEventKinds of velo_discovery_events_total; DiscoveryOps of velo_discovery_errors_total.
	DiscoveryEventKinds = []string{"joined", "updated", "restarted", "left"}
	DiscoveryOps        = []string{"publish", "watch"}
	// UnknownHandler is the handler label of messages for a name nobody registered, so that a
	// sender cannot grow the label set.
	UnknownHandler = "_unknown"
)

// Metrics is one instance's set of series.
type Metrics struct {
	rdmaPath     *prometheus.CounterVec
	bytes        *prometheus.CounterVec
	ActiveSlots  prometheus.Gauge
	StagedBytes  prometheus.Gauge
	ActiveLeases prometheus.Gauge
	leasesReaped *prometheus.CounterVec
	sent         *prometheus.CounterVec
	received     *prometheus.CounterVec
	errs         *prometheus.CounterVec
	staged       *prometheus.CounterVec

	handlerRequests *prometheus.CounterVec
	handlerSeconds  *prometheus.HistogramVec
	handlerBytes    *prometheus.CounterVec
	// InboxMessages and InboxBytes: user messages queued for their handlers, all peers together
	// (one series each, whatever the number of peers).
	InboxMessages prometheus.Gauge
	InboxBytes    prometheus.Gauge
	peers         *prometheus.GaugeVec

	discoveryEvents  *prometheus.CounterVec
	registrationTime prometheus.Histogram
	discovery        *discoveryCollector
	authRefusals     *prometheus.CounterVec
	transfer         *transfers // transfer.go
}

// DiscoveryStatus is what the discovery series read from the backend at each scrape.
type DiscoveryStatus struct {
	Up                         bool
	PublishErrors, WatchErrors uint64
}

// discoveryCollector reads the backend's own counters at scrape time (they count failures inside
// the backend's background work, which velo does not see).
type discoveryCollector struct {
	errs, up *prometheus.Desc
	status   atomic.Pointer[func() DiscoveryStatus] // nil until FollowDiscovery
}

func (c *discoveryCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.errs; ch <- c.up }

func (c *discoveryCollector) Collect(ch chan<- prometheus.Metric) {
	f := c.status.Load()
	if f == nil {
		return // no discovery: no series
	}
	s := (*f)()
	up := 0.0
	if s.Up {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(c.errs, prometheus.CounterValue, float64(s.PublishErrors), "publish")
	ch <- prometheus.MustNewConstMetric(c.errs, prometheus.CounterValue, float64(s.WatchErrors), "watch")
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up)
}

// ErrRegister wraps a failure to register the series, typically because two instances share one
// Registerer: give each its own prometheus.WrapRegistererWith(prometheus.Labels{"instance": ...}, reg).
var ErrRegister = errors.New("metrics: cannot register velo series")

// Register registers every collector on reg, or none of them: on the first failure it
// unregisters the ones it did register (so the caller may try again with another Registerer) and
// returns an error wrapping ErrRegister that says what went wrong and the fix. Every component of
// velo registers its families through it.
func Register(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return fmt.Errorf("%w: %v (instances that share a registry each need prometheus.WrapRegistererWith with their own label value)", ErrRegister, err)
		}
	}
	return nil
}

// New creates the series, every label combination at zero, and registers them on reg.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		rdmaPath: prometheus.NewCounterVec(prometheus.CounterOpts{Name: RDMAPathTotal,
			Help: "Rendezvous transfers (consumer: gets; owner: acquires) by the path taken and why."}, []string{"path", "reason"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: RendezvousBytesTotal,
			Help: "Rendezvous payload bytes moved, by direction and path."}, []string{"direction", "path"}),
		ActiveSlots:  prometheus.NewGauge(prometheus.GaugeOpts{Name: ActiveSlots, Help: "Staged payloads held by this owner."}),
		StagedBytes:  prometheus.NewGauge(prometheus.GaugeOpts{Name: StagedBytes, Help: "Bytes of the staged payloads held by this owner."}),
		ActiveLeases: prometheus.NewGauge(prometheus.GaugeOpts{Name: ActiveLeases, Help: "Leases this owner has granted that have not ended."}),
		leasesReaped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: LeasesReapedTotal,
			Help: "Leases the owner ended itself: TTL expired, consumer down, or shutdown."}, []string{"cause"}),
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MessagesSentTotal,
			Help: "Messenger frames sent, by kind."}, []string{"kind"}),
		received: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MessagesRecvTotal,
			Help: "Messenger frames received, by kind."}, []string{"kind"}),
		errs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: MessageErrorsTotal,
			Help: "Messenger failures, by kind."}, []string{"kind"}),
		staged: prometheus.NewCounterVec(prometheus.CounterOpts{Name: StagedMessagesTotal,
			Help: "Messenger payloads above the staging threshold that travelled as a rendezvous handle, by direction."}, []string{"direction"}),
		handlerRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: HandlerRequestsTotal,
			Help: "Messages for each handler by outcome (handler: the registered names, _unknown for any other)."}, []string{"handler", "outcome"}),
		handlerSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: HandlerDurationSeconds,
			Help:    "Time each handler ran, per message.",
			Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}}, []string{"handler"}),
		handlerBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: HandlerBytesTotal,
			Help: "Payload bytes each handler received (request) and answered (response)."}, []string{"handler", "direction"}),
		InboxMessages: prometheus.NewGauge(prometheus.GaugeOpts{Name: InboxMessages, Help: "User messages queued for their handlers, all peers together."}),
		InboxBytes:    prometheus.NewGauge(prometheus.GaugeOpts{Name: InboxBytes, Help: "Bytes of the user messages queued for their handlers, all peers together."}),
		discoveryEvents: prometheus.NewCounterVec(prometheus.CounterOpts{Name: DiscoveryEventsTotal,
			Help: "Membership events the discovery backend delivered, by kind."}, []string{"kind"}),
		registrationTime: prometheus.NewHistogram(prometheus.HistogramOpts{Name: DiscoveryRegistrationSeconds,
			Help:    "Time from a member's start (its own clock) to its registration with this instance.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}}),
		transfer: newTransfers(),
		discovery: &discoveryCollector{
			errs: prometheus.NewDesc(DiscoveryErrorsTotal, "Failed publishes (heartbeats, lease renewals) and watches (reads of the membership) of the discovery backend.", []string{"op"}, nil),
			up:   prometheus.NewDesc(DiscoveryUp, "1 while the discovery backend reaches its store, 0 while it cannot (the members known stay registered).", nil, nil),
		},
		authRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: AuthRefusalsTotal,
			Help: "Requests refused because the peer is not authenticated on this instance's control plane, by operation."}, []string{"op"}),
		peers: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: PeersGauge,
			Help: "Peers this instance knows, by transport that took their address and state (up, draining: it said it is shutting down, down: a transport lost it)."}, []string{"transport", "state"}),
	}
	m.rdmaPath.WithLabelValues(string(PathRDMA), string(ReasonOK))
	m.rdmaPath.WithLabelValues(string(PathInline), string(ReasonOK))
	m.rdmaPath.WithLabelValues(string(PathSameHost), string(ReasonOK))
	for _, r := range ChunkedReasons {
		m.rdmaPath.WithLabelValues(string(PathChunked), string(r))
	}
	for _, d := range ByteDirections {
		for _, p := range BytePaths {
			m.bytes.WithLabelValues(d, p)
		}
	}
	for _, c := range ReapCauses {
		m.leasesReaped.WithLabelValues(c)
	}
	for _, k := range MessageKinds {
		m.sent.WithLabelValues(k)
		m.received.WithLabelValues(k)
	}
	for _, k := range ErrorKinds {
		m.errs.WithLabelValues(k)
	}
	for _, k := range DiscoveryEventKinds {
		m.discoveryEvents.WithLabelValues(k)
	}
	m.authRefusals.WithLabelValues("acquire")
	m.staged.WithLabelValues("sent")
	m.staged.WithLabelValues("received")
	m.staged.WithLabelValues("unstaged")
	if err := Register(reg, m.rdmaPath, m.bytes, m.ActiveSlots, m.StagedBytes, m.ActiveLeases,
		m.leasesReaped, m.sent, m.received, m.errs, m.staged, m.handlerRequests, m.handlerSeconds, m.handlerBytes,
		m.InboxMessages, m.InboxBytes, m.peers, m.discoveryEvents, m.registrationTime, m.discovery, m.authRefusals, m.transfer); err != nil {
		return nil, err
	}
	return m, nil
}

// CountPath counts one transfer decision. A pair outside the closed set is a programming error;
// it is counted as chunked/decode_error rather than inventing a series.
func (m *Metrics) CountPath(p Path, r Reason) { m.CountPaths(p, r, 1) }

// CountPaths counts n transfers that took one path for one reason (a batch's entries).
func (m *Metrics) CountPaths(p Path, r Reason, n int) {
	if n <= 0 {
		return
	}
	if !Valid(p, r) {
		p, r = PathChunked, ReasonDecodeError
	}
	m.rdmaPath.WithLabelValues(string(p), string(r)).Add(float64(n))
}

// CountAuthRefusal counts an acquire refused to an unauthenticated peer.
func (m *Metrics) CountAuthRefusal() { m.authRefusals.WithLabelValues("acquire").Inc() }

// AddBytes counts payload bytes; direction is "sent" or "received", path one of BytePaths.
func (m *Metrics) AddBytes(direction, path string, n int) {
	m.bytes.WithLabelValues(direction, path).Add(float64(n))
}

// LeaseReaped counts a lease the owner ended itself; cause is one of ReapCauses.
func (m *Metrics) LeaseReaped(cause string) { m.leasesReaped.WithLabelValues(cause).Inc() }

// Sent counts a messenger frame sent; kind is one of MessageKinds.
func (m *Metrics) Sent(kind string) { m.sent.WithLabelValues(kind).Inc() }

// Received counts a messenger frame received.
func (m *Metrics) Received(kind string) { m.received.WithLabelValues(kind).Inc() }

// Error counts a messenger failure; kind is one of ErrorKinds.
func (m *Metrics) Error(kind string) { m.errs.WithLabelValues(kind).Inc() }

// Staged counts a payload staged ("sent"), resolved ("received"), or freed because the message
// carrying its handle could not be sent ("unstaged") by the transparent stager.
func (m *Metrics) Staged(direction string) { m.staged.WithLabelValues(direction).Inc() }

// HandlerRegistered creates a handler's series at zero, so a dashboard sees it before its first
// message.
func (m *Metrics) HandlerRegistered(handler string) {
	for _, o := range HandlerOutcomes {
		m.handlerRequests.WithLabelValues(handler, o)
	}
	m.handlerSeconds.WithLabelValues(handler)
	m.handlerBytes.WithLabelValues(handler, "request")
	m.handlerBytes.WithLabelValues(handler, "response")
}

// HandlerDone counts one message a handler ran for: its outcome, how long it ran, and the bytes in
// and out.
func (m *Metrics) HandlerDone(handler, outcome string, seconds float64, reqBytes, respBytes int) {
	m.handlerRequests.WithLabelValues(handler, outcome).Inc()
	m.handlerSeconds.WithLabelValues(handler).Observe(seconds)
	m.handlerBytes.WithLabelValues(handler, "request").Add(float64(reqBytes))
	m.handlerBytes.WithLabelValues(handler, "response").Add(float64(respBytes))
}

// HandlerRefused counts a message that never reached its handler (outcome refused).
func (m *Metrics) HandlerRefused(handler string) {
	m.handlerRequests.WithLabelValues(handler, "refused").Inc()
}

// DiscoveryEvent counts one membership event; kind is one of DiscoveryEventKinds.
func (m *Metrics) DiscoveryEvent(kind string) { m.discoveryEvents.WithLabelValues(kind).Inc() }

// MemberRegistered observes how long a member took from its start to its registration here.
func (m *Metrics) MemberRegistered(d time.Duration) { m.registrationTime.Observe(max(d, 0).Seconds()) }

// FollowDiscovery makes the error and up series read status at each scrape.
func (m *Metrics) FollowDiscovery(status func() DiscoveryStatus) {
	m.discovery.status.Store(&status)
}

// PeersCreated creates the peer series of one transport at zero (the instance's transports are
// a closed set).
func (m *Metrics) PeersCreated(transport string) {
	for _, st := range PeerStates {
		m.peers.WithLabelValues(transport, st)
	}
}

// SetPeers sets the peer gauge of one transport: how many peers are in each of PeerStates.
func (m *Metrics) SetPeers(transport string, counts map[string]int) {
	for _, st := range PeerStates {
		m.peers.WithLabelValues(transport, st).Set(float64(counts[st]))
	}
}

// Lines renders the series called name from g in the text exposition style, one line per series,
// sorted: `name{label="value",...} value`. A histogram child gives its `name_count` and
// `name_sum` lines (its buckets are left out: Histogram reads them), a summary child its
// `name{quantile="q"}` lines beside those two; name may also be one of those lines' names
// (`velo_rendezvous_transfer_duration_seconds_count`) for those lines alone. The examples print
// the path metric with it.
func Lines(g prometheus.Gatherer, name string) ([]string, error) {
	mfs, err := g.Gather()
	if err != nil {
		return nil, err
	}
	mf, part := findFamily(mfs, name)
	if mf == nil {
		return nil, nil
	}
	var out []string
	for _, mt := range mf.GetMetric() {
		ls, err := exposition(mf, mt)
		if err != nil {
			return nil, err
		}
		for _, l := range ls {
			if part == "" || l.suffix == part {
				out = append(out, l.text)
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

// ErrNoSeries: Value found no series of that name with those labels (a typo in a name or a label
// reads as an error, never as zero).
var ErrNoSeries = errors.New("no such series")

// ErrWrongType: the family is of a type the helper does not read (Value on a histogram, Histogram
// on a counter, ...); the error names the helper that reads it.
var ErrWrongType = errors.New("metric of another type")

// Value returns the value of the series called name whose labels include all of want (nil: the
// family's first series). When there is none it returns an error wrapping ErrNoSeries that lists
// the label sets the family has, so a typo shows at once instead of reading as zero. want is a
// Labels, which a map[string]string literal is too; PathLabels builds the path metric's without a
// conversion. Tests, examples and health checks read single series with it; Lines prints a whole
// family.
//
// Value reads counters, gauges and untyped series. A histogram or a summary has no single value:
// Value refuses it with an error wrapping ErrWrongType that names Histogram (or Summary), which
// read its count, sum and quantiles; Value does read its count and sum under their exposition
// names, name+"_count" and name+"_sum".
func Value(g prometheus.Gatherer, name string, want Labels) (float64, error) {
	mfs, err := g.Gather()
	if err != nil {
		return 0, err
	}
	mf, part := findFamily(mfs, name)
	if mf == nil {
		return 0, fmt.Errorf("metrics: %w: no family %s is registered here", ErrNoSeries, name)
	}
	if part == "bucket" || (part == "" && !scalarType(mf.GetType())) {
		return 0, wrongType(mf, "Value")
	}
	mt, err := pick(mf, name, want)
	if err != nil {
		return 0, err
	}
	switch part {
	case "count":
		return float64(sampleCount(mt)), nil
	case "sum":
		return sampleSum(mt), nil
	}
	return scalar(mf, mt)
}

// describeLabels lists each label with the values present: "path in [chunked rdma], reason in [...]".
func describeLabels(seen map[string]map[string]bool) string {
	if len(seen) == 0 {
		return "none"
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, n := range names {
		vals := make([]string, 0, len(seen[n]))
		for v := range seen[n] {
			vals = append(vals, v)
		}
		sort.Strings(vals)
		parts = append(parts, fmt.Sprintf("%s in %v", n, vals))
	}
	return strings.Join(parts, ", ")
}

func formatLabels(want map[string]string) string {
	pairs := make([]string, 0, len(want))
	for k, v := range want {
		pairs = append(pairs, k+"="+v)
	}
	sort.Strings(pairs)
	return "{" + strings.Join(pairs, ",") + "}"
}
