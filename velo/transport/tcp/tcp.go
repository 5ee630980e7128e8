// Package tcp is velo's TCP transport: the control plane every deployment has, and the wire that
// carries the chunked rendezvous path.
//
// Design, and why:
//
//   - One connection per peer pair serves both directions. Whichever side connects first, the
//     other side sends on the same connection, so a consumer behind a listener-less client, or two
//     instances that only one of them registered, still talk. When both dial at once each side keeps
//     sending on the connection it had first and reads both; per-direction order holds because a
//     sender never switches connections while one is up.
//   - Every connection opens with a versioned hello that names the instance, its incarnation, the
//     largest frame it reads, and its own listening address. The acceptor learns where to reconnect.
//     The connection speaks the dialer's wire version when the acceptor speaks it too: version 3,
//     or version 2 with a member of the previous release (the dialer tries 3 first, and 2 when
//     the peer hangs up on it), so a cluster upgrades one member at a time. A peer on any other
//     version is refused at once with the versions in the error.
//   - Frames are a 4-byte big-endian length and the bytes. The receiver enforces its maximum before
//     it allocates anything, so a hostile or buggy peer cannot make it allocate gigabytes; it drops
//     that connection only.
//   - Send writes the length prefix and the caller's parts with one writev (net.Buffers): a
//     rendezvous chunk goes from the owner's slot to the socket without being copied behind its
//     header. On the receiving side a transport.Claimer lets the runtime steer a chunk's body
//     straight into the consumer's buffer.
//   - Each connection is read by one goroutine at a time. When the runtime implements
//     transport.InlineHost it may run a message's handler on that goroutine (no hand-off per
//     message); if the handler turns out slow, the runtime calls handOff and a new goroutine reads
//     on from where the old one stopped. The read deadline for a frame is cleared before the frame
//     is delivered, so the next reader never inherits one.
//   - A lost connection is reported once through Host.PeerDown; the next Send to a peer whose
//     address is known dials again.
//   - Connections are opened on first use and closed when idle: after Config.IdleTimeout without a
//     frame, and least recently used first while more than Config.MaxConnections are open. The
//     two sides agree on the close first (a goodbye and its answer, transport control frames the
//     runtime never sees), so that it cuts nothing in flight and neither side takes it for a lost
//     peer; the next Send either way opens a new connection. A version 2 peer has no goodbye, so
//     its connection is never closed as idle.
package tcp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo/velo/auth"
	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/transport"
)

// Name is the transport name under which the TCP address appears in a PeerInfo.
const Name = "tcp"

// Defaults for Config fields left zero.
const (
	DefaultMaxFrameSize = 16 << 20
	DefaultDialTimeout  = 10 * time.Second
	DefaultIOTimeout    = 60 * time.Second
	// MinMaxFrameSize is the smallest MaxFrameSize accepted: room for any control message.
	MinMaxFrameSize = 4 << 10
	// DefaultMaxConnections is Config.MaxConnections' default. A worker talks to a few peers at a
	// time, so 256 connections cover it with room, and eight workers of a node stay well inside
	// a default descriptor limit whatever the cluster's size (the UCX transport's endpoint
	// budget has the same default).
	DefaultMaxConnections = 256
	// DefaultIdleTimeout is Config.IdleTimeout's default.
	DefaultIdleTimeout = 2 * time.Minute
)

