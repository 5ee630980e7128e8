package rendezvous

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/velo-go/velo/velo/internal/slowpath"
	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/transport"
)

func (r *Rendezvous) registerHandlers() {
	g := r.msgr
	g.HandleInternal(opMetadata, r.onMetadata)
	g.HandleInternal(opAcquire, r.onAcquire)
	g.HandleInternal(opAcquireBatch, r.onAcquireBatch)
	g.HandleInternal(opAcquireBatchInline, r.onAcquireBatch)
	g.HandleInternal(opPull, r.onPull)
	g.HandleInternal(opDetach, func(ctx context.Context, from transport.InstanceID, p []byte) ([][]byte, func(), error) {
		return r.onEndLease(from, p, false)
	})
	g.HandleInternal(opRelease, func(ctx context.Context, from transport.InstanceID, p []byte) ([][]byte, func(), error) {
		return r.onEndLease(from, p, true)
	})
	g.HandleInternal(opEndBatch, r.onEndBatch)
	g.HandleInternal(opRef, func(ctx context.Context, from transport.InstanceID, p []byte) ([][]byte, func(), error) {
		return nil, nil, r.onHandle(p, r.store.ref)
	})
	g.HandleInternal(opDrop, func(ctx context.Context, from transport.InstanceID, p []byte) ([][]byte, func(), error) {
		return nil, nil, r.onHandle(p, r.store.drop)
	})
}

func decodeHandle(p []byte) (Handle, error) {
	w, err := wire.DecodeHandle(p)
	if err != nil {
		return Handle{}, ownerErr(fmt.Errorf("%w: %w", ErrBadHandle, err))
	}
	return fromWire(w), nil
}

func (r *Rendezvous) onHandle(p []byte, op func(Handle) error) error {
	h, err := decodeHandle(p)
	if err != nil {
		return err
	}
	return ownerErr(op(h))
}

func (r *Rendezvous) onMetadata(ctx context.Context, from transport.InstanceID, p []byte) ([][]byte, func(), error) {
	h, err := decodeHandle(p)
	if err != nil {
		return nil, nil, err
	}
	si, err := r.store.metadata(h)
	if err != nil {
		return nil, nil, ownerErr(err)
	}
	md := wire.Metadata{Size: si.size, Refs: uint32(si.refs), Leases: uint32(si.leases)}
	if !si.pinned {
		md.Staging = string(si.stagingReason)
	}
	b, err := wire.AppendMetadata(nil, md)
	return [][]byte{b}, nil, err
}

func (r *Rendezvous) onAcquire(ctx context.Context, from transport.InstanceID, p []byte) ([][]byte, func(), error) {
	req, err := wire.DecodeAcquireRequest(p)
	if err != nil {
		return nil, nil, ownerErr(fmt.Errorf("%w: %w", ErrProtocol, err))
	}
	if err := r.authorize(from); err != nil {
		return nil, nil, err
	}
	resp, err := r.acquireOne(ctx, from, fromWire(req.Handle), req.Offer)
	if err != nil {
		return nil, nil, ownerErr(err)
	}
	b, err := wire.AppendAcquireResponse(nil, resp)
	if err != nil {
		r.store.endLease(from, resp.Lease, false)
		return nil, nil, err
	}
	return [][]byte{b}, nil, nil
}

// authorize refuses a peer that may not hold leases (Config.Authorize), before any lease exists.
func (r *Rendezvous) authorize(from transport.InstanceID) error {
	if r.cfg.Authorize == nil {
		return nil
	}
	if err := r.cfg.Authorize(from); err != nil {
		r.m.CountAuthRefusal()
		return ownerErr(fmt.Errorf("%w: %v", ErrUnauthenticated, err))
	}
	return nil
}

