package rendezvous

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/transport"
)

// StageOptions describe the memory a slot holds. The zero value is plain Go memory staged with
// StageData: the chunked path serves it and an RDMA offer is answered not_pinned.
type StageOptions struct {
	// Pinned is set for memory a PinnedPool handed out, which the same pool's RDMAServer can
	// register for a lease; nil for plain memory (the chunked path serves it).
	Pinned PinnedMemory
	// Reason is recorded for unpinned memory and answered to RDMA offers (default not_pinned;
	// pool_exhausted or budget when a pinned staging fell back to plain memory).
	Reason metrics.Reason
	// OnFree runs once when the slot is freed (last reference and last lease gone, nothing reading
	// it): the memory's owner gets it back there. Memory the store does not own must have one.
	OnFree func()
	// For and TTL mark a transient slot (transparent staging of a message for peer For): it is
	// freed once TTL has passed and no lease is open on it, or when For goes down.
	For transport.InstanceID
	TTL time.Duration
	// Memory is what the payload's memory is. A typed payload (device memory) is served by
	// chunks through the owner's bounce buffers, and registered with its type.
	Memory Memory
}

// Slot is what an RDMAServer sees of a slot when it serves a lease.
type Slot struct {
	ID    uint64
	Data  []byte
	Opts  StageOptions
	Lease LeaseInfo
}

// LeaseInfo names a lease.
type LeaseInfo struct {
	ID       uint64
	Consumer transport.InstanceID
}

type slot struct {
	id, nonce uint64
	data      []byte
	opts      StageOptions
	refs      int
	leases    int
	busy      int       // reads of data in flight (chunk writes)
	expires   time.Time // transient slots only, until first acquire
	freed     bool
}

type lease struct {
	id       uint64
	slot     *slot
	consumer transport.InstanceID
	granted  time.Time // for velo_rendezvous_lease_duration_seconds
	expires  time.Time
	onEnd    []func()
}

// store is the owner side: slots, references and leases. One mutex guards it all; every operation
// is a few table lookups, and the bytes themselves are never touched under it.
type store struct {
	self transport.InstanceID
	m    *metrics.Metrics
	ttl  time.Duration

	mu       sync.Mutex
	slots    idTable[slot]
	leases   idTable[lease]
	nextSlot uint64
	nextLse  uint64
	closed   bool
}

func newStore(self transport.InstanceID, m *metrics.Metrics, ttl time.Duration) *store {
	return &store{self: self, m: m, ttl: ttl}
}

func randomNonce() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("rendezvous: crypto/rand failed: " + err.Error()) // the runtime cannot hand out safe handles
	}
	return binary.BigEndian.Uint64(b[:]) | 1 // never zero
}

// stage puts data in a new slot with one reference.
func (s *store) stage(data []byte, o StageOptions) (Handle, error) {
	if o.Reason == "" {
		o.Reason = metrics.ReasonNotPinned
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return Handle{}, ErrClosed
	}
	s.nextSlot++
	sl := &slot{id: s.nextSlot, nonce: randomNonce(), data: data, opts: o, refs: 1}
	if o.TTL > 0 {
		sl.expires = time.Now().Add(o.TTL)
	}
	s.slots.put(sl.id, sl)
	s.m.ActiveSlots.Inc()
	s.m.StagedBytes.Add(float64(len(data)))
	return Handle{Owner: s.self, Slot: sl.id, Nonce: sl.nonce, Size: uint64(len(data))}, nil
}

// lookup finds the live slot h names. Callers hold mu.
func (s *store) lookupLocked(h Handle) (*slot, error) {
	if h.Owner != s.self {
		return nil, fmt.Errorf("%w: %v was sent to %016x", ErrForeignHandle, h, uint64(s.self))
	}
	if s.closed {
		return nil, ErrClosed
	}
	sl := s.slots.get(h.Slot)
	if sl == nil {
		if h.Slot >= 1 && h.Slot <= s.nextSlot {
			return nil, fmt.Errorf("%w: %v: its slot was freed", ErrReleased, h)
		}
		return nil, fmt.Errorf("%w: %v: no such slot", ErrBadHandle, h)
	}
	if sl.nonce != h.Nonce || uint64(len(sl.data)) != h.Size {
		return nil, fmt.Errorf("%w: %v does not match its slot", ErrBadHandle, h)
	}
	return sl, nil
}

// maybeFreeLocked frees sl once nothing refers to it; it returns the hook to run outside the lock.
func (s *store) maybeFreeLocked(sl *slot) func() {
	if sl.freed || sl.refs > 0 || sl.leases > 0 || sl.busy > 0 {
		return nil
	}
	sl.freed = true
	s.slots.del(sl.id)
	s.m.ActiveSlots.Dec()
	s.m.StagedBytes.Sub(float64(len(sl.data)))
	sl.data = nil
	return sl.opts.OnFree
}