// Config configures a TCP transport. Its zero value listens on 127.0.0.1 on a free port.
type Config struct {
	// Listener, when set, is used as is; the transport closes it on Close.
	Listener net.Listener
	// ListenAddress is where to listen when Listener is nil (default "127.0.0.1:0").
	ListenAddress string
	// Advertise is the host:port that peers dial, published in the address blob. Default: the
	// listener's address; an unspecified IP (0.0.0.0, ::) is replaced by 127.0.0.1 with a warning,
	// so multi-host deployments that listen on all interfaces must set it (RoutableHost guesses
	// the host part when nothing says it).
	Advertise string
	// MaxFrameSize is the largest frame this side reads and sends (default 16 MiB).
	MaxFrameSize int
	// DialTimeout bounds a connect plus hello (default 10 s).
	DialTimeout time.Duration
	// IOTimeout bounds one frame write, and reading the rest of a frame once its length arrived
	// (default 60 s). A peer that stalls longer loses its connection.
	IOTimeout time.Duration
	// MaxConnections bounds the connections this transport keeps open, dialed and accepted
	// (default DefaultMaxConnections). When more are open, those idle longest are closed, least
	// recently used first, by the goodbye exchange: nothing in flight is cut (no frame half
	// written or half read, no call of this side waiting for its answer on it), the peer is not
	// reported down, and the next frame either way opens a new connection. A connection in use is
	// never chosen, so a burst to more peers than the budget exceeds it until the traffic pauses.
	// A connection to a member of the previous release (wire version 2) has no goodbye: it counts
	// toward the budget but is never closed, neither by the budget nor by IdleTimeout.
	MaxConnections int
	// IdleTimeout closes a connection that carried no frame in either direction for that long,
	// the same way (default DefaultIdleTimeout; negative keeps idle connections open).
	IdleTimeout time.Duration
	// Auth selects how peers are authenticated: a cluster secret or mutual TLS (package auth).
	// Left empty, the transport takes the credentials of the environment (VELO_CLUSTER_SECRET,
	// VELO_CLUSTER_SECRET_FILE, VELO_TLS_*: auth.FromEnv), so a program that builds its own
	// transport authenticates as the operator configured; with none there it authenticates
	// nobody, and Start says so in a warning. Set in code while the environment names other
	// credentials, New refuses to start (auth.ErrEnvConflict): the rule is auth.Config.Resolve's.
	Auth auth.Config
}

// Transport is a TCP transport. Create it with New and hand it to velo.WithTransport.
type Transport struct {
	cfg       Config
	ln        net.Listener
	advertise string
	blob      []byte

	host    transport.Host
	claimer transport.Claimer
	inline  transport.InlineHost
	log     *slog.Logger

	mu      sync.Mutex
	peers   map[transport.InstanceID]*peer
	pending map[net.Conn]struct{} // inbound connections still in their hello
	open    int                   // connections adopted and not finished
	closed  bool
	wg      sync.WaitGroup // the accept loop, hellos in progress, and one count per open connection

	closing atomic.Bool // set by Close before it closes connections: none may be left unread
	vacant  vacancyWatch
	idle    idleWatch // closes idle connections and keeps the budget (idle.go)

	mode     auth.Mode
	am       *authMetrics
	logLimit auth.LogLimiter
	authObs  transport.AuthObserver        // the runtime, told of each peer the handshake authenticated
	authFail transport.AuthFailureObserver // the runtime, told of each dialled peer that failed it
}

type peer struct {
	id          transport.InstanceID
	incarnation uint64
	addr        string // dial address, "" when unknown
	added       bool   // AddPeer was called (as opposed to learned from an inbound hello)
	send        *conn  // the connection frames to this peer go out on
	conns       map[*conn]struct{}
	dialing     chan struct{} // non-nil while a dial is in progress; closed when it ends
}

type conn struct {
	t        *Transport
	nc       net.Conn
	peer     transport.InstanceID
	peerMax  int
	br       *frameReader
	handOff  func()     // continueReading, bound once: the runtime calls it to move reading to a new goroutine
	wmu      sync.Mutex // serialises frame writes
	dlMu     sync.Mutex // guards the write deadline against a cancel callback racing the next write
	dlGen    uint64
	dlSet    time.Time // the write deadline currently set
	dlExact  bool      // dlSet came from a context and must be replaced by the next write
	cmu      sync.Mutex
	closeErr error // set once, under cmu, before closed becomes true
	closed   atomic.Bool

	// Who reads the connection (read.go), guarded by rmu.
	rmu        sync.Mutex
	reader     readerRole
	atBoundary bool   // the reader waits for the first byte of a frame: waking it loses nothing
	kicked     bool   // the read deadline was moved into the past to wake that wait
	waiters    int    // calls waiting in Await on this connection whose answer has not come
	takes      uint64 // times a caller took the unread connection; the vacancy watch compares
	seenTakes  uint64 // takes when the vacancy watch last looked
	listed     bool   // the vacancy watch looks at this connection

	lastUnsolicited atomic.Int64 // unix nanoseconds of the last frame the peer sent of its own accord

	// The idle close (idle.go).
	lastUse atomic.Int64  // unix nanoseconds of the last frame written or read
	sent    atomic.Uint64 // frames written whole (under wmu)
	read    atomic.Uint64 // frames read and delivered
	gb      goodbyeState  // guarded by wmu
	gbDone  chan struct{} // closed when the goodbye this side asked is answered (guarded by wmu)
	gbSince time.Time     // when gb last changed (guarded by wmu)
	retired atomic.Bool   // the two sides agreed to close: nothing is sent on it, and its end is quiet
	reason  string        // why it closes, for the closes metric (set before retired)
	// noGoodbye: the connection speaks wire version 2 (a peer of the previous release), which
	// has no control frames: it is never closed as idle, and a control frame on it is refused.
	noGoodbye bool
}