// acquireOne grants one lease on h to from and decides its path; both acquire messages use it.
func (r *Rendezvous) acquireOne(ctx context.Context, from transport.InstanceID, h Handle, offer []byte) (wire.AcquireResponse, error) {
	sl, resp, err := r.grant(from, h)
	if err != nil {
		return resp, err
	}
	path, reason := r.decide(ctx, sl, offer, &resp)
	r.answer(sl, offer, &resp, path, reason)
	return resp, nil
}

// answer counts an acquire's path and fills it in the response. A typed slot (device memory)
// served by chunks counts device_bounce, and answers it to a consumer that knows that reason.
func (r *Rendezvous) answer(sl Slot, offer []byte, resp *wire.AcquireResponse, path metrics.Path, reason metrics.Reason) {
	counted := reason
	if path == metrics.PathChunked {
		counted = chunkedReason(sl.Opts.Memory, reason)
		if len(offer) > 0 && slowpath.Worth(string(counted)) {
			// The consumer offered RDMA and this side decided chunks.
			r.slow.Once(r.log, "rendezvous: a consumer offered RDMA and this owner serves its transfers by chunks",
				uint64(sl.Lease.Consumer), string(counted))
		}
	}
	r.m.CountPath(path, counted)
	resp.Path, resp.Reason = string(wirePath(path)), string(wireReason(offer, counted, reason))
}

// wirePath is what an answer says of path: the same-host lane is the RDMA path on the wire (a
// descriptor to read), whichever backend its key is for.
func wirePath(p metrics.Path) metrics.Path {
	if p == metrics.PathSameHost {
		return metrics.PathRDMA
	}
	return p
}

// wireReason is the reason an owner answers: device_bounce only to a consumer whose offer says
// it knows that reason (version 3); any other gets the reason it would have had before memory
// types (not_pinned when it offered RDMA: the payload is not in memory it can read).
func wireReason(offer []byte, counted, before metrics.Reason) metrics.Reason {
	if counted != metrics.ReasonDeviceBounce {
		return counted
	}
	if len(offer) > 0 {
		if o, err := wire.DecodeOffer(offer); err == nil {
			if v, err := wire.RDMAOfferVersionOf(o.Blob); err == nil && v >= wire.RDMAOfferVersion {
				return counted
			}
		}
	}
	if before == "" || before == metrics.ReasonDeviceBounce || before == metrics.ReasonOK {
		return metrics.ReasonNotPinned
	}
	return before
}

// registryPath is the label of a lease on the registry path whose descriptor is desc: the lane
// its key takes (PathReporter), or rdma.
func registryPath(side any, desc []byte) metrics.Path {
	if pr, ok := side.(PathReporter); ok {
		if p := pr.PathOf(desc); p != "" {
			return p
		}
	}
	return metrics.PathRDMA
}

// grant takes the lease on h for from and fills what every answer carries.
func (r *Rendezvous) grant(from transport.InstanceID, h Handle) (Slot, wire.AcquireResponse, error) {
	sl, err := r.store.newLease(h, from)
	if err != nil {
		return Slot{}, wire.AcquireResponse{}, err
	}
	return sl, r.response(sl, r.maxChunk(from)), nil
}

// response is what every answer to an acquire of sl carries; chunk is r.maxChunk of the consumer,
// which a batch looks up once.
func (r *Rendezvous) response(sl Slot, chunk int) wire.AcquireResponse {
	return wire.AcquireResponse{Lease: sl.Lease.ID, TTLMillis: uint64(r.cfg.LeaseTTL / time.Millisecond),
		Size: uint64(len(sl.Data)), ChunkSize: uint32(chunk)}
}

