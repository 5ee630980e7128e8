package rails

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/transport"
)

// MaxRails is the most rails one Transport takes (a rail-set key indexes its keys by rail).
const MaxRails = wire.MaxRails

// MaxKeyLen bounds one rail's key inside a rail-set key.
const MaxKeyLen = wire.MaxRailKeyLen

// Defaults and bounds of Config.
const (
	DefaultSliceSize   = 512 << 10
	MinSliceSize       = 64 << 10
	MaxSliceSize       = 16 << 20
	DefaultSplitAbove  = 1 << 20
	DefaultWindow      = 4
	DefaultCoolDown    = 30 * time.Second
	DefaultMaxCoolDown = 300 * time.Second
	// minSliceTimeout and maxSliceTimeout bound the adaptive slice timeout (Config.SliceTimeout 0).
	minSliceTimeout = time.Second
	maxSliceTimeout = 30 * time.Second
)

// Config configures a Transport of several rails.
type Config struct {
	// Devices names the rails, in the order of the transports given to New (their
	// UCX_NET_DEVICES values); they label the metrics and the introspection page. Default
	// "rail0", "rail1", ...
	Devices []string
	// SliceSize is the size of the slices a large read is cut into, each read over one rail
	// (default DefaultSliceSize, MinSliceSize to MaxSliceSize).
	SliceSize int
	// SplitAbove: a read of more bytes than this is sliced over the rails; smaller reads go whole
	// on one rail (default DefaultSplitAbove; at least SliceSize).
	SplitAbove int
	// Window is how many reads each rail keeps in flight (default DefaultWindow).
	Window int
	// CoolDown is how long a rail whose read failed is paused before it is probed again; it
	// doubles at each failure in a row up to MaxCoolDown (defaults 30 s and 5 min).
	CoolDown, MaxCoolDown time.Duration
	// SliceTimeout bounds one read on one rail; a read past it counts as the rail's failure, and
	// its bytes are read again over another rail. 0 adapts it to what the rail has shown: eight
	// times its recent read time, within 1 s and 30 s (30 s before it has read anything).
	SliceTimeout time.Duration
	// Logger (default: the host's logger from Start on).
	Logger *slog.Logger
}

