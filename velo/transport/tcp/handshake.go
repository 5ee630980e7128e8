package tcp

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/velo-go/velo/velo/auth"
	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/transport"
)

// The handshake of one connection, both sides.
//
// Unauthenticated: each side writes its hello and reads the other's.
//
// Cluster secret (auth.ModeSecret):
//
//	dialer   → hello(nonce_d)
//	acceptor → hello(nonce_a), proof_a = HMAC(k, "acceptor", hello_d, hello_a)
//	dialer   → proof_d = HMAC(k, "dialer", hello_d, hello_a)   (after checking proof_a)
//	acceptor → AuthAccepted                                      (after checking proof_d)
//
// Both nonces are fresh per connection, so a recorded proof never answers a new hello (replay),
// and the role in each HMAC means a proof cannot be sent back as the other side's (reflection).
// The hellos carry both instance IDs and incarnations, so the proofs bind them too.
//
// Mutual TLS (auth.ModeTLS): a TLS 1.3 handshake with the cluster CA on both sides comes first;
// the hellos then travel inside the session, which binds the instance ID each side claims to the
// certificate it presented.
//
// Nothing of the connection reaches the runtime before the handshake completes: no frame is read,
// no handler runs.

// Reasons a handshake fails, the label of velo_tcp_auth_failures_total.
const (
	reasonMalformed       = "malformed"       // not a velo hello (garbage, a scanner, an HTTP probe)
	reasonVersion         = "version"         // a velo of another wire version
	reasonUnauthenticated = "unauthenticated" // the peer has no credentials, this side requires them
	reasonModeMismatch    = "mode_mismatch"   // both authenticate, differently (secret vs TLS), or the peer requires credentials this side lacks
	reasonBadProof        = "bad_proof"       // wrong secret, replayed or reflected proof
	reasonTimeout         = "timeout"         // the peer stalled in the handshake
	reasonTLS             = "tls_handshake"   // the TLS handshake failed (not TLS, no certificate, protocol)
	reasonCertUnknownCA   = "cert_unknown_ca" // a certificate the cluster CA did not sign
	reasonCertExpired     = "cert_expired"    // expired or not yet valid
	reasonCertRevoked     = "cert_revoked"    // on the revocation list
	reasonBusy            = "busy"            // too many handshakes in progress: refused at once
	reasonOwnID           = "own_id"          // the peer claims this instance's ID
	reasonIO              = "io"              // the connection failed during the handshake
	reasonPeerRefused     = "refused_by_peer" // (dialer) the acceptor refused this side's proof
	maxPendingHandshakes  = 256               // inbound connections in their handshake at once
	failureLogInterval    = 10 * time.Second  // one log line per source address per interval
)

var handshakeReasons = []string{reasonMalformed, reasonVersion, reasonUnauthenticated, reasonModeMismatch, reasonBadProof,
	reasonTimeout, reasonTLS, reasonCertUnknownCA, reasonCertExpired, reasonCertRevoked, reasonBusy, reasonOwnID, reasonIO, reasonPeerRefused}

// handshakeError is a failed handshake with the reason it is counted under.
type handshakeError struct {
	reason string
	err    error
}

func (e *handshakeError) Error() string { return e.err.Error() }
func (e *handshakeError) Unwrap() error { return e.err }

func failed(reason string, format string, args ...any) error {
	return &handshakeError{reason: reason, err: fmt.Errorf(format, args...)}
}

// authFailure reports whether a handshake failed on credentials (rather than on the network, a
// busy peer or another wire version): the peer is not one this side may talk to as it stands.
func authFailure(err error) bool {
	switch classify(err) {
	case reasonUnauthenticated, reasonModeMismatch, reasonBadProof, reasonTLS, reasonCertUnknownCA,
		reasonCertExpired, reasonCertRevoked, reasonPeerRefused:
		return true
	}
	return false
}

