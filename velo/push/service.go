// Package push moves bytes the other way from rendezvous: a writer puts them into memory a
// receiver granted it, and the receiver is told, after the bytes are there, that they are.
//
// Why it exists: in disaggregated inference a prefill worker must place KV-cache blocks in blocks a
// decode worker already allocated, and the decode worker must learn as early as possible, and never
// too early, that a block is complete; a trainer writes new weights into the memory of many
// inference workers. Inverted into pulls, each block costs a round trip more and a staging copy on
// the producer.
//
// How it works, in the shape of the pull path:
//
//   - A receiver grants one writer (an instance, as its incarnation) ranges of one of its regions
//     for a bounded time (Service.Grant). The grant's handle is unguessable (a 128-bit nonce) and
//     travels to the writer any way the application likes; it carries no key.
//   - The writer's first put acquires the grant over the control plane. The receiver checks that
//     the caller is the writer the grant names (authenticated, when credentials are configured, as
//     for a lease), and answers with the path: RDMA, with one write-only key per range (registered
//     for this grant, through the RDMA registry, counted against its budget, quarantined when
//     revoked while a write may be in flight), or chunked, with the reason (the same reasons as the
//     pull path's).
//   - Puts go by one-sided writes on the RDMA path (the UCX transport: ucp_put_nbx and a flush on
//     hardware-keyed lanes, velo's guarded PUT elsewhere), or as chunks over the control plane,
//     which the receiver copies in after the same checks. A put is reported done only once its
//     bytes are in the receiver's memory.
//   - A notification is sent only after every byte it covers is there, and the receiver delivers
//     notifications of one writer in the order the writer sent them, once each, to the grant's
//     handler or channel; Grant.Wait waits for ranges to be covered without either.
//   - A grant ends when the receiver revokes it, when it expires, when its writer goes down or
//     restarts, and when the receiver drains or closes. Its keys die with it; Grant.Done says when
//     no write through them can land any more, and only then may the memory be reused for
//     something else.
package push

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/velo-go/velo/velo/internal/slowpath"
	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/messenger"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/rendezvous/rdma"
	"github.com/velo-go/velo/velo/transport"
)

// The protocol's message names (velo's internal prefix).
const (
	opAcquire = "velo.push.acquire"
	opWrite   = "velo.push.write"
	opNotify  = "velo.push.notify"
	// opNoteWrite carries small puts inside their notifications (a receiver of an earlier
	// release does not know it: its writer falls back to a write and a notification).
	opNoteWrite = "velo.push.notewrite"
)

// Defaults.
const (
	// DefaultTTL is how long a grant lives unless GrantOptions.TTL says otherwise.
	DefaultTTL = 60 * time.Second
	// DefaultChunkSize is the largest piece of a chunked put.
	DefaultChunkSize = 1 << 20
	// DefaultWindow is how many writes (RDMA) or pieces (chunked) a put keeps in flight.
	DefaultWindow = 16
	// DefaultMaxNotify is the largest notification payload.
	DefaultMaxNotify = 1 << 20
	// DefaultInlineMax is the largest put that travels inside its own notification (Config.InlineMax).
	DefaultInlineMax = 4 << 10
	// maxNoteWriteBytes bounds one message of notified small puts: one eager frame on any transport.
	maxNoteWriteBytes = 128 << 10
	// DefaultNotifyBuffer is the capacity of a grant's notification channel.
	DefaultNotifyBuffer = 1024
	// notifyTimeout bounds one notification message's round trip.
	notifyTimeout = 30 * time.Second
)

