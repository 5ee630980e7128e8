package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/transport"
)

// Lease is a consumer's hold on a payload it fetched. End it with Release (the handle's reference
// is spent) or Detach (the payload stays for another Get); if the consumer does neither, the
// owner's reaper ends it after the lease TTL.
type Lease struct {
	r      *Rendezvous
	h      Handle
	id     uint64
	data   []byte
	ended  atomic.Bool
	Path   metrics.Path
	Reason metrics.Reason
}

// Handle is the handle this lease is on.
func (l *Lease) Handle() Handle { return l.h }

// Bytes is the payload (Get) or the caller's buffer (GetInto).
func (l *Lease) Bytes() []byte { return l.data }

// Release ends the lease and drops the handle's reference; at zero the owner frees the payload.
func (l *Lease) Release(ctx context.Context) error { return l.end(ctx, true) }

// Detach ends the lease and keeps the payload staged: the handle can be fetched again.
func (l *Lease) Detach(ctx context.Context) error { return l.end(ctx, false) }

func (l *Lease) end(ctx context.Context, release bool) error {
	what := "detach"
	if release {
		what = "release"
	}
	if l.ended.Swap(true) {
		return fmt.Errorf("rendezvous: %s: %w: lease %d already ended", what, ErrBadLease, l.id)
	}
	return l.settle(ctx, release, l.r.endLease(ctx, l.h.Owner, l.id, release, what))
}

// settle finishes the end of the lease given the owner's answer err.
func (l *Lease) settle(ctx context.Context, release bool, err error) error {
	if release && errors.Is(err, ErrBadLease) {
		// The owner ended the lease already (its TTL passed while this consumer was slow or
		// stopped), but the handle's reference this lease would have spent is still there: drop
		// it by the handle, or the payload would stay staged on the owner until it closes.
		if derr := l.r.Unref(ctx, l.h); derr == nil {
			return nil
		}
	}
	return err
}

func (r *Rendezvous) endLease(ctx context.Context, owner transport.InstanceID, id uint64, release bool, what string) error {
	if owner == r.cfg.Self {
		if err := r.store.endLease(owner, id, release); err != nil {
			return localErr(what, err)
		}
		return nil
	}
	op := opDetach
	if release {
		op = opRelease
	}
	if _, err := r.msgr.Request(ctx, owner, op, wire.AppendLeaseRequest(nil, wire.LeaseRequest{Lease: id})); err != nil {
		return remoteErr(what, err)
	}
	return nil
}

// Get fetches the payload h names into a new buffer. The buffer is allocated only after the owner
// confirmed the handle (and its size), and never above Config.MaxGetSize.
func (r *Rendezvous) Get(ctx context.Context, h Handle) (*Lease, error) {
	return r.GetAlloc(ctx, h, func(n int) ([]byte, error) { return make([]byte, n), nil })
}

// GetAlloc fetches the payload h names into memory from alloc. A handle's size is only a claim of
// whoever sent the handle, so nothing is allocated for it up front: a handle above
// Config.MaxGetSize is refused without asking the owner (ErrTooLarge), and otherwise alloc runs
// once the owner has granted a lease on a payload of exactly that size. alloc must return n
// bytes; when it fails, the lease ends before GetAlloc returns its error.
func (r *Rendezvous) GetAlloc(ctx context.Context, h Handle, alloc func(n int) ([]byte, error)) (*Lease, error) {
	if h.Size > r.cfg.MaxGetSize {
		return nil, fmt.Errorf("rendezvous: get: %w: the handle claims %d bytes, above this instance's limit of %d: raise it with velo.WithMaxGetSize, or fetch into a buffer of your own with GetInto",
			ErrTooLarge, h.Size, r.cfg.MaxGetSize)
	}
	return r.get(ctx, h, alloc, Memory{})
}

// GetInto fetches the payload h names into dst, which must be exactly h.Size bytes (the caller's
// buffer is its own limit: MaxGetSize does not apply). On the chunked path each chunk is read from
// the socket straight into dst. When GetInto returns, nothing writes dst any more, whatever
// happened.
func (r *Rendezvous) GetInto(ctx context.Context, h Handle, dst []byte) (*Lease, error) {
	if uint64(len(dst)) != h.Size {
		return nil, fmt.Errorf("rendezvous: get: %w: buffer of %d bytes for a %d-byte payload: pass a buffer of exactly Handle.Size bytes",
			ErrBufferSize, len(dst), h.Size)
	}
	return r.get(ctx, h, func(int) ([]byte, error) { return dst, nil }, Memory{})
}

