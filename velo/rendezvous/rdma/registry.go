package rdma

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/rendezvous"
	"github.com/velo-go/velo/velo/transport"
	"github.com/velo-go/velo/verbs"

	"github.com/velo-go/velo/velo/internal/fanout"
)

// Options are what the runtime hands the registry besides its Config.
type Options struct {
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// Registerer receives the registry's gauges (nil: not registered anywhere).
	Registerer prometheus.Registerer
	// KillSwitch is the value of VELO_RDMA_RENDEZVOUS_DISABLE read at startup; the runtime reads
	// the environment once and passes it here, so a registry never sees the variable change.
	KillSwitch bool
	// LeaseTTL is the lease TTL of the rendezvous service; Config.ForceCloseAfter defaults to
	// DefaultForceCloseTTLs of it.
	LeaseTTL time.Duration
}

// Registry is one instance's RDMA registry. It implements rendezvous.RDMAServer (owner side),
// rendezvous.RDMAClient (consumer side) and rendezvous.PinnedPool (pinned staging). All methods
// are safe for concurrent use.
type Registry struct {
	rma      transport.RMA
	backend  string
	disabled bool
	why      string // what disabled it, for logs
	log      *slog.Logger
	pool     *pool
	g        *gauges

	forceAfter time.Duration
	legacy     legacyOwners // owners that refused offer version 3

	mu         sync.Mutex
	leases     map[*leaseReg]struct{}
	quarantine map[*leaseReg]struct{}
	closed     bool
	stop       chan struct{}
	wg         sync.WaitGroup // the reclaimer
	qwg        sync.WaitGroup // quarantine watchers
}

// leaseReg is one registration and the leases whose keys it backs: one lease's slot, or a run
// of neighbouring slots leased to one consumer in one batch (ServeMany), each lease with the key
// of its own slot. It is revoked when the last of those leases ends.
type leaseReg struct {
	reg     transport.Registration
	slots   []registrable
	bytes   int
	peer    transport.InstanceID // the consumer the keys were sent to
	lease   uint64               // the first lease (for logs)
	holders int                  // leases not yet ended; guarded by Registry.mu
	once    sync.Once
}

var (
	_ rendezvous.RDMAServer     = (*Owner)(nil)
	_ rendezvous.RDMAManyServer = (*Owner)(nil)
	_ rendezvous.RDMAClient     = (*Consumer)(nil)
	_ rendezvous.PathReporter   = (*Owner)(nil)
	_ rendezvous.PathReporter   = (*Consumer)(nil)
	_ rendezvous.PinnedPool     = (*Registry)(nil)
)