// New creates a TCP transport: it listens (or takes Config.Listener) at once, so Address is valid
// before the runtime starts it.
func New(cfg Config) (*Transport, error) {
	if cfg.MaxFrameSize == 0 {
		cfg.MaxFrameSize = DefaultMaxFrameSize
	}
	if cfg.MaxFrameSize < MinMaxFrameSize || cfg.MaxFrameSize > 1<<30 {
		return nil, fmt.Errorf("tcp: MaxFrameSize %d is outside %d..%d", cfg.MaxFrameSize, MinMaxFrameSize, 1<<30)
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.IOTimeout <= 0 {
		cfg.IOTimeout = DefaultIOTimeout
	}
	if cfg.MaxConnections < 0 {
		return nil, fmt.Errorf("tcp: Config.MaxConnections %d must not be negative (0 takes DefaultMaxConnections)", cfg.MaxConnections)
	}
	if cfg.MaxConnections == 0 {
		cfg.MaxConnections = DefaultMaxConnections
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	creds, err := cfg.Auth.Resolve()
	if err != nil {
		return nil, fmt.Errorf("tcp: %w", err)
	}
	cfg.Auth = creds
	ln := cfg.Listener
	if ln == nil {
		addr := cfg.ListenAddress
		if addr == "" {
			addr = "127.0.0.1:0"
		}
		if ln, err = net.Listen("tcp", addr); err != nil {
			return nil, fmt.Errorf("tcp: listen on %s: %w", addr, err)
		}
	}
	t := &Transport{cfg: cfg, ln: ln, peers: map[transport.InstanceID]*peer{}, pending: map[net.Conn]struct{}{}, log: slog.Default(),
		mode: cfg.Auth.Mode(), am: newAuthMetrics(), logLimit: auth.LogLimiter{Interval: failureLogInterval}}
	t.vacant.look = vacancyLook
	t.idle.init()
	adv, warn, err := advertiseAddr(cfg.Advertise, ln.Addr())
	if err == nil {
		t.blob, err = wire.EncodeTCPAddr(adv)
	}
	if err != nil {
		if cfg.Listener == nil {
			ln.Close()
		}
		return nil, fmt.Errorf("tcp: advertised address: %w: set Config.Advertise to host:port", err)
	}
	t.advertise = adv
	if warn != "" {
		t.log.Warn(warn)
	}
	return t, nil
}

func advertiseAddr(configured string, la net.Addr) (addr, warning string, err error) {
	if configured != "" {
		_, _, err := wire.SplitTCPAddr(configured)
		return configured, "", err
	}
	ta, ok := la.(*net.TCPAddr)
	if !ok {
		return "", "", fmt.Errorf("listener address %v is not TCP", la)
	}
	if ta.IP == nil || ta.IP.IsUnspecified() {
		a := net.JoinHostPort("127.0.0.1", fmt.Sprint(ta.Port))
		return a, fmt.Sprintf("tcp: listening on %v; advertising %s, which only this host can reach: set Config.Advertise for other hosts", la, a), nil
	}
	return ta.String(), "", nil
}

// Name returns "tcp".
func (t *Transport) Name() string { return Name }

// Address returns the address blob peers need (version byte, advertised host:port).
func (t *Transport) Address() []byte { return append([]byte(nil), t.blob...) }

// Advertised returns the host:port published in Address.
func (t *Transport) Advertised() string { return t.advertise }

var _ transport.ControlPlane = (*Transport)(nil)

// ListenAddr is the listener's local address: velo.New hands it to the transports that follow
// the control plane's (transport.ListenScoper).
func (t *Transport) ListenAddr() net.Addr { return t.ln.Addr() }

// MaxFrameSize is the largest frame this transport reads and sends.
func (t *Transport) MaxFrameSize() int { return t.cfg.MaxFrameSize }

// Start binds the transport to the runtime and starts accepting connections.
func (t *Transport) Start(h transport.Host) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.host != nil {
		return errors.New("tcp: Start called twice")
	}
	if t.closed {
		return transport.ErrClosed
	}
	t.host = h
	t.claimer, _ = h.(transport.Claimer)
	t.inline, _ = h.(transport.InlineHost)
	if l := h.Logger(); l != nil {
		t.log = l.With("transport", Name)
	}
	t.authObs, _ = h.(transport.AuthObserver)
	t.authFail, _ = h.(transport.AuthFailureObserver)
	if t.mode == auth.ModeNone {
		t.log.Warn("tcp: WARNING: the control plane is unauthenticated: any process that reaches " + t.ln.Addr().String() +
			" can call every handler and read staged payloads; configure a cluster secret or mutual TLS (" + auth.SecretFileEnv + " or " + auth.TLSCAEnv + ", docs/security.md)")
	} else {
		t.log.Info("tcp: peers are authenticated", "with", t.cfg.Auth.String())
	}
	t.wg.Add(2)
	go t.acceptLoop()
	go t.idle.run(t)
	return nil
}

// AddPeer validates the peer's TCP address blob and records it; the connection opens on first Send.
func (t *Transport) AddPeer(ctx context.Context, pa transport.PeerAddress) error {
	addr, err := wire.DecodeTCPAddr(pa.Blob)
	if err != nil {
		return fmt.Errorf("tcp: peer %016x: %w: %w", uint64(pa.ID), transport.ErrInvalidEndpoint, err)
	}
	if pa.ID == 0 {
		return fmt.Errorf("tcp: %w: instance id 0 is reserved", transport.ErrInvalidEndpoint)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return transport.ErrClosed
	}
	if t.host != nil && pa.ID == t.host.LocalID() {
		return fmt.Errorf("tcp: %w: peer %016x is this instance", transport.ErrInvalidEndpoint, uint64(pa.ID))
	}
	p := t.peerLocked(pa.ID)
	p.addr, p.incarnation, p.added = addr, pa.Incarnation, true
	return nil
}

func (t *Transport) peerLocked(id transport.InstanceID) *peer {
	p := t.peers[id]
	if p == nil {
		p = &peer{id: id} // conns is made with the first connection: most known peers get none
		t.peers[id] = p
	}
	return p
}

// RemovePeer forgets a peer and closes its connections.
func (t *Transport) RemovePeer(id transport.InstanceID) {
	t.mu.Lock()
	p := t.peers[id]
	delete(t.peers, id)
	t.mu.Unlock()
	if p != nil {
		for c := range p.conns {
			c.close(fmt.Errorf("peer %016x removed", uint64(id)))
			c.ensureReader()
		}
	}
}

// Reaches reports whether a Send to id can be attempted: its address is known or a connection
// from it is up.
func (t *Transport) Reaches(id transport.InstanceID) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.peers[id]
	return p != nil && (p.addr != "" || p.send != nil)
}

