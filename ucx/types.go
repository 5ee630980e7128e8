package ucx

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Features select what a context can do (ucp_params_t.features).
type Features uint64

const (
	// FeatureAM enables active messages.
	FeatureAM Features = 1 << iota
	// FeatureRMA enables one-sided GET and PUT.
	FeatureRMA
	// FeatureWakeup enables the worker's event fd (needed to park instead of spin).
	FeatureWakeup
	// FeatureAMO enables 32- and 64-bit remote atomics (Endpoint.Atomic). The Engine does
	// not use them; the binding offers them for tools and tests.
	FeatureAMO
)

// ContextConfig configures NewContext. The zero value gives a context with AM, RMA and
// wakeup and whatever the UCX_* environment says.
type ContextConfig struct {
	// Features defaults to FeatureAM|FeatureRMA|FeatureWakeup.
	Features Features
	// TLS is UCX_TLS (for example "tcp" or "rc_mlx5,ud_mlx5,self"); it applies only when
	// UCX_TLS is unset in the environment.
	TLS string
	// NetDevices is UCX_NET_DEVICES (for example "mlx5_2:1"); it applies only when
	// UCX_NET_DEVICES is unset.
	NetDevices string
	// Settings are further UCX settings by name, with or without the UCX_ prefix
	// ("KEEPALIVE_INTERVAL": "5s"). Each applies only when its variable is unset.
	Settings map[string]string
	// Logger receives the binding's warnings (default slog.Default()).
	Logger *slog.Logger
}

func (c ContextConfig) features() Features {
	if c.Features == 0 {
		return FeatureAM | FeatureRMA | FeatureWakeup
	}
	return c.Features
}

// ErrorMode is an endpoint's error handling mode (ucp_err_handling_mode_t).
type ErrorMode int

const (
	// ErrorModePeer (UCP_ERR_HANDLING_MODE_PEER, the default here): UCX detects a failed
	// peer (keepalive, connection reset), calls the endpoint's error handler and fails its
	// requests instead of hanging them.
	ErrorModePeer ErrorMode = iota
	// ErrorModeNone (UCP_ERR_HANDLING_MODE_NONE): faster wireup on some transports, but a
	// dead peer can hang requests forever. Use only when both ends live and die together.
	ErrorModeNone
)

// EndpointOptions configure Worker.Connect.
type EndpointOptions struct {
	ErrorMode ErrorMode
}

// CloseMode says how an endpoint closes (ucp_ep_close_nbx flags).
type CloseMode int

const (
	// CloseFlush completes outstanding operations and tells the peer, then closes.
	CloseFlush CloseMode = iota
	// CloseForce (UCP_EP_CLOSE_FLAG_FORCE) drops outstanding operations (they complete
	// with UCS_ERR_CANCELED) without waiting for the peer.
	CloseForce
)

// AMFlags are ucp_am_send_nbx flags.
type AMFlags uint32

const (
	// AMReply (UCP_AM_SEND_FLAG_REPLY) lets the receiver see which endpoint sent it.
	AMReply AMFlags = 1 << iota
	// AMEager (UCP_AM_SEND_FLAG_EAGER) forbids the rendezvous protocol: the message goes
	// out in eager fragments however large it is. The engine always sets it.
	AMEager
	// AMRendezvous (UCP_AM_SEND_FLAG_RNDV) forces the rendezvous protocol.
	AMRendezvous
)

// RMAMode selects how Engine.Get reads remote memory.
type RMAMode int

const (
	// RMAAuto uses ucp_get_nbx when the endpoint's RMA lanes are InfiniBand RC/DC
	// transports, whose NIC checks the remote key; otherwise the guarded GET. This is
	// the default: on tcp (and cma, shared memory) UCX does not check remote keys at all.
	RMAAuto RMAMode = iota
	// RMAGuarded always uses the guarded GET: the owner's engine checks slot, token and
	// range against its live registrations before it sends a byte.
	RMAGuarded
	// RMADirect always uses ucp_get_nbx. Over tcp a stale key then reads whatever the
	// owner has at that address now, and a freed address crashes the owner. For
	// benchmarks against ucx_perftest and for hardware-enforced transports only.
	RMADirect
)

func (m RMAMode) String() string {
	switch m {
	case RMAGuarded:
		return "guarded"
	case RMADirect:
		return "direct"
	}
	return "auto"
}

