package ucxtransport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/velo/auth"
	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/transport"
)

// amID is the active-message id of every frame of this transport (hello, data and fin share it,
// so UCX's per-endpoint order covers all three).
const amID uint16 = 0x0760

// Transport is a velo transport over UCX active messages that also implements transport.RMA.
// Create it with New and add it with velo.WithUCXTransport (RDMA path) or velo.WithTransport
// (messages only).
type Transport struct {
	cfg    Config
	log    *slog.Logger
	follow *followHandler // nil when Config.Logger was set: then that logger is kept
	m      *metrics

	// engMu guards the engine's creation (engine, ScopeListen). eng, worker, noLanes and tcpListen
	// are set once, with it; whatever runs after Start reads them without it.
	engMu    sync.Mutex
	eng      *ucx.Engine
	engErr   error
	settings map[string]string // the UCX settings the engine is created with, besides TLS and devices
	// scopable: nothing names UCX's devices, so ScopeListen may; scoped: it did; scopeSaid: the
	// engine came first, and that was logged.
	scopable, scoped, scopeSaid bool
	worker                      []byte
	noLanes                     string // UCX can create no endpoint velo can use, to any peer (lane.go); set with the engine

	timings timings
	guard   guardState // the linked UCX's software RMA guard, as New found it (guard.go)

	host transport.Host
	// gate is the runtime's authentication, when it requires authenticated peers: frames come
	// only from authenticated incarnations, endpoints open only to authenticated peers.
	gate     transport.AuthGate
	gateLogs auth.LogLimiter
	// remoteLogs limits every other warning a peer's frames can cause (warnRemote).
	remoteLogs auth.LogLimiter
	// rkeys are the frame keys of each peer incarnation's endpoints that a hello with a valid
	// proof opened: with a gate, data and fins count only when their seal opens under one.
	keysMu sync.Mutex
	rkeys  map[transport.InstanceID]*recvKeys
	self   transport.InstanceID
	inc    uint64
	blob   []byte
	build  wire.UCXBuild // the UCX this process links, as the blob announces it (build.go)

	mu    sync.Mutex // guards the fields below and every peer's addr, added, learned
	peers map[transport.InstanceID]*peer
	slots map[slotKey]uint32 // endpoints created per peer incarnation (see conn.go)
	// mismatched are the peers whose UCX build this one cannot talk to (build.go), with it.
	mismatched map[transport.InstanceID]wire.UCXBuild
	orphans    map[*peer]struct{} // forgotten peers whose retired endpoints still wait to close
	started    bool
	closed     bool

	// softRMABy names the opt-in that keeps the RDMA path over software lanes ("" for none);
	// laneSaid are the pairs whose software lanes were logged, softRMAPeers the peers the opt-in
	// applies to, with their lanes (lanes.go).
	softRMABy    string
	laneSaid     map[slotKey]bool
	softRMAPeers map[transport.InstanceID]string
	// tcpListen are the addresses the worker's tcp transport listens on, as found when the engine
	// was created, and netField where UCX_NET_DEVICES came from where the program set it (listen.go).
	tcpListen []string
	netField  string

	recvMu  sync.Mutex // guards inbound and serialises Host.Deliver
	inbound map[transport.InstanceID]*inboundState

	// openEPs counts this side's endpoints from their opening to their close (retired ones
	// included); evict asks the maintenance goroutine to bring the current ones back within
	// Config.MaxEndpoints (budget.go).
	openEPs atomic.Int64
	evict   chan struct{}

	stop      chan struct{}
	closeOnce sync.Once
	closeErr  error
	wg        sync.WaitGroup
}

// timings are the lifecycle bounds of defaultFinWait and friends; tests shorten them.
type timings struct {
	finWait     time.Duration
	holdTimeout time.Duration
	// beforeJoin, when set, runs before this side follows a peer's hello into its slot and may
	// stop it (false): tests play an owner slow or unable to connect back with it.
	beforeJoin func(slot uint32) bool
}