// Send writes one frame, the concatenation of parts, to the peer, dialing first when no
// connection is up. A write that fails before any byte left is retried once on a new connection.
func (t *Transport) Send(ctx context.Context, id transport.InstanceID, parts ...[]byte) error {
	size := 0
	for _, p := range parts {
		size += len(p)
	}
	if size > t.cfg.MaxFrameSize {
		return fmt.Errorf("tcp: %w: frame of %d bytes, limit %d", transport.ErrFrameTooLarge, size, t.cfg.MaxFrameSize)
	}
	for attempt := 0; ; attempt++ {
		c, err := t.connFor(ctx, id)
		if err != nil {
			return err
		}
		if c.retired.Load() && attempt < maxRetiredRetries {
			continue // an idle close took it after connFor: the next one is another or a new one
		}
		if size > c.peerMax {
			return fmt.Errorf("tcp: %w: frame of %d bytes, peer %016x reads at most %d", transport.ErrFrameTooLarge, size, uint64(id), c.peerMax)
		}
		n, err := c.writeFrame(ctx, size, parts)
		if err == nil {
			return nil
		}
		if err == errRetired && attempt < maxRetiredRetries {
			continue
		}
		if n == 0 && attempt == 0 && ctx.Err() == nil {
			continue // the connection was already dead; one fresh dial
		}
		if ctx.Err() != nil {
			return fmt.Errorf("tcp: send to %016x: %w", uint64(id), ctx.Err())
		}
		return fmt.Errorf("tcp: send to %016x: %w: %v", uint64(id), transport.ErrPeerUnreachable, err)
	}
}

