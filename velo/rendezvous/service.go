// Package rendezvous moves large payloads between velo instances without pushing them through the
// messenger: an owner stages bytes in a slot and hands out a Handle; a consumer that receives the
// handle pulls the bytes.
//
// The protocol is consumer-driven, because only the consumer knows when (and whether) it wants
// the bytes and where they should land:
//
//	metadata  handle -> size, references, leases
//	acquire   handle + optional RDMA offer -> lease, TTL, and a chunked plan or an RDMA descriptor
//	pull      lease, offset, length -> exactly those bytes (chunked path)
//	detach    lease -> the lease ends, the slot stays
//	release   lease -> the lease ends and one reference is dropped; the slot is freed at zero
//	ref/drop  handle -> one reference more / less
//
// Why leases: a consumer that dies holding a lease would otherwise pin the owner's slot (and, on
// the RDMA path, a memory registration) forever, and a one-sided GET leaves no trace on the owner.
// Every lease has a TTL that each pull renews; an owner-side reaper ends leases whose TTL passed
// and those of consumers the transport reports down. However a lease ends — release, detach, TTL,
// peer down, shutdown — it ends in one place (store.endLocked), where its hooks run; the RDMA
// registry revokes the lease's registration there.
//
// The chunked path pipelines several pulls at once so the socket never idles between chunks, and
// each chunk is written from the slot with one writev and read straight into the consumer's
// buffer (messenger.Messenger.RequestInto). When owner and consumer are the same instance, Get
// copies from the slot without any message.
//
// The RDMA path's hooks are here already (RDMAServer, RDMAClient, offers and descriptors in the
// acquire messages); docs/architecture.md gives the decision order.
//
// Telemetry follows the same lines: the consumer observes each transfer once, where its bytes are
// in place (Get, GetInto, GetAlloc, each entry of GetBatch, each ReadRanges call), in
// velo_rendezvous_transfer_duration_seconds by the path the bytes took and the size class; the
// owner observes each lease once, in store.endLocked, by how it ended; both count bytes per peer,
// and PeerDown drops that peer's series.
package rendezvous

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo/velo/internal/slowpath"
	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/messenger"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/transport"
)

// Defaults for Config fields left zero.
const (
	DefaultChunkSize  = 2 << 20
	DefaultLeaseTTL   = 30 * time.Second
	DefaultStageTTL   = 5 * time.Minute
	DefaultPullWindow = 8
	// DefaultBatchInlineMax is Config.BatchInlineMax's default: entries of a GetBatch up to 4 KiB
	// come inside the acquire's answer. Below a page a lease's registration, key and read cost
	// more than the bytes (docs/performance.md, "Small transfers"); above it the RDMA read wins.
	DefaultBatchInlineMax = 4 << 10
	// MaxBatchInline bounds Config.BatchInlineMax.
	MaxBatchInline = wire.MaxInlinePayload
	// DefaultMaxGetSize bounds the buffer Get allocates for one payload (and so the payload of one
	// staged message): 4 GiB, above any payload the 1 GiB default RDMA budget can pin.
	DefaultMaxGetSize = 4 << 30
)

// Protocol message names (messenger internal handlers).
const (
	opMetadata = messenger.InternalPrefix + "rv.metadata"
	opAcquire  = messenger.InternalPrefix + "rv.acquire"
	// opAcquireBatch takes leases on many handles of one owner in one round trip (GetBatch).
	opAcquireBatch = messenger.InternalPrefix + "rv.acquire_batch"
	// opAcquireBatchInline is opAcquireBatch asking for small payloads inside the answer
	// (Config.BatchInlineMax): a name of its own, which an owner of an earlier release answers as
	// an unknown handler.
	opAcquireBatchInline = messenger.InternalPrefix + "rv.acquire_batch_inline"
	opPull               = messenger.InternalPrefix + "rv.pull"
	opDetach             = messenger.InternalPrefix + "rv.detach"
	opRelease            = messenger.InternalPrefix + "rv.release"
	// opEndBatch ends many leases of one owner in one round trip (EndLeases).
	opEndBatch = messenger.InternalPrefix + "rv.end_batch"
	opRef      = messenger.InternalPrefix + "rv.ref"
	opDrop     = messenger.InternalPrefix + "rv.drop"
)

// MaxPayload is the largest payload this build stages or fetches (1 TiB).
const MaxPayload = 1 << 40