// peer is one remote instance: registered with AddPeer, or learned from its hello.
type peer struct {
	id  transport.InstanceID
	inc uint64

	// Guarded by Transport.mu.
	addr  *peerAddr // replaced, never changed, when a newer blob arrives
	added bool      // AddPeer registered it
	// removedThrough is the newest slot with the peer when RemovePeer forgot it: a hello for
	// that slot or an older one is the peer joining a slot we already retired, not new contact.
	removedThrough uint32
	learned        bool // a hello introduced it, and its endpoint to us has not failed since
	// noLane: ucp_ep_create found no UCX lane to this incarnation's worker (lane.go); UCX's
	// words. The peer is not reached for messages nor offered RDMA.
	noLane string

	lastUse atomic.Int64 // unix nanoseconds of the last frame or GET either way

	// heard is the newest slot the peer said hello on: its endpoint of that slot exists and
	// speaks for us to its guard (it binds an endpoint before it sends the hello). heardCh, made
	// only while a read waits for it (holderWait), is closed when heard grows. Guarded by
	// Transport.mu.
	heard   uint32
	heardCh chan struct{}

	// sendMu orders everything submitted to the peer's current endpoint: the hello, data
	// frames in seq order, the fin last. It guards the fields below.
	sendMu    sync.Mutex
	conn      *outConn   // our endpoint of the newest slot, that frames go on; nil when none
	retired   []*outConn // endpoints taken out of use and not closed yet
	prevEpoch uint32     // the last endpoint's slot and data seq, for the next hello
	prevSeq   uint64
	gone      bool // removed or transport closed: open nothing new
	departed  bool // the peer said its transport is closing (finBye): it is down for good
}

// peerAddr is what a peer's blob says: where its worker is and what it accepts.
type peerAddr struct {
	worker   []byte
	maxFrame int
	rma      bool
	getv     bool // its engine answers vectored guarded GETs
	putv     bool // and vectored guarded PUTs
}

func (p *peer) touch() { p.lastUse.Store(time.Now().UnixNano()) }

// inboundState is one sender's receive side: ordering across its endpoints.
type inboundState struct {
	inc uint64
	inbound
}

