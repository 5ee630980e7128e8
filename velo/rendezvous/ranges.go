package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/metrics"
)

// Range is one read of ReadRanges: Length bytes at Offset of the payload, into Dst[:Length]. Err
// is that read's outcome once ReadRanges returned.
type Range struct {
	Offset uint64
	Length uint64
	Dst    []byte
	Err    error
	// DstMemory is what Dst is (zero: host memory). Device memory (Dst views it) is read with
	// its type on the RDMA path and through host bounce buffers on the chunked path (reason
	// device_bounce).
	DstMemory Memory
}

// ErrRange: a range that no read can serve: empty, or reaching past the payload's end. It is
// refused before anything is posted.
var ErrRange = errors.New("range outside the payload")

// RangeLease is a lease taken to read parts of one payload (Acquire): one descriptor and one
// remote key, on the RDMA path, for every read of the lease's life. End it with Release or Detach
// like any lease. The owner's lease TTL is renewed by the reads themselves (each call renews it
// at most once per half TTL), so a lease on a long-lived region stays valid while it is used.
type RangeLease struct {
	*Lease
	r *Rendezvous

	mu       sync.Mutex // one ReadRanges at a time; guards the fields below and the lease's id
	size     uint64
	desc     []byte       // the RDMA descriptor; nil on the chunked path
	path     metrics.Path // the lane desc's key takes (rdma or shm)
	chunk    int
	reason   metrics.Reason // why chunked, when chunked
	client   RDMAClient
	local    []byte // this instance owns the payload: its bytes
	localMem Memory // and what they are
	renewed  time.Time
	ttl      time.Duration
}

// Acquire takes a lease on h for ranged reads, without moving any byte. On the RDMA path the owner
// registers the payload's memory once for the lease, and every later read of it is a one-sided GET
// of just its range.
func (r *Rendezvous) Acquire(ctx context.Context, h Handle) (*RangeLease, error) {
	if h.Owner == 0 || h.Nonce == 0 {
		return nil, fmt.Errorf("rendezvous: acquire: %w: %v is not a handle an owner issued", ErrBadHandle, h)
	}
	if h.Owner == r.cfg.Self {
		sl, err := r.store.newLease(h, r.cfg.Self)
		if err != nil {
			return nil, localErr("acquire", err)
		}
		return &RangeLease{Lease: &Lease{r: r, h: h, id: sl.Lease.ID}, r: r, size: uint64(len(sl.Data)), local: sl.Data, localMem: sl.Opts.Memory}, nil
	}
	offer, reason, client := r.offer(h.Owner)
	l, resp, err := r.acquire(ctx, h, offer)
	if err != nil {
		return nil, err
	}
	rl := &RangeLease{Lease: l, r: r, size: resp.Size, chunk: int(resp.ChunkSize), renewed: time.Now(),
		ttl: time.Duration(resp.TTLMillis) * time.Millisecond}
	if resp.Path == string(metrics.PathRDMA) {
		rl.desc, rl.client = resp.Descriptor, client
		rl.path = registryPath(client, resp.Descriptor)
		l.Path, l.Reason = rl.path, metrics.ReasonOK
	} else {
		if offer != nil {
			reason = metrics.Reason(resp.Reason)
			r.offerRefused(client, h.Owner, reason)
		}
		rl.reason = reason
		l.Path, l.Reason = metrics.PathChunked, reason
	}
	return rl, nil
}

// Size is the payload's size.
func (l *RangeLease) Size() uint64 { return l.size }

// Release ends the lease and drops the handle's reference (see Lease.Release).
func (l *RangeLease) Release(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.Lease.Release(ctx)
}

// Detach ends the lease and keeps the payload staged (see Lease.Detach).
func (l *RangeLease) Detach(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.Lease.Detach(ctx)
}