// New creates the registry over rma. It maps nothing yet: the first arena is mapped by the first
// pinned staging (StageDataPinned) or pinned consumer buffer (GetPinned).
func New(rma transport.RMA, cfg Config, o Options) (*Registry, error) {
	if rma == nil {
		return nil, errors.New("rdma: New: nil RMA")
	}
	pc, err := cfg.Pool.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.ForceCloseAfter < 0 {
		return nil, fmt.Errorf("rdma: ForceCloseAfter %v is negative", cfg.ForceCloseAfter)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	g, err := newGauges(o.Registerer)
	if err != nil {
		return nil, err
	}
	forceAfter := cfg.ForceCloseAfter
	if forceAfter == 0 {
		ttl := o.LeaseTTL
		if ttl <= 0 {
			ttl = DefaultLeaseTTL
		}
		forceAfter = DefaultForceCloseTTLs * ttl
	}
	r := &Registry{rma: rma, backend: rma.RMABackend(), log: o.Logger, g: g, forceAfter: forceAfter,
		leases: map[*leaseReg]struct{}{}, quarantine: map[*leaseReg]struct{}{}, stop: make(chan struct{})}
	switch {
	case cfg.Disabled:
		r.disabled, r.why = true, "RDMAConfig.Disabled"
	case o.KillSwitch:
		r.disabled, r.why = true, KillSwitchEnv
	}
	r.pool = newPool(pc, r.log, g)
	r.pool.mapper, _ = rma.(transport.PayloadMapper)
	if r.disabled {
		r.log.Info("rdma: the RDMA rendezvous path is switched off; every transfer takes the chunked path (reason kill_switch)", "by", r.why)
	} else if err := verbs.CheckMemlock(uint64(pc.ArenaSize)); err != nil && errors.Is(err, verbs.ErrMemlock) {
		r.log.Warn("rdma: the first pinned arena will not fit the memlock limit; pinned staging will fall back to plain memory and transfers to the chunked path (reason pool_exhausted)",
			"arena_bytes", pc.ArenaSize, "err", err)
	}
	if pc.ArenaReclaimAfter > 0 {
		r.wg.Add(1)
		go r.reclaimer(pc.ArenaReclaimAfter)
	}
	return r, nil
}

func (r *Registry) reclaimer(after time.Duration) {
	defer r.wg.Done()
	tk := time.NewTicker(max(after/2, 10*time.Millisecond))
	defer tk.Stop()
	for {
		select {
		case <-r.stop:
			return
		case now := <-tk.C:
			if n := r.pool.reclaim(now); n > 0 {
				r.log.Debug("rdma: unmapped idle arenas", "arenas", n)
			}
		}
	}
}

// Backend names the RMA backend ("ucx").
func (r *Registry) Backend() string { return r.backend }

// KillSwitch reports whether the RDMA path is switched off here.
func (r *Registry) KillSwitch() bool { return r.disabled }

// pathRefusal is the transport's reason for not reaching peer, when it gives one
// (transport.PathRefuser) and it is a chunked-path reason; else "".
func (r *Registry) pathRefusal(peer transport.InstanceID) metrics.Reason {
	pr, ok := r.rma.(transport.PathRefuser)
	if !ok {
		return ""
	}
	if why := metrics.Reason(pr.PathRefusal(peer)); metrics.Valid(metrics.PathChunked, why) {
		return why
	}
	return ""
}

// The registry plays three parts in the rendezvous protocol. It is itself the pool that stages
// payloads in pinned memory (rendezvous.PinnedPool); the owner that registers a slot for one lease
// and the consumer that reads a lease with one GET are views of it, so that each interface has
// one implementation a reader can find. The views share the registry's state (pool, budget,
// leases).

// Owner is the registry's owner side, as rendezvous.RDMAServer.
func (r *Registry) Owner() *Owner { return &Owner{r} }

// Consumer is the registry's consumer side, as rendezvous.RDMAClient.
func (r *Registry) Consumer() *Consumer { return &Consumer{r} }

// Owner serves leases: it registers exactly a slot's pages for one consumer (the pages of a run
// of its slots, for a batch; see runs).
type Owner struct{ r *Registry }

// Backend names the RMA backend whose offers it answers.
func (o *Owner) Backend() string { return o.r.backend }

// KillSwitch reports whether the RDMA path is switched off on this owner.
func (o *Owner) KillSwitch() bool { return o.r.disabled }

// PathRefusal says why the RMA transport does not reach consumer (rendezvous.PathRefuser).
func (o *Owner) PathRefusal(consumer transport.InstanceID) metrics.Reason {
	return o.r.pathRefusal(consumer)
}

// Consumer reads leases by one GET each.
type Consumer struct{ r *Registry }

// Backend names the RMA backend it reads with.
func (c *Consumer) Backend() string { return c.r.backend }

// KillSwitch reports whether the RDMA path is switched off on this consumer.
func (c *Consumer) KillSwitch() bool { return c.r.disabled }

// ---------------------------------------------------------------------------- pinned staging

// Pin implements rendezvous.PinnedPool.
func (r *Registry) Pin(n int, mayMap bool) ([]byte, rendezvous.StageOptions) {
	if r.disabled {
		return nil, rendezvous.StageOptions{Reason: metrics.ReasonKillSwitch}
	}
	s, reason, err := r.pool.allocPayload(n, mayMap)
	if err != nil {
		switch {
		case isMapFailure(err):
			r.log.Warn("rdma: no pinned memory; staging in plain memory, transfers of it take the chunked path", "reason", reason, "err", err)
		case errors.Is(err, ErrBudget):
			r.log.Info("rdma: registered-bytes budget spent; staging in plain memory", "reason", reason, "err", err)
		default:
			r.log.Debug("rdma: staging in plain memory", "reason", reason, "err", err)
		}
		return nil, rendezvous.StageOptions{Reason: reason}
	}
	return s.Bytes(), rendezvous.StageOptions{Pinned: s, OnFree: func() { r.pool.free(s) }}
}

// Buffer is pinned memory a consumer fetched a payload into (velo's GetPinned). Free gives it
// back; Bytes must not be used afterwards.
type Buffer struct {
	s    *Slot
	once sync.Once
}

// Bytes is the buffer's memory.
func (b *Buffer) Bytes() []byte { return b.s.Bytes() }

// Free returns the memory to the pool. It is idempotent.
func (b *Buffer) Free() { b.once.Do(func() { b.s.p.free(b.s) }) }

// AllocBuffer returns n bytes of pinned memory, mapping an arena when none has room. It fails
// with an error wrapping ErrBudget, ErrArenaMap (ErrMemlock) or ErrClosed, naming the fix.
func (r *Registry) AllocBuffer(n int) (*Buffer, error) {
	s, _, err := r.pool.alloc(n, true)
	if err != nil {
		return nil, err
	}
	return &Buffer{s: s}, nil
}

// ---------------------------------------------------------------------------- owner side

// Serve implements rendezvous.RDMAServer: it registers exactly the slot's pages for one lease and
// returns the descriptor and the hook that revokes the registration when the lease ends.
func (o *Owner) Serve(ctx context.Context, sl rendezvous.Slot, offer []byte) ([]byte, func(), metrics.Reason, error) {
	sv := o.ServeMany(ctx, []rendezvous.Slot{sl}, offer)[0]
	return sv.Descriptor, sv.OnLeaseEnd, sv.Reason, sv.Err
}

// ServeMany implements rendezvous.RDMAManyServer: Serve for the slots of one batch of leases,
// each with a key of its own, registered in one call where the transport can
// (transport.ManyRegisterer). Neighbouring slots of one consumer share one registration (runs).
func (o *Owner) ServeMany(ctx context.Context, slots []rendezvous.Slot, offer []byte) []rendezvous.Served {
	r := o.r
	out := make([]rendezvous.Served, len(slots))
	version, err := wire.RDMAOfferVersionOf(offer)
	if err != nil {
		for i := range out {
			out[i] = rendezvous.Served{Reason: metrics.ReasonDecodeError, Err: fmt.Errorf("rdma: %w: %w", ErrDescriptor, err)}
		}
		return out
	}
	// Reserve each slot's bytes and hold its pages, then register what passed.
	mems := make([]registrable, len(slots))
	var regions [][]byte
	var idx []int
	for i, sl := range slots {
		s, ok := sl.Opts.Pinned.(registrable)
		if !ok || s == nil || !s.of(r) {
			out[i] = rendezvous.Served{Reason: metrics.ReasonNotPinned, Err: fmt.Errorf("rdma: slot %d is not in this registry's pinned memory", sl.ID)}
			continue
		}
		if why := r.typedRefusal(s.memory(), version); why != "" {
			out[i] = rendezvous.Served{Reason: metrics.ReasonDeviceBounce, Err: fmt.Errorf("rdma: slot %d is %v memory and %s: serving it by chunks through host bounce buffers", sl.ID, s.memory().Type, why)}
			continue
		}
		region := s.PinnedRegion()
		if err := r.pool.reserve(len(region)); err != nil {
			out[i] = rendezvous.Served{Reason: metrics.ReasonBudget, Err: err}
			continue
		}
		if err := s.holdReg(); err != nil {
			r.pool.unreserve(len(region))
			out[i] = rendezvous.Served{Reason: metrics.ReasonPoolExhausted, Err: err}
			continue
		}
		mems[i] = s
		regions = append(regions, region)
		idx = append(idx, i)
	}
	consumers := make([]transport.InstanceID, len(idx))
	for k, i := range idx {
		consumers[k] = slots[i].Lease.Consumer
	}
	units := r.runs(mems, regions, idx, consumers)
	unitRegions := make([][]byte, len(units))
	unitConsumers := make([]transport.InstanceID, len(units))
	unitMems := make([]registrable, len(units))
	for u, un := range units {
		unitRegions[u], unitConsumers[u], unitMems[u] = un.region, consumers[un.first], mems[idx[un.first]]
	}
	regs, errs := r.register(unitRegions, unitConsumers, unitMems)
	for u, un := range units {
		members := idx[un.first : un.first+un.n]
		if errs[u] != nil {
			for _, i := range members {
				r.pool.unreserve(len(mems[i].PinnedRegion()))
				mems[i].dropReg()
				out[i] = rendezvous.Served{Reason: metrics.ReasonBudget, Err: fmt.Errorf("rdma: registering %s for lease %d: %w", verbs.FormatBytes(uint64(len(un.region))), slots[i].Lease.ID, errs[u])}
			}
			continue
		}
		lr := &leaseReg{reg: regs[u], bytes: len(un.region), peer: unitConsumers[u], lease: slots[members[0]].Lease.ID, holders: un.n}
		for _, i := range members {
			lr.slots = append(lr.slots, mems[i])
		}
		keys, err := runKeys(lr.reg, regions[un.first:un.first+un.n])
		if err == nil {
			for j, i := range members {
				out[i].Descriptor, err = wire.AppendRDMADescriptor(nil, wire.RDMADescriptor{Version: wire.DescriptorVersionFor(version), Memory: uint8(mems[i].memory().Type), Key: keys[j]})
				if err != nil {
					break
				}
			}
		}
		if err != nil {
			r.revoke(lr)
			for _, i := range members {
				out[i] = rendezvous.Served{Reason: metrics.ReasonDecodeError, Err: fmt.Errorf("rdma: %w: %w", ErrDescriptor, err)}
			}
			continue
		}
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			r.revoke(lr)
			for _, i := range members {
				out[i] = rendezvous.Served{Reason: metrics.ReasonPoolExhausted, Err: ErrClosed}
			}
			continue
		}
		r.leases[lr] = struct{}{}
		r.g.leaseRegs.Inc()
		r.g.leaseBytes.Add(float64(lr.bytes))
		r.mu.Unlock()
		for _, i := range members {
			var once sync.Once
			out[i].OnLeaseEnd, out[i].Reason = func() { once.Do(func() { r.leaseEnded(lr) }) }, metrics.ReasonOK
		}
	}
	return out
}