// New creates the transport and its UCX engine: the UCX context and worker on their own locked
// OS thread. TLS, NetDevices and KeepaliveInterval apply only where the UCX_* environment leaves
// them unset; Start logs which value applied from where. Without cgo (or off Linux) it fails with an
// error wrapping ucx.ErrNotCompiled (ucx.ErrUnsupported). On a UCX that does not enforce remote keys
// on software RMA (no velo guard patch set: build with -tags ucx_static after make ucx-static) it
// fails with an error wrapping ErrUnguardedUCX, unless Config.TrustNetwork or VELO_UCX_TRUST_NETWORK=1
// opts in.
//
// Where nothing names the devices UCX may use (TCPInterfaces, NetDevices and UCX_NET_DEVICES all
// unset), New checks the configuration and leaves the engine for later: velo.New hands the transport
// its control plane's address (ScopeListen) before anything starts, and the worker's tcp transport
// then listens on that address's interface only. Used without velo, the engine is created, with
// UCX's default devices, by the first call that needs it (Start, RegisterMemory, Collectors,
// Settings); an error creating it is returned by Start, ScopeListen and RegisterMemory.
func New(cfg Config) (*Transport, error) {
	var follow *followHandler
	if cfg.Logger == nil {
		follow = newFollowHandler()
		cfg.Logger = slog.New(follow)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if _, err := ucx.SoftwareRMAGuard(); errors.Is(err, ucx.ErrNotCompiled) || errors.Is(err, ucx.ErrUnsupported) {
		return nil, fmt.Errorf("ucx transport: %w", err)
	}
	guard, err := checkGuard(cfg, os.Getenv)
	if err != nil {
		return nil, err
	}
	settings := map[string]string{}
	addTCPSegSizes(settings, os.Getenv, ucx.Version())
	if cfg.KeepaliveInterval > 0 {
		settings["KEEPALIVE_INTERVAL"] = fmt.Sprintf("%dus", cfg.KeepaliveInterval.Microseconds())
	}
	netField := "Config.NetDevices"
	if len(cfg.TCPInterfaces) > 0 {
		if cfg.NetDevices != "" {
			return nil, fmt.Errorf("ucx: Config.NetDevices %q and Config.TCPInterfaces %q both name devices: set one (TCPInterfaces keeps every InfiniBand port)",
				cfg.NetDevices, cfg.TCPInterfaces)
		}
		if cfg.NetDevices, err = tcpNetDevices(cfg.TCPInterfaces, sysInfiniband); err != nil {
			return nil, err
		}
		netField = "Config.TCPInterfaces"
	}
	m, err := newMetrics(cfg.Metrics)
	if err != nil {
		return nil, err
	}
	t := &Transport{
		cfg:          cfg,
		log:          cfg.Logger,
		follow:       follow,
		m:            m,
		settings:     settings,
		guard:        guard,
		timings:      timings{finWait: defaultFinWait, holdTimeout: defaultHoldTimeout},
		peers:        map[transport.InstanceID]*peer{},
		slots:        map[slotKey]uint32{},
		mismatched:   map[transport.InstanceID]wire.UCXBuild{},
		softRMABy:    softwareRMAOptIn(cfg, os.Getenv(SoftwareRMAEnv)),
		laneSaid:     map[slotKey]bool{},
		softRMAPeers: map[transport.InstanceID]string{},
		netField:     netField,
		remoteLogs:   auth.LogLimiter{Interval: remoteLogInterval},
		orphans:      map[*peer]struct{}{},
		inbound:      map[transport.InstanceID]*inboundState{},
		stop:         make(chan struct{}),
		evict:        make(chan struct{}, 1),
	}
	// A scope can narrow the devices only where nothing names them; otherwise there is nothing to
	// wait for, and UCX's own errors come from New as they always did.
	t.scopable = len(cfg.TCPInterfaces) == 0 && cfg.NetDevices == "" && strings.TrimSpace(os.Getenv("UCX_NET_DEVICES")) == ""
	if !t.scopable {
		if _, err := t.engine(); err != nil {
			m.unregister()
			return nil, err
		}
	}
	return t, nil
}

// engine is the transport's UCX engine, created on the first call (see New). A failure is kept
// and returned to every later call: the transport is unusable, and Close still works.
func (t *Transport) engine() (*ucx.Engine, error) {
	t.engMu.Lock()
	defer t.engMu.Unlock()
	if t.eng == nil && t.engErr == nil {
		t.engErr = t.createEngine()
	}
	return t.eng, t.engErr
}

// createEngine creates the UCX context and worker with the devices t.cfg.NetDevices names and
// finds where the worker listens; t.engMu is held.
func (t *Transport) createEngine() error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	before := TCPListeners()
	eng, err := ucx.NewEngine(ctx, ucx.EngineConfig{
		Context:      ucx.ContextConfig{TLS: t.cfg.TLS, NetDevices: t.cfg.NetDevices, Settings: t.settings, Logger: t.cfg.Logger},
		MaxEagerSize: t.cfg.EagerMax + sealedHeaderLen,
		RMA:          t.cfg.RMA,
		Name:         Name,
		Logger:       t.cfg.Logger,
		Metrics:      t.cfg.Metrics,
	})
	if err != nil {
		return fmt.Errorf("ucx transport: %w", err)
	}
	if eng.MaxAMHeader() < sealedHeaderLen {
		_ = eng.Close(context.Background())
		return fmt.Errorf("ucx transport: the UCX worker carries active-message headers of at most %d bytes; frames need %d", eng.MaxAMHeader(), sealedHeaderLen)
	}
	t.eng, t.worker = eng, eng.Address()
	t.tcpListen = newListeners(before, TCPListeners())
	t.probeLanes()
	return nil
}