// connFor returns the connection to send on, dialing (once, shared by concurrent senders) when
// there is none.
func (t *Transport) connFor(ctx context.Context, id transport.InstanceID) (*conn, error) {
	for {
		t.mu.Lock()
		if t.closed || t.host == nil {
			t.mu.Unlock()
			if t.host == nil {
				return nil, errors.New("tcp: transport not started")
			}
			return nil, transport.ErrClosed
		}
		p := t.peers[id]
		switch {
		case p == nil || (p.send == nil && p.addr == ""):
			t.mu.Unlock()
			return nil, fmt.Errorf("tcp: %w: %016x: register it with RegisterPeer first", transport.ErrUnknownPeer, uint64(id))
		case p.send != nil:
			c := p.send
			t.mu.Unlock()
			return c, nil
		case p.dialing != nil:
			wait := p.dialing
			t.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, fmt.Errorf("tcp: waiting for a connection to %016x: %w", uint64(id), ctx.Err())
			}
		}
		done := make(chan struct{})
		p.dialing = done
		addr, inc := p.addr, p.incarnation
		t.mu.Unlock()

		c, err := t.dial(ctx, id, addr, inc)

		t.mu.Lock()
		p.dialing = nil
		close(done)
		if err == nil && p.send != nil && p.send != c {
			// The peer's own dial was adopted first and became the connection to send on: keep
			// to it, so that this peer's frames do not take two connections (two readers, no
			// order between them).
			c = p.send
		}
		t.mu.Unlock()
		if err != nil {
			return nil, err
		}
		return c, nil
	}
}

// dial connects to the peer in the newest wire version, and in the oldest when the peer hung up
// on that hello as a release that speaks only the oldest does: a member of the previous release
// stays reachable while a cluster is upgraded one member at a time.
func (t *Transport) dial(ctx context.Context, id transport.InstanceID, addr string, inc uint64) (*conn, error) {
	c, err := t.dialVersion(ctx, id, addr, inc, wire.HelloVersion)
	if errors.Is(err, errOlderPeer) {
		c, err = t.dialVersion(ctx, id, addr, inc, wire.HelloVersionMin)
	}
	return c, err
}