// regUnit is what one registration of ServeMany covers: the regions regions[first:first+n] of
// one call, as one region. head and tail are its first and last pool slots (nil for memory that
// is not a pool slot, which is always alone).
type regUnit struct {
	first, n   int
	region     []byte
	head, tail *Slot
}

// runs cuts the regions of one ServeMany (regions[k], of slot mems[idx[k]], leased to
// consumers[k]) into what is registered once. Pool slots that follow each other in one arena,
// leased to one consumer, form a run, registered as one region where the transport can name
// the parts of a registration (transport.RunRegisterer): a batch of blocks staged one after
// another then costs one registration and one revocation instead of one per block (on
// InfiniBand, one ibv_reg_mr for the run). Each lease still gets a key naming its own slot, but
// that key reaches the whole run: the run's slots are all this consumer's, leased in the same
// answer, and the run's pages stay out of use until its registration is dead, which is when the
// last of its leases ends. Anything else is registered alone.
func (r *Registry) runs(mems []registrable, regions [][]byte, idx []int, consumers []transport.InstanceID) []regUnit {
	units := make([]regUnit, 0, len(regions))
	rr, ok := r.rma.(transport.RunRegisterer)
	joins := ok && rr.RegistersRuns()
	for k := range regions {
		cur, _ := mems[idx[k]].(*Slot)
		if n := len(units); joins && n > 0 && cur != nil && consumers[k] == consumers[k-1] {
			u := &units[n-1]
			if t := u.tail; t != nil && t.a == cur.a && t.start+t.pages == cur.start {
				off, end := u.head.start*pageSize, (cur.start+cur.pages)*pageSize
				u.region, u.tail = cur.a.mem[off:end:end], cur
				u.n++
				continue
			}
		}
		units = append(units, regUnit{first: k, n: 1, region: regions[k], head: cur, tail: cur})
	}
	return units
}