// GetIntoMemory is GetInto into memory of the type m names: device memory is read by the
// transport with its type on the RDMA path and copied in through host bounce buffers, one per
// pull in flight, on the chunked path (reason device_bounce). dst views the memory; nothing but
// the transport and Config.CopyMemory touches it.
func (r *Rendezvous) GetIntoMemory(ctx context.Context, h Handle, dst []byte, m Memory) (*Lease, error) {
	if uint64(len(dst)) != h.Size {
		return nil, fmt.Errorf("rendezvous: get: %w: buffer of %d bytes for a %d-byte payload: pass a buffer of exactly Handle.Size bytes",
			ErrBufferSize, len(dst), h.Size)
	}
	if err := r.checkMemory(dst, m); err != nil {
		return nil, fmt.Errorf("rendezvous: get: %w", err)
	}
	return r.get(ctx, h, func(int) ([]byte, error) { return dst, nil }, m)
}

// get takes a lease on h, then asks alloc for the destination (sized as the owner confirmed),
// then moves the bytes. A get that put its bytes in place is one transfer of
// velo_rendezvous_transfer_duration_seconds, timed from just before the acquire is sent to the
// moment the last byte is in the destination: the acquire's round trip, alloc, and the GET or the
// pulls are inside; building the offer before it and the lease's end after it are not. A GET that
// failed and fell back to chunks is one transfer on the chunked path, its time covering both
// tries.
func (r *Rendezvous) get(ctx context.Context, h Handle, alloc func(n int) ([]byte, error), m Memory) (*Lease, error) {
	if h.Owner == 0 || h.Nonce == 0 {
		return nil, fmt.Errorf("rendezvous: get: %w: %v is not a handle an owner issued", ErrBadHandle, h)
	}
	if h.Owner == r.cfg.Self {
		return r.getLocal(h, alloc, m)
	}
	offer, reason, client := r.offerFor(h.Owner, m)
	start := time.Now()
	l, resp, err := r.acquire(ctx, h, offer)
	if err != nil {
		return nil, err
	}
	dst, err := alloc(int(h.Size)) // acquire checked that the owner's payload is h.Size bytes
	if err != nil {
		r.detachNow(ctx, h.Owner, l.id)
		return nil, err
	}
	l.data = dst
	if resp.Path == string(metrics.PathRDMA) {
		var why metrics.Reason
		if err := rdmaGet(ctx, client, h.Owner, resp.Descriptor, dst, m); err == nil {
			path := registryPath(client, resp.Descriptor)
			r.m.ObserveTransfer(path, uint64(len(dst)), time.Since(start))
			r.m.CountPath(path, metrics.ReasonOK)
			r.received(h.Owner, path, len(dst))
			l.Path, l.Reason = path, metrics.ReasonOK
			return l, nil
		} else {
			why = r.getFailed(client, h.Owner, err)
		}
		r.m.CountPath(metrics.PathChunked, why)
		r.abandon(h.Owner, l.id)
		if l, resp, err = r.acquire(ctx, h, nil); err != nil {
			return nil, err
		}
		l.data = dst
		if resp.Path != string(metrics.PathChunked) {
			r.abandon(h.Owner, l.id)
			return nil, fmt.Errorf("rendezvous: get: %w: owner %016x answered the fallback acquire (no offer) with path %q",
				ErrProtocol, uint64(h.Owner), resp.Path)
		}
		l.Path, l.Reason = metrics.PathChunked, why
	} else {
		if offer != nil {
			reason = metrics.Reason(resp.Reason) // we offered; the owner says why not
			r.offerRefused(client, h.Owner, reason)
		}
		reason = chunkedReason(m, reason)
		r.m.CountPath(metrics.PathChunked, reason)
		l.Path, l.Reason = metrics.PathChunked, reason
	}
	if err := r.pullAll(ctx, h.Owner, l.id, int(resp.ChunkSize), dst, m); err != nil {
		r.abandon(h.Owner, l.id)
		return nil, err
	}
	r.m.ObserveTransfer(metrics.PathChunked, uint64(len(dst)), time.Since(start))
	r.received(h.Owner, metrics.PathChunked, len(dst))
	return l, nil
}

// received counts n payload bytes moved in from owner on path p: in the instance's total and in
// the owner's own series.
func (r *Rendezvous) received(owner transport.InstanceID, p metrics.Path, n int) {
	r.m.AddBytes("received", string(p), n)
	r.m.PeerReceived(uint64(owner), p, n)
}