// ReadRanges reads every range, with up to Config.BatchWindow reads in flight: on the RDMA path
// one GET per range with the lease's key, on the chunked path pipelined pulls. A range that is
// empty, reaches past the payload (ErrRange) or has a Dst shorter than its Length (ErrBufferSize)
// fails before anything is posted; each range's outcome is in its Err, and one range's failure
// fails only that range. The error returned is nil when every range was read, and otherwise says
// how many failed and wraps the first failure. ReadRanges returns once nothing writes any Dst.
//
// A GET that fails makes the lease fall back to the chunked path, as Get does: the lease is given
// up, a new one taken without an offer, and the failed ranges (and all later reads of the lease)
// are pulled. The path metric counts each call once: rdma/ok, get_failed after such a fallback,
// or the reason the lease is chunked. So does velo_rendezvous_transfer_duration_seconds: a call
// that read at least one range is one transfer, of the bytes of the ranges it read, on the path
// the lease ended the call on (chunked after a fallback), timed from the call to its last range in
// place (the Acquire that took the lease is not inside: it is paid once for many calls). Reads of
// a payload this instance owns are copies, not transfers, and are not observed.
//
// Consistency: a read returns the bytes the owner's memory holds while the read runs. A reader
// sees everything the owner wrote before it announced the range (staged the region, or sent the
// message naming the range); bytes the owner writes while a read of them runs may be seen in
// part. The owner must not write a range from the time it announced it until its readers are
// done with it (docs/velo.md, "Regions").
func (l *RangeLease) ReadRanges(ctx context.Context, ranges []Range) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	start := time.Now()
	r := l.r
	var valid []int
	for i := range ranges {
		rg := &ranges[i]
		rg.Err = nil
		switch {
		case rg.Length == 0:
			rg.Err = fmt.Errorf("rendezvous: read range %d: %w: zero-length range at %d", i, ErrRange, rg.Offset)
		case rg.Offset > l.size || rg.Length > l.size-rg.Offset:
			rg.Err = fmt.Errorf("rendezvous: read range %d: %w: [%d, +%d) reaches past the %d-byte payload", i, ErrRange, rg.Offset, rg.Length, l.size)
		case uint64(len(rg.Dst)) < rg.Length:
			rg.Err = fmt.Errorf("rendezvous: read range %d: %w: a %d-byte destination for %d bytes", i, ErrBufferSize, len(rg.Dst), rg.Length)
		case rg.DstMemory.Typed() && r.checkMemory(rg.Dst[:rg.Length], rg.DstMemory) != nil:
			rg.Err = fmt.Errorf("rendezvous: read range %d: %w", i, r.checkMemory(rg.Dst[:rg.Length], rg.DstMemory))
		default:
			valid = append(valid, i)
		}
	}
	if l.ended.Load() {
		for _, i := range valid {
			ranges[i].Err = fmt.Errorf("rendezvous: read range %d: %w: the lease was ended", i, ErrBadLease)
		}
		return rangesErr(ranges)
	}
	switch {
	case len(valid) == 0:
	case l.local != nil:
		for _, i := range valid {
			rg := &ranges[i]
			if rg.DstMemory.Typed() || l.localMem.Typed() {
				if err := r.copyMemory(rg.Dst[:rg.Length], rg.DstMemory.Type, l.local[rg.Offset:rg.Offset+rg.Length], l.localMem.Type); err != nil {
					rg.Err = fmt.Errorf("rendezvous: read range %d: %w", i, err)
					continue
				}
			} else {
				copy(rg.Dst[:rg.Length], l.local[rg.Offset:rg.Offset+rg.Length])
			}
			r.m.AddBytes("received", "local", int(rg.Length))
		}
	case l.desc != nil:
		l.readRDMA(ctx, ranges, valid)
		l.observe(ranges, valid, start)
	default:
		reason := l.reason
		for _, i := range valid {
			reason = chunkedReason(ranges[i].DstMemory, reason)
		}
		r.m.CountPath(metrics.PathChunked, reason)
		l.pullRanges(ctx, ranges, valid)
		l.observe(ranges, valid, start)
	}
	return rangesErr(ranges)
}

// observe counts one call that read at least one of the valid ranges as one transfer of the bytes
// it read, on the lease's path now.
func (l *RangeLease) observe(ranges []Range, valid []int, start time.Time) {
	var n uint64
	read := false
	for _, i := range valid {
		if ranges[i].Err == nil {
			n += ranges[i].Length
			read = true
		}
	}
	if read {
		l.r.m.ObserveTransfer(l.Path, n, time.Since(start))
	}
}

