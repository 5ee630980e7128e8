// Package rdmatest is an in-process stand-in for an RMA transport, for tests of the RDMA registry
// and of the runtime's RDMA path on machines and in packages where the UCX transport is not at
// hand. It sits below the transport.RMA seam only: messages travel over a real TCP transport, and
// every behaviour tested with it is tested again over real UCX (module test, package rdma).
//
// A Fabric joins the Transports of one process. A registration gets a random key that names it;
// a GET by another Transport on the fabric checks the key and the range against the owner's live
// registrations, as UCX's guarded GET does, and counts itself in flight on the registration while
// it copies, so a revoked registration's Dead closes only once no GET reads the memory. A revoked
// or forged key reads nothing. DuringGet holds a GET in flight (a stalled consumer);
// ForceClosePeer cancels the GETs a consumer has in flight, as closing its endpoints with force does.
package rdmatest

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/velo-go/velo/velo/transport"
	"github.com/velo-go/velo/velo/transport/tcp"
)

// Errors a GET fails with.
var (
	ErrRevoked    = errors.New("rdmatest: remote key revoked or unknown")
	ErrOutOfRange = errors.New("rdmatest: read outside the registered region")
	ErrInjected   = errors.New("rdmatest: injected GET failure")
)

// Fabric joins Transports in one process.
type Fabric struct {
	mu    sync.Mutex
	nodes map[transport.InstanceID]*Transport
}

// NewFabric returns an empty fabric.
func NewFabric() *Fabric { return &Fabric{nodes: map[transport.InstanceID]*Transport{}} }

func (f *Fabric) node(id transport.InstanceID) *Transport {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.nodes[id]
}

// Transport carries messages over TCP (on 127.0.0.1) and implements transport.RMA on its fabric.
type Transport struct {
	*tcp.Transport
	f    *Fabric
	name string
	self transport.InstanceID

	mu     sync.RWMutex
	peers  map[transport.InstanceID]bool
	regs   map[uint64]*registration   // live: not revoked
	all    map[*registration]struct{} // not dead yet
	nextID uint64

	// FailGets makes the next n GETs fail with ErrInjected.
	FailGets atomic.Int32
	// BeforeGet, when set, runs at the start of every GET (a test blocks here to let a lease expire).
	BeforeGet func(ctx context.Context)
	// DuringGet, when set, runs while a GET is in flight on the owner's registration, after the
	// key was checked and before the bytes are copied; ctx ends when the owner force-closes this
	// consumer. A test blocks here to play a consumer that stalled mid-GET.
	DuringGet func(ctx context.Context)
	// RegisterErr, when set, makes RegisterMemory fail with it.
	RegisterErr atomic.Pointer[error]

	last atomic.Pointer[GetArgs]

	Registrations   atomic.Int64 // RegisterMemory calls that succeeded
	Deregistrations atomic.Int64 // registrations revoked
	ForcedCloses    atomic.Int64 // ForceClosePeer calls
	Gets            atomic.Int64 // GETs that moved bytes
}

// New returns a transport named name ("ucx" to stand where the UCX transport would) on f.
func (f *Fabric) New(name string) (*Transport, error) {
	tr, err := tcp.New(tcp.Config{})
	if err != nil {
		return nil, err
	}
	return &Transport{Transport: tr, f: f, name: name, peers: map[transport.InstanceID]bool{}, regs: map[uint64]*registration{}, all: map[*registration]struct{}{}}, nil
}

// Name is the name given to New.
func (t *Transport) Name() string { return t.name }

// Start starts the TCP transport and joins the fabric under the host's ID.
func (t *Transport) Start(h transport.Host) error {
	if err := t.Transport.Start(h); err != nil {
		return err
	}
	t.self = h.LocalID()
	t.f.mu.Lock()
	t.f.nodes[t.self] = t
	t.f.mu.Unlock()
	return nil
}

// AddPeer registers the peer for messages and for GETs.
func (t *Transport) AddPeer(ctx context.Context, p transport.PeerAddress) error {
	if err := t.Transport.AddPeer(ctx, p); err != nil {
		return err
	}
	t.mu.Lock()
	t.peers[p.ID] = true
	t.mu.Unlock()
	return nil
}

