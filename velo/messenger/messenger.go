// Package messenger carries active messages between velo instances: named handlers, fire-and-forget
// sends and unary requests, over whichever transports the instance has.
//
// Why it is built this way:
//
//   - Handlers for messages from one peer run one at a time, in the order that peer sent them (a
//     per-peer queue drained by a goroutine that exists only while there is work). That is the
//     ordering users reason about, and it costs nothing when peers are idle. A handler that blocks
//     stalls only its own peer's queue.
//   - On a transport that reads each connection on a goroutine of its own (TCP), the reader runs
//     the handler itself when no earlier message of that peer is being handled, and writes the
//     answer too. Handing each message to another goroutine costs a scheduler wake-up,
//     which on a small machine is most of a round trip's cost beyond the raw socket's. So that a
//     slow handler still never stalls its connection, reading moves to a new goroutine as soon as
//     the handler waits for a request of its own, or after at most two ticks of a rescuer
//     goroutine (2 ms) whatever it blocks on.
//   - Responses never wait behind handlers: they complete the waiting call straight from the
//     transport's reader. A handler that itself sends requests back to the caller therefore cannot
//     deadlock the connection.
//   - Internal protocol handlers (the rendezvous owner side) bypass the per-peer queue and run
//     concurrently, so a user handler that resolves a staged payload from a peer can never wait
//     behind that peer's own user handlers.
//   - A handler's panic is recovered and answered as a remote error, so a bug in one handler never
//     takes the process down. Remote failures come back as *RemoteError, which matches the sentinels
//     below with errors.Is.
//   - Payloads above the staging threshold (or above what any transport carries in one frame) never
//     travel inline: a Stager turns them into a rendezvous handle, and the receiver resolves the
//     handle before the handler runs, so handlers always see plain bytes.
//   - A response whose destination is already known (RequestInto) is claimed from the transport and
//     read straight into the caller's buffer: the chunked rendezvous path moves each chunk from
//     socket to destination once.
package messenger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/velo-go/velo/velo/internal/errfam"
	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/transport"
)

// Sentinels matched by errors.Is on the errors this package returns.
var (
	// ErrUnknownHandler: the receiver has no handler of that name. Register it there with
	// RegisterHandler (velo) or Handle (a bare Messenger).
	ErrUnknownHandler = errors.New("unknown handler")
	// ErrHandlerFailed: the remote handler returned an error.
	ErrHandlerFailed = errors.New("remote handler failed")
	// ErrHandlerPanic: the remote handler panicked (the receiver recovered and kept running).
	ErrHandlerPanic = errors.New("remote handler panicked")
	// ErrBadRequest: the receiver could not read the message, for instance a staged payload it could
	// not fetch.
	ErrBadRequest = errors.New("bad request")
	// ErrUnavailable: the receiver is shutting down, or its inbox for the sender is full
	// (Config.InboxLimit): the call was refused before any handler saw it.
	ErrUnavailable = errors.New("receiver unavailable")
	// ErrDraining: the peer is draining (shutting down gracefully): it runs no new handler. The
	// message was not handled; sending it to another instance is safe. It also matches
	// ErrUnavailable.
	ErrDraining error = &drainingError{}
	// ErrNoRoute: no transport reaches the peer, or none carries a frame that large.
	ErrNoRoute = errors.New("no transport reaches the peer")
	// ErrClosed: the messenger was closed. It also matches transport.ErrClosed (velo.ErrClosed).
	ErrClosed = errfam.New("velo instance closed", transport.ErrClosed)
	// ErrInvalidName: a handler name that is empty, too long, or in the reserved "velo." space.
	ErrInvalidName = errors.New("invalid handler name")
	// ErrProtocol: the peer answered with something this side cannot accept (a response of the
	// wrong size, a staged response without a stager).
	ErrProtocol = errors.New("protocol violation")
)

type drainingError struct{}

func (*drainingError) Error() string        { return "peer is draining" }
func (*drainingError) Is(target error) bool { return target == ErrUnavailable }