func run(fs ...func()) {
	for _, f := range fs {
		if f != nil {
			f()
		}
	}
}

// ref adds one reference.
func (s *store) ref(h Handle) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	sl, err := s.lookupLocked(h)
	if err != nil {
		return err
	}
	sl.refs++
	return nil
}

// drop removes one reference (the slot is freed at zero, once its leases end).
func (s *store) drop(h Handle) error {
	s.mu.Lock()
	sl, err := s.lookupLocked(h)
	if err != nil {
		s.mu.Unlock()
		return err
	}
	if sl.refs == 0 {
		s.mu.Unlock()
		return fmt.Errorf("%w: %v has no reference left to drop", ErrReleased, h)
	}
	sl.refs--
	free := s.maybeFreeLocked(sl)
	s.mu.Unlock()
	run(free)
	return nil
}

type slotInfo struct {
	size          uint64
	refs, leases  int
	pinned        bool
	stagingReason metrics.Reason
}

func (s *store) metadata(h Handle) (slotInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sl, err := s.lookupLocked(h)
	if err != nil {
		return slotInfo{}, err
	}
	if sl.refs == 0 && sl.leases == 0 {
		// Released: only the write of its last chunk still reads it, a moment after the
		// consumer that released it got the bytes.
		return slotInfo{}, fmt.Errorf("%w: %v: every reference was released", ErrReleased, h)
	}
	return slotInfo{size: uint64(len(sl.data)), refs: sl.refs, leases: sl.leases, pinned: sl.opts.Pinned != nil, stagingReason: sl.opts.Reason}, nil
}

// newLease grants consumer a lease on h's slot and returns a view for the path decision.
func (s *store) newLease(h Handle, consumer transport.InstanceID) (Slot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out, _, err := s.leaseLocked(h, consumer, -1, time.Now(), &lease{})
	if err == nil {
		s.m.ActiveLeases.Inc()
	}
	return out, err
}

// leased is one handle's outcome in newLeases: the view of its lease, its slot when held for
// sending inline, or the error of that handle alone.
type leased struct {
	slot Slot
	held *slot
	err  error
}

// newLeases is newLease for the handles of a batch, each outcome in out (as long as hs), under one
// lock and with one allocation for their leases (freed once the last of them ends; an ended lease
// lets go of its slot and hooks). It also holds payloads for sending inline, as read does: in
// order, each payload of at most inlineMax bytes of host memory is held while the bytes held stay
// within budget (inlineMax 0: none is); unhold ends the holds once the bytes are sent.
func (s *store) newLeases(hs []Handle, consumer transport.InstanceID, inlineMax, budget int, out []leased) {
	leases := make([]lease, len(hs))
	granted := 0
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for i, h := range hs {
		holdMax := -1
		if inlineMax > 0 {
			holdMax = min(inlineMax, budget)
		}
		e := &out[i]
		if e.slot, e.held, e.err = s.leaseLocked(h, consumer, holdMax, now, &leases[i]); e.err != nil {
			continue
		}
		granted++
		if e.held != nil {
			budget -= len(e.slot.Data)
		}
	}
	s.m.ActiveLeases.Add(float64(granted))
}

// leaseLocked fills l as consumer's new lease on h's slot, granted at now, and holds the payload
// when it is at most holdMax bytes of host memory. The caller counts the lease in ActiveLeases.
func (s *store) leaseLocked(h Handle, consumer transport.InstanceID, holdMax int, now time.Time, l *lease) (_ Slot, held *slot, _ error) {
	sl, err := s.lookupLocked(h)
	if err != nil {
		return Slot{}, nil, err
	}
	if sl.refs == 0 {
		return Slot{}, nil, fmt.Errorf("%w: %v: every reference was released (its last lease is still ending)", ErrReleased, h)
	}
	s.nextLse++
	*l = lease{id: s.nextLse, slot: sl, consumer: consumer, granted: now, expires: now.Add(s.ttl)}
	s.leases.put(l.id, l)
	sl.leases++
	if len(sl.data) <= holdMax && !sl.opts.Memory.Typed() {
		sl.busy++
		held = sl
	}
	return Slot{ID: sl.id, Data: sl.data, Opts: sl.opts, Lease: LeaseInfo{ID: l.id, Consumer: consumer}}, held, nil
}

// unhold ends holds on slots' bytes (newLeases', read's), under one lock, and frees a
// slot nothing else keeps.
func (s *store) unhold(held []*slot) {
	if len(held) == 0 {
		return
	}
	var frees []func()
	s.mu.Lock()
	for _, sl := range held {
		sl.busy--
		if f := s.maybeFreeLocked(sl); f != nil {
			frees = append(frees, f)
		}
	}
	s.mu.Unlock()
	run(frees...)
}