// runKeys is the key of each part of reg, whose region is the parts laid end to end: reg's own
// key for a registration of one part.
func runKeys(reg transport.Registration, parts [][]byte) ([][]byte, error) {
	if len(parts) == 1 {
		return [][]byte{reg.Key()}, nil
	}
	rk, ok := reg.(transport.RangeKeyer)
	if !ok {
		return nil, fmt.Errorf("the transport said it registers runs, but its registration cannot name a part of itself")
	}
	keys := make([][]byte, len(parts))
	off := 0
	for j, p := range parts {
		k, err := rk.RangeKey(off, len(p))
		if err != nil {
			return nil, err
		}
		keys[j] = k
		off += len(p)
	}
	return keys, nil
}

// register registers each region with its own key: in one call where the transport can. A
// transport whose keys depend on the reader (transport.PeerRegisterer: several rails) is told
// the consumer of each region's lease, in one call per consumer (one acquire's leases are all
// one consumer's).
//
// Typed regions (memory the caller described: mems[k]) are registered one by one with their
// memory type (transport.MemoryRMA), the others as before.
func (r *Registry) register(regions [][]byte, consumers []transport.InstanceID, mems []registrable) ([]transport.Registration, []error) {
	if len(regions) == 0 {
		return nil, nil
	}
	var plain [][]byte
	var plainConsumers []transport.InstanceID
	var at []int
	regs := make([]transport.Registration, len(regions))
	errs := make([]error, len(regions))
	for k := range regions {
		if m := mems[k].memory(); m.Typed() {
			regs[k], errs[k] = r.registerTyped(regions[k], consumers[k], m)
			continue
		}
		plain, plainConsumers, at = append(plain, regions[k]), append(plainConsumers, consumers[k]), append(at, k)
	}
	if len(plain) == 0 {
		return regs, errs
	}
	pr, pe := r.registerPlain(plain, plainConsumers)
	for j, k := range at {
		regs[k], errs[k] = pr[j], pe[j]
	}
	return regs, errs
}