// onAcquireBatch grants a lease on each handle of the request (one offer for all), entry by entry:
// a handle that cannot be leased answers its own error and the others are served. A payload
// within the inline limit both sides set (the request's InlineMax, Config.BatchInlineMax) goes
// inside its entry, while the answer's inline budget lasts; the entries that go to the RDMA path
// are registered together where the server can (RDMAManyServer), each still with its own key.
func (r *Rendezvous) onAcquireBatch(ctx context.Context, from transport.InstanceID, p []byte) ([][]byte, func(), error) {
	req, err := wire.DecodeAcquireBatchRequest(p)
	if err != nil {
		return nil, nil, ownerErr(fmt.Errorf("%w: %w", ErrProtocol, err))
	}
	if err := r.authorize(from); err != nil {
		return nil, nil, err
	}
	// The scratch and the holds on the inline entries' slots (their bytes are parts of the answer,
	// viewed as a pull's are) last until the answer is sent; on an early return they end here.
	sc := newAcquireScratch(len(req.Handles))
	defer func() {
		if sc != nil {
			sc.done(r.store)
		}
	}()
	hs, granted, entries := sc.hs, sc.granted, sc.entries
	many, _ := r.cfg.Server.(RDMAManyServer)
	var serve []int
	var slots []Slot
	var blob []byte
	for i, wh := range req.Handles {
		hs[i] = fromWire(wh)
	}
	inlineMax := min(int(req.InlineMax), r.cfg.BatchInlineMax)
	r.store.newLeases(hs, from, inlineMax, inlineBudget(r.msgr.MaxFrame(from), len(hs)), granted)
	var inlineBytes int
	maxChunk := r.maxChunk(from)
	for i, g := range granted {
		if g.err != nil {
			entries[i].ErrKind, entries[i].ErrText = batchEntryError(g.err)
			continue
		}
		sl, resp := g.slot, r.response(g.slot, maxChunk)
		if g.held != nil {
			sc.held, inlineBytes = append(sc.held, g.held), inlineBytes+len(sl.Data)
			resp.Path, resp.Reason = string(metrics.PathInline), string(metrics.ReasonOK)
			entries[i].Response, entries[i].Inline = resp, sl.Data
			if entries[i].Inline == nil {
				entries[i].Inline = []byte{}
			}
			continue
		}
		path, reason, b, ok := r.precheck(sl, req.Offer)
		if ok && many == nil {
			path, reason = r.served(sl, &resp, r.serveOne(ctx, sl, b))
		} else if ok {
			serve, slots, blob = append(serve, i), append(slots, sl), b
			entries[i].Response = resp
			continue
		}
		r.answer(sl, req.Offer, &resp, path, reason)
		entries[i].Response = resp
	}
	if len(serve) > 0 {
		for k, sv := range many.ServeMany(ctx, slots, blob) {
			resp := &entries[serve[k]].Response
			path, reason := r.served(slots[k], resp, sv)
			r.answer(slots[k], req.Offer, resp, path, reason)
		}
	}
	parts, err := wire.AcquireBatchResponseParts(entries, &sc.answer)
	if err != nil {
		for _, e := range entries {
			if !e.Failed() {
				r.store.endLease(from, e.Response.Lease, false)
			}
		}
		return nil, nil, err
	}
	// The inline payloads go out as parts of the answer, straight from their slots: their holds
	// end when the answer has been sent (or could not be).
	r.m.CountPaths(metrics.PathInline, metrics.ReasonOK, len(sc.held))
	r.m.AddBytes("sent", string(metrics.PathInline), inlineBytes)
	r.m.PeerServed(uint64(from), metrics.PathInline, inlineBytes)
	sent := sc
	sc = nil // not ended on return: once the answer is sent
	return parts, func() { sent.done(r.store) }, nil
}

// acquireScratch is what answering one batched acquire needs until the answer is sent: the
// handles, their leases' outcomes, the answer's entries and its encoding (a few hundred bytes per
// handle), and the slots held for the inline entries. An owner answering a stream of batches
// takes them from a pool instead of leaving them all to the collector.
type acquireScratch struct {
	hs      []Handle
	granted []leased
	entries []wire.AcquireBatchEntry
	answer  wire.PartsBuffer
	held    []*slot
}

