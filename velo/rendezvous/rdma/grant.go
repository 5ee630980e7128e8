package rdma

import (
	"fmt"

	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/transport"
	"github.com/velo-go/velo/verbs"
)

// ServeWrite registers n bytes at off of region g for one writer of one write grant, with write
// access only, and returns the key to send that writer, the hook that revokes it when the grant
// ends, and the registration's Dead: closed once no write through the key can land any more. It
// is a lease's registration in every other way: its bytes count against the budget while it
// lives, the region's pages stay held until the transport confirms the key dead,
// and a key revoked while a write of it may be in flight is quarantined as a read's would be
// (Stats, the quarantine gauges). When the region cannot be written by RDMA it returns the
// reason (kill_switch, not_pinned, not_configured, budget, pool_exhausted) and no key; the grant
// then takes writes over the control plane.
func (r *Registry) ServeWrite(g *Region, off, n int, writer transport.InstanceID, grant uint64) (key []byte, end func(), dead <-chan struct{}, reason metrics.Reason, err error) {
	switch {
	case r.disabled:
		return nil, nil, nil, metrics.ReasonKillSwitch, fmt.Errorf("rdma: the RDMA path is switched off (%s)", r.why)
	case g == nil || off < 0 || n <= 0 || off > len(g.mem)-n:
		return nil, nil, nil, metrics.ReasonDecodeError, fmt.Errorf("rdma: ServeWrite: [%d, +%d) is not a range of the region", off, n)
	case g.pin == nil:
		return nil, nil, nil, g.reason, fmt.Errorf("rdma: the region is plain memory (%s)", g.reason)
	case !g.pin.of(r):
		return nil, nil, nil, metrics.ReasonNotPinned, fmt.Errorf("rdma: the region is not in this registry's pinned memory")
	}
	wr, ok := r.rma.(transport.RMAWriter)
	if !ok {
		return nil, nil, nil, metrics.ReasonNotConfigured, fmt.Errorf("rdma: the %s transport cannot register memory for writing", r.backend)
	}
	register := wr.RegisterMemoryWritable
	if pw, ok := r.rma.(transport.PeerWriteRegisterer); ok {
		// The key writes only through the writer's own connections; the same-host path
		// (shm.Route) registers a grant's host memory for its writer alone when the writer holds
		// a proven channel to this instance.
		register = func(mem []byte) (transport.Registration, error) {
			return pw.RegisterMemoryWritableFor(writer, mem)
		}
	}
	if g.memory.Typed() {
		// Device memory is registered for writing with its type, where the transport can; any
		// other transport's grant goes by chunks, which the receiver copies in with the
		// transport's copy.
		tw, ok := r.rma.(transport.MemoryRMAWriter)
		if !ok {
			return nil, nil, nil, metrics.ReasonDeviceBounce, fmt.Errorf("rdma: the region is %v memory and the %s transport registers host memory only for writing: written by chunks through a host buffer", g.memory.Type, r.backend)
		}
		register = func(mem []byte) (transport.Registration, error) {
			return tw.RegisterMemoryWritableOf(mem, g.memory.Type)
		}
	}
	if err := r.pool.reserve(n); err != nil {
		return nil, nil, nil, metrics.ReasonBudget, err
	}
	s := g.pin
	if err := s.holdReg(); err != nil {
		r.pool.unreserve(n)
		return nil, nil, nil, metrics.ReasonPoolExhausted, err
	}
	reg, err := register(g.mem[off : off+n])
	if err != nil {
		r.pool.unreserve(n)
		s.dropReg()
		return nil, nil, nil, metrics.ReasonBudget, fmt.Errorf("rdma: registering %s for write grant %d: %w", verbs.FormatBytes(uint64(n)), grant, err)
	}
	lr := &leaseReg{reg: reg, slots: []registrable{s}, bytes: n, peer: writer, lease: grant, holders: 1}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		r.revoke(lr)
		return nil, nil, nil, metrics.ReasonPoolExhausted, ErrClosed
	}
	r.leases[lr] = struct{}{}
	r.g.leaseRegs.Inc()
	r.g.leaseBytes.Add(float64(lr.bytes))
	r.mu.Unlock()
	return reg.Key(), func() { r.endLease(lr) }, reg.Dead(), metrics.ReasonOK, nil
}