// classify gives a handshake error its reason when no step named one.
func classify(err error) string {
	var he *handshakeError
	var ne net.Error
	switch {
	case errors.As(err, &he):
		return he.reason
	case errors.Is(err, auth.ErrCertRevoked):
		return reasonCertRevoked
	case errors.Is(err, auth.ErrCertExpired):
		return reasonCertExpired
	case errors.Is(err, auth.ErrCertUnknownCA):
		return reasonCertUnknownCA
	case errors.As(err, &ne) && ne.Timeout():
		return reasonTimeout
	case errors.Is(err, wire.ErrVersion):
		return reasonVersion
	case errors.Is(err, wire.ErrMalformed):
		return reasonMalformed
	}
	return reasonIO
}

// authMetrics counts handshake failures by reason, and the connections open: with nothing that
// closes an idle control-plane connection, their number is what a member's peers cost it in
// sockets, so a scale run reads it beside the UCX endpoints.
type authMetrics struct {
	failures *prometheus.CounterVec
	conns    prometheus.Gauge
	closes   *prometheus.CounterVec
}

func newAuthMetrics() *authMetrics {
	m := &authMetrics{failures: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "velo", Subsystem: "tcp", Name: "auth_failures_total",
		Help: "TCP connections refused during the hello or authentication, by reason (both directions).",
	}, []string{"reason"}), conns: prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "velo", Subsystem: "tcp", Name: "connections",
		Help: "TCP control-plane connections open now, dialed and accepted, past their hello.",
	})}
	m.closes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "velo", Subsystem: "tcp", Name: "closes_total",
		Help: "TCP control-plane connections closed, by reason: idle (this side's IdleTimeout), budget (this side's MaxConnections), peer (the peer's idle close, agreed here), lost (failed or closed without agreement), removed (RemovePeer, Close).",
	}, []string{"reason"})
	for _, r := range closeReasons {
		m.closes.WithLabelValues(r)
	}
	for _, r := range handshakeReasons {
		m.failures.WithLabelValues(r) // every series exists from the start
	}
	return m
}

// TransportCollectors are the transport's metric families, for velo.WithRegisterer to register.
func (t *Transport) TransportCollectors() []prometheus.Collector {
	return []prometheus.Collector{t.am.failures, t.am.conns, t.am.closes}
}

// peerAuth is what the handshake learned of the peer.
type peerAuth struct {
	hello    wire.Hello
	identity string // the TLS certificate's name; "" otherwise
	session  []byte // the key the two sides share (auth.Secrets.Session, or exported from TLS)
}

// tlsSessionLabel names the TLS exporter of the session key (RFC 8446, section 7.5).
const tlsSessionLabel = "EXPORTER-velo-session"

func tlsSession(tc *tls.Conn) ([]byte, error) {
	cs := tc.ConnectionState()
	return cs.ExportKeyingMaterial(tlsSessionLabel, nil, 32)
}

func (t *Transport) newHello() (wire.Hello, []byte, error) {
	h := wire.Hello{
		Version: wire.HelloVersion, Auth: uint8(t.mode), ID: uint64(t.host.LocalID()), Incarnation: t.host.Incarnation(),
		MaxFrame: uint32(t.cfg.MaxFrameSize), Addr: t.blob,
	}
	if _, err := rand.Read(h.Nonce[:]); err != nil {
		return h, nil, err
	}
	b, err := wire.AppendHello(nil, h)
	return h, b, err
}

// checkMode compares the peer's authentication mode with this side's.
func (t *Transport) checkMode(h wire.Hello) error {
	peer := auth.Mode(h.Auth)
	switch {
	case peer == t.mode:
		return nil
	case t.mode == auth.ModeNone:
		return failed(reasonModeMismatch, "tcp: instance %016x requires %s authentication, and this instance has no credentials: configure the cluster's", h.ID, peer)
	case peer == auth.ModeNone:
		return failed(reasonUnauthenticated, "tcp: instance %016x presents no credentials, and this instance requires %s: configure the same credentials on it", h.ID, t.mode)
	default:
		return failed(reasonModeMismatch, "tcp: instance %016x authenticates with %s, this instance with %s: configure both alike", h.ID, peer, t.mode)
	}
}

