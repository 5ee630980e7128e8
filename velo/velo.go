package velo

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/velo-go/velo/velo/auth"
	"github.com/velo-go/velo/velo/internal/slowpath"
	"github.com/velo-go/velo/velo/messenger"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/rendezvous"
	"github.com/velo-go/velo/velo/rendezvous/rdma"
	"github.com/velo-go/velo/velo/transport"
	"github.com/velo-go/velo/velo/transport/shm"
	"github.com/velo-go/velo/velo/transport/tcp"
)

// InstanceID names one velo instance for its lifetime (random at New).
type InstanceID = transport.InstanceID

// Handle names a staged payload (StageData and its kin): small, safe to copy, and meaningless
// without the owner, whose 64-bit nonce per slot makes it unguessable. It travels in a message
// however the application likes: MarshalBinary and UnmarshalBinary, MarshalText and
// UnmarshalText (as JSON too); String prints it, IsZero reports the zero handle.
//
//	type Handle struct {
//		Owner InstanceID // the instance that staged the payload
//		Slot  uint64
//		Nonce uint64
//		Size  uint64 // the payload's size in bytes
//	}
type Handle = rendezvous.Handle

// Lease is a consumer's hold on a fetched payload (Get and its kin). Bytes() is the payload;
// Handle() the handle it was fetched with; Path and Reason (fields) say how it moved (rdma, chunked,
// inline, local) and why not by RDMA. End it with Release(ctx), which spends the handle's
// reference, or Detach(ctx), which keeps the payload staged for another Get; a lease neither ends
// is ended by the owner after the lease TTL.
type Lease = rendezvous.Lease

// Metadata describes a staged payload as its owner sees it (Velo.Metadata): its Size, the
// references left (Refs), the live Leases on it, whether it is in Pinned memory, and Staging, the
// reason recorded for memory that is not pinned.
type Metadata = rendezvous.Metadata

// Message is what a handler receives: From (the sending instance), Name (the handler's name),
// Payload and Staged. The payload belongs to the handler: it may keep it, change it or return it
// as its answer. Staged reports that the payload travelled as a rendezvous handle and was fetched
// before the handler ran.
type Message = messenger.Message

// MessageHandler serves the messages of one name (RegisterHandler): it returns the answer of a
// request, or an error the caller sees as ErrHandlerFailed.
type MessageHandler = messenger.Handler

// DefaultStagingThreshold is the payload size above which messages travel as a rendezvous handle.
const DefaultStagingThreshold = 256 << 10

// DefaultShutdownGrace is how long Close waits for running handlers.
const DefaultShutdownGrace = 5 * time.Second

// quarantineCloseWait bounds how long Close waits, after the transports closed, for the memory of
// keys that were still being read to come back (closing the transport kills them, so this is
// normally immediate).
const quarantineCloseWait = 2 * time.Second

type options struct {
	transports  []transport.Transport
	reg         prometheus.Registerer
	log         *slog.Logger
	threshold   int
	chunk       int
	leaseTTL    time.Duration
	stageTTL    time.Duration
	window      int
	batchWindow int
	grace       time.Duration
	maxGet      uint64
	inboxLimit  int
	pushInline  int // WithPushInlineMax: the limit + 1 (0: the default)
	batchInline int // WithBatchInlineMax: the limit + 1 (0: the default)

	rmaTransport transport.Transport // WithUCXTransport: the transport the RDMA registry reads with
	rdma         RDMAConfig
	sameHost     *SameHostConfig // WithSameHost
	shm          *shm.Transport  // the same-host transport WithSameHost made
	rails        *RailChoice     // WithRails
	metricsReg   prometheus.Registerer
	discovery    Discovery
	memberName   string
	handlers     []namedHandler
	// noPeerInfo leaves velo.peerinfo unanswered, as a release without it does (the tests play
	// such a peer with it).
	noPeerInfo bool
}

// Option configures New.
type Option func(*options) error

// WithTransport adds a transport. Messages go out on the first transport, in the order added,
// that reaches the peer and carries the frame.
func WithTransport(t transport.Transport) Option {
	return func(o *options) error {
		if t == nil {
			return errors.New("velo: WithTransport(nil)")
		}
		o.transports = append(o.transports, t)
		return nil
	}
}