// EngineConfig configures NewEngine. The zero value works.
type EngineConfig struct {
	// Context configures the engine's UCX context (TLS, devices, settings).
	Context ContextConfig
	// SpinFor is how long the progressor keeps polling after the last event before it
	// sleeps until the worker's event fd fires. Default 50µs; negative sleeps at once.
	// A spinning thread holds one of GOMAXPROCS Ps, so at most GOMAXPROCS-1 engines of a
	// process spin at a time (none with GOMAXPROCS=1); the others sleep at once.
	SpinFor time.Duration
	// MaxEagerSize bounds header+payload of an active message the engine sends. Every AM
	// goes out eagerly (never by rendezvous), so this is also the largest message a peer
	// must buffer. Default 1 MiB.
	MaxEagerSize int
	// RMA selects the GET path (default RMAAuto).
	RMA RMAMode
	// Name labels the engine in logs and metrics (default "ucx").
	Name string
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// Metrics, when set, receives the engine's collectors. Never the global registry.
	Metrics prometheus.Registerer
}

const (
	defaultSpinFor      = 200 * time.Microsecond
	defaultMaxEagerSize = 1 << 20
)

// AMHandler receives active messages of one id. Handlers run one at a time, in arrival
// order across all ids, outside the engine's lock, usually on the goroutine that found the
// message (the progressor). A handler may call the engine and may block; while it blocks,
// later messages wait for it and, after a short while, another goroutine carries on with
// progress (Engine.HandleAM).
type AMHandler func(msg AMMessage)

// AMMessage is one received active message. Header and Payload are Go copies the handler
// may keep.
type AMMessage struct {
	ID      uint16
	Header  []byte
	Payload []byte
	// Sender identifies the endpoint the message came on when the sender set AMReply
	// (zero otherwise). It is an identity for correlation, not a handle to send on: UCX
	// only guarantees the reply endpoint during its callback.
	Sender uint64
}

// Op is the future of an asynchronous engine operation. It completes exactly once, when
// UCX has released every buffer the operation used.
type Op struct {
	done chan struct{}
	err  error
	n    int
	e    *Engine // the engine that runs it (nil for an Op that was done at birth)
}

func newOp() *Op { return &Op{done: make(chan struct{})} }

// completedOp is an Op that is already done.
func completedOp(err error) *Op {
	o := newOp()
	o.finish(err, 0)
	return o
}

func (o *Op) finish(err error, n int) {
	o.err = err
	o.n = n
	close(o.done)
}

// Done is closed when the operation completed and its buffers are free again.
func (o *Op) Done() <-chan struct{} { return o.done }

// Err is the operation's result; valid after Done is closed.
func (o *Op) Err() error {
	select {
	case <-o.done:
		return o.err
	default:
		return StatusInProgress
	}
}

// Wait returns the operation's result, or ctx.Err() when ctx ends first. After an early
// return the operation still owns its buffers: do not reuse or free them until Done.
func (o *Op) Wait(ctx context.Context) error {
	if o.e != nil {
		if err := o.e.await(ctx, o.done); err != nil {
			return err
		}
		return o.err
	}
	select {
	case <-o.done:
		return o.err
	case <-ctx.Done():
		select {
		case <-o.done:
			return o.err
		default:
		}
		return ctx.Err()
	}
}

// VersionInfo is the version of the linked UCX and of the headers the binding was
// compiled with.
type VersionInfo struct {
	Major, Minor, Release uint
	String                string // ucp_get_version_string
	// APIMajor and APIMinor are UCP_API_MAJOR/MINOR of the compile-time headers.
	APIMajor, APIMinor uint
}

// BuildSupport says which RDMA pieces are compiled into the linked UCX. Verbs and
// RDMACM come from the component list; MLX5 and DEVX from marker symbols, which a
// statically linked and stripped binary no longer has (they then read false).
type BuildSupport struct {
	Verbs  bool // the ib component (libibverbs transports rc_verbs, ud_verbs)
	MLX5   bool // mlx5 direct-verbs transports (rc_mlx5, dc_mlx5, ud_mlx5)
	DEVX   bool // the DEVX memory domain (uct_ib_mlx5_devx_md_ops)
	RDMACM bool // the rdmacm connection manager
}

// Resources is what `ucx_info -d` prints, from the UCX this binary links.
type Resources struct {
	Components []Component
	Support    BuildSupport
}

// Component is a UCT component (ib, tcp, self, sysv, posix, cma, rdmacm …).
type Component struct {
	Name string
	// CM: the component is a connection manager (rdmacm, tcp sockcm) rather than a data
	// transport.
	CM            bool
	MemoryDomains []MemoryDomain
}

