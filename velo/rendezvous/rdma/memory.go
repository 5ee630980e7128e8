package rdma

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/rendezvous"
	"github.com/velo-go/velo/velo/transport"
)

// Memory types in the registry (docs/gpu.md). A region of memory the caller describes
// (WrapRegionMemory) is registered for each lease with its memory type, through the
// transport's transport.MemoryRMA, and its descriptor says the type to a consumer whose offer
// reads version 3. A consumer of an earlier release (offer version 2) reads host memory only:
// an owner serves it typed memory by chunks, through its bounce buffers (device_bounce).

var (
	_ rendezvous.RDMAMemoryClient = (*Consumer)(nil)
	_ rendezvous.RDMAOfferTracker = (*Consumer)(nil)
)

// ErrUnsupportedMemory is rendezvous.ErrUnsupportedMemory: memory of a type the transport cannot
// register or read (it matches errors.ErrUnsupported).
var ErrUnsupportedMemory = rendezvous.ErrUnsupportedMemory

// CheckMemory reports whether mem can be registered and read into as memory m on device (a CUDA
// ordinal; ignored for host memory): the transport's verdict (transport.MemoryRMA.CheckMemory),
// or, for device memory on a transport without memory types, an error matching
// errors.ErrUnsupported.
func (r *Registry) CheckMemory(mem []byte, m rendezvous.Memory, device int) error {
	mr, ok := r.rma.(transport.MemoryRMA)
	if !ok {
		if m.Type == transport.MemoryHost {
			return nil
		}
		return fmt.Errorf("rdma: %w: this instance's %s transport (%T) registers host memory only; %v memory needs velo's UCX transport (ucxtransport, one rail) in a binary built with -tags cuda,ucx_static",
			ErrUnsupportedMemory, r.backend, r.rma, m.Type)
	}
	return mr.CheckMemory(mem, m.Type, device)
}

// CopyMemory copies between memories of any two types with the transport
// (transport.MemoryRMA); without one, host memory only.
func (r *Registry) CopyMemory(dst []byte, dt transport.MemoryType, src []byte, st transport.MemoryType) error {
	if mr, ok := r.rma.(transport.MemoryRMA); ok {
		return mr.CopyMemory(dst, dt, src, st)
	}
	if dt != transport.MemoryHost || st != transport.MemoryHost {
		return fmt.Errorf("rdma: %w: the %s transport cannot copy %v memory", ErrUnsupportedMemory, r.backend, dt)
	}
	copy(dst, src)
	return nil
}

// WrapRegionMemory is WrapRegion of memory the caller describes: mem views it (for
// device memory a view nothing but the transport and CopyMemory touch), m says what it is and
// device is its CUDA ordinal. The memory is checked first (CheckMemory): nothing is registered
// when it fails. Each lease then registers the region with its type. With the kill switch on
// the region is plain: consumers read it by chunks through the owner's bounce buffers.
func (r *Registry) WrapRegionMemory(mem []byte, m rendezvous.Memory, device int) (*Region, error) {
	if len(mem) == 0 {
		return nil, errors.New("rdma: WrapRegionMemory: an empty region")
	}
	if err := r.CheckMemory(mem, m, device); err != nil {
		return nil, err
	}
	if r.disabled {
		g := PlainRegion(mem, metrics.ReasonKillSwitch)
		g.memory = m
		return g, nil
	}
	return &Region{mem: mem, memory: m, pin: &external{r: r, mem: mem, mt: m}, done: make(chan struct{})}, nil
}

// PlainRegionMemory is PlainRegion of memory m: its chunks go through the owner's bounce buffers.
func PlainRegionMemory(mem []byte, m rendezvous.Memory, reason metrics.Reason) *Region {
	g := PlainRegion(mem, reason)
	g.memory = m
	return g
}

// typedRefusal says why a typed slot cannot be served to this offer by RDMA ("" when it can).
func (r *Registry) typedRefusal(m rendezvous.Memory, offerVersion uint8) string {
	if !m.Typed() {
		return ""
	}
	if offerVersion < wire.RDMAOfferVersion {
		return fmt.Sprintf("the consumer's offer (version %d) reads host memory only", offerVersion)
	}
	if _, ok := r.rma.(transport.MemoryRMA); !ok {
		return fmt.Sprintf("the %s transport registers host memory only", r.backend)
	}
	return ""
}

// registerTyped registers a typed region (one registration, its own key) with its memory type,
// for the lease's consumer where the transport's keys depend on it (transport.PeerMemoryRegisterer:
// the same-host path exports device memory by CUDA IPC to a consumer of its host).
func (r *Registry) registerTyped(region []byte, consumer transport.InstanceID, m rendezvous.Memory) (transport.Registration, error) {
	if pr, ok := r.rma.(transport.PeerMemoryRegisterer); ok {
		return pr.RegisterMemoryOfFor(consumer, region, m.Type)
	}
	return r.rma.(transport.MemoryRMA).RegisterMemoryOf(region, m.Type)
}

// ---------------------------------------------------------------------------- consumer side

// legacyOwners are owners that refused this build's offer (an earlier release): they get the
// version-2 offer.
type legacyOwners struct {
	mu sync.Mutex
	m  map[transport.InstanceID]bool
}

func (l *legacyOwners) is(owner transport.InstanceID) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.m[owner]
}

func (l *legacyOwners) add(owner transport.InstanceID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[transport.InstanceID]bool{}
	}
	l.m[owner] = true
}

// OfferRefused implements rendezvous.RDMAOfferTracker: owner answered the offer with
// decode_error, as an owner of a release before memory types answers offer version 3; later
// offers to it are version 2 (host memory by RDMA as before; typed destinations are read with
// their type all the same, the owner's memory being host memory).
func (c *Consumer) OfferRefused(owner transport.InstanceID) {
	if !c.r.legacy.is(owner) {
		c.r.log.Info("rdma: the owner refused the version-3 offer (an earlier release); offering it version 2 from now on", "owner", owner)
		c.r.legacy.add(owner)
	}
}

// GetMemory implements rendezvous.RDMAMemoryClient: Get into a destination of type mt.
func (c *Consumer) GetMemory(ctx context.Context, owner transport.InstanceID, descriptor []byte, dst []byte, mt transport.MemoryType) error {
	d, err := wire.DecodeRDMADescriptor(descriptor)
	if err != nil {
		return fmt.Errorf("rdma: %w: %w", ErrDescriptor, err)
	}
	mr, ok := c.r.rma.(transport.MemoryRMA)
	if !ok {
		return fmt.Errorf("rdma: %w: the %s transport reads into host memory only", ErrUnsupportedMemory, c.r.backend)
	}
	return mr.GetMemory(ctx, owner, d.Key, 0, dst, mt)
}

func isManyReader(rma transport.RMA) bool {
	_, ok := rma.(transport.ManyReader)
	return ok
}