// readRDMA reads the valid ranges with one GetMany on the lease's key; ranges whose GET failed are
// pulled after the lease fell back to the chunked path.
func (l *RangeLease) readRDMA(ctx context.Context, ranges []Range, valid []int) {
	r := l.r
	l.renew(ctx)
	reads := make([]RemoteRead, len(valid))
	for k, i := range valid {
		reads[k] = RemoteRead{Descriptor: l.desc, Offset: ranges[i].Offset, Dst: ranges[i].Dst[:ranges[i].Length], Memory: ranges[i].DstMemory}
	}
	var failed []int
	var firstErr error
	getMany(ctx, l.client, l.h.Owner, reads, r.cfg.BatchWindow, func(k int, err error) {
		if err == nil {
			r.received(l.h.Owner, l.path, len(reads[k].Dst))
			return
		}
		failed = append(failed, valid[k])
		if firstErr == nil {
			firstErr = err
		}
	})
	if len(failed) == 0 {
		r.m.CountPath(l.path, metrics.ReasonOK)
		return
	}
	if err := ctx.Err(); err != nil {
		for _, i := range failed {
			ranges[i].Err = fmt.Errorf("rendezvous: read range %d: %w", i, err)
		}
		return
	}
	why := r.getFailed(l.client, l.h.Owner, fmt.Errorf("%d ranges: %w", len(failed), firstErr))
	r.m.CountPath(metrics.PathChunked, why)
	r.abandon(l.h.Owner, l.id)
	nl, resp, err := r.acquire(ctx, l.h, nil)
	if err == nil && resp.Path != string(metrics.PathChunked) {
		r.abandon(l.h.Owner, nl.id)
		err = fmt.Errorf("rendezvous: read ranges: %w: owner %016x answered the fallback acquire (no offer) with path %q", ErrProtocol, uint64(l.h.Owner), resp.Path)
	}
	if err != nil {
		for _, i := range failed {
			ranges[i].Err = err
		}
		return // the lease keeps its first id: Release still drops the handle's reference
	}
	l.id, l.desc, l.client, l.chunk, l.reason = nl.id, nil, nil, int(resp.ChunkSize), why
	l.Path, l.Reason = metrics.PathChunked, why
	l.pullRanges(ctx, ranges, failed)
}

// pullRanges pulls the given ranges with the batch window across all of them.
func (l *RangeLease) pullRanges(ctx context.Context, ranges []Range, idx []int) {
	spans := make([]pullSpan, len(idx))
	for k, i := range idx {
		spans[k] = pullSpan{lease: l.id, off: ranges[i].Offset, dst: ranges[i].Dst[:ranges[i].Length], chunk: l.chunk, mem: ranges[i].DstMemory}
	}
	l.renewed = time.Now() // every pull renews the lease
	l.r.pullSpans(ctx, l.h.Owner, spans, func(k int, err error) {
		i := idx[k]
		if err != nil {
			ranges[i].Err = fmt.Errorf("rendezvous: read range %d: %w", i, err)
			return
		}
		l.r.received(l.h.Owner, metrics.PathChunked, len(spans[k].dst))
	})
}

// renew keeps an RDMA-path lease alive: a one-sided GET leaves no trace on the owner, so once half
// the TTL passed since the last renewal a one-byte pull renews it, as every pull does.
func (l *RangeLease) renew(ctx context.Context) {
	if l.ttl <= 0 || time.Since(l.renewed) < l.ttl/2 || l.size == 0 {
		return
	}
	var one [1]byte
	req := wire.AppendPullRequest(nil, wire.PullRequest{Lease: l.id, Offset: 0, Length: 1})
	if err := l.r.msgr.RequestInto(ctx, l.h.Owner, opPull, req, one[:]); err != nil {
		l.r.log.Debug("rendezvous: renewing an RDMA lease failed; its reads will say why", "lease", l.id, "err", err)
		return
	}
	l.renewed = time.Now()
}

// rangesErr summarises the ranges' outcomes: nil when all succeeded.
func rangesErr(ranges []Range) error {
	var first error
	n := 0
	for _, rg := range ranges {
		if rg.Err != nil {
			if first == nil {
				first = rg.Err
			}
			n++
		}
	}
	if n == 0 {
		return nil
	}
	return fmt.Errorf("rendezvous: %d of %d ranges failed; the first: %w", n, len(ranges), first)
}