// registerPlain registers host regions, each with its own key.
func (r *Registry) registerPlain(regions [][]byte, consumers []transport.InstanceID) ([]transport.Registration, []error) {
	if pr, ok := r.rma.(transport.PeerRegisterer); ok {
		regs := make([]transport.Registration, len(regions))
		errs := make([]error, len(regions))
		done := make([]bool, len(regions))
		for k := range regions {
			if done[k] {
				continue
			}
			var group [][]byte
			var at []int
			for j := k; j < len(regions); j++ {
				if !done[j] && consumers[j] == consumers[k] {
					group, at, done[j] = append(group, regions[j]), append(at, j), true
				}
			}
			gr, ge := pr.RegisterMemoryFor(consumers[k], group)
			for n, j := range at {
				regs[j], errs[j] = gr[n], ge[n]
			}
		}
		return regs, errs
	}
	return transport.RegisterEach(r.rma, regions)
}

// leaseEnded is one lease of lr ending: the last one ends the registration.
func (r *Registry) leaseEnded(lr *leaseReg) {
	r.mu.Lock()
	lr.holders--
	last := lr.holders <= 0
	r.mu.Unlock()
	if last {
		r.endLease(lr)
	}
}

// endLease ends lr's registration, whatever leases it still backs (the last lease ended, or the
// registry closes).
func (r *Registry) endLease(lr *leaseReg) {
	r.mu.Lock()
	_, live := r.leases[lr]
	delete(r.leases, lr)
	r.mu.Unlock()
	if live {
		r.g.leaseRegs.Dec()
		r.g.leaseBytes.Sub(float64(lr.bytes))
	}
	r.revoke(lr)
}

// revokeTimeout bounds handing a revocation to the transport (the UCX engine takes it in
// microseconds; a transport that does not take it within this is stuck, and the key is retried).
const revokeTimeout = 5 * time.Second

// revoke revokes lr's key once. When the transport confirms at once that nothing can read the
// region any more, its bytes and its slot's pages are given back now; otherwise the
// registration is quarantined until the transport confirms it (see watch).
func (r *Registry) revoke(lr *leaseReg) {
	lr.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), revokeTimeout)
		err := lr.reg.Revoke(ctx)
		cancel()
		if err == nil {
			select {
			case <-lr.reg.Dead():
				r.released(lr, false)
				return
			default:
			}
		}
		r.quarantineReg(lr, err)
	})
}

// quarantineReg keeps a registration whose key may still be read: its slot's pages stay mapped
// and out of use and its bytes stay counted against the budget, until watch sees it dead.
func (r *Registry) quarantineReg(lr *leaseReg, revokeErr error) {
	r.mu.Lock()
	r.quarantine[lr] = struct{}{}
	r.qwg.Add(1)
	r.mu.Unlock()
	r.g.quarantined.Inc()
	r.g.quarantinedBytes.Add(float64(lr.bytes))
	if revokeErr != nil {
		r.log.Error("rdma: a lease's key could not be revoked yet; its memory is quarantined and the revocation retried",
			"lease", lr.lease, "consumer", fmt.Sprintf("%016x", uint64(lr.peer)), "bytes", lr.bytes, "err", revokeErr)
	} else {
		r.log.Info("rdma: a revoked key's read is still in flight; its memory is quarantined until the read ends",
			"lease", lr.lease, "consumer", fmt.Sprintf("%016x", uint64(lr.peer)), "bytes", lr.bytes, "force_close_after", r.forceAfter)
	}
	go r.watch(lr, revokeErr == nil)
}

// watch waits for a quarantined registration to die. While its revocation has not been taken it
// retries it; once the consumer has held the read for forceAfter it closes the consumer's
// endpoints with force, which cancels the read, and repeats that every forceAfter for as long as
// the transport has not confirmed the key dead. The memory is never given back before that.
func (r *Registry) watch(lr *leaseReg, revoked bool) {
	defer r.qwg.Done()
	force := time.NewTimer(r.forceAfter)
	defer force.Stop()
	retry := time.NewTicker(time.Second)
	defer retry.Stop()
	for {
		select {
		case <-lr.reg.Dead():
			r.released(lr, true)
			return
		case <-retry.C:
			if !revoked {
				ctx, cancel := context.WithTimeout(context.Background(), revokeTimeout)
				revoked = lr.reg.Revoke(ctx) == nil
				cancel()
			}
		case <-force.C:
			r.g.forced.Inc()
			r.log.Warn("rdma: a consumer held a revoked key's read past the bound; closing its endpoints with force",
				"lease", lr.lease, "consumer", fmt.Sprintf("%016x", uint64(lr.peer)), "bytes", lr.bytes, "after", r.forceAfter)
			if err := r.rma.ForceClosePeer(lr.peer); err != nil {
				r.log.Error("rdma: force-closing the consumer's endpoints failed; the memory stays quarantined", "consumer", fmt.Sprintf("%016x", uint64(lr.peer)), "err", err)
			}
			force.Reset(r.forceAfter)
		}
	}
}