// offer is the consumer's side of the path decision: it returns the offer to send (nil for none)
// and, when there is none, the reason to count.
func (r *Rendezvous) offer(owner transport.InstanceID) ([]byte, metrics.Reason, RDMAClient) {
	c := r.cfg.Client
	switch {
	case c == nil:
		return nil, metrics.ReasonNotConfigured, nil
	case c.KillSwitch():
		return nil, metrics.ReasonKillSwitch, nil
	}
	// A reason the transport gives (release_mismatch, software_lanes) was said once, naming the
	// pair, by the transport itself.
	if why := refusedBy(c, owner); why != "" {
		return nil, why, nil
	}
	if !c.CanGet(owner) {
		// Decided per transfer: the first transfer after the owner's UCX address is known offers.
		r.slow.Once(r.log, "rendezvous: transfers from this owner go by chunks: this instance knows no UCX address of it yet (or it has none); the first transfer after one is known takes RDMA",
			uint64(owner), string(metrics.ReasonNoOffer))
		return nil, metrics.ReasonNoOffer, nil
	}
	blob, err := c.Offer(owner)
	if err != nil {
		r.log.Warn("rendezvous: could not build an RDMA offer", "owner", fmt.Sprintf("%016x", uint64(owner)), "err", err)
		return nil, metrics.ReasonNoOffer, nil
	}
	b, err := wire.AppendOffer(nil, wire.Offer{Backend: c.Backend(), Blob: blob})
	if err != nil {
		return nil, metrics.ReasonDecodeError, nil
	}
	return b, "", c
}

// getFailed logs a failed one-sided read from owner and says why the transfer falls back to
// chunks: the transport's refusal of the pair when the failure taught it one (no_ucx_lane: UCX
// found no lane to the owner, which the transport logs once per peer, so this line is debug), and
// get_failed otherwise.
func (r *Rendezvous) getFailed(side any, owner transport.InstanceID, err error) metrics.Reason {
	if why := refusedBy(side, owner); why != "" {
		r.log.Debug("rendezvous: RDMA get failed; fetching by chunks", "owner", fmt.Sprintf("%016x", uint64(owner)), "reason", why, "err", err)
		return why
	}
	r.log.Warn("rendezvous: RDMA get failed; fetching by chunks", "owner", fmt.Sprintf("%016x", uint64(owner)), "err", err)
	return metrics.ReasonGetFailed
}

// refusedBy is the reason the pair has no RDMA path as side (an RDMAClient or RDMAServer) gives
// it, "" when it gives none.
func refusedBy(side any, peer transport.InstanceID) metrics.Reason {
	if pr, ok := side.(PathRefuser); ok {
		return pr.PathRefusal(peer)
	}
	return ""
}

func (r *Rendezvous) acquire(ctx context.Context, h Handle, offer []byte) (*Lease, wire.AcquireResponse, error) {
	req, err := wire.AppendAcquireRequest(nil, wire.AcquireRequest{Handle: h.wire(), Offer: offer})
	if err != nil {
		return nil, wire.AcquireResponse{}, err
	}
	b, err := r.msgr.Request(ctx, h.Owner, opAcquire, req)
	if err != nil {
		return nil, wire.AcquireResponse{}, remoteErr("acquire", err)
	}
	resp, err := wire.DecodeAcquireResponse(b)
	if err != nil {
		r.m.CountPath(metrics.PathChunked, metrics.ReasonDecodeError)
		return nil, wire.AcquireResponse{}, fmt.Errorf("rendezvous: acquire from %016x: %w: %v", uint64(h.Owner), ErrProtocol, err)
	}
	l, err := r.checkGrant(h, offer, resp, false)
	return l, resp, err
}

// checkGrant checks an owner's answer to an acquire of h (single or in a batch) against what a
// correct owner sends, and returns the lease. A wrong answer counts as decode_error and its lease,
// if it names one, is given back in the background.
//
// inline says whether the answer carried the payload's bytes (a batch entry); exactly those answers
// name the inline path.
func (r *Rendezvous) checkGrant(h Handle, offer []byte, resp wire.AcquireResponse, inline bool) (*Lease, error) {
	var err error
	if !metrics.Valid(metrics.Path(resp.Path), metrics.Reason(resp.Reason)) {
		err = fmt.Errorf("path %q with reason %q", resp.Path, resp.Reason)
	}
	switch named := resp.Path == string(metrics.PathInline); {
	case err != nil:
	case named && !inline:
		err = errors.New("path inline without the payload")
	case inline && !named:
		err = fmt.Errorf("the payload inside the answer with path %q", resp.Path)
	}
	if err == nil && resp.Size != h.Size {
		err = fmt.Errorf("payload of %d bytes, the handle says %d", resp.Size, h.Size)
	}
	if err == nil && (resp.Path == string(metrics.PathRDMA)) != (len(resp.Descriptor) > 0) {
		err = fmt.Errorf("path %q with a %d-byte descriptor", resp.Path, len(resp.Descriptor))
	}
	if err == nil && resp.Path == string(metrics.PathRDMA) && offer == nil {
		err = errors.New("an RDMA descriptor although no offer was sent")
	}
	if err != nil {
		r.m.CountPath(metrics.PathChunked, metrics.ReasonDecodeError)
		if resp.Lease != 0 {
			r.abandon(h.Owner, resp.Lease)
		}
		return nil, fmt.Errorf("rendezvous: acquire from %016x: %w: %v", uint64(h.Owner), ErrProtocol, err)
	}
	return &Lease{r: r, h: h, id: resp.Lease}, nil
}

