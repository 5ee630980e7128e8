package velo

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/velo-go/velo/velo/auth"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/transport"
)

// The runtime's side of authentication. The TCP transport authenticates each connection in its
// handshake (velo/transport/tcp, package auth) and reports the peer here before any of its frames
// arrives. With credentials configured:
//
//   - a lease, and so a remote key, is granted only to an authenticated peer (rendezvous
//     Config.Authorize); the handle's nonce stays the second check;
//   - the UCX transport accepts a peer's frames only once the control plane authenticated that
//     peer's incarnation, and before it opens an endpoint to a peer it has the control plane
//     authenticate it first (transport.AuthGate).
//
// An incarnation, once authenticated, stays authenticated until the peer restarts (a new
// incarnation) or is removed: a control connection that drops and comes back does not make the
// peer's UCX traffic or leases fail in between.

// authModeOf is the strictest authentication among transports.
func authModeOf(ts []transport.Transport) auth.Mode {
	m := auth.ModeNone
	for _, t := range ts {
		if a, ok := t.(interface{ AuthMode() auth.Mode }); ok && a.AuthMode() > m {
			m = a.AuthMode()
		}
	}
	return m
}

// credentialsUsed refuses an instance none of whose transports authenticates peers while the
// environment names credentials: the TCP transport takes them itself (tcp.Config.Auth), so this
// is an instance without one, whose UCX transport has no credentials of its own (it admits the
// peers a control plane authenticated). Running it would leave the operator's credentials unused.
func credentialsUsed(mode auth.Mode) error {
	if mode != auth.ModeNone {
		return nil
	}
	if set := auth.EnvVars(); len(set) > 0 {
		return fmt.Errorf("velo: the environment sets %s, but no transport of this instance authenticates peers (the UCX transport takes no credentials: it admits the peers a TCP control plane authenticated): give it a TCP transport (tcp.New, with WithTransport) beside the others, or unset %s",
			strings.Join(set, ", "), strings.Join(set, ", "))
	}
	return nil
}

// authTable is the peers the control plane authenticated, by instance.
type authTable struct {
	mu    sync.Mutex
	peers map[transport.InstanceID]authEntry
}

type authEntry struct {
	incarnation uint64
	identity    string
	// sessions are the keys of this incarnation's latest handshakes, newest last: two
	// connections may be up at once (both sides dialled), and either side's greeting may use
	// either key.
	sessions [][]byte
}

// maxSessions bounds the keys kept per peer incarnation.
const maxSessions = 4

func (a *authTable) add(id transport.InstanceID, inc uint64, identity string, session []byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.peers == nil {
		a.peers = map[transport.InstanceID]authEntry{}
	}
	e := a.peers[id]
	if e.incarnation != inc {
		e = authEntry{incarnation: inc}
	}
	e.identity = identity
	if len(session) > 0 {
		e.sessions = append(e.sessions, session)
		if len(e.sessions) > maxSessions {
			e.sessions = e.sessions[len(e.sessions)-maxSessions:]
		}
	}
	a.peers[id] = e
}

// remove forgets a peer that left (its sessions went with it).
func (a *authTable) remove(id transport.InstanceID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.peers, id)
}

// lookup reports whether the peer is authenticated; inc 0 matches any incarnation.
func (a *authTable) lookup(id transport.InstanceID, inc uint64) (authEntry, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e, ok := a.peers[id]
	if !ok || (inc != 0 && e.incarnation != inc) {
		return authEntry{}, false
	}
	return e, true
}

// authorize is rendezvous's Authorize when the control plane authenticates peers.
func (v *Velo) authorize(peer transport.InstanceID) error {
	if _, ok := v.auth.lookup(peer, 0); !ok {
		return fmt.Errorf("instance %016x is not authenticated on this owner's control plane", uint64(peer))
	}
	return nil
}