var _ transport.ListenScoper = (*Transport)(nil)

// ScopeListen implements transport.ListenScoper: velo.New calls it with the control plane's
// listening address before it starts anything, and the engine is created here. Where nothing
// names UCX's devices (see New) and ip is a specific address, UCX_NET_DEVICES becomes that
// address's interface and every InfiniBand port, as Config.TCPInterfaces: InterfacesOf(ip) would
// set it, so the worker's tcp transport listens beside the control plane and nowhere else. An
// unspecified address (0.0.0.0, ::) or none keeps UCX's default, every interface. An engine
// created before (memory registered before velo.New) cannot be narrowed any more: that is logged
// once, with the setting that does it. The error is the engine's creation error, if any.
func (t *Transport) ScopeListen(ip netip.Addr) error {
	t.engMu.Lock()
	defer t.engMu.Unlock()
	ip = ip.Unmap()
	wants := t.scopable && ip.IsValid() && !ip.IsUnspecified()
	if t.eng != nil || t.engErr != nil {
		if wants && !t.scoped && len(t.tcpListen) > 0 && !t.scopeSaid {
			t.scopeSaid = true
			t.log.Warn("ucx: the UCX worker was created before the control plane's address was known (memory registered "+
				"before velo.New?), so its tcp transport listens on every interface, not only beside the control plane: "+
				"set ucxtransport.Config.TCPInterfaces (ucxtransport.InterfacesOf of the control plane's address) or UCX_NET_DEVICES",
				"control_plane", ip.String(), "tcp_listen", strings.Join(t.tcpListen, ","))
		}
		return t.engErr
	}
	if wants {
		ifaces, err := InterfacesOf(ip)
		var devs string
		if err == nil {
			devs, err = tcpNetDevices(ifaces, sysInfiniband)
		}
		if err != nil {
			t.log.Warn("ucx: the control plane's address names no interface of this host; UCX's tcp transport listens on every interface",
				"control_plane", ip.String(), "err", err)
		} else {
			t.cfg.NetDevices, t.scoped = devs, true
			t.netField = "the control plane's address " + ip.String() + " (interface " + strings.Join(ifaces, ",") + ")"
		}
	}
	t.engErr = t.createEngine()
	return t.engErr
}

// addTCPSegSizes gives UCX's tcp transport segments of tcpSegSize where the environment sets
// neither size. UCX's tcp transport copies an active message out in segments of TX_SEG_SIZE (8 KiB
// by default), so a 64 KiB frame went as eight fragments, each one needing the receiver's progress
// before the next is worth sending: its round trip was 5-6× the TCP transport's on a loaded host
// and 1.4-2× on an idle one. With segments of tcpSegSize a frame of up to 64 KiB goes in one.
// Both sizes or neither: UCX refuses a send segment larger than the receive one, so an operator
// who sets either variable chooses both.
func addTCPSegSizes(settings map[string]string, getenv func(string) string, v ucx.VersionInfo) {
	if getenv("UCX_TCP_TX_SEG_SIZE") != "" || getenv("UCX_TCP_RX_SEG_SIZE") != "" {
		return
	}
	tx, rx := tcpSegSizeNames(v)
	settings[tx] = tcpSegSize
	settings[rx] = tcpSegSize
}

// tcpSegSizeNames are the names under which ucp_config_modify reaches the tcp transport's segment
// sizes in UCX release v. ucp hands a name it does not know to every transport's table; UCX 1.13
// matches it against the table's own names ("TX_SEG_SIZE"), later releases against the names with
// the table's prefix ("TCP_TX_SEG_SIZE", what ucx_info -f shows). A name a release does not match
// is left unused, and UCX warns once per worker ("invalid configuration") and keeps its default.
func tcpSegSizeNames(v ucx.VersionInfo) (tx, rx string) {
	if v.Major == 1 && v.Minor < 15 {
		return "TX_SEG_SIZE", "RX_SEG_SIZE"
	}
	return "TCP_TX_SEG_SIZE", "TCP_RX_SEG_SIZE"
}