// maxPooledScratch bounds the handles of the scratch a pool keeps (a few parts of the largest
// inline batches); a larger one is left to the collector.
const maxPooledScratch = 4 * maxInlinePart

var acquireScratches = sync.Pool{New: func() any { return new(acquireScratch) }}

func newAcquireScratch(n int) *acquireScratch {
	sc := acquireScratches.Get().(*acquireScratch)
	if cap(sc.hs) < n {
		sc.hs, sc.granted, sc.entries = make([]Handle, n), make([]leased, n), make([]wire.AcquireBatchEntry, n)
	}
	sc.hs, sc.granted, sc.entries, sc.held = sc.hs[:n], sc.granted[:n], sc.entries[:n], sc.held[:0]
	return sc
}

// done ends the holds and gives sc back to the pool, holding nothing: the entries and the answer
// viewed payloads and named slots.
func (sc *acquireScratch) done(s *store) {
	s.unhold(sc.held)
	if cap(sc.hs) > maxPooledScratch {
		return
	}
	clear(sc.granted)
	clear(sc.entries)
	clear(sc.held)
	sc.answer.Reset()
	acquireScratches.Put(sc)
}

// batchEntryError is err as one entry of a batch answer: its sentinel's kind and the owner's text
// (bounded, so that a long text never makes the answer unencodable).
func batchEntryError(err error) (kind, text string) {
	kind, text = "rendezvous.error", err.Error()
	if k, ok := kinds.KindOf(err); ok {
		kind = k
	}
	if len(text) > 1024 {
		text = text[:1024]
	}
	return kind, text
}

// maxChunk is the largest pull this owner serves to peer: ChunkSize, capped so a chunk and its
// header fit one frame of the transport that carries it.
func (r *Rendezvous) maxChunk(peer transport.InstanceID) int {
	c := r.cfg.ChunkSize
	if f := r.msgr.MaxFrame(peer) - wire.HeaderLen; f > 0 && f < c {
		c = f
	}
	return c
}

// decide is the owner's path decision (docs/architecture.md, "Path decision"): its own state
// first, then the offer, then the slot's memory, then the registration.
func (r *Rendezvous) decide(ctx context.Context, sl Slot, offer []byte, resp *wire.AcquireResponse) (metrics.Path, metrics.Reason) {
	path, reason, blob, ok := r.precheck(sl, offer)
	if !ok {
		return path, reason
	}
	return r.served(sl, resp, r.serveOne(ctx, sl, blob))
}

// precheck is the decision up to the registration: ok with the offer's backend blob when the
// slot is to be registered, else the chunked path and why.
func (r *Rendezvous) precheck(sl Slot, offer []byte) (metrics.Path, metrics.Reason, []byte, bool) {
	srv := r.cfg.Server
	switch {
	case srv == nil:
		return metrics.PathChunked, metrics.ReasonNotConfigured, nil, false
	case srv.KillSwitch():
		return metrics.PathChunked, metrics.ReasonKillSwitch, nil, false
	case r.draining.Load():
		return metrics.PathChunked, metrics.ReasonDraining, nil, false
	}
	// Asked whether or not an offer came: this side may refuse a pair the consumer offered
	// (software lanes, without this side's opt-in).
	if why := refusedBy(srv, sl.Lease.Consumer); why != "" {
		return metrics.PathChunked, why, nil, false
	}
	if len(offer) == 0 {
		return metrics.PathChunked, metrics.ReasonNoOffer, nil, false
	}
	o, err := wire.DecodeOffer(offer)
	if err != nil {
		r.log.Warn("rendezvous: undecodable RDMA offer", "peer", fmt.Sprintf("%016x", uint64(sl.Lease.Consumer)), "err", err)
		return metrics.PathChunked, metrics.ReasonDecodeError, nil, false
	}
	if o.Backend != srv.Backend() {
		return metrics.PathChunked, metrics.ReasonNoOffer, nil, false
	}
	if sl.Opts.Pinned == nil {
		return metrics.PathChunked, sl.Opts.Reason, nil, false
	}
	return "", "", o.Blob, true
}