// Config configures the rendezvous service of one instance.
type Config struct {
	Self      transport.InstanceID
	Messenger *messenger.Messenger
	Metrics   *metrics.Metrics
	Logger    *slog.Logger
	// ChunkSize is the largest pull this owner serves (default 2 MiB).
	ChunkSize int
	// LeaseTTL is how long a lease lives without a pull (default 30 s).
	LeaseTTL time.Duration
	// StageTTL is how long a transparently staged message payload waits for its receiver
	// (default 5 min).
	StageTTL time.Duration
	// PullWindow is how many pulls a consumer keeps in flight for one Get (default 8).
	PullWindow int
	// BatchWindow is how many reads or pulls one ReadRanges call, and one part of a GetBatch
	// (up to 256 entries of one owner; four parts move at once), keeps in flight (default
	// DefaultBatchWindow).
	BatchWindow int
	// BatchInlineMax is the largest payload a GetBatch entry receives inside the owner's answer
	// to its batched acquire, with neither a registration nor a read of its own (path inline): as
	// consumer what this instance asks for, as owner what it grants. 0 takes
	// DefaultBatchInlineMax; a negative value turns it off (every entry takes the RDMA or the
	// chunked path). At most MaxBatchInline.
	BatchInlineMax int
	// MaxGetSize is the largest payload Get and GetAlloc allocate a buffer for, and so the largest
	// staged message payload this instance fetches (default DefaultMaxGetSize). A handle's size is
	// a claim of whoever sent it; without a bound one message could make this instance allocate
	// any amount. GetInto writes the caller's buffer and is not bounded by it.
	MaxGetSize uint64
	// Server and Client are the RDMA path's two sides; nil means not configured.
	Server RDMAServer
	Client RDMAClient
	// Pool is the pinned memory StagePinned and the transparent stager copy payloads into; nil
	// stages everything in plain memory.
	Pool PinnedPool
	// Authorize, when set, decides whether a peer may acquire a lease (and so receive a remote
	// key): an error refuses the acquire before any lease exists. The runtime sets it when its
	// control plane authenticates peers; the handle's nonce remains the second check.
	Authorize func(peer transport.InstanceID) error
	// CopyMemory copies between memories of any two types (the UCX transport's, through
	// transport.MemoryRMA); the chunked path moves device memory with it. Nil copies host memory
	// only, and typed memory that is not host memory is refused.
	CopyMemory CopyMemoryFunc
	// CheckMemory checks that a typed destination (GetIntoMemory, GetRequest.IntoMemory,
	// Range.DstMemory) is the memory it is said to be before anything is asked of an owner. Nil
	// accepts host memory and refuses any other type.
	CheckMemory func(b []byte, m Memory) error
}

// Rendezvous is one instance's owner and consumer sides.
type Rendezvous struct {
	cfg      Config
	log      *slog.Logger
	m        *metrics.Metrics
	msgr     *messenger.Messenger
	store    *store
	draining atomic.Bool
	stop     chan struct{}

	// noInline holds the owners that answered opAcquireBatchInline as an unknown handler (an
	// earlier release): their batches are acquired without inline payloads.
	noInline sync.Map // transport.InstanceID -> bool

	slow slowpath.Log // transfers slower than the pair could have, logged once per peer and reason

	bounceSem  chan struct{} // the owner's bounce buffers in use (maxBounce)
	bounceBufs sync.Pool     // *[]byte
	wg         sync.WaitGroup
}