// InternalPrefix starts the names of velo's own protocol handlers; user handlers may not use it.
const InternalPrefix = "velo."

// Message is what a handler receives.
type Message struct {
	From transport.InstanceID
	Name string
	// Payload belongs to the handler: it may keep it, change it or return it as its answer. The
	// messenger therefore reads every payload into a buffer of its own (a staged one too: the
	// rendezvous get allocates it) and never reuses that buffer.
	Payload []byte
	// Staged reports that the payload travelled as a rendezvous handle and was fetched before the
	// handler ran.
	Staged bool
}

// Handler serves one handler name. Its return value answers a request; for a fire-and-forget
// message it is dropped (an error is logged and counted). The context ends when the instance closes.
// The answer's bytes are written to the peer after the handler returns, so the handler must not
// change them afterwards.
type Handler func(ctx context.Context, m *Message) ([]byte, error)

// InternalHandler serves a velo protocol message. It answers with parts (so a chunk goes out
// without a copy) and an optional done func, called once the answer has been written or dropped.
type InternalHandler func(ctx context.Context, from transport.InstanceID, payload []byte) (parts [][]byte, done func(), err error)

// Stager moves payloads above the threshold by rendezvous.
type Stager interface {
	// Stage keeps a copy of payload for peer and returns the encoded handle that travels instead.
	Stage(ctx context.Context, peer transport.InstanceID, payload []byte) ([]byte, error)
	// Resolve fetches the payload a handle names; release ends the consumer's hold on it once the
	// handler has run.
	Resolve(ctx context.Context, from transport.InstanceID, token []byte) (payload []byte, release func(), err error)
	// Unstage frees what Stage kept when the message carrying its handle could not be sent: the
	// receiver never learned of the handle, so nothing else would free it before its TTL.
	Unstage(token []byte)
}

// Config configures a Messenger.
type Config struct {
	Metrics *metrics.Metrics
	Logger  *slog.Logger
	// StageThreshold: payloads larger than this travel as a rendezvous handle (when Stager is set).
	StageThreshold int
	// InboxLimit bounds the bytes of one peer's messages that wait for their handler (payloads
	// plus inboxOverhead each); default DefaultInboxLimit. See dispatch for what happens above it.
	InboxLimit int
}

// DefaultInboxLimit is the default Config.InboxLimit: 64 MiB per peer.
const DefaultInboxLimit = 64 << 20

// inboxOverhead is what one queued message counts beyond its payload, so a flood of empty
// messages is bounded too.
const inboxOverhead = 256

// Messenger routes frames between the runtime's transports and its handlers.
type Messenger struct {
	cfg     Config
	log     *slog.Logger
	m       *metrics.Metrics
	ctx     context.Context
	cancel  context.CancelFunc
	stager  atomic.Pointer[stagerBox]
	nextID  atomic.Uint64
	running sync.WaitGroup
	active  atomic.Int64 // what running counts, readable

	draining      atomic.Bool                       // BeginDrain: run no new user handler
	drainingPeers map[transport.InstanceID]struct{} // peers that said they drain (guarded by mu)
	refusedFrom   map[transport.InstanceID]struct{} // peers whose one-way messages were refused while draining (for the log)
	inboxMsgs     atomic.Int64
	inboxBytes    atomic.Int64
	claimPrefix   atomic.Int64 // ClaimPrefix: the fixed header, or what the request claimers need

	mu         sync.Mutex
	transports []transport.Transport
	handlers   map[string]Handler
	internal   map[string]InternalHandler
	claimers   map[string]claimer // internal requests read straight into their destination (claimreq.go)
	claims     map[claimKey]*pendingClaim
	calls      map[uint64]*call
	inboxes    map[transport.InstanceID]*inbox
	closed     bool

	rescue rescuer
}

type stagerBox struct{ s Stager }