// WithRegisterer registers the instance's metrics on reg instead of a private registry. Two
// instances on one registry need prometheus.WrapRegistererWith with distinct labels.
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(o *options) error {
		if reg == nil {
			return errors.New("velo: WithRegisterer(nil)")
		}
		o.reg = reg
		return nil
	}
}

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error { o.log = l; return nil }
}

// WithStagingThreshold sets the payload size above which Send, Request and handler answers travel
// as a rendezvous handle (default 256 KiB). Payloads that do not fit a transport frame are staged
// whatever the threshold.
func WithStagingThreshold(n int) Option {
	return func(o *options) error {
		if n < 0 {
			return fmt.Errorf("velo: staging threshold %d is negative", n)
		}
		o.threshold = n
		return nil
	}
}

// WithChunkSize sets the largest chunk this instance serves on the chunked path (default 2 MiB;
// capped so a chunk fits a transport frame).
func WithChunkSize(n int) Option {
	return func(o *options) error {
		if n < 1<<10 {
			return fmt.Errorf("velo: chunk size %d is below 1 KiB", n)
		}
		o.chunk = n
		return nil
	}
}

type namedHandler struct {
	name string
	h    MessageHandler
}

// WithHandler registers a handler before the instance starts: it is there before any peer can
// reach the instance (or, with WithDiscovery, find it), which RegisterHandler after New cannot
// promise.
func WithHandler(name string, h MessageHandler) Option {
	return func(o *options) error {
		o.handlers = append(o.handlers, namedHandler{name, h})
		return nil
	}
}

// WithLeaseTTL sets how long a lease this instance grants lives without activity (default 30 s).
func WithLeaseTTL(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("velo: lease TTL %v must be positive", d)
		}
		o.leaseTTL = d
		return nil
	}
}

// WithStagingTTL sets how long a transparently staged message payload waits for its receiver to
// fetch it (default 5 min).
func WithStagingTTL(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("velo: stage TTL %v must be positive", d)
		}
		o.stageTTL = d
		return nil
	}
}

// WithInboxLimit bounds, per peer, the bytes of messages that wait for their handler here
// (default 64 MiB; each message counts its payload plus 256 bytes). A peer that sends faster than
// its handlers run fills it; then its requests fail at once with ErrUnavailable and its one-way
// messages are dropped, counted in velo_messenger_errors_total{kind="inbox_full"} and logged,
// until the handlers catch up. Messages staged by rendezvous count only their handle.
func WithInboxLimit(n int) Option {
	return func(o *options) error {
		if n < 64<<10 {
			return fmt.Errorf("velo: inbox limit %d is below 64 KiB", n)
		}
		o.inboxLimit = n
		return nil
	}
}

// WithBatchInlineMax sets the largest payload a GetBatch entry receives inside the owner's answer
// to the batch's acquire, with no registration and no read of its own (path "inline"; default
// 4 KiB, at most 64 KiB). As owner it is the largest payload this instance sends that way; 0 turns
// it off on both sides (docs/velo.md, GetBatch).
func WithBatchInlineMax(n int) Option {
	return func(o *options) error {
		if n < 0 || n > MaxBatchInline {
			return fmt.Errorf("velo: batch inline limit %d: want 0 (off) to %d bytes", n, MaxBatchInline)
		}
		o.batchInline = n + 1
		return nil
	}
}

// WithBatchWindow sets how many reads (RDMA path) or pulls (chunked path) one ReadRanges call, and
// one part of a GetBatch (up to 256 entries of one owner, four parts moving at once), keep in
// flight (default 64).
func WithBatchWindow(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("velo: batch window %d must be at least 1", n)
		}
		o.batchWindow = n
		return nil
	}
}

// WithPullWindow sets how many chunk pulls a get keeps in flight (default 8).
func WithPullWindow(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("velo: pull window %d must be at least 1", n)
		}
		o.window = n
		return nil
	}
}

// DefaultMaxGetSize is the largest payload Get and GetPinned fetch, and so the largest staged
// message payload an instance accepts, unless WithMaxGetSize says otherwise (4 GiB).
const DefaultMaxGetSize = rendezvous.DefaultMaxGetSize

// WithMaxGetSize sets the largest payload this instance allocates memory for when it fetches one:
// Get, GetPinned, and the payload of a staged message (default 4 GiB; at most 1 TiB). A handle's
// size is a claim of whoever sent it, so a larger claim is refused with ErrTooLarge before the
// owner is asked. GetInto fills the caller's buffer and is not bounded by it.
func WithMaxGetSize(n uint64) Option {
	return func(o *options) error {
		if n == 0 || n > rendezvous.MaxPayload {
			return fmt.Errorf("velo: WithMaxGetSize(%d): use 1 byte to %d", n, uint64(rendezvous.MaxPayload))
		}
		o.maxGet = n
		return nil
	}
}