// logSettings says where the UCX transport selection came from. A configuration header a
// program prints can lie (the environment overrides it); this line is what the context used.
func (t *Transport) logSettings() {
	for _, want := range []struct{ name, field, value string }{
		{"TLS", "Config.TLS", t.cfg.TLS},
		{"NET_DEVICES", t.netField, t.cfg.NetDevices},
	} {
		s, ok := t.setting(want.name)
		if !ok {
			continue
		}
		switch {
		case s.Source == ucx.SourceEnvironment && want.value != "" && want.value != s.Value:
			t.log.Info("ucx: UCX_"+want.name+" from the environment overrides "+want.field, "value", s.Value, "config", want.value)
		case s.Source == ucx.SourceEnvironment:
			t.log.Info("ucx: UCX_"+want.name+" from the environment", "value", s.Value)
		case s.Source == ucx.SourceProgram:
			t.log.Info("ucx: UCX_"+want.name+" from "+want.field+" (the variable is unset)", "value", s.Value)
		default:
			t.log.Info("ucx: UCX_"+want.name+" is UCX's default", "value", s.Value)
		}
	}
	if len(t.tcpListen) == 0 {
		t.log.Info("ucx: the worker opened no tcp listener")
	} else {
		t.log.Info("ucx: the worker's tcp transport listens", "on", strings.Join(t.tcpListen, ","))
	}
}

func (t *Transport) setting(name string) (ucx.Setting, bool) {
	for _, s := range t.eng.Settings() {
		if s.Name == name {
			return s, true
		}
	}
	return ucx.Setting{}, false
}

// Settings returns the UCX settings the transport's context runs with, each with its source
// (environment, program, default). Trust these over any configuration a program prints. It
// creates the engine if nothing did yet (see New); nil when that failed.
func (t *Transport) Settings() []ucx.Setting {
	eng, err := t.engine()
	if err != nil {
		return nil
	}
	return eng.Settings()
}

// Name implements transport.Transport: "ucx".
func (t *Transport) Name() string { return Name }

// MaxFrameSize implements transport.Transport: Config.EagerMax. Frames above it are refused with
// transport.ErrFrameTooLarge, and the runtime carries them another way (TCP, or staging).
func (t *Transport) MaxFrameSize() int { return t.cfg.EagerMax }

// Start implements transport.Transport: it binds the runtime and starts receiving.
func (t *Transport) Start(h transport.Host) error {
	if _, err := t.engine(); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.closed:
		return fmt.Errorf("ucx: Start: %w", transport.ErrClosed)
	case t.started:
		return errors.New("ucx: Start called twice")
	}
	if t.follow != nil && h.Logger() != nil {
		t.follow.follow(h.Logger().Handler())
	}
	t.host, t.self, t.inc = h, h.LocalID(), h.Incarnation()
	if g, ok := h.(transport.AuthGate); ok && g.AuthRequired() {
		t.gate = g
		t.gateLogs.Interval = 10 * time.Second
	}
	t.build = localBuild(t.guard.rma)
	t.blob = appendBlob(nil, peerBlob{RMA: true, VectoredGet: true, VectoredPut: true, MaxFrame: t.cfg.EagerMax, Incarnation: t.inc,
		Build: t.build, Worker: t.worker})
	if err := t.eng.HandleAM(amID, t.onAM); err != nil {
		return fmt.Errorf("ucx: installing the frame handler: %w", err)
	}
	t.started = true
	t.wg.Add(1)
	go t.maintain()
	t.logSettings()
	t.logGuard()
	t.logNoLanes()
	return nil
}

// Address implements transport.Transport: the address blob (version, limits, incarnation, worker
// address, checksum). Valid after Start.
func (t *Transport) Address() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]byte(nil), t.blob...)
}

