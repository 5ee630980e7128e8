package velo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/velo-go/velo/velo/rendezvous/rdma"
	"github.com/velo-go/velo/velo/transport"
	"github.com/velo-go/velo/velo/transport/shm"
)

// RDMAConfig configures the RDMA registry that WithUCXTransport creates: the kill switch and the
// pinned memory pool. The zero value gives the defaults (64 MiB arenas, a 1 GiB budget, idle
// arenas kept).
type RDMAConfig struct {
	// Disabled switches the RDMA path off on this instance, like RDMAKillSwitchEnv: it offers
	// nothing as a consumer, answers every acquire chunked as an owner (reason kill_switch), and
	// StageDataPinned stages in plain memory.
	Disabled bool
	// Pool sizes the pinned memory.
	Pool RDMAPoolConfig
	// ForceCloseAfter bounds how long a consumer may keep reading a lease's memory after the
	// lease ended (a consumer stopped mid-read: a debugger, a frozen VM, a long pause). Until the
	// read ends the memory is quarantined: never reused, still counted against the budget. Past
	// this bound the consumer's endpoints are closed with force, which cancels the read and so
	// frees the memory; the consumer is reported down. Zero means three lease TTLs
	// (WithLeaseTTL).
	ForceCloseAfter time.Duration
}

// RDMAPoolConfig sizes the pinned memory pool. The zero value gives the defaults.
type RDMAPoolConfig struct {
	// ArenaSize is the size of one pooled arena in bytes (default 64 MiB; rounded up to pages).
	// Each arena is one mmap, pre-faulted and mlocked, so it needs RLIMIT_MEMLOCK above its size
	// (or CAP_IPC_LOCK).
	ArenaSize int
	// RegisteredBytesBudget caps the bytes pinned at once: every mapped arena (whole, however
	// little of it is used) plus every live per-lease registration (default 1 GiB). Over it,
	// pinned staging falls back to plain memory and leases to the chunked path (reason budget).
	RegisteredBytesBudget int64
	// ArenaReclaimAfter unmaps a pooled arena that has held no slot for this long, newest first,
	// keeping the last pooled arena mapped so transparent staging keeps its pinned memory. Zero
	// keeps idle arenas until Close. Arenas made for one oversized payload are unmapped as soon as
	// that payload is freed, whatever this says.
	ArenaReclaimAfter time.Duration
}

// registry is c in package rdma's terms.
func (c RDMAConfig) registry() rdma.Config {
	return rdma.Config{Disabled: c.Disabled, Pool: rdma.PoolConfig(c.Pool), ForceCloseAfter: c.ForceCloseAfter}
}

// RDMAStats is what the RDMA registry holds now (Velo.RDMAStats):
//
//   - Arenas and ArenaBytes: mapped arenas (pooled and oversized) and their bytes.
//   - Slots: pinned slots handed out (staged payloads and consumer buffers) not yet freed.
//   - LeaseRegistrations and LeaseBytes: live registrations of leases and the bytes they cover.
//   - QuarantinedRegistrations and QuarantinedBytes: registrations whose lease ended while a
//     read may still use their key; they count against the budget until the read is over.
//   - HeldSlots: freed slots whose pages a quarantined registration still holds.
//   - PinnedBytes: what counts against the budget (ArenaBytes + LeaseBytes + QuarantinedBytes).
//   - Budget: RDMAPoolConfig.RegisteredBytesBudget.
//   - LastArenaError: the last arena that could not be mapped (a memlock limit, typically).
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
	reg, err := rdma.New(rma, o.rdma.registry(), rdma.Options{Logger: v.log, Registerer: o.metricsReg, KillSwitch: rdma.KillSwitchFromEnv(), LeaseTTL: o.leaseTTL})
	if err != nil {
		return nil, fmt.Errorf("velo: RDMA registry: %w", err)
	}
	return reg, nil
}

// StageDataPinned stages a copy of data in pinned memory and returns its handle, with one
// reference. The first call maps the first arena (and so is the slow one: an mmap and mlock of
// RDMAPoolConfig.ArenaSize); later payloads share it. Consumers that can (UCX registered for this
// owner, RDMA on at both ends) then read the payload with one GET. When no pinned memory can be
// had — no RDMA registry, the kill switch, the budget, the memlock limit — the copy goes to plain
// memory and transfers of it take the chunked path under that reason; staging itself does not
// fail for it. data may be reused as soon as StageDataPinned returns. With WithSameHost and
// SameHostConfig.SingleCopyMin set, a payload of at least that many bytes gets pinned memory of
// its own instead of a share of an arena (a sealed memfd, mapped once per payload and closed when
// it is freed: a slower staging), which UCX serves as before and a consumer of this host reads
// with one copy.
//
// Call it once at startup in a process whose only staging is transparent (large messages): the
// transparent stager uses pinned memory only once an arena is mapped.
func (v *Velo) StageDataPinned(ctx context.Context, data []byte) (Handle, error) {
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