// RemovePeer forgets the peer.
func (t *Transport) RemovePeer(id transport.InstanceID) {
	t.mu.Lock()
	delete(t.peers, id)
	t.mu.Unlock()
	t.Transport.RemovePeer(id)
}

// Close leaves the fabric, kills every key it handed out (GETs in flight on them are cancelled, as
// destroying a UCX worker does) and closes the TCP transport.
func (t *Transport) Close() error {
	t.mu.Lock()
	for r := range t.all {
		for g := range r.inflight {
			g.cancel()
		}
		if !r.revoked {
			r.revoked = true
			delete(t.regs, r.id)
			r.maybeDeadLocked()
		}
	}
	t.mu.Unlock()
	t.f.mu.Lock()
	if t.f.nodes[t.self] == t {
		delete(t.f.nodes, t.self)
	}
	t.f.mu.Unlock()
	return t.Transport.Close()
}

// LiveRegistrations is how many registrations are not deregistered yet.
func (t *Transport) LiveRegistrations() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.regs)
}

// RMABackend names the backend.
func (t *Transport) RMABackend() string { return t.name }

// CanGet reports whether peer was added here and is on the fabric.
func (t *Transport) CanGet(peer transport.InstanceID) bool {
	t.mu.RLock()
	ok := t.peers[peer]
	t.mu.RUnlock()
	return ok && t.f.node(peer) != nil
}

type registration struct {
	t     *Transport
	id    uint64
	token uint64
	mem   []byte
	dead  chan struct{}

	// Guarded by t.mu.
	revoked  bool
	inflight map[*inflightGet]struct{}
}

// inflightGet is one GET reading a registration, and how to cancel it.
type inflightGet struct {
	consumer transport.InstanceID
	cancel   context.CancelFunc
}

func (r *registration) Len() int              { return len(r.mem) }
func (r *registration) Dead() <-chan struct{} { return r.dead }

// Key is this fabric's key: the registration's id and its random token.
func (r *registration) Key() []byte {
	k := binary.LittleEndian.AppendUint64(nil, r.id)
	return binary.LittleEndian.AppendUint64(k, r.token)
}

// RangeKey is the key of the n bytes at off (transport.RangeKeyer): the registration's key and
// the part's bounds.
func (r *registration) RangeKey(off, n int) ([]byte, error) {
	if off < 0 || n <= 0 || off > len(r.mem)-n {
		return nil, fmt.Errorf("rdmatest: RangeKey: [%d, +%d) is not inside %d bytes", off, n, len(r.mem))
	}
	k := binary.LittleEndian.AppendUint64(r.Key(), uint64(off))
	return binary.LittleEndian.AppendUint64(k, uint64(n)), nil
}

// Revoke refuses later GETs with the key; Dead closes when no GET reads the region any more.
func (r *registration) Revoke(context.Context) error {
	r.t.mu.Lock()
	defer r.t.mu.Unlock()
	if r.revoked {
		return nil
	}
	r.revoked = true
	delete(r.t.regs, r.id)
	r.t.Deregistrations.Add(1)
	r.maybeDeadLocked()
	return nil
}

func (r *registration) maybeDeadLocked() {
	if r.revoked && len(r.inflight) == 0 {
		close(r.dead)
		delete(r.t.all, r)
	}
}

// LiveReads is how many GETs read this transport's registrations now.
func (t *Transport) LiveReads() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	n := 0
	for r := range t.all {
		n += len(r.inflight)
	}
	return n
}

// ForceClosePeer cancels every GET that peer has in flight on this transport's registrations.
func (t *Transport) ForceClosePeer(peer transport.InstanceID) error {
	t.ForcedCloses.Add(1)
	t.mu.RLock()
	defer t.mu.RUnlock()
	for r := range t.all {
		for g := range r.inflight {
			if g.consumer == peer {
				g.cancel()
			}
		}
	}
	return nil
}

// RegistersRuns implements transport.RunRegisterer: its registrations name their parts.
func (t *Transport) RegistersRuns() bool { return true }