// AddPeer implements transport.Transport. A blob of another UCX wire version is refused with an
// error wrapping transport.ErrInvalidEndpoint, and the refusal is logged at warn level; so is a
// blob whose UCX build cannot talk to ours (ErrUCXBuildMismatch). With
// EagerEndpoints the endpoint is created and wired up here; a peer that cannot be reached yet is
// kept (the next Send tries again) and the failure logged.
func (t *Transport) AddPeer(ctx context.Context, pa transport.PeerAddress) error {
	b, err := decodeBlob(pa.Blob)
	if err != nil {
		if errors.Is(err, errBlobVersion) {
			t.log.Warn(fmt.Sprintf("ucx: rejecting peer blob: unsupported ucx blob version %d (expected %d)", b.Version, BlobVersion),
				"peer", fmt.Sprintf("%016x", uint64(pa.ID)))
		}
		return fmt.Errorf("ucx: peer %016x: %w", uint64(pa.ID), err)
	}
	if pa.ID == 0 {
		return fmt.Errorf("ucx: %w: instance ID 0", transport.ErrInvalidEndpoint)
	}
	t.mu.Lock()
	started := t.started
	t.mu.Unlock()
	if !started {
		return errors.New("ucx: AddPeer before Start: add the transport to a velo instance first")
	}
	if b.Incarnation != pa.Incarnation {
		return fmt.Errorf("ucx: %w: peer %016x: the UCX address belongs to incarnation %016x, the peer info says %016x (stale peer info: fetch it again)",
			transport.ErrInvalidEndpoint, uint64(pa.ID), b.Incarnation, pa.Incarnation)
	}
	if !t.build.Meets(b.Build) {
		t.noteMismatch(pa.ID, b.Build)
		return t.buildMismatch(pa.ID, b.Build)
	}
	t.meets(pa.ID)
	p, err := t.record(pa.ID, b, true)
	if err != nil {
		return err
	}
	if !t.cfg.EagerEndpoints || pa.Learned {
		return nil // a learned peer gets its endpoint on first use (transport.PeerAddress)
	}
	if err := t.wireUp(ctx, p); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("ucx: eager wireup to %016x: %w", uint64(pa.ID), ctx.Err())
		}
		if t.noUCXLane(pa.ID) {
			return nil // New or noteConnectFailed said why, and nothing tries again
		}
		t.log.Warn("ucx: eager endpoint wireup failed; the next send to the peer tries again", "peer", fmt.Sprintf("%016x", uint64(pa.ID)), "err", err)
	}
	return nil
}

// record adds or updates a peer from a decoded blob. added says AddPeer (as opposed to a hello).
func (t *Transport) record(id transport.InstanceID, b peerBlob, added bool) (*peer, error) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, fmt.Errorf("ucx: %w", transport.ErrClosed)
	}
	p := t.peers[id]
	var replaced *peer
	if p != nil && p.inc != b.Incarnation {
		replaced, p = p, nil
		delete(t.peers, id)
	}
	if p == nil {
		p = &peer{id: id, inc: b.Incarnation}
		p.touch()
		t.peers[id] = p
	}
	p.addr = &peerAddr{worker: append([]byte(nil), b.Worker...), maxFrame: b.MaxFrame, rma: b.RMA, getv: b.VectoredGet, putv: b.VectoredPut}
	if added {
		p.added = true
	} else {
		p.learned = true
	}
	t.mu.Unlock()
	if replaced != nil {
		t.log.Info("ucx: peer came back as another incarnation; forgetting the old one", "peer", fmt.Sprintf("%016x", uint64(id)))
		t.retireAll(replaced, "removed")
	}
	return p, nil
}

// wireUp opens the endpoint to p and waits until its hello went out: UCX has wired it up.
func (t *Transport) wireUp(ctx context.Context, p *peer) error {
	p.sendMu.Lock()
	oc, err := t.connLocked(ctx, p)
	if err != nil {
		p.sendMu.Unlock()
		return err
	}
	hello := oc.helloOp
	p.sendMu.Unlock()
	return hello.Wait(ctx)
}