// WithPushInlineMax sets the largest put with a notification whose bytes travel inside the
// notification's message (default 4 KiB, at most 64 KiB); 0 writes every put by the grant's path
// and notifies after it (docs/velo.md, push).
func WithPushInlineMax(n int) Option {
	return func(o *options) error {
		if n < 0 || n > 64<<10 {
			return fmt.Errorf("velo: push inline limit %d: want 0 (off) to 65536 bytes", n)
		}
		o.pushInline = n + 1
		return nil
	}
}

// inlineLimit turns an inline option (the limit + 1, 0 when not given) into the config value of
// push and rendezvous: 0 for their default, a negative value for off.
func inlineLimit(opt int) int {
	switch {
	case opt == 0:
		return 0
	case opt == 1:
		return -1
	}
	return opt - 1
}

// WithShutdownGrace sets how long Close waits for running handlers (default 5 s).
func WithShutdownGrace(d time.Duration) Option {
	return func(o *options) error { o.grace = d; return nil }
}

// Velo is one instance of the runtime. Its methods are safe for concurrent use.
type Velo struct {
	id          InstanceID
	incarnation uint64
	log         *slog.Logger
	gatherer    prometheus.Gatherer
	m           *metrics.Metrics
	transports  []transport.Transport
	msgr        *messenger.Messenger
	rv          *rendezvous.Rendezvous
	rdma        *rdma.Registry // nil unless WithUCXTransport
	shm         *shm.Transport // nil unless WithSameHost
	rails       *RailChoice    // nil unless WithRails
	grace       time.Duration
	pushInline  int    // push.Config.InlineMax (0: its default)
	pusher      pusher // the push service, made by the first grant or put (put.go)

	peers    peerTable
	draining atomic.Bool
	closed   atomic.Bool
	closing  chan struct{} // closed by Close: WatchPeers subscribers end
	watch    watchers

	discovery     Discovery
	memberName    string
	started       time.Time
	members       map[string]InstanceID // member name -> its latest instance, to see restarts across a departure
	membersMu     sync.Mutex
	stopDiscovery context.CancelFunc
	discoveryDone chan struct{}

	authMode auth.Mode // the strictest among its transports
	auth     authTable // peers the control plane authenticated

	regions regionSet // pinned regions NewRegion handed out, named at Close while not freed

	// heard holds the peers that sent this instance a frame (InstanceID -> struct{}) until a
	// transport reports them down: a peer that connected without being registered here is told
	// of the drain too, so it sees this instance depart rather than lose its connection.
	heard sync.Map

	authWarn    slowpath.Log // a peer that failed authentication, logged once
	registering counts       // peers in registerPeer: it records their failed authentication itself

	closeOnce sync.Once
	closeErr  error
}

func random64() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("velo: crypto/rand failed: " + err.Error())
	}
	return binary.BigEndian.Uint64(b[:])
}