// New creates a messenger. Add transports with AddTransport, in preference order.
func New(cfg Config) *Messenger {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.InboxLimit <= 0 {
		cfg.InboxLimit = DefaultInboxLimit
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Messenger{
		cfg: cfg, log: cfg.Logger, m: cfg.Metrics, ctx: ctx, cancel: cancel,
		handlers: map[string]Handler{}, internal: map[string]InternalHandler{},
		claimers: map[string]claimer{}, claims: map[claimKey]*pendingClaim{},
		calls: map[uint64]*call{}, inboxes: map[transport.InstanceID]*inbox{},
		drainingPeers: map[transport.InstanceID]struct{}{}, refusedFrom: map[transport.InstanceID]struct{}{},
	}
}

// SetStager installs the rendezvous stager (the runtime does this once rendezvous exists).
func (g *Messenger) SetStager(s Stager) { g.stager.Store(&stagerBox{s}) }

func (g *Messenger) getStager() Stager {
	if b := g.stager.Load(); b != nil {
		return b.s
	}
	return nil
}

// AddTransport appends t to the routing order and returns its index (used by Deliver and
// PeerDown).
func (g *Messenger) AddTransport(t transport.Transport) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.transports = append(g.transports, t)
	return len(g.transports) - 1
}

// Handle registers h under name, replacing any earlier handler of that name.
func (g *Messenger) Handle(name string, h Handler) error {
	if name == "" || len(name) > wire.MaxNameLen || strings.HasPrefix(name, InternalPrefix) {
		return fmt.Errorf("messenger: %w: %q (1..%d bytes, not starting with %q)", ErrInvalidName, name, wire.MaxNameLen, InternalPrefix)
	}
	if h == nil {
		return fmt.Errorf("messenger: %w: nil handler for %q", ErrInvalidName, name)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.handlers[name] = h
	g.m.HandlerRegistered(name)
	return nil
}

func (g *Messenger) start() { g.running.Add(1); g.active.Add(1) }
func (g *Messenger) done()  { g.active.Add(-1); g.running.Done() }

// BeginDrain makes this messenger run no new user handler: a request gets ErrDraining back at
// once, a one-way message is refused, counted (errors_total{kind="draining"}) and logged once per
// peer. Handlers already running go on, and velo's own protocol (rendezvous) keeps working, so
// transfers in flight complete and answers to this side's own calls still arrive.
func (g *Messenger) BeginDrain() { g.draining.Store(true) }

// PeerDraining records that peer said it is draining: from now on Send and Request to it fail at
// once with an error matching ErrDraining, without sending. PeerUp forgets it (the peer
// registered again, a new incarnation).
func (g *Messenger) PeerDraining(peer transport.InstanceID) {
	g.mu.Lock()
	g.drainingPeers[peer] = struct{}{}
	g.mu.Unlock()
}

// PeerUp forgets that peer was draining.
func (g *Messenger) PeerUp(peer transport.InstanceID) {
	g.mu.Lock()
	delete(g.drainingPeers, peer)
	g.mu.Unlock()
}

// Pending reports how many of this side's calls wait for their answers.
func (g *Messenger) Pending() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.calls)
}

// Busy reports how many handlers are running or queued to run (user and internal), for a
// shutdown that waits for them.
func (g *Messenger) Busy() int { return int(g.active.Load()) }

// InboxPeers lists the peers that sent this instance user messages whose handlers are queued or
// running; a draining instance tells them too before it goes.
func (g *Messenger) InboxPeers() []transport.InstanceID {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]transport.InstanceID, 0, len(g.inboxes))
	for p := range g.inboxes {
		out = append(out, p)
	}
	return out
}

// drainingPeer is the error of a user call this side will not make: the peer said it drains.
func (g *Messenger) drainingPeer(peer transport.InstanceID) error {
	g.mu.Lock()
	_, ok := g.drainingPeers[peer]
	g.mu.Unlock()
	if !ok {
		return nil
	}
	return fmt.Errorf("messenger: %016x is shutting down: %w (nothing was sent: send it to another instance)", uint64(peer), ErrDraining)
}