// Config is what the runtime gives the service.
type Config struct {
	Self      transport.InstanceID
	Messenger *messenger.Messenger
	// Registry registers granted ranges for RDMA writes (nil: no RDMA path on this receiver).
	Registry *rdma.Registry
	// Writer writes by RDMA on this writer (nil: every put takes the chunked path).
	Writer transport.RMAWriter
	// CanRMA reports whether the writer's RMA transport reaches peer.
	CanRMA func(peer transport.InstanceID) bool
	// SameHostKey reports whether a grant's key is the same-host lane's (shm.IsKey), so that
	// both sides count such a grant on path shm; nil without the same-host path.
	SameHostKey func(key []byte) bool
	// WriterVia is the messenger's index of Writer's transport (AddTransport), or -1. The
	// notifications of a grant written by RDMA travel on it, beside the writes, when it reaches
	// the receiver and carries the message: a round trip on the data path's own transport, not
	// on the control plane (docs/velo.md, push).
	WriterVia int
	// Authorize, when set, decides whether a peer may acquire a grant (and so receive its keys),
	// write chunks and notify; as for the pull path's leases.
	Authorize func(peer transport.InstanceID) error
	// Incarnation is the peer's incarnation as this instance knows it (ok false: unknown).
	Incarnation func(peer transport.InstanceID) (inc uint64, ok bool)
	Logger      *slog.Logger
	Metrics     *Metrics
	// AuthRefused counts a request refused to an unauthenticated peer.
	AuthRefused func()
	ChunkSize   int
	Window      int
	MaxNotify   int
	// InlineMax is the largest put with a notification that travels inside the notification's
	// message (one round trip: the receiver copies the bytes in, then delivers), rather than as a
	// write and then a notification (two). 0 takes DefaultInlineMax; a negative value sends every
	// put as a write (docs/velo.md, push).
	InlineMax int
}

// Service is one instance's push service: receiver and writer at once.
type Service struct {
	cfg Config
	log *slog.Logger
	m   *Metrics

	mu       sync.Mutex
	grants   map[uint64]*Grant
	nextID   uint64
	closed   bool
	draining bool

	wmu       sync.Mutex
	held      map[heldKey]*held
	notifiers map[transport.InstanceID]*notifier

	slow slowpath.Log // transfers slower than the pair could have, logged once per peer and reason
}

// New starts the service and registers its handlers on the messenger.
func New(cfg Config) *Service {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ChunkSize <= 0 {
		cfg.ChunkSize = DefaultChunkSize
	}
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.MaxNotify <= 0 {
		cfg.MaxNotify = DefaultMaxNotify
	}
	if cfg.InlineMax == 0 {
		cfg.InlineMax = DefaultInlineMax
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	s := &Service{cfg: cfg, log: cfg.Logger, m: cfg.Metrics, grants: map[uint64]*Grant{},
		held: map[heldKey]*held{}, notifiers: map[transport.InstanceID]*notifier{}}
	g := cfg.Messenger
	g.HandleInternal(opAcquire, s.onAcquire)
	g.HandleInternal(opWrite, s.onWrite)
	g.ClaimRequests(opWrite, wire.PushWriteLen, s.claimWrite)
	g.HandleInternal(opNotify, s.onNotify)
	g.HandleInternal(opNoteWrite, s.onNoteWrite)
	return s
}

// Close ends every grant (ErrClosed) and refuses new ones and new puts.
func (s *Service) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	gs := s.liveLocked()
	s.mu.Unlock()
	for _, g := range gs {
		g.end(ErrClosed, "the receiver closed")
	}
}

// Drain ends every grant (the receiver drains) and refuses new ones.
func (s *Service) Drain() {
	s.mu.Lock()
	if s.draining {
		s.mu.Unlock()
		return
	}
	s.draining = true
	gs := s.liveLocked()
	s.mu.Unlock()
	for _, g := range gs {
		g.end(ErrDraining, "the receiver drains")
	}
	if len(gs) > 0 {
		s.log.Info("push: draining: every write grant ended", "grants", len(gs))
	}
}

// WriterGone ends the grants of a writer that went down or restarted: its keys die with them.
func (s *Service) WriterGone(writer transport.InstanceID, why string) {
	s.slow.Forget(uint64(writer)) // a peer that comes back is logged again
	s.mu.Lock()
	var gs []*Grant
	for _, g := range s.grants {
		if g.writer == writer {
			gs = append(gs, g)
		}
	}
	s.mu.Unlock()
	for _, g := range gs {
		g.end(ErrGrantEnded, "its writer "+why)
	}
	s.wmu.Lock()
	for k := range s.held {
		if k.receiver == writer {
			delete(s.held, k) // this side's grants from that instance died with it
		}
	}
	s.wmu.Unlock()
}