// New starts an instance. Transports are started in the order given; if one fails to start the
// ones already started are closed. A discovery backend given to WithDiscovery belongs to the
// instance from then on: Close and Shutdown close it, and so does a New that fails.
func New(ctx context.Context, opts ...Option) (_ *Velo, err error) {
	o := options{threshold: DefaultStagingThreshold, grace: DefaultShutdownGrace}
	// Every option is applied even after one failed, so that a backend given to WithDiscovery is
	// closed on failure whichever place it had among the options.
	var optErr error
	for _, opt := range opts {
		if err := opt(&o); err != nil && optErr == nil {
			optErr = err
		}
	}
	defer func() {
		if err != nil && o.discovery != nil {
			// A published entry would otherwise stay, kept alive by the backend, for an instance
			// that never ran; a backend that published nothing is closed all the same, since the
			// caller handed it over. Both backends' Close may be called again.
			_ = o.discovery.Close()
		}
	}()
	if optErr != nil {
		return nil, optErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(o.transports) > 0 { // the default transport takes the environment's credentials
		if err := credentialsUsed(authModeOf(o.transports)); err != nil {
			return nil, err
		}
	}
	if o.log == nil {
		o.log = slog.Default()
	}
	v := &Velo{id: InstanceID(random64() | 1), incarnation: random64(), grace: o.grace, closing: make(chan struct{}),
		discovery: o.discovery, memberName: o.memberName, started: time.Now(), members: map[string]InstanceID{}}
	v.log = o.log.With("velo", fmt.Sprintf("%016x", uint64(v.id)))
	v.rails = o.rails
	v.logRails()
	v.pushInline = inlineLimit(o.pushInline)
	reg := o.reg
	if reg == nil {
		r := prometheus.NewRegistry()
		reg, v.gatherer = r, r
	} else if g, ok := reg.(prometheus.Gatherer); ok {
		v.gatherer = g
	}
	m, err := metrics.New(reg)
	if err != nil {
		return nil, fmt.Errorf("velo: %w", err)
	}
	v.m = m
	if len(o.transports) == 0 {
		t, err := tcp.New(tcp.Config{}) // the environment's credentials, if any
		if err != nil {
			return nil, fmt.Errorf("velo: default TCP transport: %w", err)
		}
		o.transports = []transport.Transport{t}
	}
	if err := scopeListeners(o.transports); err != nil {
		return nil, err
	}
	if err := newSameHost(&o); err != nil {
		return nil, err
	}
	if err := registerTransportMetrics(reg, o.transports); err != nil {
		return nil, err
	}
	v.authMode = authModeOf(o.transports)
	o.metricsReg = reg
	v.shm = o.shm
	if v.rdma, err = v.newRegistry(&o); err != nil {
		return nil, err
	}
	v.msgr = messenger.New(messenger.Config{Metrics: m, Logger: v.log, StageThreshold: o.threshold, InboxLimit: o.inboxLimit})
	rc := rendezvous.Config{Self: v.id, Messenger: v.msgr, Metrics: m, Logger: v.log,
		ChunkSize: o.chunk, LeaseTTL: o.leaseTTL, StageTTL: o.stageTTL, PullWindow: o.window, BatchWindow: o.batchWindow, MaxGetSize: o.maxGet,
		BatchInlineMax: inlineLimit(o.batchInline)}
	if v.rdma != nil {
		rc.Server, rc.Client, rc.Pool = v.rdma.Owner(), v.rdma.Consumer(), v.rdma
	}
	if v.authMode != auth.ModeNone {
		rc.Authorize = v.authorize
	}
	rc.CopyMemory, rc.CheckMemory = v.copyMemory, v.checkMemory // memory.go
	v.rv = rendezvous.New(rc)
	v.msgr.SetStager(v.rv.Stager())
	for _, h := range o.handlers {
		if err := v.msgr.Handle(h.name, h.h); err != nil {
			return nil, fmt.Errorf("velo: WithHandler: %w", err)
		}
	}
	v.msgr.HandleInternal(drainNotice, v.onDrainNotice)
	v.msgr.HandleInternal(pingName, onPing)
	if !o.noPeerInfo {
		v.msgr.HandleInternal(peerInfoName, v.onPeerInfo)
	}
	names := map[string]bool{}
	for _, t := range o.transports {
		if names[t.Name()] {
			v.abort()
			return nil, fmt.Errorf("velo: two transports named %q: a PeerInfo holds one address per transport name", t.Name())
		}
		names[t.Name()] = true
		idx := v.msgr.AddTransport(t)
		if err := t.Start(&host{v: v, idx: idx, name: t.Name()}); err != nil {
			v.abort()
			return nil, fmt.Errorf("velo: starting transport %q: %w", t.Name(), err)
		}
		v.transports = append(v.transports, t)
		v.m.PeersCreated(t.Name())
	}
	if v.discovery != nil {
		if err := v.startDiscovery(); err != nil {
			v.abort()
			return nil, err
		}
	}
	v.log.Debug("velo: instance started", "transports", len(v.transports))
	return v, nil
}

// scopeListeners hands every transport that can follow it (the UCX transport) the control plane's
// listening address, before anything starts or reads a transport's metrics: a UCX worker created
// then listens beside the control plane only (transport.ListenScoper). With no control-plane
// transport the zero address goes, which scopes nothing; the call still creates the worker, so a
// UCX that cannot start fails New here.
func scopeListeners(ts []transport.Transport) error {
	var cp netip.Addr
	for _, t := range ts {
		if c, ok := t.(transport.ControlPlane); ok {
			if a, ok := c.ListenAddr().(*net.TCPAddr); ok {
				cp = a.AddrPort().Addr()
				break
			}
		}
	}
	for _, t := range ts {
		if s, ok := t.(transport.ListenScoper); ok {
			if err := s.ScopeListen(cp); err != nil {
				return fmt.Errorf("velo: starting transport %q: %w", t.Name(), err)
			}
		}
	}
	return nil
}

func (v *Velo) abort() {
	v.rv.Close()
	v.msgr.Close(context.Background())
	if v.rdma != nil {
		v.rdma.Close()
	}
	for _, t := range v.transports {
		t.Close()
	}
}

// ID is this instance's random 64-bit ID.
func (v *Velo) ID() InstanceID { return v.id }

// Incarnation is this instance's random 64-bit incarnation.
func (v *Velo) Incarnation() uint64 { return v.incarnation }

// Metrics returns the gatherer of the instance's series: its private registry, or the Registerer
// given to WithRegisterer when that is also a Gatherer (nil otherwise).
func (v *Velo) Metrics() prometheus.Gatherer { return v.gatherer }

// PeerInfo is what other instances pass to RegisterPeer to reach this one.
func (v *Velo) PeerInfo() PeerInfo {
	p := PeerInfo{ID: v.id, Incarnation: v.incarnation, Addresses: map[string][]byte{}}
	for _, t := range v.transports {
		p.Addresses[t.Name()] = t.Address()
		if ra, ok := t.(transport.RailAddresser); ok {
			for name, blob := range ra.RailAddresses() {
				p.Addresses[name] = blob
			}
		}
	}
	return p
}

// RegisterPeer makes a peer reachable over each of this instance's transports for which p has an
// address (addresses for transports this instance lacks are ignored); each transport validates its
// own address. A refused address does not take the others down with it: the peer stays reachable
// over the transports that accepted theirs, and RegisterPeer returns a *PartialPeerError that
// names them and wraps each refusal (ErrInvalidEndpoint for an unusable address). That keeps the
// TCP control plane up during a rolling upgrade, when an old and a new node refuse each other's UCX
// address: messages flow, and rendezvous payloads move by chunks (reason no_offer). When no
// address is accepted, or none matches, it returns an error wrapping ErrInvalidEndpoint and the
// peer is not registered.
//
// With credentials configured, a peer whose control plane has not authenticated it yet is connected
// to here, so that a peer with other credentials never shows as up: it is listed as
// StateUnauthenticated, with the handshake's error, and RegisterPeer returns that error (wrapping
// ErrPeerUnreachable). A peer that cannot be reached yet is registered up, as without credentials,
// and is authenticated on its first connection. A peer registered by hand has an empty Name unless
// it told this instance its name (it reached this instance first, or discovery reported it).
func (v *Velo) RegisterPeer(ctx context.Context, p PeerInfo) error {
	return v.registerPeer(ctx, p, "", false)
}

// registerPeer is RegisterPeer with the member's name ("" when unknown: a known name stays);
// learned says the peer reached this instance first and sent its PeerInfo when asked
// (transport.PeerAddress.Learned).
func (v *Velo) registerPeer(ctx context.Context, p PeerInfo, name string, learned bool) error {
	if err := p.validate(); err != nil {
		return err
	}
	if p.ID == v.id {
		return fmt.Errorf("velo: %w: that PeerInfo describes this instance", ErrInvalidEndpoint)
	}
	v.registering.add(p.ID, 1)
	defer v.registering.add(p.ID, -1)
	var added []string
	var refused []error
	for _, t := range v.registrationOrder() {
		blob, ok := p.Addresses[t.Name()]
		if !ok {
			continue
		}
		err := fmt.Errorf("%w: the %s address is empty (the peer published none)", ErrInvalidEndpoint, t.Name())
		if len(blob) > 0 {
			// The transport's error names itself and the peer; the text here does not repeat them.
			err = t.AddPeer(ctx, transport.PeerAddress{ID: p.ID, Incarnation: p.Incarnation, Blob: blob, Learned: learned})
		}
		if ra, ok := t.(transport.RailAddresser); ok && err == nil {
			// The other rails of a transport of several: one that refuses is left out for this
			// peer, and the first rail carries on.
			if rerr := ra.AddRailPeers(ctx, transport.PeerAddress{ID: p.ID, Incarnation: p.Incarnation, Learned: learned}, p.Addresses); rerr != nil {
				v.log.Warn("velo: a rail refused the peer's address; transfers with the peer leave it out",
					"peer", fmt.Sprintf("%016x", uint64(p.ID)), "transport", t.Name(), "err", rerr)
			}
		}
		if err != nil {
			v.log.Warn("velo: a transport refused the peer's address; the peer keeps the transports that accepted theirs",
				"peer", fmt.Sprintf("%016x", uint64(p.ID)), "transport", t.Name(), "err", err)
			refused = append(refused, err)
			continue
		}
		added = append(added, t.Name())
	}
	if len(added) > 0 {
		if err := v.authenticatePeer(ctx, p, name, added); err != nil {
			return fmt.Errorf("velo: peer %016x registered but not authenticated: %w", uint64(p.ID), err)
		}
		v.msgr.PeerUp(p.ID)
		v.peerChanged(p.ID, func(ps *PeerStatus) {
			ps.State, ps.Incarnation, ps.Transports, ps.Err = StateUp, p.Incarnation, added, ""
			if name != "" {
				ps.Name = name
			}
		})
	}
	switch {
	case len(added) > 0 && len(refused) > 0:
		return &PartialPeerError{Peer: p.ID, Registered: added, Err: errors.Join(refused...)}
	case len(refused) > 0:
		return fmt.Errorf("velo: peer not registered: %w", errors.Join(refused...))
	case len(added) == 0:
		var have []string
		for _, t := range v.transports {
			have = append(have, t.Name())
		}
		return fmt.Errorf("velo: %w: peer %016x offers %v, this instance has transports %v: add a common transport",
			ErrInvalidEndpoint, uint64(p.ID), p.transportNames(), have)
	}
	return nil
}

// PartialPeerError is what RegisterPeer returns when some transports accepted the peer's address
// and others refused theirs. The peer is registered: reachable over the transports in Registered.
type PartialPeerError struct {
	Peer InstanceID
	// Registered names the transports the peer is reachable over, in this instance's order.
	Registered []string
	// Err is the refusals (each transport's error, joined); errors.Is(Err, ErrInvalidEndpoint)
	// for an address that transport cannot use.
	Err error
}

func (e *PartialPeerError) Error() string {
	return fmt.Sprintf("velo: peer registered over %s only: %v", strings.Join(e.Registered, ", "), e.Err)
}

func (e *PartialPeerError) Unwrap() error { return e.Err }

// RegisterHandler registers h for messages named name (replacing an earlier handler of that
// name). Names starting with "velo." are the runtime's own.
func (v *Velo) RegisterHandler(name string, h MessageHandler) error { return v.msgr.Handle(name, h) }

// Send delivers a fire-and-forget message; it returns once a transport took it.
func (v *Velo) Send(ctx context.Context, peer InstanceID, name string, payload []byte) error {
	return v.msgr.Send(ctx, peer, name, payload)
}

// Request calls a handler on peer and returns its answer.
func (v *Velo) Request(ctx context.Context, peer InstanceID, name string, payload []byte) ([]byte, error) {
	return v.msgr.Request(ctx, peer, name, payload)
}

// StageData stages data and returns its handle, with one reference. The slot holds data itself,
// not a copy: do not modify data until the payload is freed (its last reference released and its
// last lease ended).
func (v *Velo) StageData(ctx context.Context, data []byte) (Handle, error) {
	if err := ctx.Err(); err != nil {
		return Handle{}, err
	}
	return v.rv.Stage(data, rendezvous.StageOptions{})
}

// Metadata asks the owner about h.
func (v *Velo) Metadata(ctx context.Context, h Handle) (Metadata, error) {
	return v.rv.Metadata(ctx, h)
}

// Get fetches h's payload into a new buffer (Lease.Bytes) and returns the lease on it. The buffer
// is allocated once the owner has confirmed the handle; a handle above WithMaxGetSize is refused
// with ErrTooLarge.
func (v *Velo) Get(ctx context.Context, h Handle) (*Lease, error) {
	l, err := v.rv.Get(ctx, h)
	return l, v.ownerGone(h, err)
}

// GetInto fetches h's payload into dst, which must be exactly h.Size bytes (WithMaxGetSize does
// not apply: the caller chose the buffer).
func (v *Velo) GetInto(ctx context.Context, h Handle, dst []byte) (*Lease, error) {
	l, err := v.rv.GetInto(ctx, h, dst)
	return l, v.ownerGone(h, err)
}

// Ref adds a reference to h on its owner: one more Get + Release (or Unref) before the payload is
// freed.
func (v *Velo) Ref(ctx context.Context, h Handle) error { return v.ownerGone(h, v.rv.Ref(ctx, h)) }

// Unref drops one reference to h without fetching it; the payload is freed when the last one is
// gone and no lease is open on it. (Lease.Release ends a lease and drops the reference it used.)
func (v *Velo) Unref(ctx context.Context, h Handle) error {
	return v.ownerGone(h, v.rv.Unref(ctx, h))
}

// ownerGone says, for an error of a call about h that could not reach h's owner, that the owner is
// known to be down and why (it left, was restarted, or its transport lost it): its handles went
// with it. Other errors pass unchanged.
func (v *Velo) ownerGone(h Handle, err error) error {
	if err == nil || !(errors.Is(err, ErrUnknownPeer) || errors.Is(err, ErrPeerUnreachable) || errors.Is(err, ErrNoRoute)) {
		return err
	}
	st, ok := v.peerStatus(h.Owner)
	if !ok || st.State != StateDown {
		return err
	}
	why := st.Err
	if why == "" {
		why = "its transport lost it"
	}
	return &ownerDownError{msg: fmt.Sprintf("velo: the owner %016x of %v is down (%s): its handles went with it; ask a live owner for the data again", uint64(h.Owner), h, why), cause: err}
}

// ownerDownError is ownerGone's error. Its text stops at what the caller can act on: the cause
// (kept for errors.Is: ErrUnknownPeer, ErrPeerUnreachable) reads like advice to register the peer,
// which is wrong for an owner that is gone.
type ownerDownError struct {
	msg   string
	cause error
}

func (e *ownerDownError) Error() string { return e.msg }
func (e *ownerDownError) Unwrap() error { return e.cause }

// StagedCounts reports how many payloads this instance holds as owner and how many leases on them
// are open. A region (NewRegion, WrapRegion) is not a staged payload: it is the application's
// memory until Region.Free, and only its stagings count here, each while it is staged. Close
// (and so Shutdown) logs the pinned regions still allocated, since their arenas stay mapped
// until they are freed.
func (v *Velo) StagedCounts() (slots, leases int) { return v.rv.Counts() }

// BeginDrain starts the drain of Shutdown without waiting for it: peers are told, no new handler
// runs, rendezvous offers are answered on the chunked path (reason draining). Call Shutdown or
// Close afterwards.
func (v *Velo) BeginDrain() { v.beginDrain() }

// Close shuts the instance down: pending requests fail with ErrClosed, running handlers get up to
// the shutdown grace to return, every lease ends, every staged payload is freed, and the
// transports close. It is safe to call more than once.
func (v *Velo) Close() error {
	v.closeOnce.Do(func() {
		v.closed.Store(true)
		v.closeDiscovery()
		defer close(v.closing)
		ctx, cancel := context.WithTimeout(context.Background(), v.grace)
		defer cancel()
		// Grants end first: a handler that waits for a grant's writes returns within the grace.
		v.endPush()
		err := v.msgr.Close(ctx)
		v.rv.Close()
		if n, bytes := v.regions.allocated(); n > 0 {
			// Every staging is freed by now: what the registry finds still in use below is these
			// regions (and pinned buffers of GetPinned leases), which only the application ends.
			v.log.Warn("velo: closing with pinned regions still allocated: a region is the application's memory, not a staged payload (StagedCounts leaves it out); call Region.Free on each, and its arena is unmapped then",
				"regions", n, "bytes", bytes)
		}
		if v.rdma != nil {
			// After every lease ended (their registrations are revoked) and before the RMA
			// transport closes under the arenas.
			v.rdma.Close()
		}
		for _, t := range v.transports {
			if terr := t.Close(); terr != nil && err == nil {
				err = fmt.Errorf("velo: closing transport %q: %w", t.Name(), terr)
			}
		}
		if v.rdma != nil {
			// Closing the RMA transport killed every key, so quarantined memory comes back now;
			// a transport that failed to kill them leaves it mapped and out of use, never reused.
			wctx, wcancel := context.WithTimeout(context.Background(), quarantineCloseWait)
			if werr := v.rdma.WaitReleased(wctx); werr != nil {
				v.log.Error("velo: closing: pinned memory is still held by keys the transport did not kill", "err", werr)
			}
			wcancel()
		}
		v.closeErr = err
	})
	return v.closeErr
}

// host is the runtime as one transport sees it.
type host struct {
	v    *Velo
	idx  int
	name string // the transport's
}

func (h *host) LocalID() transport.InstanceID { return h.v.id }
func (h *host) Incarnation() uint64           { return h.v.incarnation }
func (h *host) Logger() *slog.Logger          { return h.v.log }
func (h *host) Deliver(from transport.InstanceID, frame []byte) {
	h.v.heardFrom(from, h)
	h.v.msgr.Deliver(h.idx, from, frame)
}
func (h *host) DeliverInline(from transport.InstanceID, frame []byte, handOff func()) bool {
	h.v.heardFrom(from, h)
	return h.v.msgr.DeliverInline(h.idx, from, frame, handOff)
}
func (h *host) Answers(frame []byte) bool { return h.v.msgr.Answers(frame) }
func (h *host) PeerDown(peer transport.InstanceID, err error) {
	h.v.msgr.PeerDown(h.idx, peer, err)
	h.v.rv.PeerDown(peer)
	h.v.peerDown(peer, err.Error())
}
func (h *host) ClaimPrefix() int { return h.v.msgr.ClaimPrefix() }
func (h *host) Claim(from transport.InstanceID, prefix []byte, size int) []byte {
	h.v.heardFrom(from, h)
	return h.v.msgr.ClaimOn(h.idx, from, prefix, size)
}
func (h *host) Claimed(from transport.InstanceID, prefix []byte, err error) {
	h.v.msgr.Claimed(from, prefix, err)
}

// heardFrom notes a peer that sent a frame over h's transport (a map read once it is known). A peer
// this instance did not know is listed from then on (Peers), and asked for its PeerInfo and name.
func (v *Velo) heardFrom(id InstanceID, h *host) {
	if _, ok := v.heard.Load(id); ok {
		return
	}
	if _, known := v.heard.LoadOrStore(id, struct{}{}); !known {
		v.heardFirst(id, h.idx, h.name)
	}
}

// heardPeers lists the peers heardFrom noted that are not known to be down.
func (v *Velo) heardPeers() []InstanceID {
	var out []InstanceID
	v.heard.Range(func(k, _ any) bool {
		out = append(out, k.(InstanceID))
		return true
	})
	return out
}

// DepartedReason is the Err of a peer that left cleanly, in Peers and in its down PeerEvent: it
// announced its drain (Shutdown, BeginDrain), then its connections closed.
const DepartedReason = "departed: it drained (Shutdown) and closed"

// peerDown marks a peer down with the reason of the report that took it down. That reason stays:
// the down event carries it and Peers shows the same text, since a later report (another
// transport losing the peer too, discovery seeing its entry go) is about the same departure. A
// peer that had announced its drain departed cleanly (DepartedReason), whatever its transports
// saw of the connections closing.
func (v *Velo) peerDown(id InstanceID, why string) {
	v.heard.Delete(id)
	v.peerChanged(id, func(p *PeerStatus) {
		switch {
		case p.State == StateDown:
			if p.Err == "" {
				p.Err = why
			}
		case p.State == StateDraining:
			p.Err = DepartedReason
		default:
			p.Err = why
		}
		p.State = StateDown
	})
}

// regionSet holds the pinned regions NewRegion handed out, so that Close can name the ones the
// application did not free. A region leaves it once it is over (Region.Done).
type regionSet struct {
	mu    sync.Mutex
	m     map[*Region]struct{}
	swept int // size after the last sweep of finished regions
}

func regionOver(g *Region) bool {
	select {
	case <-g.Done():
		return true
	default:
		return false
	}
}

func (s *regionSet) add(g *Region) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[*Region]struct{}{}
	}
	if len(s.m) >= 2*s.swept+16 { // sweeps cost amortised O(1) per region
		for r := range s.m {
			if regionOver(r) {
				delete(s.m, r)
			}
		}
		s.swept = len(s.m)
	}
	s.m[g] = struct{}{}
}

// allocated counts the regions not over yet, and their bytes.
func (s *regionSet) allocated() (n int, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for r := range s.m {
		if !regionOver(r) {
			n++
			bytes += int64(len(r.Bytes()))
		}
	}
	return n, bytes
}
