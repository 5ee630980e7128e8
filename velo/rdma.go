package velo

import (
	"context"
	"errors"
	"fmt"

	"github.com/velo-go/velo/velo/rendezvous/rdma"
	"github.com/velo-go/velo/velo/transport"
	"github.com/velo-go/velo/velo/transport/shm"
)

// RDMAConfig configures the RDMA registry that WithUCXTransport creates: the kill switch and the
// pinned memory pool. The zero value gives the defaults (64 MiB arenas, a 1 GiB budget, idle
// arenas kept). See package velo/rendezvous/rdma.
type RDMAConfig = rdma.Config

// RDMAPoolConfig sizes the pinned memory pool: ArenaSize, RegisteredBytesBudget,
// ArenaReclaimAfter.
type RDMAPoolConfig = rdma.PoolConfig

// RDMAStats is what the RDMA registry holds now (mapped arenas, pinned slots, live per-lease
// registrations, bytes against the budget).
type RDMAStats = rdma.Stats

// RDMAKillSwitchEnv is the variable that switches the RDMA path off with no rebuild when it holds
// 1, true, yes or on (any case). New reads it once.
const RDMAKillSwitchEnv = rdma.KillSwitchEnv

// ErrNoPinnedMemory: GetPinned could not get pinned memory for the payload (no RDMA registry, the
// budget is spent, or an arena did not fit the memlock limit); the text names the fix.
var ErrNoPinnedMemory = errors.New("no pinned memory for the payload")

// WithUCXTransport adds a transport that can also read remote memory (transport.RMA: the UCX
// transport of package velo/transport/ucxtransport) and creates the RDMA registry on it, which turns on
// the rendezvous RDMA path. Like WithTransport it joins the transport list in the order given, so
// add the TCP control plane first. Added with WithTransport instead, the same transport carries
// messages only and every transfer reports reason not_configured.
func WithUCXTransport(t transport.Transport) Option {
	return func(o *options) error {
		if t == nil {
			return errors.New("velo: WithUCXTransport(nil)")
		}
		if _, ok := t.(transport.RMA); !ok {
			return fmt.Errorf("velo: WithUCXTransport: transport %q cannot read remote memory (it does not implement transport.RMA); add it with WithTransport", t.Name())
		}
		if o.rmaTransport != nil {
			return errors.New("velo: WithUCXTransport given twice: one instance has one RDMA registry")
		}
		o.rmaTransport = t
		o.transports = append(o.transports, t)
		return nil
	}
}

// WithRDMA configures the RDMA registry that WithUCXTransport creates; without WithUCXTransport it
// has no effect.
func WithRDMA(cfg RDMAConfig) Option {
	return func(o *options) error {
		o.rdma = cfg
		return nil
	}
}

// newRegistry creates the RDMA registry when WithUCXTransport was given (nil otherwise). The kill
// switch variable is read here, once, so one process never answers half its transfers one way.
func (v *Velo) newRegistry(o *options) (*rdma.Registry, error) {
	if o.rmaTransport == nil {
		return nil, nil
	}
	rma := o.rmaTransport.(transport.RMA)
	if o.shm != nil {
		rma = shm.Route(rma, o.shm)
	}
	reg, err := rdma.New(rma, o.rdma, rdma.Options{Logger: v.log, Registerer: o.metricsReg, KillSwitch: rdma.KillSwitchFromEnv(), LeaseTTL: o.leaseTTL})
	if err != nil {
		return nil, fmt.Errorf("velo: RDMA registry: %w", err)
	}
	return reg, nil
}

// RegisterDataPinned stages a copy of data in pinned memory and returns its handle, with one
// reference. The first call maps the first arena (and so is the slow one: an mmap and mlock of
// RDMAPoolConfig.ArenaSize); later payloads share it. Consumers that can (UCX registered for this
// owner, RDMA on at both ends) then read the payload with one GET. When no pinned memory can be
// had — no RDMA registry, the kill switch, the budget, the memlock limit — the copy goes to plain
// memory and transfers of it take the chunked path under that reason; staging itself does not
// fail for it. data may be reused as soon as RegisterDataPinned returns.
//
// Call it once at startup in a process whose only staging is transparent (large messages): the
// transparent stager uses pinned memory only once an arena is mapped.
func (v *Velo) RegisterDataPinned(ctx context.Context, data []byte) (Handle, error) {
	if err := ctx.Err(); err != nil {
		return Handle{}, err
	}
	return v.rv.StagePinned(data)
}

// PinnedLease is a lease whose bytes are in this instance's pinned memory (GetPinned). End the
// lease with Release or Detach as usual; give the memory back with Free once Bytes is no longer
// used. The two are independent: the bytes stay valid after the lease ends, until Free.
type PinnedLease struct {
	*Lease
	buf *rdma.Buffer
}

// Free returns the pinned memory. Bytes must not be used afterwards. It is idempotent.
func (p *PinnedLease) Free() {
	if p.buf != nil {
		p.buf.Free()
	}
}

// GetPinned fetches h's payload into pinned memory of this instance (mapping an arena when none
// has room) and returns the lease on it. It takes the same path as Get, and like Get refuses a
// handle above WithMaxGetSize (ErrTooLarge) and takes memory only once the owner has confirmed the
// handle. It fails with an error wrapping ErrNoPinnedMemory when there is no RDMA registry
// (WithUCXTransport) or no pinned memory within the budget and the memlock limit; nothing is
// fetched then, and the lease it took is ended before it returns.
func (v *Velo) GetPinned(ctx context.Context, h Handle) (*PinnedLease, error) {
	if v.rdma == nil {
		return nil, fmt.Errorf("velo: GetPinned: %w: this instance has no RDMA registry: add the UCX transport with WithUCXTransport", ErrNoPinnedMemory)
	}
	// The pinned buffer is taken only once the owner has confirmed the handle: a forged handle
	// must not map an arena.
	var buf *rdma.Buffer
	l, err := v.rv.GetAlloc(ctx, h, func(n int) ([]byte, error) {
		if n == 0 {
			return nil, nil
		}
		b, err := v.rdma.AllocBuffer(n)
		if err != nil {
			return nil, fmt.Errorf("velo: GetPinned: %w: %w", ErrNoPinnedMemory, err)
		}
		buf = b
		return b.Bytes(), nil
	})
	if err != nil {
		if buf != nil {
			buf.Free() // the get returned: nothing writes the buffer any more
		}
		return nil, err
	}
	return &PinnedLease{Lease: l, buf: buf}, nil
}

// RDMAStats reports the RDMA registry's state (the zero value without WithUCXTransport).
func (v *Velo) RDMAStats() RDMAStats {
	if v.rdma == nil {
		return RDMAStats{}
	}
	return v.rdma.Stats()
}
