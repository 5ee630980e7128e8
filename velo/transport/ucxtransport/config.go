package ucxtransport

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/velo-go/velo/ucx"
)

// Name is the transport name under which the UCX address appears in a PeerInfo, and the RMA
// backend name in offers and descriptors.
const Name = "ucx"

// Limits and defaults for Config fields.
const (
	// DefaultEagerMax is the default largest frame: 1 MiB. Larger payloads travel as rendezvous
	// handles (the runtime stages them), never as one active message.
	DefaultEagerMax = 1 << 20
	// tcpSegSize is the segment size the transport gives UCX's tcp transport (UCX_TCP_TX_SEG_SIZE
	// and UCX_TCP_RX_SEG_SIZE, where the environment sets neither): room for a 64 KiB frame and
	// its headers in one segment. Each worker's tcp interface then keeps its send and receive
	// buffers in pools grown eight buffers at a time (640 KiB to send, 1.25 MiB to receive, the
	// receive buffers being twice the segment).
	tcpSegSize = "80kb"
	// MinEagerMax is the smallest EagerMax accepted (and advertised by a peer): room for any
	// control message of the runtime.
	MinEagerMax = 4 << 10
	// MaxEagerMax bounds EagerMax: every frame goes out eagerly, so a receiver must be able to
	// buffer the largest one whole.
	MaxEagerMax = 64 << 20
	// DefaultSendTimeout bounds a Send whose context has no deadline (the runtime sends answers
	// with context.Background).
	DefaultSendTimeout = 60 * time.Second
	// DefaultMaxEndpoints is Config.MaxEndpoints' default. A worker talks to a few peers at a
	// time, so 256 open endpoints cover it with room; over tcp each holds a socket or two on each
	// side, which keeps eight workers of a node well inside a default descriptor limit
	// whatever the cluster's size.
	DefaultMaxEndpoints = 256
)

// Timings of the endpoint lifecycle that tests shorten. They are not Config fields: they bound
// waits that only matter when a peer misbehaves or dies, and the defaults are generous.
const (
	// defaultFinWait bounds how long a retired endpoint stays open waiting for the peer's fin
	// (the peer stopping its own endpoint to us) before it is closed anyway.
	defaultFinWait = 5 * time.Second
	// defaultHoldTimeout bounds how long frames of a sender's new endpoint wait for the missing
	// tail of its old one before that tail is counted lost.
	defaultHoldTimeout = 5 * time.Second
	// maxTick is the longest interval between two maintenance passes (reaping, retired
	// endpoints, held frames).
	maxTick = 250 * time.Millisecond
	// remoteLogInterval: a warning that peers' frames cause is logged at most once per peer and
	// message in this interval, with the count of those held back.
	remoteLogInterval = 10 * time.Second
	// startTimeout bounds the engine's start-up.
	startTimeout = 60 * time.Second
)

// RMAMode is how GETs read a peer's memory: the UCX binding's mode, named here so a program that
// configures the transport needs no import of the binding.
type RMAMode = ucx.RMAMode

// The RMA modes (Config.RMA).
const (
	// RMAAuto: ucp_get_nbx where the NIC checks keys (InfiniBand RC/DC), the guarded GET elsewhere.
	RMAAuto = ucx.RMAAuto
	// RMAGuarded: the guarded GET everywhere.
	RMAGuarded = ucx.RMAGuarded
	// RMADirect: ucp_get_nbx everywhere (see Config.RMA before choosing it).
	RMADirect = ucx.RMADirect
)