func (t *Transport) dialVersion(ctx context.Context, id transport.InstanceID, addr string, inc uint64, version uint8) (*conn, error) {
	dctx, cancel := context.WithTimeout(ctx, t.cfg.DialTimeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(dctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("tcp: dial %016x at %s: %w: %v", uint64(id), addr, transport.ErrPeerUnreachable, err)
	}
	if dl, ok := dctx.Deadline(); ok {
		nc.SetDeadline(dl)
	}
	nc, br, pa, err := t.handshakeDial(nc, version)
	if errors.Is(err, errOlderPeer) {
		nc.Close()
		return nil, err // not counted: the dial tries again in the oldest version
	}
	if err != nil {
		nc.Close()
		t.refused("outbound", nc.RemoteAddr(), err)
		if authFailure(err) {
			err = fmt.Errorf("tcp: hello with %016x at %s: %w: %w: %w", uint64(id), addr, transport.ErrPeerUnreachable, transport.ErrUnauthenticated, err)
			if t.authFail != nil {
				t.authFail.PeerAuthFailed(id, err)
			}
			return nil, err
		}
		return nil, fmt.Errorf("tcp: hello with %016x at %s: %w: %w", uint64(id), addr, transport.ErrPeerUnreachable, err)
	}
	h := pa.hello
	if transport.InstanceID(h.ID) != id || (inc != 0 && h.Incarnation != inc) {
		nc.Close()
		return nil, fmt.Errorf("tcp: %s answers as instance %016x incarnation %d, not %016x incarnation %d: %w: the peer restarted; register its new PeerInfo",
			addr, h.ID, h.Incarnation, uint64(id), inc, transport.ErrPeerUnreachable)
	}
	nc.SetDeadline(time.Time{})
	t.authenticated(pa)
	c, err := t.adopt(nc, br, h)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil
}

// authenticated tells the runtime that the handshake authenticated the peer (with credentials
// configured), before any of its frames is delivered.
func (t *Transport) authenticated(pa peerAuth) {
	if t.mode != auth.ModeNone && t.authObs != nil {
		t.authObs.PeerAuthenticated(transport.InstanceID(pa.hello.ID), pa.hello.Incarnation, pa.identity, pa.session)
	}
}

// adopt registers a connection whose hello succeeded and starts its reader.
func (t *Transport) adopt(nc net.Conn, br *frameReader, h wire.Hello) (*conn, error) {
	id := transport.InstanceID(h.ID)
	c := &conn{t: t, nc: nc, peer: id, br: br, peerMax: int(h.MaxFrame), noGoodbye: h.Version < wire.HelloVersionControl}
	c.lastUse.Store(time.Now().UnixNano())
	c.handOff = c.continueReading
	if c.peerMax <= 0 || c.peerMax > t.cfg.MaxFrameSize {
		c.peerMax = t.cfg.MaxFrameSize
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, transport.ErrClosed
	}
	p := t.peerLocked(id)
	if p.added && p.incarnation != 0 && p.incarnation != h.Incarnation {
		t.mu.Unlock()
		return nil, fmt.Errorf("tcp: %w: instance %016x connected with incarnation %d, registered as %d",
			transport.ErrInvalidEndpoint, h.ID, h.Incarnation, p.incarnation)
	}
	if p.addr == "" && len(h.Addr) > 0 {
		if a, err := wire.DecodeTCPAddr(h.Addr); err == nil {
			p.addr = a
		}
	}
	if p.incarnation == 0 {
		p.incarnation = h.Incarnation
	}
	if p.conns == nil {
		p.conns = map[*conn]struct{}{}
	}
	p.conns[c] = struct{}{}
	if p.send == nil || p.send.retired.Load() {
		p.send = c
	}
	t.wg.Add(1)      // given back by finish, whoever reads the connection when it fails
	t.am.conns.Inc() // and this too, even after RemovePeer forgot the peer
	t.open++
	over := t.open > t.cfg.MaxConnections
	c.reader = readerLoop
	t.mu.Unlock()
	go c.readLoop()
	if over {
		t.idle.kick()
	}
	return c, nil
}

func (t *Transport) acceptLoop() {
	defer t.wg.Done()
	for {
		nc, err := t.ln.Accept()
		if err != nil {
			t.mu.Lock()
			closed := t.closed
			t.mu.Unlock()
			if closed || errors.Is(err, net.ErrClosed) {
				return
			}
			t.log.Warn("tcp: accept failed", "err", err)
			time.Sleep(50 * time.Millisecond) // e.g. EMFILE: do not spin
			continue
		}
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			t.handshakeInbound(nc)
		}()
	}
}

func (t *Transport) handshakeInbound(nc net.Conn) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		nc.Close()
		return
	}
	if len(t.pending) >= maxPendingHandshakes {
		t.mu.Unlock()
		nc.Close()
		t.refused("inbound", nc.RemoteAddr(), failed(reasonBusy, "tcp: %d handshakes already in progress", maxPendingHandshakes))
		return
	}
	t.pending[nc] = struct{}{}
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		delete(t.pending, nc)
		t.mu.Unlock()
	}()
	nc.SetDeadline(time.Now().Add(t.cfg.DialTimeout))
	conn, err := t.handshakeAccept(nc, func(sc net.Conn, br *frameReader, pa peerAuth) error {
		sc.SetDeadline(time.Time{})
		t.authenticated(pa)
		_, err := t.adopt(sc, br, pa.hello)
		return err
	})
	if err != nil {
		conn.Close()
		t.refused("inbound", nc.RemoteAddr(), err)
	}
}

var longAgo = time.Unix(1, 0)

