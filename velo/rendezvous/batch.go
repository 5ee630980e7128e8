package rendezvous

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/messenger"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/transport"

	"github.com/velo-go/velo/velo/internal/fanout"
)

// GetRequest is one entry of GetBatch.
type GetRequest struct {
	Handle Handle
	// Into receives the payload and must be exactly Handle.Size bytes; nil fetches into a new
	// buffer, allocated once the owner confirmed the size (and bounded by MaxGetSize, like Get).
	Into []byte
	// IntoMemory is what Into is (zero: host memory). Device memory (Into views it) is read
	// with its type on the RDMA path and through host bounce buffers on the chunked path
	// (reason device_bounce); it needs Into.
	IntoMemory Memory
}

// GetResult is the outcome of one GetRequest: a lease (the caller ends it, as after Get) or the
// error of that entry alone.
type GetResult struct {
	Index int
	Lease *Lease
	Err   error
}

// ErrDuplicateHandle: a batch named the same handle twice. The later entry is refused; the first
// is fetched.
var ErrDuplicateHandle = errors.New("handle repeated in one batch")

// DefaultBatchWindow is Config.BatchWindow's default.
const DefaultBatchWindow = 64

// maxBatchPart bounds the handles of one acquire batch message whose payloads move by their own
// reads or pulls; with a few hundred bytes per granted entry the answer stays well inside one frame
// of either transport, and four parts moving at once keep the acquires ahead of the reads.
// Entries expected inline count against maxInlinePart and the inline budget instead: their bytes
// are the answer, and larger answers carry them with less work per payload.
const (
	maxBatchPart  = 256
	maxInlinePart = 1024
)

// GetBatch fetches every request's payload and returns one result per request, in request order.
// It is Get for many handles at once, built for many small payloads (cache blocks of 4 KiB to a
// few MiB): the handles of one owner are leased together, a few hundred per round trip; their
// RDMA reads are posted without waiting for each other, up to Config.BatchWindow in flight per
// part (four parts move at once); and payloads on the chunked path are pulled with that many
// pulls in flight across a part, not one payload at a time. Owners are served in parallel.
//
// One entry's failure fails that entry alone: a released, foreign, forged or repeated handle, a
// buffer of the wrong size, an owner that refuses or goes away. each, when not nil, is called once
// per entry as it completes, one call at a time. When ctx ends, entries not yet done fail with its
// error. Every entry that fails gives back what it took before GetBatch returns: its lease is
// ended (and with it the owner's registration of its memory), so only the leases of the results
// without error remain, for the caller to Release or Detach.
//
// Each entry is a transfer of its own: velo_rendezvous_transfer_duration_seconds observes every
// entry that put its bytes in place once, under its path and its own size (see grant for what is
// timed); the batch as a whole is not observed.
func (r *Rendezvous) GetBatch(ctx context.Context, reqs []GetRequest, each func(GetResult)) []GetResult {
	b := &batch{r: r, ctx: ctx, reqs: reqs, results: make([]GetResult, len(reqs)), each: each}
	seen := make(map[Handle]int, len(reqs))
	byOwner := map[transport.InstanceID][]int{}
	var owners []transport.InstanceID
	for i, q := range reqs {
		h := q.Handle
		switch {
		case h.Owner == 0 || h.Nonce == 0:
			b.done(i, nil, fmt.Errorf("rendezvous: get: %w: %v is not a handle an owner issued", ErrBadHandle, h))
			continue
		case q.Into != nil && uint64(len(q.Into)) != h.Size:
			b.done(i, nil, fmt.Errorf("rendezvous: get: %w: buffer of %d bytes for a %d-byte payload: pass a buffer of exactly Handle.Size bytes",
				ErrBufferSize, len(q.Into), h.Size))
			continue
		case q.Into == nil && q.IntoMemory.Typed():
			b.done(i, nil, fmt.Errorf("rendezvous: get: %w: entry %d names memory of type %v without a buffer: pass the memory in Into", ErrBufferSize, i, q.IntoMemory.Type))
			continue
		case q.IntoMemory.Typed() && r.checkMemory(q.Into, q.IntoMemory) != nil:
			b.done(i, nil, fmt.Errorf("rendezvous: get: entry %d: %w", i, r.checkMemory(q.Into, q.IntoMemory)))
			continue
		case q.Into == nil && h.Size > r.cfg.MaxGetSize:
			b.done(i, nil, fmt.Errorf("rendezvous: get: %w: the handle claims %d bytes, above this instance's limit of %d: raise it with velo.WithMaxGetSize, or fetch into a buffer of your own (Into)",
				ErrTooLarge, h.Size, r.cfg.MaxGetSize))
			continue
		}
		if j, dup := seen[h]; dup {
			b.done(i, nil, fmt.Errorf("rendezvous: get: %w: entry %d repeats the handle of entry %d: fetch it once, or Ref it and Get it again after this batch", ErrDuplicateHandle, i, j))
			continue
		}
		seen[h] = i
		if h.Owner == r.cfg.Self {
			l, err := r.getLocal(h, b.alloc(i), q.IntoMemory)
			b.done(i, l, err)
			continue
		}
		if byOwner[h.Owner] == nil {
			owners = append(owners, h.Owner)
		}
		byOwner[h.Owner] = append(byOwner[h.Owner], i)
	}
	var wg sync.WaitGroup
	for _, o := range owners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.fromOwner(o, byOwner[o])
		}()
	}
	wg.Wait()
	return b.results
}