// onLeaseEnd adds a hook that runs when the lease ends, however it ends. If the lease already
// ended, the hook runs at once.
func (s *store) onLeaseEnd(id uint64, f func()) {
	s.mu.Lock()
	l := s.leases.get(id)
	if l != nil {
		l.onEnd = append(l.onEnd, f)
	}
	s.mu.Unlock()
	if l == nil {
		f()
	}
}

// read pins the slot for a chunk write: it checks the lease and range, renews the lease, and
// returns the bytes and a done func that unpins them.
func (s *store) read(consumer transport.InstanceID, leaseID, off uint64, n uint32, maxChunk int) ([]byte, Memory, func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, Memory{}, nil, ErrClosed
	}
	l := s.leases.get(leaseID)
	if l == nil || l.consumer != consumer {
		return nil, Memory{}, nil, fmt.Errorf("%w: lease %d is not held by %016x", ErrBadLease, leaseID, uint64(consumer))
	}
	size := uint64(len(l.slot.data))
	if n == 0 || int(n) > maxChunk || off > size || uint64(n) > size-off {
		return nil, Memory{}, nil, fmt.Errorf("%w: pull of %d bytes at %d from a %d-byte slot (chunk limit %d)", ErrProtocol, n, off, size, maxChunk)
	}
	l.expires = time.Now().Add(s.ttl)
	sl := l.slot
	sl.busy++
	return sl.data[off : off+uint64(n)], sl.opts.Memory, func() { s.unhold([]*slot{sl}) }, nil
}

// endLease ends a lease the consumer holds: detach keeps the reference, release drops it.
func (s *store) endLease(consumer transport.InstanceID, leaseID uint64, release bool) error {
	s.mu.Lock()
	l := s.leases.get(leaseID)
	if l == nil || l.consumer != consumer {
		s.mu.Unlock()
		return fmt.Errorf("%w: lease %d is not held by %016x", ErrBadLease, leaseID, uint64(consumer))
	}
	end := metrics.LeaseDetached
	if release {
		end = metrics.LeaseReleased
		if l.slot.refs > 0 {
			l.slot.refs--
		}
	}
	hooks := s.endLocked(l, end)
	s.mu.Unlock()
	run(hooks...)
	return nil
}

// endLocked is the one place a lease ends (release, detach, TTL, peer down, shutdown), so it is
// where the lease's lifetime is observed, under how it ended. It returns the hooks to run outside
// the lock: the lease's own (an RDMA registration revoke) and the slot's free hook when this was
// the last thing holding it.
func (s *store) endLocked(l *lease, end metrics.LeaseEnd) []func() {
	s.leases.del(l.id)
	l.slot.leases--
	s.m.ActiveLeases.Dec()
	s.m.ObserveLease(end, time.Since(l.granted))
	hooks := append(l.onEnd, s.maybeFreeLocked(l.slot))
	l.onEnd, l.slot = nil, nil // its batch's allocation may outlive it
	return hooks
}

// reap ends expired leases and frees transient slots whose TTL passed with no lease open on them.
func (s *store) reap(now time.Time) {
	var hooks []func()
	s.mu.Lock()
	s.leases.each(func(l *lease) {
		if now.After(l.expires) {
			hooks = append(hooks, s.endLocked(l, metrics.LeaseExpired)...)
			s.m.LeaseReaped("ttl")
		}
	})
	s.slots.each(func(sl *slot) {
		if sl.opts.TTL > 0 && sl.leases == 0 && now.After(sl.expires) {
			sl.refs = 0
			hooks = append(hooks, s.maybeFreeLocked(sl))
		}
	})
	s.mu.Unlock()
	run(hooks...)
}

// peerDown ends every lease peer holds and frees transient slots staged for it.
func (s *store) peerDown(peer transport.InstanceID) int {
	var hooks []func()
	n := 0
	s.mu.Lock()
	s.leases.each(func(l *lease) {
		if l.consumer == peer {
			hooks = append(hooks, s.endLocked(l, metrics.LeasePeerDown)...)
			s.m.LeaseReaped("peer_down")
			n++
		}
	})
	s.slots.each(func(sl *slot) {
		if sl.opts.TTL > 0 && sl.opts.For == peer {
			sl.refs = 0
			hooks = append(hooks, s.maybeFreeLocked(sl))
		}
	})
	s.mu.Unlock()
	run(hooks...)
	return n
}

// close ends every lease and frees every slot that nothing is reading.
func (s *store) close() {
	var hooks []func()
	s.mu.Lock()
	s.closed = true
	s.leases.each(func(l *lease) {
		hooks = append(hooks, s.endLocked(l, metrics.LeaseShutdown)...)
		s.m.LeaseReaped("shutdown")
	})
	s.slots.each(func(sl *slot) {
		sl.refs = 0
		hooks = append(hooks, s.maybeFreeLocked(sl))
	})
	s.mu.Unlock()
	run(hooks...)
}

// counts reports live slots and leases (tests and Stats).
func (s *store) counts() (slots, leases int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.slots.len(), s.leases.len()
}