// handshakeDial runs the dialer's side on a fresh connection and returns the connection to use
// (the TLS session in TLS mode), its buffered reader and what the peer said.
func (t *Transport) handshakeDial(nc net.Conn) (net.Conn, *frameReader, peerAuth, error) {
	var pa peerAuth
	if t.mode == auth.ModeTLS {
		tc := tls.Client(nc, t.cfg.Auth.TLS.ClientConfig())
		if err := tc.Handshake(); err != nil {
			return nc, nil, pa, tlsFailure(err)
		}
		nc = tc
		pa.identity = auth.PeerName(tc.ConnectionState())
		var err error
		if pa.session, err = tlsSession(tc); err != nil {
			return nc, nil, pa, err
		}
	}
	br := newFrameReader(nc)
	_, mine, err := t.newHello()
	if err != nil {
		return nc, nil, pa, err
	}
	if _, err := nc.Write(mine); err != nil {
		return nc, nil, pa, tlsFailure(err)
	}
	theirs, raw, err := readHello(br)
	if errors.Is(err, io.EOF) && t.mode == auth.ModeNone {
		return nc, nil, pa, failed(reasonModeMismatch, "tcp: the peer closed the connection during the hello: it requires credentials this instance lacks (docs/security.md)")
	}
	if err != nil {
		return nc, nil, pa, tlsFailure(err)
	}
	pa.hello = theirs
	if err := t.checkMode(theirs); err != nil {
		return nc, nil, pa, err
	}
	if t.mode != auth.ModeSecret {
		return nc, br, pa, nil
	}
	proof := make([]byte, auth.ProofLen)
	if _, err := io.ReadFull(br, proof); err != nil {
		return nc, nil, pa, fmt.Errorf("tcp: reading the peer's proof: %w", err)
	}
	if !t.cfg.Auth.Secrets.Verify(proof, auth.RoleAcceptor, mine, raw) {
		return nc, nil, pa, failed(reasonBadProof, "tcp: instance %016x could not prove the cluster secret (it has another one)", theirs.ID)
	}
	proofD := t.cfg.Auth.Secrets.Prove(auth.RoleDialer, mine, raw)
	if _, err := nc.Write(proofD); err != nil {
		return nc, nil, pa, err
	}
	pa.session, _ = t.cfg.Auth.Secrets.Session(proofD, mine, raw)
	var ack [1]byte
	if _, err := io.ReadFull(br, ack[:]); err != nil || ack[0] != wire.AuthAccepted {
		return nc, nil, pa, failed(reasonPeerRefused, "tcp: instance %016x refused this instance's proof of the cluster secret (the two have different secrets)", theirs.ID)
	}
	return nc, br, pa, nil
}

// handshakeAccept runs the acceptor's side. accepted is called once the peer is authenticated and
// before the acceptance goes out, so that the peer can use the connection as soon as it hears it.
func (t *Transport) handshakeAccept(nc net.Conn, accepted func(net.Conn, *frameReader, peerAuth) error) (net.Conn, error) {
	var pa peerAuth
	if t.mode == auth.ModeTLS {
		tc := tls.Server(nc, t.cfg.Auth.TLS.ServerConfig())
		if err := tc.Handshake(); err != nil {
			return nc, tlsFailure(err)
		}
		nc = tc
		pa.identity = auth.PeerName(tc.ConnectionState())
		var err error
		if pa.session, err = tlsSession(tc); err != nil {
			return nc, err
		}
	}
	br := newFrameReader(nc)
	theirs, raw, err := readHello(br)
	if err != nil {
		return nc, tlsFailure(err)
	}
	pa.hello = theirs
	if transport.InstanceID(theirs.ID) == t.host.LocalID() {
		return nc, failed(reasonOwnID, "the peer claims this instance's own id")
	}
	if err := t.checkMode(theirs); err != nil {
		// Without credentials there is nothing to protect: say our hello, so the dialer learns
		// why from the mode in it. With them, a peer that cannot authenticate gets nothing.
		if t.mode == auth.ModeNone {
			if _, mine, herr := t.newHello(); herr == nil {
				nc.Write(mine)
			}
		}
		return nc, err
	}
	_, mine, err := t.newHello()
	if err != nil {
		return nc, err
	}
	out := mine
	if t.mode == auth.ModeSecret {
		out = append(out, t.cfg.Auth.Secrets.Prove(auth.RoleAcceptor, raw, mine)...)
	}
	if _, err := nc.Write(out); err != nil {
		return nc, err
	}
	if t.mode == auth.ModeSecret {
		proof := make([]byte, auth.ProofLen)
		if _, err := io.ReadFull(br, proof); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				// The dialer checks our proof first and hangs up when it fails: another secret.
				return nc, failed(reasonPeerRefused, "tcp: instance %016x hung up after this instance's proof (it has another cluster secret)", theirs.ID)
			}
			return nc, err
		}
		var ok bool
		if pa.session, ok = t.cfg.Auth.Secrets.Session(proof, raw, mine); !ok {
			return nc, failed(reasonBadProof, "tcp: instance %016x could not prove the cluster secret", theirs.ID)
		}
	}
	if err := accepted(nc, br, pa); err != nil {
		return nc, err
	}
	if t.mode == auth.ModeSecret {
		if _, err := nc.Write([]byte{wire.AuthAccepted}); err != nil {
			return nc, err
		}
	}
	return nc, nil
}