func (c Config) withDefaults(n int) (Config, error) {
	if c.SliceSize == 0 {
		c.SliceSize = DefaultSliceSize
	}
	if c.SliceSize < MinSliceSize || c.SliceSize > MaxSliceSize {
		return c, fmt.Errorf("rails: Config.SliceSize %d is outside %d..%d", c.SliceSize, MinSliceSize, MaxSliceSize)
	}
	if c.SplitAbove == 0 {
		c.SplitAbove = max(DefaultSplitAbove, c.SliceSize)
	}
	if c.SplitAbove < c.SliceSize {
		return c, fmt.Errorf("rails: Config.SplitAbove %d is below SliceSize %d: a read that small would be one slice anyway", c.SplitAbove, c.SliceSize)
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.Window < 1 || c.Window > 64 {
		return c, fmt.Errorf("rails: Config.Window %d is outside 1..64", c.Window)
	}
	if c.CoolDown == 0 {
		c.CoolDown = DefaultCoolDown
	}
	if c.MaxCoolDown == 0 {
		c.MaxCoolDown = max(DefaultMaxCoolDown, c.CoolDown)
	}
	if c.CoolDown < 0 || c.MaxCoolDown < c.CoolDown {
		return c, fmt.Errorf("rails: Config.CoolDown %v and MaxCoolDown %v: want 0 < CoolDown <= MaxCoolDown", c.CoolDown, c.MaxCoolDown)
	}
	if c.SliceTimeout < 0 {
		return c, fmt.Errorf("rails: Config.SliceTimeout %v is negative (0 adapts it)", c.SliceTimeout)
	}
	if len(c.Devices) != 0 && len(c.Devices) != n {
		return c, fmt.Errorf("rails: Config.Devices names %d rails for %d transports", len(c.Devices), n)
	}
	if len(c.Devices) == 0 {
		for i := range n {
			c.Devices = append(c.Devices, "rail"+strconv.Itoa(i))
		}
	}
	return c, nil
}

// Transport is several transports, one per rail, shown to velo as one UCX transport: messages go
// over the first rail, reads over all of them. See the package doc.
type Transport struct {
	cfg   Config
	rails []*rail
	m     *railMetrics
	log   *slog.Logger
	turn  atomic.Uint64 // the rail each transfer's first batches start from, turned per transfer

	mu      sync.Mutex
	peers   map[transport.InstanceID]uint32 // peer -> bitmask of the rails added for it (rail 0 included)
	started bool
	closed  bool
}

var (
	_ transport.Transport      = (*Transport)(nil)
	_ transport.RMA            = (*Transport)(nil)
	_ transport.ManyReader     = (*Transport)(nil)
	_ transport.PeerRegisterer = (*Transport)(nil)
	_ transport.RailAddresser  = (*Transport)(nil)
)

// New makes a Transport of the given transports, one per rail, the first carrying the messages.
// Each must implement transport.RMA and be new (not started). Between 2 and MaxRails; with one
// rail, use that transport alone.
func New(cfg Config, members ...transport.Transport) (*Transport, error) {
	if len(members) < 2 || len(members) > MaxRails {
		return nil, fmt.Errorf("rails: %d transports: a rail set has 2 to %d (with one rail, add that transport alone)", len(members), MaxRails)
	}
	cfg, err := cfg.withDefaults(len(members))
	if err != nil {
		return nil, err
	}
	t := &Transport{cfg: cfg, peers: map[transport.InstanceID]uint32{}, log: cfg.Logger}
	if t.log == nil {
		t.log = slog.Default()
	}
	for i, m := range members {
		if m == nil {
			return nil, fmt.Errorf("rails: transport %d is nil", i)
		}
		rma, ok := m.(transport.RMA)
		if !ok {
			return nil, fmt.Errorf("rails: transport %d (%s) cannot read remote memory (no transport.RMA): every rail must", i, m.Name())
		}
		r := &rail{idx: i, name: cfg.Devices[i], t: m, rma: rma, cool: cfg.CoolDown}
		r.many, _ = m.(transport.ManyReader)
		t.rails = append(t.rails, r)
	}
	t.m = newRailMetrics(t)
	return t, nil
}

// Rails names the rails, in order.
func (t *Transport) Rails() []string { return append([]string(nil), t.cfg.Devices...) }

// Name is the first rail's name ("ucx").
func (t *Transport) Name() string { return t.rails[0].t.Name() }

// RailAddressName is the PeerInfo name of rail i's address (i >= 1): "ucx.rail1".
func (t *Transport) RailAddressName(i int) string { return t.Name() + ".rail" + strconv.Itoa(i) }

// Start starts every rail, each with a host of its own around the runtime's: the first passes
// a lost peer on (it carries the messages), unless the rail set itself closed the endpoints (a
// stalled read, see forceClose); the others keep their losses to themselves (the peer is not down
// while its first rail carries its messages).
func (t *Transport) Start(h transport.Host) error {
	if t.cfg.Logger == nil {
		t.log = h.Logger().With("rails", len(t.rails))
	}
	for i, r := range t.rails {
		base := &railHost{Host: h, t: t, r: r}
		var rh transport.Host = base
		if g, ok := h.(transport.AuthGate); ok {
			rh = &gatedRailHost{railHost: base, AuthGate: g}
		}
		if err := r.t.Start(rh); err != nil {
			for _, s := range t.rails[:i] {
				s.t.Close()
			}
			return fmt.Errorf("rails: starting rail %d (%s): %w", i, r.name, err)
		}
	}
	t.mu.Lock()
	t.started = true
	t.mu.Unlock()
	t.log.Info("rails: started", "rails", t.cfg.Devices, "slice_bytes", t.cfg.SliceSize, "split_above", t.cfg.SplitAbove, "window", t.cfg.Window)
	return nil
}

// railHost is the host of one rail.
type railHost struct {
	transport.Host
	t *Transport
	r *rail
}

// PeerDown on the first rail is the runtime's, but for the endpoints the rail set closed itself.
// On another rail it pauses nothing: a peer that closed or died is no fault of the NIC, and a
// rail that did lose a live peer shows it in its reads, which fail or time out and pause it.
func (h *railHost) PeerDown(peer transport.InstanceID, err error) {
	if h.r.idx == 0 && !h.r.forcing.Load() {
		h.Host.PeerDown(peer, err)
		return
	}
	h.t.log.Info("rails: a rail lost a peer; its next read to it opens a new endpoint", "rail", h.r.idx, "device", h.r.name, "peer", peer, "err", err)
}

type gatedRailHost struct {
	*railHost
	transport.AuthGate
}

// Address is the first rail's address.
func (t *Transport) Address() []byte { return t.rails[0].t.Address() }

// RailAddresses are the other rails' addresses, under RailAddressName.
func (t *Transport) RailAddresses() map[string][]byte {
	out := map[string][]byte{}
	for i, r := range t.rails[1:] {
		out[t.RailAddressName(i+1)] = r.t.Address()
	}
	return out
}

// AddPeer adds the peer on the first rail.
func (t *Transport) AddPeer(ctx context.Context, p transport.PeerAddress) error {
	if err := t.rails[0].t.AddPeer(ctx, p); err != nil {
		return err
	}
	t.mu.Lock()
	t.peers[p.ID] |= 1
	t.mu.Unlock()
	return nil
}

// AddRailPeers adds the peer on each other rail whose address its PeerInfo carries.
func (t *Transport) AddRailPeers(ctx context.Context, p transport.PeerAddress, addrs map[string][]byte) error {
	var errs []error
	var mask uint32
	for i, r := range t.rails[1:] {
		blob, ok := addrs[t.RailAddressName(i+1)]
		if !ok || len(blob) == 0 {
			continue
		}
		q := p
		q.Blob = blob
		if err := r.t.AddPeer(ctx, q); err != nil {
			errs = append(errs, fmt.Errorf("rails: rail %d (%s): %w", i+1, r.name, err))
			continue
		}
		mask |= 1 << (i + 1)
	}
	t.mu.Lock()
	t.peers[p.ID] |= mask
	t.mu.Unlock()
	return errors.Join(errs...)
}

// RemovePeer forgets the peer on every rail.
func (t *Transport) RemovePeer(id transport.InstanceID) {
	for _, r := range t.rails {
		r.t.RemovePeer(id)
	}
	t.mu.Lock()
	delete(t.peers, id)
	t.mu.Unlock()
}

// Reaches is the first rail's.
func (t *Transport) Reaches(peer transport.InstanceID) bool { return t.rails[0].t.Reaches(peer) }

// Send goes over the first rail.
func (t *Transport) Send(ctx context.Context, peer transport.InstanceID, parts ...[]byte) error {
	return t.rails[0].t.Send(ctx, peer, parts...)
}

// MaxFrameSize is the first rail's.
func (t *Transport) MaxFrameSize() int { return t.rails[0].t.MaxFrameSize() }

// Close closes every rail.
func (t *Transport) Close() error {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	var errs []error
	for _, r := range t.rails {
		if err := r.t.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// sharedMask is the rails on which peer was added.
func (t *Transport) sharedMask(peer transport.InstanceID) uint32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.peers[peer]
}

// Collectors are the rails' own series and each member's, labelled rail="<index>" so that the
// same families of several UCX transports can sit in one registry.
func (t *Transport) Collectors() []prometheus.Collector {
	out := t.m.collectors()
	for i, r := range t.rails {
		c, ok := r.t.(interface{ Collectors() []prometheus.Collector })
		if !ok {
			continue
		}
		for _, col := range c.Collectors() {
			out = append(out, prometheus.WrapCollectorWith(prometheus.Labels{"rail": strconv.Itoa(i)}, col))
		}
	}
	return out
}

// Describe is the first rail's settings with every rail's device and state.
func (t *Transport) Describe() map[string]string {
	d := map[string]string{}
	if ds, ok := t.rails[0].t.(interface{ Describe() map[string]string }); ok {
		for k, v := range ds.Describe() {
			d[k] = v
		}
	}
	d["rails"] = strconv.Itoa(len(t.rails))
	d["rail_slice"] = strconv.Itoa(t.cfg.SliceSize)
	d["rail_split_above"] = strconv.Itoa(t.cfg.SplitAbove)
	for _, s := range t.Status() {
		d["rail"+strconv.Itoa(s.Index)] = fmt.Sprintf("%s %s, %d bytes in %d slices, %d failures", s.Device, s.State, s.Bytes, s.Slices, s.Failures)
	}
	return d
}

// Endpoints is the first rail's count.
func (t *Transport) Endpoints(peer transport.InstanceID) int {
	if c, ok := t.rails[0].t.(interface {
		Endpoints(transport.InstanceID) int
	}); ok {
		return c.Endpoints(peer)
	}
	return 0
}

// HealthReasons are the members' reasons and one for each rail that is paused.
func (t *Transport) HealthReasons() []string {
	var out []string
	for _, r := range t.rails {
		if hr, ok := r.t.(interface{ HealthReasons() []string }); ok {
			out = append(out, hr.HealthReasons()...)
		}
	}
	for _, s := range t.Status() {
		if s.State != StateUp {
			out = append(out, fmt.Sprintf("rail %d (%s) is %s until %s after %d failures (last: %s): its share of every transfer goes over the other rails",
				s.Index, s.Device, s.State, s.Until.Format(time.TimeOnly), s.Failures, s.LastError))
		}
	}
	return out
}

// RailsTo names the rails shared with peer (added on both sides' PeerInfo), for velo's peer table.
func (t *Transport) RailsTo(peer transport.InstanceID) []string {
	mask := t.sharedMask(peer)
	var out []string
	for i, r := range t.rails {
		if mask&(1<<i) != 0 {
			out = append(out, r.name)
		}
	}
	return out
}