// RemovePeer implements transport.Transport: it forgets the peer and retires its endpoint (the
// peer is told with a fin, so it stops its own endpoint to us too).
func (t *Transport) RemovePeer(id transport.InstanceID) {
	t.mu.Lock()
	p := t.peers[id]
	delete(t.peers, id)
	delete(t.softRMAPeers, id)
	if p != nil {
		// In the same critical section as the delete, so a hello handled meanwhile finds the
		// peer among the forgotten ones rather than nowhere (and would learn it again).
		p.removedThrough = t.slots[slotKey{p.id, p.inc}]
		t.orphans[p] = struct{}{}
	}
	t.mu.Unlock()
	if p != nil {
		// Its receive state stays until the retired endpoint closed: the peer's fin still
		// has to be read against it.
		t.retireAll(p, "removed")
	}
}

// Reaches implements transport.Transport: the peer was added, or it introduced itself with a
// hello and its endpoint to us has not failed since.
func (t *Transport) Reaches(id transport.InstanceID) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.peers[id]
	return !t.closed && p != nil && (p.added || p.learned) && t.laneless(p) == ""
}

// lookup finds a peer that Send can reach, with its current address.
func (t *Transport) lookup(id transport.InstanceID) (*peer, *peerAddr, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, nil, fmt.Errorf("ucx: %w", transport.ErrClosed)
	}
	if !t.started {
		return nil, nil, errors.New("ucx: the transport is not started (add it to a velo instance first)")
	}
	p := t.peers[id]
	if p == nil || !(p.added || p.learned) {
		return nil, nil, fmt.Errorf("ucx: %w: %016x (register it with RegisterPeer first)", transport.ErrUnknownPeer, uint64(id))
	}
	return p, p.addr, nil
}

// Send implements transport.Transport. The frame goes out as one eager active message on the
// peer's endpoint (opened now when there is none); frames to one peer keep their order across
// endpoint changes. A frame above MaxFrameSize or the peer's advertised limit fails with
// transport.ErrFrameTooLarge before anything is sent. The parts are copied before Send waits, so
// an early return on ctx leaves nothing of the caller's in UCX's hands.
func (t *Transport) Send(ctx context.Context, id transport.InstanceID, parts ...[]byte) error {
	n := 0
	for _, b := range parts {
		n += len(b)
	}
	p, pa, err := t.lookup(id)
	if err != nil {
		return err
	}
	if limit := min(t.cfg.EagerMax, pa.maxFrame); n > limit {
		return fmt.Errorf("ucx: %w: %d bytes to %016x exceed the eager limit of %d (this side %d, the peer %d)",
			transport.ErrFrameTooLarge, n, uint64(id), limit, t.cfg.EagerMax, pa.maxFrame)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ucx: send to %016x: %w", uint64(id), err) // before anything was taken
	}
	// Without a deadline of the caller's the send is bounded by SendTimeout. The bound is made
	// only where something may wait (opening an endpoint, a send UCX did not finish at once): a
	// timer per frame would cost more than the frame on the common path.
	bounded := func() (context.Context, context.CancelFunc) {
		if _, ok := ctx.Deadline(); ok {
			return ctx, func() {}
		}
		return context.WithTimeout(ctx, t.cfg.SendTimeout)
	}
	p.sendMu.Lock()
	oc := p.conn
	if oc == nil {
		octx, cancel := bounded()
		oc, err = t.connLocked(octx, p)
		cancel()
		if err != nil {
			p.sendMu.Unlock()
			return err
		}
	}
	oc.seq++
	hdr := oc.header(frameHeader{Incarnation: t.inc, Sender: t.self, Kind: kindData, Epoch: oc.epoch, Seq: oc.seq}, parts)
	op := t.submit(oc, hdr, parts)
	p.sendMu.Unlock()
	p.touch()
	select {
	case <-op.Done():
		err = op.Err()
	default:
		wctx, cancel := bounded()
		err = op.Wait(wctx)
		cancel()
	}
	t.settle(oc, op)
	if err != nil {
		return t.sendError(id, err)
	}
	t.m.frames.WithLabelValues("sent").Inc()
	return nil
}