// HandleInternal registers a velo protocol handler; name must start with InternalPrefix. A nil h
// removes the handler: its requests are answered ErrUnknownHandler, as by a build that never had
// it (the tests play a peer of an earlier release this way).
func (g *Messenger) HandleInternal(name string, h InternalHandler) {
	if !strings.HasPrefix(name, InternalPrefix) {
		panic("messenger: internal handler without the velo. prefix: " + name)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if h == nil {
		delete(g.internal, name)
		return
	}
	g.internal[name] = h
	g.m.HandlerRegistered(name)
}

// routeVia is transport via, when it reaches peer.
func (g *Messenger) routeVia(via int, peer transport.InstanceID) (int, transport.Transport, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return 0, nil, ErrClosed
	}
	if via >= len(g.transports) || !g.transports[via].Reaches(peer) {
		return 0, nil, fmt.Errorf("messenger: %w: transport %d does not reach %016x", ErrNoRoute, via, uint64(peer))
	}
	return via, g.transports[via], nil
}

// route picks the first transport, in the order added, that reaches peer and carries size bytes.
func (g *Messenger) route(peer transport.InstanceID, size int) (int, transport.Transport, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return 0, nil, ErrClosed
	}
	reached := false
	for i, t := range g.transports {
		if !t.Reaches(peer) {
			continue
		}
		reached = true
		if size <= t.MaxFrameSize() {
			return i, t, nil
		}
	}
	if reached {
		return 0, nil, fmt.Errorf("messenger: %w: no transport to %016x carries a %d-byte frame: %w", ErrNoRoute, uint64(peer), size, transport.ErrFrameTooLarge)
	}
	return 0, nil, fmt.Errorf("messenger: %w: %016x is an %w: register it with RegisterPeer first", ErrNoRoute, uint64(peer), transport.ErrUnknownPeer)
}

// maxInline is the largest payload sent inline to peer: the threshold, and what fits one frame.
func (g *Messenger) maxInline(peer transport.InstanceID, overhead int) int {
	limit := g.maxFrame(peer, overhead)
	if g.getStager() != nil && g.cfg.StageThreshold > 0 && g.cfg.StageThreshold < limit {
		limit = g.cfg.StageThreshold
	}
	return limit
}

// MaxInline is the largest payload a call of name to peer carries in its own frame: above it the
// payload is staged by rendezvous (internal handlers get the staged token, not the bytes, so velo's
// own protocols that carry data keep their requests at or below it).
func (g *Messenger) MaxInline(peer transport.InstanceID, name string) int {
	return g.maxInline(peer, wire.HeaderLen+1+len(name))
}

// CarriesOver reports whether transport via (the index AddTransport returned) reaches peer and
// carries a request of name with a payload of size bytes in one frame: what RequestOver needs.
func (g *Messenger) CarriesOver(via int, peer transport.InstanceID, name string, size int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if via < 0 || via >= len(g.transports) {
		return false
	}
	t := g.transports[via]
	return t.Reaches(peer) && wire.HeaderLen+1+len(name)+size <= t.MaxFrameSize()
}

// MaxParts is the largest payload RequestParts sends to peer for name: what the largest frame of
// a transport that reaches peer holds besides the header (0 when none reaches it).
func (g *Messenger) MaxParts(peer transport.InstanceID, name string) int {
	return g.maxFrame(peer, wire.HeaderLen+1+len(name))
}

// maxFrame is what the largest frame of a transport that reaches peer holds besides overhead.
func (g *Messenger) maxFrame(peer transport.InstanceID, overhead int) int {
	limit := 0
	g.mu.Lock()
	for _, t := range g.transports {
		if t.Reaches(peer) && t.MaxFrameSize()-overhead > limit {
			limit = t.MaxFrameSize() - overhead
		}
	}
	g.mu.Unlock()
	return limit
}