// released gives back what a dead registration held: its bytes against the budget and its hold
// on the slot's pages.
func (r *Registry) released(lr *leaseReg, quarantined bool) {
	if quarantined {
		r.mu.Lock()
		delete(r.quarantine, lr)
		r.mu.Unlock()
		r.g.quarantined.Dec()
		r.g.quarantinedBytes.Sub(float64(lr.bytes))
		r.log.Info("rdma: a quarantined registration is dead; its memory is back in use", "lease", lr.lease, "bytes", lr.bytes)
	}
	r.pool.unreserve(lr.bytes)
	for _, s := range lr.slots {
		s.dropReg()
	}
}

// ---------------------------------------------------------------------------- consumer side

// CanGet reports whether owner is registered on the RMA transport.
func (c *Consumer) CanGet(owner transport.InstanceID) bool { return c.r.rma.CanGet(owner) }

// PathRefusal says why the RMA transport does not reach owner (rendezvous.PathRefuser).
func (c *Consumer) PathRefusal(owner transport.InstanceID) metrics.Reason {
	return c.r.pathRefusal(owner)
}

// Offer returns the backend-specific part of an offer: version 3 (descriptors of version 2 and
// 3), or version 2 to an owner that refused version 3 (OfferRefused).
func (c *Consumer) Offer(owner transport.InstanceID) ([]byte, error) {
	if c.r.legacy.is(owner) {
		return wire.AppendRDMAOfferVersion(nil, wire.RDMALegacyOfferVersion), nil
	}
	return wire.AppendRDMAOffer(nil), nil
}

// Get reads the lease's first len(dst) bytes into dst with one GET. The key inside the
// descriptor is the backend's; it is checked, with the range, by the backend alone.
func (c *Consumer) Get(ctx context.Context, owner transport.InstanceID, descriptor []byte, dst []byte) error {
	r := c.r
	d, err := wire.DecodeRDMADescriptor(descriptor)
	if err != nil {
		return fmt.Errorf("rdma: %w: %w", ErrDescriptor, err)
	}
	return r.rma.Get(ctx, owner, d.Key, 0, dst)
}

// GetMany reads many ranges of many leases of one owner. Each distinct descriptor is decoded
// once; a transport that posts many reads in one call (transport.ManyReader: the UCX transport)
// gets them all, and any other gets one Get per read, window at a time.
func (c *Consumer) GetMany(ctx context.Context, owner transport.InstanceID, reads []rendezvous.RemoteRead, window int, done func(i int, err error)) {
	window = max(window, 1)
	var mu sync.Mutex
	report := func(i int, err error) {
		mu.Lock()
		defer mu.Unlock()
		if done != nil {
			done(i, err)
		}
	}
	keys := map[string][]byte{}
	tr := make([]transport.Read, 0, len(reads))
	index := make([]int, 0, len(reads))
	var typed []int // reads into typed memory: one typed GET each (tr[j] for j in typed)
	for i, rd := range reads {
		key, ok := keys[string(rd.Descriptor)]
		if !ok {
			d, err := wire.DecodeRDMADescriptor(rd.Descriptor)
			if err == nil {
				key = d.Key
			}
			keys[string(rd.Descriptor)] = key
			if err != nil {
				report(i, fmt.Errorf("rdma: %w: %w", ErrDescriptor, err))
				continue
			}
		}
		if key == nil {
			report(i, fmt.Errorf("rdma: %w: the descriptor failed to decode", ErrDescriptor))
			continue
		}
		if rd.Memory.Typed() {
			typed = append(typed, len(tr))
		}
		tr = append(tr, transport.Read{Key: key, Offset: rd.Offset, Dst: rd.Dst, Memory: rd.Memory.Type})
		index = append(index, i)
	}
	if len(tr) == 0 {
		return
	}
	if mr, ok := c.r.rma.(transport.MemoryRMA); ok && mr.ReadsTypedMany() && isManyReader(c.r.rma) {
		typed = nil // the transport's batch read takes them with their types
	}
	if len(typed) > 0 {
		// Reads into typed memory go one typed GET each, window at a time (the vectored read of
		// the transport reads into host memory only); the host reads of the call follow.
		mr, ok := c.r.rma.(transport.MemoryRMA)
		isTyped := make([]bool, len(tr))
		for _, j := range typed {
			isTyped[j] = true
		}
		fanout.Each(len(typed), window, func(n int) {
			j := typed[n]
			err := ctx.Err()
			if err == nil && !ok {
				err = fmt.Errorf("rdma: %w: the %s transport reads into host memory only", ErrUnsupportedMemory, c.r.backend)
			}
			if err == nil {
				err = mr.GetMemory(ctx, owner, tr[j].Key, tr[j].Offset, tr[j].Dst, reads[index[j]].Memory.Type)
			}
			report(index[j], err)
		})
		var htr []transport.Read
		var hindex []int
		for j := range tr {
			if !isTyped[j] {
				htr, hindex = append(htr, tr[j]), append(hindex, index[j])
			}
		}
		if len(htr) == 0 {
			return
		}
		tr, index = htr, hindex
	}
	if mr, ok := c.r.rma.(transport.ManyReader); ok {
		mr.ReadMany(ctx, owner, tr, window, func(j int, err error) { report(index[j], err) })
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < min(window, len(tr)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				j := int(next.Add(1) - 1)
				if j >= len(tr) {
					return
				}
				err := ctx.Err()
				if err == nil {
					err = c.r.rma.Get(ctx, owner, tr[j].Key, tr[j].Offset, tr[j].Dst)
				}
				report(index[j], err)
			}
		}()
	}
	wg.Wait()
}