func (t *Transport) sendError(id transport.InstanceID, err error) error {
	switch {
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("ucx: send to %016x: %w", uint64(id), err)
	case errors.Is(err, ucx.ErrMessageTooLarge):
		return fmt.Errorf("ucx: send to %016x: %w: %w", uint64(id), transport.ErrFrameTooLarge, err)
	case errors.Is(err, ucx.ErrClosed) && t.isClosed():
		return fmt.Errorf("ucx: send to %016x: %w", uint64(id), transport.ErrClosed)
	}
	return fmt.Errorf("ucx: send to %016x: %w: %w", uint64(id), transport.ErrPeerUnreachable, err)
}

func (t *Transport) isClosed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}

// Close implements transport.Transport: it stops the maintenance loop, closes every endpoint and
// the UCX engine (which revokes every registration), and waits for its goroutines.
func (t *Transport) Close() error {
	t.closeOnce.Do(func() {
		t.mu.Lock()
		t.closed = true
		started := t.started
		peers := make([]*peer, 0, len(t.peers))
		for _, p := range t.peers {
			peers = append(peers, p)
		}
		t.mu.Unlock()
		close(t.stop)
		// Say goodbye on each peer's current endpoint before the engine closes them all: the fin
		// goes out behind every frame already sent there (the engine flushes endpoints as it
		// closes), and the peer reports us down as departed instead of finding a failed
		// endpoint and warning about it.
		for _, p := range peers {
			p.sendMu.Lock()
			p.gone = true
			if oc := p.conn; oc != nil && started {
				oc.mu.Lock()
				oc.finBye = true
				oc.mu.Unlock()
				t.retireLocked(p, oc, "closed", true)
			}
			p.sendMu.Unlock()
		}
		if started {
			_ = t.eng.HandleAM(amID, nil)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// An engine not created yet never will be (its error says closed); one that was is
		// closed here.
		t.engMu.Lock()
		eng := t.eng
		if eng == nil && t.engErr == nil {
			t.engErr = fmt.Errorf("ucx: %w", transport.ErrClosed)
		}
		t.engMu.Unlock()
		if eng != nil {
			t.closeErr = eng.Close(ctx)
		}
		t.wg.Wait()
		t.m.unregister()
	})
	return t.closeErr
}

// Endpoints is the number of UCX endpoints this transport holds to peer: the one frames go on
// and those retired but not closed yet (the introspection page shows it).
func (t *Transport) Endpoints(peer transport.InstanceID) int {
	t.mu.Lock()
	p := t.peers[peer]
	t.mu.Unlock()
	if p == nil {
		return 0
	}
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	n := len(p.retired)
	if p.conn != nil {
		n++
	}
	return n
}

// Describe lists the transport's settings for velo's introspection page: every UCX setting it
// runs with and where it came from (environment, program, default), the frame limit, the RMA mode.
func (t *Transport) Describe() map[string]string {
	settings := t.Settings() // creates the engine if nothing did yet, and so finds tcpListen
	d := map[string]string{
		"eager_max":       strconv.Itoa(t.cfg.EagerMax),
		"rma":             fmt.Sprint(t.cfg.RMA),
		"ep_idle_timeout": t.cfg.EPIdleTimeout.String(),
		"max_endpoints":   strconv.Itoa(t.cfg.MaxEndpoints),
		"ucx_build":       t.build.String(),
		"rma_guard":       t.guard.describe(),
		"software_lanes":  t.describeSoftwareRMA(),
		"tcp_listen":      describeListen(t.tcpListen),
	}
	for _, s := range settings {
		d["UCX_"+s.Name] = s.Value + " (" + s.Source.String() + ")"
	}
	return d
}