// MemoryDomain is one memory domain of a component (a device for ib, "tcp" for tcp).
type MemoryDomain struct {
	Name string
	// Err is set when the domain could not be opened; the other fields are then empty.
	Err              error
	CanRegister      bool // UCT_MD_FLAG_REG
	CanAllocate      bool // UCT_MD_FLAG_ALLOC
	NeedsRemoteKey   bool // UCT_MD_FLAG_NEED_RKEY: remote access is checked with a key
	RemoteKeySize    int
	RegisterCostBase time.Duration // linear cost model of a registration: base …
	RegisterCostPerB time.Duration // … plus this per byte (usually sub-nanosecond, so 0)
	RegisterCostNsPB float64       // per-byte cost in nanoseconds, unrounded
	Transports       []Transport
}

// DeviceType is uct_device_type_t.
type DeviceType int

const (
	DeviceNet DeviceType = iota
	DeviceShm
	DeviceAcc
	DeviceSelf
)

func (d DeviceType) String() string {
	switch d {
	case DeviceNet:
		return "network"
	case DeviceShm:
		return "shared memory"
	case DeviceAcc:
		return "accelerator"
	case DeviceSelf:
		return "loopback"
	}
	return "unknown"
}

// Transport is one transport on one device.
type Transport struct {
	Name       string // "tcp", "rc_mlx5", …
	Device     string // "eth0", "mlx5_0:1", …
	DeviceType DeviceType
	// Err is set when the interface could not be opened to read its capabilities.
	Err  error
	Caps TransportCaps
}

// TransportCaps are the capabilities of an opened interface.
type TransportCaps struct {
	AMShort, AMBcopy, AMZcopy    bool
	PutShort, PutBcopy, PutZcopy bool
	GetShort, GetBcopy, GetZcopy bool
	PeerFailure                  bool // UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE
	Keepalive                    bool // UCT_IFACE_FLAG_EP_KEEPALIVE
	ConnectToIface               bool
	ConnectToEP                  bool
	AMMaxShort, AMMaxBcopy       uint64
	AMMaxZcopy, AMMaxHeader      uint64
	GetMaxZcopy, PutMaxZcopy     uint64
	Latency                      time.Duration
	BandwidthMBs                 float64 // dedicated + shared, MB/s
	MaxEndpoints                 uint64
	Priority                     int
}

// HasGet reports whether the transport reads remote memory itself. Without it, UCP
// emulates GET in software through the target's worker.
func (c TransportCaps) HasGet() bool { return c.GetShort || c.GetBcopy || c.GetZcopy }

// ConnectOptions configure Engine.Connect.
type ConnectOptions struct {
	// ErrorMode defaults to ErrorModePeer (error handler, keepalive).
	ErrorMode ErrorMode
	// VectoredGet says the peer's engine answers vectored guarded GETs (this release and
	// later): GetMany then posts consecutive small guarded reads as one request. An engine of
	// an earlier release would drop such a request unanswered, so it is off unless the peer
	// said it can (velo's UCX transport reads that from the peer's address).
	VectoredGet bool
	// VectoredPut says the peer's engine answers vectored guarded PUTs (this release and
	// later): PutMany then sends consecutive small guarded writes as one request. Off unless the
	// peer said it can, for the same reason as VectoredGet.
	VectoredPut bool
	// Holder, when nonzero, names the peer at the other end (any number the caller chooses
	// per peer, the same as the RegisterOptions.Holder of the keys given to that peer): the
	// engine's guard serves a registration made with a holder only to guarded GETs and PUTs
	// that arrive on an endpoint connected with that holder. A key seen on the wire is then
	// useless from any other endpoint.
	Holder uint64
	// OnError is called once, where the engine runs handlers, when UCX reports the
	// endpoint failed (the peer died, keepalive expired, the connection was reset). The
	// engine then force-closes the endpoint; later operations fail with
	// ErrEndpointFailed.
	OnError func(err error)
}

// SendOptions configure Conn.SendAMAsync.
type SendOptions struct {
	// Reply sets AMReply, so the receiver's AMMessage.Sender identifies this endpoint.
	Reply bool
	// Copy copies header and payload into C memory before the call returns, so the
	// caller's buffers are free at once (and a cancelled Wait leaves nothing behind).
	// Without it the buffers are pinned and owned by the operation until Done.
	Copy bool
}

// EventKind says what an Event reports.
type EventKind int

const (
	// EventAM: an active message arrived (Event.AM).
	EventAM EventKind = iota + 1
	// EventEndpointError: an endpoint's error handler ran (Event.Endpoint, Event.Err).
	// The endpoint's requests fail and it can only be closed.
	EventEndpointError
	// EventCompleted: a request completed (Event.Request, Event.Err).
	EventCompleted
)

// ReservedAMIDs: active-message ids from here up belong to the engine (the guarded GET);
// user handlers take ids below it.
const ReservedAMIDs = 0xFF00