// RegisterMemory registers mem under a fresh key.
func (t *Transport) RegisterMemory(mem []byte) (transport.Registration, error) {
	if p := t.RegisterErr.Load(); p != nil {
		return nil, *p
	}
	if len(mem) == 0 {
		return nil, errors.New("rdmatest: empty region")
	}
	var tok [8]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.nextID++
	r := &registration{t: t, id: t.nextID, token: binary.LittleEndian.Uint64(tok[:]) | 1, mem: mem,
		dead: make(chan struct{}), inflight: map[*inflightGet]struct{}{}}
	t.regs[r.id] = r
	t.all[r] = struct{}{}
	t.Registrations.Add(1)
	return r, nil
}

// GetArgs are the arguments of a GET, kept so a test can replay a descriptor after its lease ended.
type GetArgs struct {
	Peer   transport.InstanceID
	Key    []byte
	Offset uint64
	Len    int
}

// LastGet returns the arguments of the last GET attempted (nil before the first).
func (t *Transport) LastGet() *GetArgs { return t.last.Load() }

// Get reads from peer's registration named by key.
func (t *Transport) Get(ctx context.Context, peer transport.InstanceID, key []byte, offset uint64, dst []byte) error {
	t.last.Store(&GetArgs{Peer: peer, Key: append([]byte(nil), key...), Offset: offset, Len: len(dst)})
	if hook := t.BeforeGet; hook != nil {
		hook(ctx)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if !t.CanGet(peer) {
		return fmt.Errorf("rdmatest: %w: peer %016x is not on the fabric", transport.ErrPeerUnreachable, uint64(peer))
	}
	for n := t.FailGets.Load(); n > 0; n = t.FailGets.Load() {
		if t.FailGets.CompareAndSwap(n, n-1) {
			return ErrInjected
		}
	}
	if len(key) != 16 && len(key) != 32 {
		return fmt.Errorf("%w: key of %d bytes", ErrRevoked, len(key))
	}
	if len(key) == 32 {
		// A part's key (RangeKey): the offset is the part's, the range checked against it here
		// as the UCX binding does on the reader's side; the owner checks the registration's.
		base, n := binary.LittleEndian.Uint64(key[16:]), binary.LittleEndian.Uint64(key[24:])
		if uint64(len(dst)) > n || offset > n-uint64(len(dst)) {
			return fmt.Errorf("%w: [%d, +%d) of a %d-byte part", ErrOutOfRange, offset, len(dst), n)
		}
		offset += base
	}
	owner := t.f.node(peer)
	if owner == nil {
		return fmt.Errorf("rdmatest: %w", transport.ErrPeerUnreachable)
	}
	owner.mu.Lock()
	r := owner.regs[binary.LittleEndian.Uint64(key)]
	if r == nil || r.token != binary.LittleEndian.Uint64(key[8:]) {
		owner.mu.Unlock()
		return ErrRevoked
	}
	if uint64(len(dst)) > uint64(len(r.mem)) || offset > uint64(len(r.mem))-uint64(len(dst)) {
		owner.mu.Unlock()
		return fmt.Errorf("%w: [%d, +%d) of a %d-byte region", ErrOutOfRange, offset, len(dst), len(r.mem))
	}
	gctx, cancel := context.WithCancel(ctx)
	g := &inflightGet{consumer: t.self, cancel: cancel}
	r.inflight[g] = struct{}{}
	during := owner.DuringGet
	owner.mu.Unlock()
	defer func() {
		cancel()
		owner.mu.Lock()
		delete(r.inflight, g)
		r.maybeDeadLocked()
		owner.mu.Unlock()
	}()
	if during != nil {
		during(gctx)
	}
	if err := gctx.Err(); err != nil {
		return fmt.Errorf("rdmatest: GET cancelled: %w", err)
	}
	copy(dst, r.mem[offset:offset+uint64(len(dst))])
	t.Gets.Add(1)
	return nil
}

var (
	_ transport.Transport = (*Transport)(nil)
	_ transport.RMA       = (*Transport)(nil)
)