// batch is one GetBatch call.
type batch struct {
	r    *Rendezvous
	ctx  context.Context
	reqs []GetRequest

	mu      sync.Mutex // results and the calls of each
	results []GetResult
	each    func(GetResult)
}

// grant is an entry the owner leased: its lease, the owner's answer, the path reason to count
// if it goes chunked, and when the acquire that leased it was sent. Each entry is one transfer of
// velo_rendezvous_transfer_duration_seconds, timed from that acquire (its part's batch message, or
// its own acquire from an owner without one) to its own bytes in place, so an entry's time
// includes waiting behind the other entries of its part.
type grant struct {
	i      int
	l      *Lease
	resp   wire.AcquireResponse
	reason metrics.Reason
	start  time.Time
}

func (b *batch) done(i int, l *Lease, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.results[i] = GetResult{Index: i, Lease: l, Err: err}
	if b.each != nil {
		b.each(b.results[i])
	}
}

// alloc returns the destination of entry i: its Into, or a new buffer.
func (b *batch) alloc(i int) func(n int) ([]byte, error) {
	return func(n int) ([]byte, error) {
		if into := b.reqs[i].Into; into != nil {
			return into, nil
		}
		return make([]byte, n), nil
	}
}

// fail ends g's lease before the entry reports err, so that nothing of it outlives the batch.
func (b *batch) fail(owner transport.InstanceID, g grant, err error) {
	b.r.detachNow(b.ctx, owner, g.l.id)
	b.done(g.i, nil, err)
}

// fromOwner fetches the entries idx of one owner. Parts of the batch are leased in order, up to
// acquiresInFlight at a time, and each part's bytes start moving as soon as it is leased (up to
// movesInFlight parts at once): the round trips of later acquires hide behind the reads of
// earlier parts. The first part is small, so that reads start after one short round trip.
func (b *batch) fromOwner(owner transport.InstanceID, idx []int) {
	r := b.r
	var typed Memory
	for _, i := range idx {
		if m := b.reqs[i].IntoMemory; m.Typed() {
			typed = m
		}
	}
	offer, reason, client := r.offerFor(owner, typed)
	frame := r.msgr.MaxFrame(owner)
	per := maxBatchPart
	if f := frame - wire.HeaderLen; f > 0 {
		per = max(1, min(per, f/batchEntryRoom))
	}
	inlineMax := r.inlineFor(owner)
	// A part ends at its size in entries read or pulled, at maxInlinePart entries, or where the
	// payloads it expects inline would outgrow the budget of its answer (the owner would send the
	// rest by their paths).
	var parts [][]int
	for start, size := 0, min(per, firstBatchPart); start < len(idx); size = per {
		end, others, inline := start, 0, 0
		for end < len(idx) && others < size && end-start < maxInlinePart {
			if n := b.reqs[idx[end]].Handle.Size; n <= uint64(inlineMax) {
				if end > start && inline+int(n) > inlineBudget(frame, end-start+1) {
					break
				}
				inline += int(n)
			} else {
				others++
			}
			end++
		}
		parts = append(parts, idx[start:end])
		start = end
	}
	granted := make([]chan []grant, len(parts))
	for k := range granted {
		granted[k] = make(chan []grant, 1)
	}
	go func() {
		acquiring := make(chan struct{}, acquiresInFlight)
		for k, part := range parts {
			acquiring <- struct{}{}
			go func() {
				defer func() { <-acquiring }()
				if err := b.ctx.Err(); err != nil {
					for _, i := range part {
						b.done(i, nil, fmt.Errorf("rendezvous: get: %w", err))
					}
					granted[k] <- nil
					return
				}
				granted[k] <- b.acquire(owner, part, offer, reason)
			}()
		}
	}()
	moving := make(chan struct{}, movesInFlight)
	var wg sync.WaitGroup
	for k := range parts {
		grants := <-granted[k]
		if len(grants) == 0 {
			continue
		}
		moving <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-moving }()
			b.move(owner, grants, client)
		}()
	}
	wg.Wait()
}