// prepare stages payload when it is too large to travel inline.
func (g *Messenger) prepare(ctx context.Context, peer transport.InstanceID, overhead int, payload []byte) ([]byte, wire.Flags, error) {
	if len(payload) <= g.maxInline(peer, overhead) {
		return payload, 0, nil
	}
	s := g.getStager()
	if s == nil {
		return payload, 0, nil // route reports the size problem
	}
	tok, err := s.Stage(ctx, peer, payload)
	if err != nil {
		g.m.Error("staging_failed")
		return nil, 0, fmt.Errorf("messenger: staging a %d-byte payload for %016x: %w", len(payload), uint64(peer), err)
	}
	g.m.Staged("sent")
	return tok, wire.FlagStaged, nil
}

func (g *Messenger) send(ctx context.Context, peer transport.InstanceID, kind string, parts ...[]byte) (int, transport.Transport, error) {
	return g.sendVia(ctx, -1, peer, kind, parts...)
}

// sendVia is send on transport via, or on the route's choice when via is negative.
func (g *Messenger) sendVia(ctx context.Context, via int, peer transport.InstanceID, kind string, parts ...[]byte) (int, transport.Transport, error) {
	size := 0
	for _, p := range parts {
		size += len(p)
	}
	idx, t, err := g.route(peer, size)
	if via >= 0 {
		idx, t, err = g.routeVia(via, peer)
	}
	if err == nil {
		err = t.Send(ctx, peer, parts...)
	}
	if err != nil {
		g.m.Error("send_failed")
		return idx, nil, err
	}
	g.m.Sent(kind)
	return idx, t, nil
}

// Send delivers a fire-and-forget message to the named handler on peer. It returns once a
// transport has taken the frame; the handler's outcome is not reported.
func (g *Messenger) Send(ctx context.Context, peer transport.InstanceID, name string, payload []byte) error {
	if err := g.drainingPeer(peer); err != nil {
		return err
	}
	hdr, err := wire.AppendCallHeader(make([]byte, 0, wire.HeaderLen+1+len(name)), wire.Header{Kind: wire.KindOneWay}, name)
	if err != nil {
		return fmt.Errorf("messenger: %w: %v", ErrInvalidName, err)
	}
	body, flags, err := g.prepare(ctx, peer, len(hdr), payload)
	if err != nil {
		return err
	}
	hdr[2] = byte(flags)
	_, _, err = g.send(ctx, peer, "one_way", hdr, body)
	if err != nil {
		g.unstage(flags, body)
	}
	return err
}

// unstage frees a staged payload whose message did not go out.
func (g *Messenger) unstage(flags wire.Flags, token []byte) {
	if flags&wire.FlagStaged == 0 {
		return
	}
	if s := g.getStager(); s != nil {
		s.Unstage(token)
		g.m.Staged("unstaged")
	}
}

// Request calls the named handler on peer and returns its answer, which belongs to the caller (a
// buffer of its own per call, never reused by the messenger). Errors from the remote side are
// *RemoteError; ctx bounds the whole call.
func (g *Messenger) Request(ctx context.Context, peer transport.InstanceID, name string, payload []byte) ([]byte, error) {
	c, err := g.call(ctx, -1, peer, name, payload, nil)
	if err != nil {
		return nil, err
	}
	return g.resolve(ctx, peer, name, c)
}

// resolve returns call c's answer: its bytes, or those of the payload its answer staged.
func (g *Messenger) resolve(ctx context.Context, peer transport.InstanceID, name string, c *call) ([]byte, error) {
	if c.flags&wire.FlagStaged == 0 {
		return c.resp, nil
	}
	s := g.getStager()
	if s == nil {
		return nil, fmt.Errorf("messenger: %w: staged response without a stager", ErrProtocol)
	}
	b, release, err := s.Resolve(ctx, peer, c.resp)
	if err != nil {
		g.m.Error("staging_failed")
		return nil, fmt.Errorf("messenger: fetching the staged response of %q from %016x: %w", name, uint64(peer), err)
	}
	g.m.Staged("received")
	release()
	return b, nil
}