// abandon detaches a lease in the background after a failed get, so the owner does not wait for
// the TTL. Failure is harmless: the reaper ends the lease anyway.
func (r *Rendezvous) abandon(owner transport.InstanceID, id uint64) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := r.endLease(ctx, owner, id, false, "detach"); err != nil {
			r.log.Debug("rendezvous: detaching an abandoned lease failed; the owner's reaper will end it", "err", err)
		}
	}()
}

// detachNow ends a lease whose bytes will not be fetched, before the get that took it returns,
// so the caller sees no lease left behind. If the owner cannot be told, its reaper ends the lease.
func (r *Rendezvous) detachNow(ctx context.Context, owner transport.InstanceID, id uint64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := r.endLease(ctx, owner, id, false, "detach"); err != nil {
		r.log.Debug("rendezvous: detaching an unused lease failed; the owner's reaper will end it", "err", err)
	}
}

// pullAll moves dst's bytes with up to PullWindow pulls in flight. It returns after every pull
// has finished, so nothing writes dst afterwards.
//
// A typed destination (device memory) is never read into from the socket: each pull lands in a
// host bounce buffer of its worker (PullWindow of them, one chunk each) and is copied in from there.
func (r *Rendezvous) pullAll(ctx context.Context, owner transport.InstanceID, lease uint64, chunk int, dst []byte, m Memory) error {
	if limit := r.msgr.MaxFrame(owner) - wire.HeaderLen; limit > 0 && chunk > limit {
		chunk = limit
	}
	n := (len(dst) + chunk - 1) / chunk
	if n == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Int64
	var once sync.Once
	var firstErr error
	var wg sync.WaitGroup
	workers := min(r.cfg.PullWindow, n)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := make([]byte, 0, wire.PullRequestLen)
			var bounce []byte
			if m.Typed() {
				bounce = make([]byte, chunk)
			}
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				off := i * chunk
				end := min(off+chunk, len(dst))
				req = wire.AppendPullRequest(req[:0], wire.PullRequest{Lease: lease, Offset: uint64(off), Length: uint32(end - off)})
				into := dst[off:end]
				if bounce != nil {
					into = bounce[:end-off]
				}
				if err := r.msgr.RequestInto(ctx, owner, opPull, req, into); err != nil {
					once.Do(func() { firstErr = remoteErr(fmt.Sprintf("pull of %d bytes at %d", end-off, off), err); cancel() })
					return
				}
				if bounce != nil {
					if err := r.copyMemory(dst[off:end], m.Type, into, transport.MemoryHost); err != nil {
						once.Do(func() {
							firstErr = fmt.Errorf("rendezvous: copying %d bytes at %d from the bounce buffer: %w", end-off, off, err)
							cancel()
						})
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	return firstErr
}

// getLocal is the fast path when this instance owns h: a lease like any other (so detach and
// release mean the same), and one copy from the slot. It takes no lane, so it is no transfer of
// the transfer histogram; its bytes count under path local.
func (r *Rendezvous) getLocal(h Handle, alloc func(n int) ([]byte, error), m Memory) (*Lease, error) {
	sl, err := r.store.newLease(h, r.cfg.Self)
	if err != nil {
		return nil, localErr("get", err)
	}
	dst, err := alloc(len(sl.Data))
	if err != nil {
		r.store.endLease(r.cfg.Self, sl.Lease.ID, false)
		return nil, err
	}
	if m.Typed() || sl.Opts.Memory.Typed() {
		if err := r.copyMemory(dst, m.Type, sl.Data, sl.Opts.Memory.Type); err != nil {
			r.store.endLease(r.cfg.Self, sl.Lease.ID, false)
			return nil, fmt.Errorf("rendezvous: get: %w", err)
		}
	} else {
		copy(dst, sl.Data)
	}
	r.m.AddBytes("received", "local", len(dst))
	return &Lease{r: r, h: h, id: sl.Lease.ID, data: dst}, nil
}

// LeaseID returns the owner's ID for l (for tools and tests that speak the protocol directly).
func LeaseID(l *Lease) uint64 { return l.id }