// maxInlineAnswer bounds the inline bytes of one answer to a batched acquire: a consumer has
// acquiresInFlight of them in flight per owner. Answers of 1, 2 and 4 MiB moved 4 KiB payloads at
// about 0.45x, 0.6x and 0.65x of one large get (docs/performance.md, "Small transfers").
const maxInlineAnswer = 4 << 20

// inlineEntryRoom is what an inline entry of an answer takes besides its payload, with room to
// spare (its lease, path, reason and lengths: about 60 bytes).
const inlineEntryRoom = 128

// batchEntryRoom is what one entry of a batched acquire's answer is allowed besides its inline
// bytes (its lease, path, reason, descriptor or error text), with room to spare.
const batchEntryRoom = 2 << 10

// answerBufs are the buffers answers to inline acquires are read into (RequestBuffer): room for
// the largest inline budget and a part of inline entries; an answer that is larger (entries with
// RDMA descriptors beside them) comes in a buffer of its own.
var answerBufs = sync.Pool{New: func() any {
	b := make([]byte, wire.HeaderLen+maxInlineAnswer+maxInlinePart*inlineEntryRoom)
	return &b
}}

// inlineBudget is how many inline bytes an answer of entries entries may carry on a transport
// whose frames hold frame bytes (0: unknown). The owner keeps its answer within it; the consumer
// cuts its parts so that what it expects inline fits.
func inlineBudget(frame, entries int) int {
	b := maxInlineAnswer
	if frame > 0 {
		b = min(b, frame-wire.HeaderLen-entries*batchEntryRoom)
	}
	return max(b, 0)
}

// How a batch's parts overlap (fromOwner).
const (
	firstBatchPart   = 32
	acquiresInFlight = 3
	movesInFlight    = 4
)