// Config configures a UCX transport. The zero value works: lazy endpoints, UCX's own choice of
// transports and devices (or the UCX_* environment), no idle reaper.
type Config struct {
	// EagerEndpoints creates the endpoint to a peer, and finishes its wireup, in AddPeer
	// (velo.RegisterPeer) instead of on the first Send or Get. It moves the wireup cost (about
	// 14 ms on InfiniBand) out of the first transfer. A peer velo learned because it reached
	// this instance first gets its endpoint on first use all the same.
	EagerEndpoints bool
	// TLS is UCX_TLS ("tcp", "rc_mlx5,ud_mlx5,self" …). It applies only when UCX_TLS is unset in
	// the environment: the environment wins, so an operator can move a deployed binary onto
	// another fabric without a rebuild. New logs which one applied.
	TLS string
	// NetDevices is UCX_NET_DEVICES ("mlx5_2:1" …), with the same rule as TLS.
	NetDevices string
	// TCPInterfaces names the network interfaces UCX's tcp transport may use ("lo", "eth0"): its
	// worker listens on their addresses only. Left unset with NetDevices and UCX_NET_DEVICES, the
	// interface of the control plane's address is used under velo.New (ScopeListen), and every
	// active interface of the host without it.
	// It sets UCX_NET_DEVICES to these interfaces and every InfiniBand port of the node, with the
	// same rule as TLS (the environment wins); it cannot be combined with NetDevices. A UCX_TLS
	// without tcp opens no tcp listener at all. New logs where the worker listens, and the
	// introspection page shows it (tcp_listen).
	TCPInterfaces []string
	// KeepaliveInterval is UCX_KEEPALIVE_INTERVAL (UCX's default is 20 s), with the same rule.
	// Keepalive is how an endpoint to a peer that vanished without closing its connections
	// fails, and so how Host.PeerDown learns of it.
	KeepaliveInterval time.Duration
	// EPIdleTimeout, when positive, closes an endpoint that carried nothing in either direction
	// for that long. The peer is told first (a fin), stops its own endpoint to this instance
	// and opens a new one on its next send, so a reap loses no frames. Zero keeps endpoints
	// until the peer goes away.
	EPIdleTimeout time.Duration
	// MaxEndpoints bounds the endpoints this transport keeps open to peers at once, one per
	// peer it talks to (default DefaultMaxEndpoints). When opening one puts the transport over
	// it, the endpoints idle longest are retired, nothing in flight on them (the idle reaper's
	// fin exchange: no frame or GET is lost, and the next send to such a peer opens a new one),
	// so that an instance of a large cluster holds descriptors for the peers it talks to, not
	// for every member. An endpoint that is busy is never cut: under a burst to more peers than
	// the budget the count exceeds it until their traffic pauses. Eager endpoints count too.
	MaxEndpoints int
	// EagerMax is the largest frame this transport sends and receives (MaxFrameSize): default
	// DefaultEagerMax, at least MinEagerMax, at most MaxEagerMax. A peer that advertises less
	// gets frames up to its own limit only. Every frame goes out as one eager active message.
	EagerMax int
	// SendTimeout bounds a Send whose context has no deadline (default DefaultSendTimeout), and
	// likewise how long a one-sided read or write without a deadline waits for an owner to connect
	// back to this instance before it fails with the owner's refusal (keys bound to their holder).
	SendTimeout time.Duration
	// RMA selects how this transport's GETs read a peer's memory. The default, RMAAuto, uses
	// ucp_get_nbx only where the NIC checks remote keys (InfiniBand RC/DC lanes) and the guarded
	// GET everywhere else. RMADirect forces ucp_get_nbx on every lane: over tcp (and shared
	// memory) nothing then checks a key against its live registration, so a GET after the owner
	// revoked a lease reads whatever memory is at that address, or crashes the owner. Set it only
	// on fabrics whose keys the hardware checks, or to measure against ucx_perftest. velo's static
	// UCX refuses software-emulated RMA altogether, so there RMADirect reads only over
	// hardware RC/DC lanes and fails elsewhere.
	RMA RMAMode
	// Logger (default: the logger of the velo instance the transport is added to, from Start on,
	// and slog.Default() before that); UCX's own warnings from the binding go here too.
	Logger *slog.Logger
	// Metrics, when set, receives the transport's and its UCX engine's collectors. Never the
	// global registry.
	Metrics prometheus.Registerer
	// TrustNetwork lets New run on a UCX that does not enforce remote keys on software RMA (any
	// build without velo's guard patch set, such as Debian's shared UCX), like
	// VELO_UCX_TRUST_NETWORK=1. Over such a UCX any process that reaches this worker (tcp, or ud
	// on InfiniBand) can read and write all of this process's memory, so set it only on a network
	// trusted with that; the transport then warns at start and the instance's health says so.
	// Without it, and without the variable, New fails with ErrUnguardedUCX. The enforcing UCX
	// (make ucx-static, -tags ucx_static) needs neither. See docs/security.md.
	TrustNetwork bool
	// RMAOverSoftwareLanes keeps the RDMA path for payloads with a peer whose endpoint UCX built
	// on software lanes only (tcp; ud without rc), like VELO_UCX_SOFTWARE_RMA=1. Without it such
	// a pair moves payload bytes on the chunked path (reason software_lanes), which is as fast
	// there and authenticated end to end; messages keep UCX either way, and a pair with a
	// hardware lane (rc, dc, shared memory) keeps the RDMA path regardless. Set it to exercise the
	// RDMA path without RDMA hardware (tests, benchmarks); once it applies to a peer the
	// instance's health says so. See docs/velo.md.
	RMAOverSoftwareLanes bool
}

func (c Config) withDefaults() (Config, error) {
	if c.EagerMax == 0 {
		c.EagerMax = DefaultEagerMax
	}
	if c.EagerMax < MinEagerMax || c.EagerMax > MaxEagerMax {
		return c, fmt.Errorf("ucx: Config.EagerMax %d is outside %d..%d", c.EagerMax, MinEagerMax, MaxEagerMax)
	}
	if c.EPIdleTimeout < 0 {
		return c, fmt.Errorf("ucx: Config.EPIdleTimeout %v must not be negative (0 turns the reaper off)", c.EPIdleTimeout)
	}
	if c.KeepaliveInterval < 0 {
		return c, fmt.Errorf("ucx: Config.KeepaliveInterval %v must not be negative (0 keeps UCX's default)", c.KeepaliveInterval)
	}
	if c.RMA < ucx.RMAAuto || c.RMA > ucx.RMADirect {
		return c, fmt.Errorf("ucx: Config.RMA %d is not a ucx.RMAMode (RMAAuto, RMAGuarded or RMADirect)", int(c.RMA))
	}
	if c.SendTimeout <= 0 {
		c.SendTimeout = DefaultSendTimeout
	}
	if c.MaxEndpoints < 0 {
		return c, fmt.Errorf("ucx: Config.MaxEndpoints %d must not be negative (0 takes DefaultMaxEndpoints)", c.MaxEndpoints)
	}
	if c.MaxEndpoints == 0 {
		c.MaxEndpoints = DefaultMaxEndpoints
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// tick is the maintenance interval: a quarter of the idle timeout, within [10 ms, maxTick].
func (c Config) tick() time.Duration {
	if c.EPIdleTimeout <= 0 {
		return maxTick
	}
	return min(max(c.EPIdleTimeout/4, 10*time.Millisecond), maxTick)
}