// tlsFailure keeps a certificate reason visible: a TLS alert from the peer arrives as a plain
// error, so "bad certificate" read from it is counted as the peer's refusal of ours.
func tlsFailure(err error) error {
	var he *handshakeError
	if errors.As(err, &he) {
		return err
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "remote error" {
		return failed(reasonPeerRefused, "tcp: the peer refused this instance's TLS credentials (%v): check that its certificate comes from the same cluster CA, is valid and not revoked", err)
	}
	if r := classify(err); r != reasonIO {
		return &handshakeError{reason: r, err: err}
	}
	if errors.As(err, new(tls.RecordHeaderError)) {
		return failed(reasonTLS, "tcp: TLS: the peer does not speak TLS (%v): configure mutual TLS on it too", err)
	}
	return err
}

// readHello reads exactly one hello: the fixed part, then the address it announces. It returns the
// raw bytes too (the proofs cover them).
func readHello(br io.Reader) (wire.Hello, []byte, error) {
	fixed := make([]byte, wire.HelloFixedLen, wire.HelloMaxSize)
	if _, err := io.ReadFull(br, fixed[:5]); err != nil {
		return wire.Hello{}, nil, fmt.Errorf("reading hello: %w", err)
	}
	if string(fixed[:4]) != string(wire.HelloMagic[:]) || fixed[4] != wire.HelloVersion {
		h, err := wire.DecodeHello(fixed[:5]) // reports the bad magic or the other version
		return h, nil, err
	}
	if _, err := io.ReadFull(br, fixed[5:]); err != nil {
		return wire.Hello{}, nil, fmt.Errorf("reading hello: %w", err)
	}
	n := int(binary.BigEndian.Uint16(fixed[wire.HelloFixedLen-2:]))
	if n > wire.TCPAddrMaxLen {
		return wire.Hello{}, nil, fmt.Errorf("%w: tcp hello announces a %d-byte address (limit %d)", wire.ErrMalformed, n, wire.TCPAddrMaxLen)
	}
	b := fixed[:wire.HelloFixedLen+n]
	if _, err := io.ReadFull(br, b[wire.HelloFixedLen:]); err != nil {
		return wire.Hello{}, nil, fmt.Errorf("reading hello address: %w", err)
	}
	h, err := wire.DecodeHello(b)
	return h, b, err
}

// refused counts a failed handshake and logs it, at most once per source per interval.
func (t *Transport) refused(direction string, remote net.Addr, err error) {
	reason := classify(err)
	t.am.failures.WithLabelValues(reason).Inc()
	src := remote.String()
	if host, _, e := net.SplitHostPort(src); e == nil {
		src = host
	}
	ok, suppressed := t.logLimit.Allow(src, time.Now())
	if !ok {
		return
	}
	args := []any{"remote", remote, "reason", reason, "err", err}
	if suppressed > 0 {
		args = append(args, "suppressed_since_last", suppressed)
	}
	t.log.Warn("tcp: refusing "+direction+" connection", args...)
}