// acquire leases the entries part of owner in one batch message (one acquire per entry from an
// owner that does not know the batch message yet) and allocates their destinations. Entries that
// fail are reported here; the granted ones are returned.
func (b *batch) acquire(owner transport.InstanceID, part []int, offer []byte, reason metrics.Reason) []grant {
	r := b.r
	hs := make([]wire.Handle, len(part))
	for k, i := range part {
		hs[k] = b.reqs[i].Handle.wire()
	}
	inlineMax := r.inlineFor(owner)
	op := opAcquireBatch
	expected := 0 // payload bytes the answer should carry
	if inlineMax > 0 {
		op = opAcquireBatchInline
		for _, i := range part {
			if n := b.reqs[i].Handle.Size; n <= uint64(inlineMax) {
				expected += int(n)
			}
		}
	}
	req, err := wire.AppendAcquireBatchRequest(nil, wire.AcquireBatchRequest{Offer: offer, InlineMax: uint32(inlineMax), Handles: hs})
	var entries []wire.AcquireBatchEntry
	start := time.Now()
	if err == nil {
		var resp []byte
		if expected > 0 {
			// The answer carries up to maxInlineAnswer bytes of payloads, copied out below: it
			// is read into a buffer that a later part reuses, not into a new one per part.
			buf := answerBufs.Get().(*[]byte)
			defer answerBufs.Put(buf)
			resp, err = r.msgr.RequestBuffer(b.ctx, owner, op, req, *buf)
		} else {
			resp, err = r.msgr.Request(b.ctx, owner, op, req)
		}
		switch {
		case errors.Is(err, messenger.ErrUnknownHandler) && op == opAcquireBatchInline:
			// An owner of an earlier release: ask it again, and from now on, without inline.
			r.noInline.Store(owner, true)
			return b.acquire(owner, part, offer, reason)
		case errors.Is(err, messenger.ErrUnknownHandler):
			return b.acquireEach(owner, part, offer, reason)
		case err != nil:
			err = remoteErr("get", err)
		default:
			if entries, err = wire.DecodeAcquireBatchResponse(resp); err == nil && len(entries) != len(part) {
				for _, e := range entries {
					if !e.Failed() {
						r.abandon(owner, e.Response.Lease)
					}
				}
				err = fmt.Errorf("%d answers to %d handles", len(entries), len(part))
			}
			if err != nil {
				r.m.CountPath(metrics.PathChunked, metrics.ReasonDecodeError)
				err = fmt.Errorf("rendezvous: acquire from %016x: %w: %v", uint64(owner), ErrProtocol, err)
			}
		}
	}
	if err != nil {
		for _, i := range part {
			b.done(i, nil, err)
		}
		return nil
	}
	grants := make([]grant, 0, len(part))
	var inlined, inlineBytes int // counted together, once the part's entries are in place
	defer func() {
		r.m.CountPaths(metrics.PathInline, metrics.ReasonOK, inlined)
		r.received(owner, metrics.PathInline, inlineBytes)
	}()
	for k, e := range entries {
		i := part[k]
		if e.Failed() {
			b.done(i, nil, batchEntryErr("get", e.ErrKind, e.ErrText))
			continue
		}
		l, err := r.checkGrant(b.reqs[i].Handle, offer, e.Response, e.Inline != nil)
		if err != nil {
			b.done(i, nil, err)
			continue
		}
		g := grant{i: i, l: l, resp: e.Response, reason: reason, start: start}
		if e.Inline != nil {
			if b.inline(owner, g, e.Inline) {
				inlined, inlineBytes = inlined+1, inlineBytes+len(e.Inline)
			}
			continue
		}
		if expected > 0 {
			// The descriptor is read after this part's answer buffer went back to answerBufs.
			g.resp.Descriptor = bytes.Clone(g.resp.Descriptor)
		}
		if offer != nil {
			g.reason = metrics.Reason(e.Response.Reason) // we offered; the owner says why not
		}
		g.reason = chunkedReason(b.reqs[i].IntoMemory, g.reason)
		if g.l.data, err = b.alloc(i)(int(e.Response.Size)); err != nil {
			b.fail(owner, g, err)
			continue
		}
		grants = append(grants, g)
	}
	return grants
}

// inline puts the payload an owner sent inside its answer (path inline) in place and reports the
// entry; it reports whether the entry succeeded (the caller counts it). The bytes are copied out
// of the answer, whose buffer the next part reuses.
func (b *batch) inline(owner transport.InstanceID, g grant, data []byte) bool {
	r := b.r
	var err error
	if g.l.data, err = b.alloc(g.i)(len(data)); err != nil {
		b.fail(owner, g, err)
		return false
	}
	if m := b.reqs[g.i].IntoMemory; m.Typed() {
		if err := r.copyMemory(g.l.data, m.Type, data, transport.MemoryHost); err != nil {
			b.fail(owner, g, fmt.Errorf("rendezvous: get: copying an inline payload into %v memory: %w", m.Type, err))
			return false
		}
	} else {
		copy(g.l.data, data)
	}
	g.l.Path, g.l.Reason = metrics.PathInline, metrics.ReasonOK
	r.m.ObserveTransfer(metrics.PathInline, uint64(len(data)), time.Since(g.start))
	b.done(g.i, g.l, nil)
	return true
}

// inlineFor is the inline limit to ask owner for: Config.BatchInlineMax, or 0 for an owner that
// answered the inline acquire as an unknown handler (an earlier release).
func (r *Rendezvous) inlineFor(owner transport.InstanceID) int {
	if _, old := r.noInline.Load(owner); old {
		return 0
	}
	return r.cfg.BatchInlineMax
}