func (s *Service) liveLocked() []*Grant {
	gs := make([]*Grant, 0, len(s.grants))
	for _, g := range s.grants {
		gs = append(gs, g)
	}
	return gs
}

// Grants is how many grants this receiver holds live.
func (s *Service) Grants() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.grants)
}

// authorize refuses a peer that may not use grants, counted as an authentication refusal.
func (s *Service) authorize(from transport.InstanceID) error {
	if s.cfg.Authorize == nil {
		return nil
	}
	if err := s.cfg.Authorize(from); err != nil {
		if s.cfg.AuthRefused != nil {
			s.cfg.AuthRefused()
		}
		return receiverErr(opErrorf(ErrUnauthenticated, "%v", err))
	}
	return nil
}

// Metrics are the push path's series.
type Metrics struct {
	path         *prometheus.CounterVec
	bytes        *prometheus.CounterVec
	inlineWrites *prometheus.CounterVec
	grants       prometheus.Gauge
}

// Series names.
const (
	PathTotal         = "velo_push_path_total"
	BytesTotal        = "velo_push_bytes_total"
	InlineWritesTotal = "velo_push_inline_writes_total"
	GrantsGauge       = "velo_push_grants"
)

// Sides of velo_push_path_total: a writer counts each put, a receiver each acquire of a grant (when
// it decides the path).
var Sides = []string{"writer", "receiver"}

// NewMetrics makes the series, every (side, path, reason) pair at zero.
func NewMetrics() *Metrics {
	m := &Metrics{
		path: prometheus.NewCounterVec(prometheus.CounterOpts{Name: PathTotal,
			Help: "Puts by the path they took (writer side, per put) and grant acquisitions by the path the receiver chose (receiver side), with the reason, as velo_rendezvous_rdma_path_total."},
			[]string{"side", "path", "reason"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: BytesTotal,
			Help: "Bytes put: written by this instance as writer (sent) or copied in from chunks as receiver (received), by path."},
			[]string{"direction", "path"}),
		inlineWrites: prometheus.NewCounterVec(prometheus.CounterOpts{Name: InlineWritesTotal,
			Help: "Puts whose bytes travelled inside their notification (InlineMax): sent by this instance as writer, copied in as receiver. They are also counted in velo_push_path_total and velo_push_bytes_total under the grant's path."},
			[]string{"side"}),
		grants: prometheus.NewGauge(prometheus.GaugeOpts{Name: GrantsGauge, Help: "Write grants this instance holds live as receiver."}),
	}
	for _, side := range Sides {
		m.inlineWrites.WithLabelValues(side)
		m.path.WithLabelValues(side, string(metrics.PathRDMA), string(metrics.ReasonOK))
		m.path.WithLabelValues(side, string(metrics.PathSameHost), string(metrics.ReasonOK))
		for _, r := range metrics.ChunkedReasons {
			m.path.WithLabelValues(side, string(metrics.PathChunked), string(r))
		}
	}
	for _, d := range []string{"sent", "received"} {
		m.bytes.WithLabelValues(d, string(metrics.PathRDMA))
		m.bytes.WithLabelValues(d, string(metrics.PathChunked))
		m.bytes.WithLabelValues(d, string(metrics.PathSameHost))
	}
	return m
}

// Collectors are the series to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.path, m.bytes, m.inlineWrites, m.grants}
}

func (m *Metrics) countPath(side string, p metrics.Path, r metrics.Reason, n int) {
	if n <= 0 {
		return
	}
	if !metrics.Valid(p, r) {
		p, r = metrics.PathChunked, metrics.ReasonDecodeError
	}
	m.path.WithLabelValues(side, string(p), string(r)).Add(float64(n))
}

func (m *Metrics) addBytes(direction string, p metrics.Path, n int) {
	m.bytes.WithLabelValues(direction, string(p)).Add(float64(n))
}

// bg is the context of work the service does on its own (a notification message carries the
// notifications of several puts, so none of their contexts bounds it).
func bg() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), notifyTimeout)
}