// RequestInto is Request for an answer whose size the caller knows: the answer must be exactly
// len(dst) bytes and is read from the transport straight into dst when the transport supports it.
// dst is not touched after RequestInto returns.
func (g *Messenger) RequestInto(ctx context.Context, peer transport.InstanceID, name string, payload, dst []byte) error {
	_, err := g.call(ctx, -1, peer, name, payload, dst)
	return err
}

// RequestBuffer is Request for an answer that usually fits buf: an answer of at most len(buf)
// bytes is read from the transport straight into buf when the transport supports it, and the
// answer returned is then buf[:n]; a larger one, or one the transport could not read in place,
// comes in a buffer of its own. Either way the caller may reuse buf once RequestBuffer returned
// and no slice of the answer is still in use: a caller that reads answers of about the same size
// over and over (velo's batched acquires) allocates none of them.
func (g *Messenger) RequestBuffer(ctx context.Context, peer transport.InstanceID, name string, payload, buf []byte) ([]byte, error) {
	c, err := g.callParts(ctx, -1, peer, name, [][]byte{payload}, buf, true)
	if err != nil {
		return nil, err
	}
	return g.resolve(ctx, peer, name, c)
}

// RequestParts is Request for a payload in parts (a header of the caller's and the bytes it
// describes, say), which go out one after the other without being joined into one buffer first.
// Such a payload is never staged, whatever the staging threshold: above MaxParts it is refused,
// so callers that move bulk data cut it into pieces of at most that size (a receiver that claims
// the request, ClaimRequests, reads each piece straight into place, so pieces as large as a
// frame cost it nothing extra). The parts are not touched after RequestParts returns.
func (g *Messenger) RequestParts(ctx context.Context, peer transport.InstanceID, name string, parts ...[]byte) ([]byte, error) {
	size := 0
	for _, p := range parts {
		size += len(p)
	}
	if limit := g.MaxParts(peer, name); size > limit {
		return nil, fmt.Errorf("messenger: %w: a payload of %d bytes in parts for %q is above the %d bytes one frame to %016x carries (cut it into pieces of at most MaxParts)", transport.ErrFrameTooLarge, size, name, limit, uint64(peer))
	}
	c, err := g.callParts(ctx, -1, peer, name, parts, nil, false)
	if err != nil {
		return nil, err
	}
	return c.resp, nil
}

// RequestOver is Request on one transport (by the index AddTransport returned), for velo's own
// probes: it neither stages nor refuses a draining peer.
func (g *Messenger) RequestOver(ctx context.Context, via int, peer transport.InstanceID, name string, payload []byte) ([]byte, error) {
	c, err := g.call(ctx, via, peer, name, payload, nil)
	if err != nil {
		return nil, err
	}
	return c.resp, nil
}

// SendInternal sends a one-way message of velo's own protocol (name in InternalPrefix), to a
// draining peer too.
func (g *Messenger) SendInternal(ctx context.Context, peer transport.InstanceID, name string, payload []byte) error {
	if !strings.HasPrefix(name, InternalPrefix) {
		return fmt.Errorf("messenger: %w: SendInternal of %q", ErrInvalidName, name)
	}
	hdr, err := wire.AppendCallHeader(make([]byte, 0, wire.HeaderLen+1+len(name)), wire.Header{Kind: wire.KindOneWay}, name)
	if err != nil {
		return fmt.Errorf("messenger: %w: %v", ErrInvalidName, err)
	}
	_, _, err = g.send(ctx, peer, "one_way", hdr, payload)
	return err
}

func (g *Messenger) call(ctx context.Context, via int, peer transport.InstanceID, name string, payload, sink []byte) (*call, error) {
	return g.callParts(ctx, via, peer, name, [][]byte{payload}, sink, false)
}