// acquireEach leases the entries one acquire message each, Config.BatchWindow at a time: the
// batch's answer to an owner of an earlier release.
func (b *batch) acquireEach(owner transport.InstanceID, part []int, offer []byte, reason metrics.Reason) []grant {
	var mu sync.Mutex
	var grants []grant
	fanout.Each(len(part), b.r.cfg.BatchWindow, func(k int) {
		i := part[k]
		start := time.Now()
		l, resp, err := b.r.acquire(b.ctx, b.reqs[i].Handle, offer)
		if err != nil {
			b.done(i, nil, err)
			return
		}
		g := grant{i: i, l: l, resp: resp, reason: reason, start: start}
		if offer != nil {
			g.reason = metrics.Reason(resp.Reason)
		}
		g.reason = chunkedReason(b.reqs[i].IntoMemory, g.reason)
		if g.l.data, err = b.alloc(i)(int(resp.Size)); err != nil {
			b.fail(owner, g, err)
			return
		}
		mu.Lock()
		grants = append(grants, g)
		mu.Unlock()
	})
	return grants
}

// move moves the bytes of granted entries: the RDMA ones with one GetMany, the chunked ones (and
// those whose GET failed, after a fallback acquire without offer) by pipelined pulls.
func (b *batch) move(owner transport.InstanceID, grants []grant, client RDMAClient) {
	r := b.r
	var rdma, chunked []grant
	counts := map[metrics.Reason]int{}
	for _, g := range grants {
		if g.resp.Path == string(metrics.PathRDMA) {
			rdma = append(rdma, g)
			continue
		}
		counts[g.reason]++
		g.l.Path, g.l.Reason = metrics.PathChunked, g.reason
		chunked = append(chunked, g)
	}
	for reason, n := range counts {
		r.m.CountPaths(metrics.PathChunked, reason, n)
	}
	if len(rdma) > 0 {
		reads := make([]RemoteRead, len(rdma))
		for k, g := range rdma {
			reads[k] = RemoteRead{Descriptor: g.resp.Descriptor, Dst: g.l.data, Memory: b.reqs[g.i].IntoMemory}
		}
		failed := make([]error, len(rdma))
		// Each entry's lane is its key's: one batch may mix same-host keys with UCX ones (device
		// memory stays with UCX).
		paths := make([]metrics.Path, len(rdma))
		for k, g := range rdma {
			paths[k] = registryPath(client, g.resp.Descriptor)
		}
		ok, bytes := map[metrics.Path]int{}, map[metrics.Path]int{}
		getMany(b.ctx, client, owner, reads, r.cfg.BatchWindow, func(k int, err error) {
			if err != nil {
				failed[k] = err
				return
			}
			g, path := rdma[k], paths[k]
			r.m.ObserveTransfer(path, uint64(len(g.l.data)), time.Since(g.start))
			ok[path], bytes[path] = ok[path]+1, bytes[path]+len(g.l.data)
			g.l.Path, g.l.Reason = path, metrics.ReasonOK
			b.done(g.i, g.l, nil)
		})
		for path, n := range ok {
			r.m.CountPaths(path, metrics.ReasonOK, n)
			r.received(owner, path, bytes[path])
		}
		for k, err := range failed {
			if err == nil {
				continue
			}
			if g, ok := b.fallback(owner, client, rdma[k], err); ok {
				chunked = append(chunked, g)
			}
		}
	}
	if len(chunked) > 0 {
		b.pull(owner, chunked)
	}
}

// fallback handles an entry whose GET failed: like Get, it gives the lease up and acquires again
// without an offer, for the chunked path. It reports the entry itself when that fails.
func (b *batch) fallback(owner transport.InstanceID, client RDMAClient, g grant, getErr error) (grant, bool) {
	r := b.r
	if err := b.ctx.Err(); err != nil {
		b.fail(owner, g, fmt.Errorf("rendezvous: get: %w", err))
		return grant{}, false
	}
	why := r.getFailed(client, owner, getErr)
	r.m.CountPath(metrics.PathChunked, why)
	r.abandon(owner, g.l.id)
	l, resp, err := r.acquire(b.ctx, b.reqs[g.i].Handle, nil)
	if err != nil {
		b.done(g.i, nil, err)
		return grant{}, false
	}
	l.data = g.l.data
	ng := grant{i: g.i, l: l, resp: resp, reason: why, start: g.start}
	if resp.Path != string(metrics.PathChunked) {
		b.fail(owner, ng, fmt.Errorf("rendezvous: get: %w: owner %016x answered the fallback acquire (no offer) with path %q",
			ErrProtocol, uint64(owner), resp.Path))
		return grant{}, false
	}
	l.Path, l.Reason = metrics.PathChunked, why
	return ng, true
}