// ---------------------------------------------------------------------------- state

// Stats is what the registry holds now.
type Stats struct {
	// Arenas and ArenaBytes: mapped arenas (pooled and oversized) and their bytes.
	Arenas     int
	ArenaBytes int64
	// Slots: pinned slots handed out (staged payloads and consumer buffers) not yet freed.
	Slots int
	// LeaseRegistrations and LeaseBytes: live registrations of leases (one per lease, or one per
	// run of neighbouring slots leased in one batch) and the bytes they cover.
	LeaseRegistrations int
	LeaseBytes         int64
	// QuarantinedRegistrations and QuarantinedBytes: registrations whose lease ended but whose
	// key may still be read (a read was in flight when it was revoked); their bytes still count
	// against the budget, and their slots' pages stay out of use, until the transport confirms
	// them dead.
	QuarantinedRegistrations int
	QuarantinedBytes         int64
	// HeldSlots: slots their owner freed whose pages a quarantined registration still holds.
	HeldSlots int
	// PinnedBytes is what counts against the budget: ArenaBytes plus LeaseBytes plus
	// QuarantinedBytes.
	PinnedBytes int64
	// Budget is RegisteredBytesBudget.
	Budget int64
	// LastArenaError is the last arena map failure (a memlock limit, typically), nil if none.
	LastArenaError error
}

// Stats reports the registry's state.
func (r *Registry) Stats() Stats {
	ps := r.pool.stats()
	r.mu.Lock()
	n := len(r.leases)
	var lb, qb int64
	for lr := range r.leases {
		lb += int64(lr.bytes)
	}
	for lr := range r.quarantine {
		qb += int64(lr.bytes)
	}
	nq := len(r.quarantine)
	r.mu.Unlock()
	return Stats{Arenas: ps.arenas, ArenaBytes: ps.arenaBytes, Slots: ps.slots, LeaseRegistrations: n, LeaseBytes: lb,
		QuarantinedRegistrations: nq, QuarantinedBytes: qb, HeldSlots: ps.held,
		PinnedBytes: ps.pinned, Budget: r.pool.cfg.RegisteredBytesBudget, LastArenaError: ps.lastFail}
}

// Close revokes any registration still live (normally none: the rendezvous service ends every
// lease first), stops the reclaimer and unmaps every arena no slot is left in. It does not wait
// for quarantined registrations: closing the RMA transport kills their keys (the worker goes),
// and WaitReleased then waits for their memory to come back. An arena that still holds a
// consumer's pinned buffer or a quarantined slot stays mapped until that is freed: unmapping it
// would pull memory from under the caller or a reader. Call it before closing the RMA transport.
func (r *Registry) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	live := make([]*leaseReg, 0, len(r.leases))
	for lr := range r.leases {
		live = append(live, lr)
	}
	r.mu.Unlock()
	for _, lr := range live {
		r.endLease(lr)
	}
	close(r.stop)
	r.wg.Wait()
	if n := r.pool.close(); n > 0 {
		r.log.Warn("rdma: pinned memory still in use at close; its arenas are unmapped once it is freed", "slots", n)
	}
	return nil
}