// writeFrame writes the length prefix and parts in one writev. It returns the bytes written; any
// error closes the connection, because a partial frame leaves the stream unreadable.
func (c *conn) writeFrame(ctx context.Context, size int, parts [][]byte) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	var prefix [4]byte
	binary.BigEndian.PutUint32(prefix[:], uint32(size))
	bufs := make(net.Buffers, 0, len(parts)+1)
	bufs = append(bufs, prefix[:])
	for _, p := range parts {
		if len(p) > 0 {
			bufs = append(bufs, p)
		}
	}

	c.wmu.Lock()
	defer c.wmu.Unlock()
	for c.gb == goodbyeAsked { // the answer decides which connection the frame takes
		done := c.gbDone
		c.wmu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			c.wmu.Lock()
			return 0, ctx.Err()
		}
		c.wmu.Lock()
	}
	if c.gb == goodbyeRetired {
		return 0, errRetired
	}
	if c.closed.Load() {
		return 0, c.err()
	}
	// The write deadline is the I/O timeout, extended lazily (a timer update per frame is
	// measurable on small messages), or the context's deadline when that is sooner. A context that
	// can be cancelled gets a callback that cuts the write short.
	now := time.Now()
	deadline, exact := now.Add(c.t.cfg.IOTimeout), false
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline, exact = dl, true
	}
	c.dlMu.Lock()
	c.dlGen++
	gen := c.dlGen
	if exact || c.dlExact || c.dlSet.Sub(now) < c.t.cfg.IOTimeout/2 {
		c.nc.SetWriteDeadline(deadline)
		c.dlSet, c.dlExact = deadline, exact
	}
	c.dlMu.Unlock()
	stop := func() bool { return true }
	if ctx.Done() != nil {
		stop = context.AfterFunc(ctx, func() {
			c.dlMu.Lock()
			if c.dlGen == gen {
				c.nc.SetWriteDeadline(longAgo)
				c.dlSet, c.dlExact = longAgo, true
			}
			c.dlMu.Unlock()
		})
	}
	n, err := bufs.WriteTo(c.nc)
	stop()
	c.dlMu.Lock()
	c.dlGen++
	c.dlMu.Unlock()
	if err != nil {
		c.close(fmt.Errorf("write failed after %d of %d bytes: %w", n, size+4, err))
		return n, err
	}
	c.sent.Add(1)
	c.lastUse.Store(time.Now().UnixNano())
	return n, nil
}

func (c *conn) close(err error) {
	c.cmu.Lock()
	defer c.cmu.Unlock()
	if c.closed.Load() {
		return
	}
	c.closeErr = err
	c.closed.Store(true)
	c.nc.Close()
}

func (c *conn) err() error {
	c.cmu.Lock()
	defer c.cmu.Unlock()
	return c.closeErr
}

// Close stops accepting, closes every connection and waits for the transport's goroutines.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	t.closing.Store(true)
	t.idle.stop()
	var conns []*conn
	for _, p := range t.peers {
		for c := range p.conns {
			conns = append(conns, c)
		}
	}
	for nc := range t.pending {
		nc.Close()
	}
	t.mu.Unlock()
	err := t.ln.Close()
	for _, c := range conns {
		c.close(transport.ErrClosed)
		c.ensureReader() // a connection nobody reads learns that it is closed from a reader
	}
	t.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// AuthMode is how this transport authenticates its peers.
func (t *Transport) AuthMode() auth.Mode { return t.mode }

// Connect opens (or reuses) the connection to a registered peer, running the handshake; the
// runtime uses it to authenticate a peer before another transport talks to it.
func (t *Transport) Connect(ctx context.Context, id transport.InstanceID) error {
	_, err := t.connFor(ctx, id)
	return err
}

// Describe lists the transport's settings for velo's introspection page.
func (t *Transport) Describe() map[string]string {
	t.mu.Lock()
	n := len(t.peers)
	t.mu.Unlock()
	return map[string]string{
		"listen":    t.ln.Addr().String(),
		"advertise": t.advertise,
		"max_frame": strconv.Itoa(t.MaxFrameSize()),
		"auth":      t.cfg.Auth.String(),
		"peers":     strconv.Itoa(n),
		"max_conns": strconv.Itoa(t.cfg.MaxConnections),
		"idle":      t.cfg.IdleTimeout.String(),
	}
}

// Endpoints is the number of connections open to peer (the introspection page shows it).
func (t *Transport) Endpoints(peer transport.InstanceID) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p := t.peers[peer]; p != nil {
		return len(p.conns)
	}
	return 0
}

// Connected reports whether a connection to peer is open now; velo keeps a peer that vanished from
// discovery while its connection is up.
func (t *Transport) Connected(peer transport.InstanceID) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.peers[peer]
	return p != nil && len(p.conns) > 0
}