// pull moves the chunked entries' bytes with Config.BatchWindow pulls in flight across all of
// them, and reports each entry when its last chunk landed (or its first chunk failed).
func (b *batch) pull(owner transport.InstanceID, gs []grant) {
	r := b.r
	spans := make([]pullSpan, len(gs))
	for k, g := range gs {
		spans[k] = pullSpan{lease: g.l.id, dst: g.l.data, chunk: int(g.resp.ChunkSize), mem: b.reqs[g.i].IntoMemory}
	}
	r.pullSpans(b.ctx, owner, spans, func(k int, err error) {
		g := gs[k]
		if err != nil {
			b.fail(owner, g, err)
			return
		}
		r.m.ObserveTransfer(metrics.PathChunked, uint64(len(g.l.data)), time.Since(g.start))
		r.received(owner, metrics.PathChunked, len(g.l.data))
		b.done(g.i, g.l, nil)
	})
}

// pullSpan is a run of bytes to pull: len(dst) bytes at off of a lease's payload, in pulls of at
// most chunk bytes.
type pullSpan struct {
	lease uint64
	off   uint64
	dst   []byte
	chunk int
	mem   Memory // typed: each pull lands in a host bounce buffer and is copied to dst
}

// pullSpans pulls every span with Config.BatchWindow pulls in flight across all of them, and
// calls done(k, err) once per span, from the goroutine of its last pull, when every chunk of it
// landed or after the first of its chunks failed. It returns once nothing writes any span's dst.
func (r *Rendezvous) pullSpans(ctx context.Context, owner transport.InstanceID, spans []pullSpan, done func(k int, err error)) {
	limit := r.msgr.MaxFrame(owner) - wire.HeaderLen
	type task struct{ k, off, end int }
	var tasks []task
	left := make([]atomic.Int64, len(spans))
	errs := make([]atomic.Pointer[error], len(spans))
	for k, s := range spans {
		chunk := s.chunk
		if limit > 0 && (chunk <= 0 || chunk > limit) {
			chunk = limit
		}
		chunk = max(chunk, 1)
		n := 0
		for off := 0; off < len(s.dst); off += chunk {
			tasks = append(tasks, task{k, off, min(off+chunk, len(s.dst))})
			n++
		}
		left[k].Store(int64(n))
		if n == 0 {
			done(k, nil)
		}
	}
	finish := func(k int) {
		var err error
		if p := errs[k].Load(); p != nil {
			err = *p
		}
		done(k, err)
	}
	fanout.Each(len(tasks), r.cfg.BatchWindow, func(j int) {
		t := tasks[j]
		s := spans[t.k]
		if errs[t.k].Load() == nil {
			err := ctx.Err()
			if err == nil {
				req := wire.AppendPullRequest(make([]byte, 0, wire.PullRequestLen), wire.PullRequest{Lease: s.lease, Offset: s.off + uint64(t.off), Length: uint32(t.end - t.off)})
				if s.mem.Typed() {
					// A bounce buffer per pull in flight: at most BatchWindow chunks of host memory,
					// reused across pulls.
					buf := r.bounceBufs.Get().(*[]byte)
					if cap(*buf) < t.end-t.off {
						*buf = make([]byte, t.end-t.off)
					}
					bounce := (*buf)[:t.end-t.off]
					if err = r.msgr.RequestInto(ctx, owner, opPull, req, bounce); err == nil {
						if err = r.copyMemory(s.dst[t.off:t.end], s.mem.Type, bounce, transport.MemoryHost); err != nil {
							err = fmt.Errorf("rendezvous: copying from the bounce buffer: %w", err)
						}
					}
					r.bounceBufs.Put(buf)
				} else {
					err = r.msgr.RequestInto(ctx, owner, opPull, req, s.dst[t.off:t.end])
				}
			}
			if err != nil {
				err = remoteErr(fmt.Sprintf("pull of %d bytes at %d", t.end-t.off, s.off+uint64(t.off)), err)
				errs[t.k].CompareAndSwap(nil, &err)
			}
		}
		if left[t.k].Add(-1) == 0 {
			finish(t.k)
		}
	})
}

// batchEntryErr is the error of one entry of a batch answer, said as remoteErr says a single
// acquire's: the owner's words, matching the sentinel its kind names.
func batchEntryErr(op, kind, text string) error { return kinds.Entry(op, kind, text) }