// WaitReleased waits until no registration is quarantined, or ctx ends; call it after the RMA
// transport closed (which kills every key). It returns an error naming what is still held when
// ctx ends first: that memory stays mapped and counted, never reused.
func (r *Registry) WaitReleased(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		r.qwg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		st := r.Stats()
		return fmt.Errorf("rdma: %d registrations (%s) still quarantined: their memory stays mapped and out of use: %w",
			st.QuarantinedRegistrations, verbs.FormatBytes(uint64(st.QuarantinedBytes)), ctx.Err())
	}
}

// ---------------------------------------------------------------------------- metrics

type gauges struct {
	arenas, arenaBytes            prometheus.Gauge
	leaseRegs, leaseBytes         prometheus.Gauge
	quarantined, quarantinedBytes prometheus.Gauge
	arenaFailures, forced         prometheus.Counter
}

// Series the registry exports (beside velo's own).
const (
	ArenasGauge             = "velo_rdma_arenas"
	ArenaBytesGauge         = "velo_rdma_arena_bytes"
	LeaseRegistrationsGauge = "velo_rdma_lease_registrations"
	LeaseBytesGauge         = "velo_rdma_lease_registered_bytes"
	ArenaFailuresTotal      = "velo_rdma_arena_map_failures_total"
	QuarantinedGauge        = "velo_rdma_quarantined_registrations"
	QuarantinedBytesGauge   = "velo_rdma_quarantined_bytes"
	ForcedClosesTotal       = "velo_rdma_forced_closes_total"
)

func newGauges(reg prometheus.Registerer) (*gauges, error) {
	g := &gauges{
		arenas:        prometheus.NewGauge(prometheus.GaugeOpts{Name: ArenasGauge, Help: "Pinned arenas mapped by the RDMA registry."}),
		arenaBytes:    prometheus.NewGauge(prometheus.GaugeOpts{Name: ArenaBytesGauge, Help: "Bytes of the mapped pinned arenas (mlocked)."}),
		leaseRegs:     prometheus.NewGauge(prometheus.GaugeOpts{Name: LeaseRegistrationsGauge, Help: "Live memory registrations of leases (one per lease, or one per run of neighbouring slots leased in one batch)."}),
		leaseBytes:    prometheus.NewGauge(prometheus.GaugeOpts{Name: LeaseBytesGauge, Help: "Bytes covered by live registrations of leases."}),
		arenaFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: ArenaFailuresTotal, Help: "Arenas that could not be mapped or locked (memlock limit, out of memory)."}),
		quarantined: prometheus.NewGauge(prometheus.GaugeOpts{Name: QuarantinedGauge,
			Help: "Registrations whose lease ended while a read of them was in flight; their memory stays out of use until the transport confirms the key dead."}),
		quarantinedBytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: QuarantinedBytesGauge,
			Help: "Bytes of quarantined registrations; they still count against the registered-bytes budget."}),
		forced: prometheus.NewCounter(prometheus.CounterOpts{Name: ForcedClosesTotal,
			Help: "Times a consumer held a revoked key's read past ForceCloseAfter and had its endpoints closed with force."}),
	}
	if reg != nil {
		if err := metrics.Register(reg, g.arenas, g.arenaBytes, g.leaseRegs, g.leaseBytes, g.arenaFailures, g.quarantined, g.quarantinedBytes, g.forced); err != nil {
			return nil, fmt.Errorf("rdma: %w", err)
		}
	}
	return g, nil
}

func (g *gauges) setArenas(n int, bytes int64) {
	g.arenas.Set(float64(n))
	g.arenaBytes.Set(float64(bytes))
}

// sameHostKeyer is an RMA that reads some keys through the same-host path (shm.Route).
type sameHostKeyer interface {
	SameHostKey(key []byte) bool
}

// pathOf is the lane of a descriptor's key: shm when the transport says the key is a same-host
// one, rdma otherwise (an undecodable descriptor included: its read fails on its own).
func (r *Registry) pathOf(descriptor []byte) metrics.Path {
	sk, ok := r.rma.(sameHostKeyer)
	if !ok {
		return metrics.PathRDMA
	}
	d, err := wire.DecodeRDMADescriptor(descriptor)
	if err == nil && sk.SameHostKey(d.Key) {
		return metrics.PathSameHost
	}
	return metrics.PathRDMA
}

// PathOf implements rendezvous.PathReporter for the owner's side.
func (o *Owner) PathOf(descriptor []byte) metrics.Path { return o.r.pathOf(descriptor) }

// PathOf implements rendezvous.PathReporter for the consumer's side.
func (c *Consumer) PathOf(descriptor []byte) metrics.Path { return c.r.pathOf(descriptor) }