// callParts sends a request whose payload is parts: one part is staged when it is too large to
// travel inline (RequestParts keeps several parts to the inline size).
func (g *Messenger) callParts(ctx context.Context, via int, peer transport.InstanceID, name string, parts [][]byte, sink []byte, upTo bool) (*call, error) {
	if !strings.HasPrefix(name, InternalPrefix) {
		// velo's own protocol still talks to a draining peer: its transfers must complete.
		if err := g.drainingPeer(peer); err != nil {
			return nil, err
		}
	}
	id := g.nextID.Add(1)
	hdr, err := wire.AppendCallHeader(make([]byte, 0, wire.HeaderLen+1+len(name)), wire.Header{Kind: wire.KindRequest, ID: id}, name)
	if err != nil {
		return nil, fmt.Errorf("messenger: %w: %v", ErrInvalidName, err)
	}
	var flags wire.Flags
	if len(parts) == 1 {
		var body []byte
		if body, flags, err = g.prepare(ctx, peer, len(hdr), parts[0]); err != nil {
			return nil, err
		}
		parts = [][]byte{body}
	}
	hdr[2] = byte(flags)
	if r := inlineRunOf(ctx); r != nil {
		// A handler running on a connection's reader is about to wait for an answer, which may
		// arrive on that very connection: let another goroutine read it from now on.
		r.release()
	}
	c := &call{id: id, peer: peer, sink: sink, upTo: upTo, done: make(chan struct{})}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil, ErrClosed
	}
	g.calls[id] = c
	g.mu.Unlock()

	idx, t, err := g.sendVia(ctx, via, peer, "request", append([][]byte{hdr}, parts...)...)
	c.mu.Lock()
	c.transport = idx
	c.mu.Unlock()
	if err != nil {
		if len(parts) == 1 {
			g.unstage(flags, parts[0])
		}
		g.finish(c, nil, 0, err)
		return nil, err
	}
	if aw, ok := t.(transport.Awaiter); ok {
		// When nothing reads the connection, this goroutine reads its answer itself: no
		// goroutine then has to wake this one up (see transport.Awaiter).
		aw.Await(ctx, peer, &c.waiter)
	}
	if err := c.wait(ctx); err != nil {
		g.forget(c)
		if re := (*RemoteError)(nil); errors.As(err, &re) {
			re.Peer, re.Handler = peer, name
		}
		return nil, err
	}
	return c, nil
}

func (g *Messenger) forget(c *call) {
	g.mu.Lock()
	if g.calls[c.id] == c {
		delete(g.calls, c.id)
	}
	g.mu.Unlock()
}

// finish completes c once; later completions are ignored.
func (g *Messenger) finish(c *call, resp []byte, flags wire.Flags, err error) {
	g.forget(c)
	c.complete(resp, flags, err)
}

// PeerDown fails the calls to peer that went out on transport idx and drops the peer's queued
// messages' ordering state.
func (g *Messenger) PeerDown(idx int, peer transport.InstanceID, cause error) {
	g.mu.Lock()
	var failed []*call
	for _, c := range g.calls {
		c.mu.Lock()
		if c.peer == peer && c.transport == idx && c.state == callWaiting {
			failed = append(failed, c)
		}
		c.mu.Unlock()
	}
	g.mu.Unlock()
	for _, c := range failed {
		g.finish(c, nil, 0, fmt.Errorf("messenger: request to %016x lost: %w", uint64(peer), cause))
	}
}

// Close fails pending calls, refuses new ones, cancels handler contexts and waits (up to ctx) for
// running handlers to return.
func (g *Messenger) Close(ctx context.Context) error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	calls := make([]*call, 0, len(g.calls))
	for _, c := range g.calls {
		calls = append(calls, c)
	}
	g.mu.Unlock()
	for _, c := range calls {
		g.finish(c, nil, 0, ErrClosed)
	}
	g.rescueAll()
	g.cancel()
	done := make(chan struct{})
	go func() { g.running.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("messenger: handlers still running at close: %w", ctx.Err())
	}
}

// MaxFrame is the frame limit of the transport that carries small messages to peer (the first
// that reaches it), or 0 when none does. Rendezvous sizes chunks with it: a pull travels on that
// transport and its answer returns on the same one.
func (g *Messenger) MaxFrame(peer transport.InstanceID) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, t := range g.transports {
		if t.Reaches(peer) {
			return t.MaxFrameSize()
		}
	}
	return 0
}