// New creates the service, registers its protocol handlers on the messenger and starts the reaper.
func New(cfg Config) *Rendezvous {
	if cfg.ChunkSize <= 0 {
		cfg.ChunkSize = DefaultChunkSize
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.StageTTL <= 0 {
		cfg.StageTTL = DefaultStageTTL
	}
	if cfg.PullWindow <= 0 {
		cfg.PullWindow = DefaultPullWindow
	}
	if cfg.BatchWindow <= 0 {
		cfg.BatchWindow = DefaultBatchWindow
	}
	if cfg.MaxGetSize == 0 {
		cfg.MaxGetSize = DefaultMaxGetSize
	}
	if cfg.BatchInlineMax == 0 {
		cfg.BatchInlineMax = DefaultBatchInlineMax
	}
	cfg.BatchInlineMax = min(max(cfg.BatchInlineMax, 0), MaxBatchInline)
	cfg.MaxGetSize = min(cfg.MaxGetSize, MaxPayload)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	r := &Rendezvous{cfg: cfg, log: cfg.Logger, m: cfg.Metrics, msgr: cfg.Messenger,
		store: newStore(cfg.Self, cfg.Metrics, cfg.LeaseTTL), stop: make(chan struct{}),
		bounceSem: make(chan struct{}, maxBounce)}
	r.bounceBufs.New = func() any { b := make([]byte, 0, cfg.ChunkSize); return &b }
	r.registerHandlers()
	r.wg.Add(1)
	go r.reaper()
	return r
}

func (r *Rendezvous) reaper() {
	defer r.wg.Done()
	period := min(r.cfg.LeaseTTL, r.cfg.StageTTL) / 4
	period = max(period, 10*time.Millisecond)
	tk := time.NewTicker(period)
	defer tk.Stop()
	for {
		select {
		case <-r.stop:
			return
		case now := <-tk.C:
			r.store.reap(now)
		}
	}
}

// Stage puts data in a new slot. The slot holds data itself, not a copy: data must not change
// until the slot is freed (OnFree runs, or every reference and lease is gone).
func (r *Rendezvous) Stage(data []byte, o StageOptions) (Handle, error) {
	if uint64(len(data)) > MaxPayload {
		return Handle{}, fmt.Errorf("rendezvous: %w: %d bytes (the limit is %d)", ErrTooLarge, len(data), uint64(MaxPayload))
	}
	return r.store.stage(data, o)
}

// StagePinned stages a copy of data in pinned memory, mapping the pool's first arena when none is
// mapped, so that RDMA consumers can read it by a one-sided GET. When the pool has no memory to
// give (or there is no pool) the copy goes to plain memory and the slot records why; the payload
// is then served by chunks. Either way data may be reused once StagePinned returns.
func (r *Rendezvous) StagePinned(data []byte) (Handle, error) {
	return r.stageCopy(data, true, StageOptions{Reason: metrics.ReasonNotConfigured})
}

// stageCopy stages a copy of data: in pinned memory when the pool gives some, else in plain
// memory under the reason the pool gave (o.Reason when there is no pool).
func (r *Rendezvous) stageCopy(data []byte, mayMap bool, o StageOptions) (Handle, error) {
	if uint64(len(data)) > MaxPayload {
		return Handle{}, fmt.Errorf("rendezvous: %w: %d bytes (the limit is %d)", ErrTooLarge, len(data), uint64(MaxPayload))
	}
	if r.cfg.Pool != nil && len(data) > 0 {
		mem, po := r.cfg.Pool.Pin(len(data), mayMap)
		if mem != nil {
			copy(mem, data)
			po.For, po.TTL = o.For, o.TTL
			h, err := r.Stage(mem, po)
			if err != nil && po.OnFree != nil {
				po.OnFree()
			}
			return h, err
		}
		o.Reason = po.Reason
	} else if len(data) == 0 {
		o.Reason = metrics.ReasonNotPinned // nothing to read remotely
	}
	return r.Stage(append([]byte(nil), data...), o)
}

// BeginDrain makes this owner answer every later acquire on the chunked path (reason draining
// when an RDMA registry exists).
func (r *Rendezvous) BeginDrain() { r.draining.Store(true) }

// PeerDown ends the leases peer holds here, frees payloads staged for it and removes its
// velo_rendezvous_peer_bytes_total series (they come back with its next transfer, should it
// return).
func (r *Rendezvous) PeerDown(peer transport.InstanceID) {
	r.m.ForgetPeer(uint64(peer))
	r.slow.Forget(uint64(peer)) // a peer that comes back is logged again
	if n := r.store.peerDown(peer); n > 0 {
		r.log.Info("rendezvous: ended leases of a peer that went down", "peer", fmt.Sprintf("%016x", uint64(peer)), "leases", n)
	}
}

// Close ends every lease, frees every slot and stops the reaper.
func (r *Rendezvous) Close() {
	select {
	case <-r.stop:
		return
	default:
	}
	close(r.stop)
	r.wg.Wait()
	r.store.close()
}

// Counts reports the live slots and leases this owner holds.
func (r *Rendezvous) Counts() (slots, leases int) { return r.store.counts() }

// Metadata describes a live staged payload.
type Metadata struct {
	Size   uint64
	Refs   int
	Leases int
	// Pinned reports registered memory (an RDMA-capable slot).
	Pinned bool
	// Staging is the reason recorded for unpinned memory (not_pinned for StageData).
	Staging metrics.Reason
}

// Metadata asks the owner about h.
func (r *Rendezvous) Metadata(ctx context.Context, h Handle) (Metadata, error) {
	if h.Owner == r.cfg.Self {
		si, err := r.store.metadata(h)
		if err != nil {
			return Metadata{}, localErr("metadata", err)
		}
		return Metadata{Size: si.size, Refs: si.refs, Leases: si.leases, Pinned: si.pinned, Staging: si.stagingReason}, nil
	}
	resp, err := r.msgr.Request(ctx, h.Owner, opMetadata, wire.AppendHandle(nil, h.wire()))
	if err != nil {
		return Metadata{}, remoteErr("metadata", err)
	}
	md, err := wire.DecodeMetadata(resp)
	if err != nil {
		return Metadata{}, fmt.Errorf("rendezvous: metadata: %w: %w", ErrProtocol, err)
	}
	out := Metadata{Size: md.Size, Refs: int(md.Refs), Leases: int(md.Leases), Staging: metrics.Reason(md.Staging)}
	out.Pinned = out.Staging == ""
	return out, nil
}

// Ref adds a reference to h, so one more consumer can release it.
func (r *Rendezvous) Ref(ctx context.Context, h Handle) error {
	return r.handleOp(ctx, "ref", opRef, h, r.store.ref)
}

// Unref drops one reference to h without moving its bytes; the owner frees the slot when the
// last reference is gone and its last lease has ended. (Lease.Release ends a lease and drops the
// reference it used.)
func (r *Rendezvous) Unref(ctx context.Context, h Handle) error {
	return r.handleOp(ctx, "unref", opDrop, h, r.store.drop)
}

func (r *Rendezvous) handleOp(ctx context.Context, what, op string, h Handle, local func(Handle) error) error {
	if h.Owner == r.cfg.Self {
		if err := local(h); err != nil {
			return localErr(what, err)
		}
		return nil
	}
	if _, err := r.msgr.Request(ctx, h.Owner, op, wire.AppendHandle(nil, h.wire())); err != nil {
		return remoteErr(what, err)
	}
	return nil
}