func (r *Rendezvous) serveOne(ctx context.Context, sl Slot, blob []byte) Served {
	desc, onEnd, reason, err := r.cfg.Server.Serve(ctx, sl, blob)
	return Served{Descriptor: desc, OnLeaseEnd: onEnd, Reason: reason, Err: err}
}

// served files the registration's outcome: the descriptor in the answer and its revocation on the
// lease's end, or the chunked path and why.
func (r *Rendezvous) served(sl Slot, resp *wire.AcquireResponse, sv Served) (metrics.Path, metrics.Reason) {
	if sv.Err != nil || sv.Descriptor == nil {
		reason := sv.Reason
		if reason == "" || reason == metrics.ReasonOK {
			reason = metrics.ReasonBudget
		}
		if sv.Err != nil {
			r.log.Info("rendezvous: RDMA registration refused; serving chunks", "reason", reason, "err", sv.Err)
		}
		return metrics.PathChunked, reason
	}
	r.store.onLeaseEnd(sl.Lease.ID, sv.OnLeaseEnd)
	resp.Descriptor = sv.Descriptor
	// A one-sided read leaves no trace here: what the owner can count is what it made readable.
	path := registryPath(r.cfg.Server, sv.Descriptor)
	r.m.PeerServed(uint64(sl.Lease.Consumer), path, len(sl.Data))
	return path, metrics.ReasonOK
}

func (r *Rendezvous) onPull(ctx context.Context, from transport.InstanceID, p []byte) ([][]byte, func(), error) {
	req, err := wire.DecodePullRequest(p)
	if err != nil {
		return nil, nil, ownerErr(fmt.Errorf("%w: %w", ErrProtocol, err))
	}
	chunk, mem, done, err := r.store.read(from, req.Lease, req.Offset, req.Length, r.maxChunk(from))
	if err != nil {
		return nil, nil, ownerErr(err)
	}
	if mem.Typed() {
		// Device memory never goes to the socket: its chunk is copied to a host bounce buffer,
		// which the answer's send gives back.
		b, back, err := r.bounceChunk(ctx, chunk, mem.Type)
		done()
		if err != nil {
			return nil, nil, ownerErr(err)
		}
		chunk, done = b, back
	}
	r.m.AddBytes("sent", string(metrics.PathChunked), len(chunk))
	r.m.PeerServed(uint64(from), metrics.PathChunked, len(chunk))
	return [][]byte{chunk}, done, nil
}

func (r *Rendezvous) onEndLease(from transport.InstanceID, p []byte, release bool) ([][]byte, func(), error) {
	req, err := wire.DecodeLeaseRequest(p)
	if err != nil {
		return nil, nil, ownerErr(fmt.Errorf("%w: %w", ErrProtocol, err))
	}
	return nil, nil, ownerErr(r.store.endLease(from, req.Lease, release))
}

// onEndBatch ends each lease of the request (EndLeases), entry by entry: a lease that is not open
// for this consumer answers its own error and the others end.
func (r *Rendezvous) onEndBatch(ctx context.Context, from transport.InstanceID, p []byte) ([][]byte, func(), error) {
	req, err := wire.DecodeEndBatchRequest(p)
	if err != nil {
		return nil, nil, ownerErr(fmt.Errorf("%w: %w", ErrProtocol, err))
	}
	entries := make([]wire.EndBatchEntry, len(req.Leases))
	for i, id := range req.Leases {
		if err := r.store.endLease(from, id, req.Release); err != nil {
			entries[i].ErrKind, entries[i].ErrText = batchEntryError(err)
		}
	}
	b, err := wire.AppendEndBatchResponse(nil, entries)
	if err != nil {
		return nil, nil, err
	}
	return [][]byte{b}, nil, nil
}