// registerTransportMetrics registers the metric families of the instance's transports on its
// Registerer: those a transport asks velo to register (the UCX transport's and its engine's,
// unless its Config.Metrics named another Registerer) as they are, and per-transport families
// (the TCP transport's handshake failures) under a transport label, because an instance may run
// two transports of one kind.
func registerTransportMetrics(reg prometheus.Registerer, ts []transport.Transport) error {
	for _, t := range ts {
		if c, ok := t.(interface{ Collectors() []prometheus.Collector }); ok {
			if err := metrics.Register(reg, c.Collectors()...); err != nil {
				return fmt.Errorf("velo: the %s transport's metrics: %w", t.Name(), err)
			}
		}
		if c, ok := t.(interface{ TransportCollectors() []prometheus.Collector }); ok {
			treg := prometheus.WrapRegistererWith(prometheus.Labels{"transport": t.Name()}, reg)
			if err := metrics.Register(treg, c.TransportCollectors()...); err != nil {
				return fmt.Errorf("velo: the %s transport's metrics: %w", t.Name(), err)
			}
		}
	}
	return nil
}

// PeerAuthenticated implements transport.AuthObserver.
func (h *host) PeerAuthenticated(peer transport.InstanceID, incarnation uint64, identity string, session []byte) {
	h.v.auth.add(peer, incarnation, identity, session)
	h.v.peerAuthenticated(peer)
	h.v.log.Debug("velo: peer authenticated", "peer", fmt.Sprintf("%016x", uint64(peer)), "identity", identity)
}

// AuthRequired implements transport.AuthGate.
func (h *host) AuthRequired() bool { return h.v.authMode != auth.ModeNone }

// Authenticated implements transport.AuthGate.
func (h *host) Authenticated(peer transport.InstanceID, incarnation uint64) bool {
	_, ok := h.v.auth.lookup(peer, incarnation)
	return ok
}

// Authenticate implements transport.AuthGate: it has a transport that authenticates peers (TCP)
// connect to peer, which runs the handshake.
func (h *host) Authenticate(ctx context.Context, peer transport.InstanceID) error {
	if _, ok := h.v.auth.lookup(peer, 0); ok {
		return nil
	}
	for _, t := range h.v.transports {
		c, ok := t.(interface {
			AuthMode() auth.Mode
			Connect(context.Context, transport.InstanceID) error
		})
		if ok && c.AuthMode() != auth.ModeNone {
			if err := c.Connect(ctx, peer); err != nil {
				return err
			}
			if _, ok := h.v.auth.lookup(peer, 0); ok {
				return nil
			}
		}
	}
	return fmt.Errorf("velo: %w: instance %016x is not authenticated on the control plane (its TCP address is unknown or its handshake failed)", ErrPeerUnreachable, uint64(peer))
}

// HelloProof implements transport.AuthGate: msg proven with the newest session key of the peer.
func (h *host) HelloProof(peer transport.InstanceID, msg []byte) ([]byte, error) {
	e, ok := h.v.auth.lookup(peer, 0)
	if !ok || len(e.sessions) == 0 {
		return nil, fmt.Errorf("velo: %w: no authenticated control-plane session with instance %016x", ErrPeerUnreachable, uint64(peer))
	}
	return auth.HelloProof(e.sessions[len(e.sessions)-1], msg), nil
}

// HelloKey implements transport.AuthGate.
func (h *host) HelloKey(peer transport.InstanceID, incarnation uint64, msg, proof []byte) ([]byte, bool) {
	e, ok := h.v.auth.lookup(peer, incarnation)
	if !ok {
		return nil, false
	}
	return auth.HelloKey(e.sessions, msg, proof)
}

// registrationOrder is the order RegisterPeer hands a peer's addresses to the transports: those
// that authenticate peers first, so that a transport that relies on them (UCX, through AuthGate)
// finds the peer's control-plane address already known when it opens its first endpoint.
func (v *Velo) registrationOrder() []transport.Transport {
	var first, rest []transport.Transport
	for _, t := range v.transports {
		if a, ok := t.(interface{ AuthMode() auth.Mode }); ok && a.AuthMode() != auth.ModeNone {
			first = append(first, t)
		} else {
			rest = append(rest, t)
		}
	}
	return append(first, rest...)
}
