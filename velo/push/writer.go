package push

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/messenger"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/transport"
)

// PutRequest is one entry of PutBatch: Src to Offset of the receiver's region (inside one of the
// grant's ranges), with a notification after it when Notify is set.
type PutRequest struct {
	Offset  uint64
	Src     []byte
	Notify  bool
	Payload []byte
}

// BatchOptions configure PutBatch.
type BatchOptions struct {
	// Notify sends one notification after every entry of the batch succeeded, covering all their
	// ranges, with Payload; it is not sent when an entry failed.
	Notify  bool
	Payload []byte
	// Window is how many writes (or chunks) are in flight at once (default Config.Window).
	Window int
}

// heldKey names a grant this side acquired.
type heldKey struct {
	receiver transport.InstanceID
	id       uint64
}

// held is an acquired grant: the path the receiver chose and, on the RDMA path, its keys.
type held struct {
	mu       sync.Mutex
	acquired bool
	// offered: the acquire offered RDMA. A grant answered chunked without an offer is asked
	// again once this side can offer (acquire).
	offered bool
	rdma    bool
	path    metrics.Path // on the RDMA path: rdma, or shm when every key is a same-host one
	reason  metrics.Reason
	keys    [][]byte
	chunk   int
	// noInline: the receiver does not take notified small puts in one message (an earlier
	// release), so every put goes as a write.
	noInline bool
}

// Put writes src at offset of the receiver's region through h, and then, with notify, sends
// payload as a notification that reaches the receiver only after the bytes. It returns once the
// bytes are in the receiver's memory (and the notification was delivered, when asked for).
func (s *Service) Put(ctx context.Context, h GrantHandle, offset uint64, src []byte, notify bool, payload []byte) error {
	errs, nerr := s.PutBatch(ctx, h, []PutRequest{{Offset: offset, Src: src, Notify: notify, Payload: payload}}, BatchOptions{})
	if errs[0] != nil {
		return errs[0]
	}
	return nerr
}

// PutBatch writes every entry through h, window at a time, each failing alone; an entry's own
// notification goes out as soon as its bytes are in the receiver's memory, and the batch's (opts)
// once all are. It returns one error per entry (nil: written, and its notification delivered) and
// the batch notification's error (nil when it was delivered or not asked for). Nothing is sent for
// an entry that fails the local checks (empty, outside the grant, a payload above the limit), and
// nothing at all when the handle is not this instance's.
func (s *Service) PutBatch(ctx context.Context, h GrantHandle, reqs []PutRequest, opts BatchOptions) ([]error, error) {
	errs := make([]error, len(reqs))
	failAll := func(err error) ([]error, error) {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
		if opts.Notify {
			return errs, fmt.Errorf("push: the batch notification was not sent: %w", err)
		}
		return errs, nil
	}
	switch {
	case h.IsZero() || len(h.Ranges) == 0:
		return failAll(opErr("put", fmt.Errorf("a zero grant handle: %w", ErrBadGrant)))
	case h.Writer != s.cfg.Self:
		return failAll(opErr("put", fmt.Errorf("the handle grants writer %016x, this is %016x: %w", uint64(h.Writer), uint64(s.cfg.Self), ErrNotGrantee)))
	case opts.Notify && len(opts.Payload) > s.cfg.MaxNotify:
		return failAll(opErr("put", fmt.Errorf("a batch notification of %d bytes exceeds %d: %w", len(opts.Payload), s.cfg.MaxNotify, ErrNotifyTooLarge)))
	}
	if err := ctx.Err(); err != nil {
		return failAll(err)
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return failAll(opErr("put", ErrClosed))
	}
	var valid []int
	for i, r := range reqs {
		n := uint64(len(r.Src))
		switch {
		case n == 0:
			errs[i] = opErr("put", fmt.Errorf("entry %d: %w", i, ErrEmptyPut))
		case h.rangeOf(r.Offset, n) < 0:
			errs[i] = opErr("put", fmt.Errorf("entry %d: [%d, +%d) is not inside a range of grant %d: %w", i, r.Offset, n, h.ID, ErrOutOfGrant))
		case r.Notify && len(r.Payload) > s.cfg.MaxNotify:
			errs[i] = opErr("put", fmt.Errorf("entry %d: a notification of %d bytes exceeds %d: %w", i, len(r.Payload), s.cfg.MaxNotify, ErrNotifyTooLarge))
		default:
			valid = append(valid, i)
		}
	}
	if len(valid) == 0 {
		if opts.Notify {
			return errs, errors.New("push: the batch notification was not sent: no entry was written")
		}
		return errs, nil
	}
	hd, err := s.acquire(ctx, h)
	if err != nil {
		for _, i := range valid {
			errs[i] = err
		}
		if opts.Notify {
			return errs, fmt.Errorf("push: the batch notification was not sent: %w", err)
		}
		return errs, nil
	}
	window := opts.Window
	if window <= 0 {
		window = s.cfg.Window
	}
	ref := wire.GrantRef{ID: h.ID, Nonce: h.Nonce}
	nt := s.notifier(h.Receiver)
	var notes sync.WaitGroup
	var nmu sync.Mutex
	written := func(i int, err error) {
		if err != nil {
			errs[i] = err
			return
		}
		r := reqs[i]
		if !r.Notify {
			return
		}
		notes.Add(1)
		nt.enqueue(ref, hd.rdma, wire.NotifyEntry{Ranges: []wire.GrantRange{{Offset: r.Offset, Length: uint64(len(r.Src))}}, Payload: r.Payload}, func(err error) {
			if err != nil {
				nmu.Lock()
				errs[i] = opErr("notify", err)
				nmu.Unlock()
			}
			notes.Done()
		})
	}
	direct, inline := s.splitInline(hd, reqs, valid)
	var retry []int
	queued := make([]pendingNote, 0, len(inline))
	for _, i := range inline {
		notes.Add(1)
		queued = append(queued, s.inlineNote(ctx, nt, ref, hd, reqs[i], func(err error) {
			nmu.Lock()
			if errors.Is(err, messenger.ErrUnknownHandler) {
				retry = append(retry, i)
			} else if err != nil {
				errs[i] = opErr("put", err)
			}
			nmu.Unlock()
			notes.Done()
		}))
	}
	if len(queued) > 0 {
		nt.enqueueWrites(queued, len(direct) == 0)
	}
	s.putDirect(ctx, h, hd, ref, reqs, direct, window, written)
	notes.Wait()
	if len(retry) > 0 {
		// A receiver of an earlier release: these go as writes and notifications, as every later
		// put of the grant will.
		hd.mu.Lock()
		hd.noInline = true
		hd.mu.Unlock()
		sort.Ints(retry)
		s.putDirect(ctx, h, hd, ref, reqs, retry, window, written)
		notes.Wait()
	}
	if !opts.Notify {
		return errs, nil
	}
	var ranges []Range
	for _, i := range valid {
		if errs[i] != nil {
			return errs, fmt.Errorf("push: the batch notification was not sent: entry %d failed: %w", i, errs[i])
		}
		ranges = append(ranges, Range{reqs[i].Offset, uint64(len(reqs[i].Src))})
	}
	if len(ranges) > MaxRanges {
		ranges = coalesce(ranges)
	}
	done := make(chan error, 1)
	nt.enqueue(ref, hd.rdma, wire.NotifyEntry{Ranges: toWire(ranges), Payload: opts.Payload}, func(err error) { done <- err })
	return errs, opErr("notify", <-done)
}

// splitInline parts the valid entries into those written by the grant's path (direct) and the
// notified ones small enough to travel inside their notification (inline).
func (s *Service) splitInline(hd *held, reqs []PutRequest, valid []int) (direct, inline []int) {
	hd.mu.Lock()
	off := hd.noInline
	hd.mu.Unlock()
	for _, i := range valid {
		if r := reqs[i]; !off && r.Notify && len(r.Src) <= s.cfg.InlineMax {
			inline = append(inline, i)
		} else {
			direct = append(direct, i)
		}
	}
	return direct, inline
}

// putDirect writes entries by the grant's path; written hears of each.
func (s *Service) putDirect(ctx context.Context, h GrantHandle, hd *held, ref wire.GrantRef, reqs []PutRequest, entries []int, window int, written func(int, error)) {
	switch {
	case len(entries) == 0:
	case hd.rdma:
		s.putRDMA(ctx, h, hd, reqs, entries, window, written)
	default:
		s.putChunked(ctx, h, hd, ref, reqs, entries, window, written)
	}
}

// inlineNote makes the note of a notified small put: it leaves in a message of notified writes,
// in its turn among the notifications to that receiver, on the route the grant's notifications
// take, and done hears how it went (messenger.ErrUnknownHandler from a receiver that does not take
// such messages).
func (s *Service) inlineNote(ctx context.Context, nt *notifier, ref wire.GrantRef, hd *held, r PutRequest, done func(error)) pendingNote {
	path, reason := metrics.PathChunked, hd.reason
	if hd.rdma {
		path, reason = hd.path, metrics.ReasonOK
	}
	w := &wire.NoteWrite{Offset: r.Offset, Payload: r.Payload, Data: r.Src}
	return pendingNote{ref: ref, rdma: hd.rdma, write: w, ctx: ctx, done: func(err error) {
		if err == nil {
			s.m.countPath("writer", path, reason, 1)
			s.m.addBytes("sent", path, len(r.Src))
			s.m.inlineWrites.WithLabelValues("writer").Inc()
		} else if errors.Is(opErr("put", err), ErrGrantEnded) {
			s.forget(heldKey{nt.peer, ref.ID})
		}
		done(err)
	}}
}

// coalesce merges ranges (a batch notification over more than MaxRanges entries).
func coalesce(rs []Range) []Range {
	var set []Range
	for _, r := range rs {
		set = addRange(set, r)
	}
	return set
}

// acquire returns the grant's path, asking the receiver on the first put, and again on a later
// put when the grant went by chunks only because this side could not offer RDMA then and now can
// (the receiver's UCX address arrived after the first put: discovery is slower than a message).
// The grant's path is never locked to a slower one than the pair has: the put that sees the UCX
// lane takes a fresh held, and puts still in flight finish on the old one.
func (s *Service) acquire(ctx context.Context, h GrantHandle) (*held, error) {
	k := heldKey{h.Receiver, h.ID}
	for {
		s.wmu.Lock()
		hd := s.held[k]
		if hd == nil {
			hd = &held{}
			s.held[k] = hd
		}
		s.wmu.Unlock()
		hd.mu.Lock()
		if !hd.acquired {
			err := s.ask(ctx, h, k, hd)
			hd.mu.Unlock()
			if err != nil {
				return nil, err
			}
			return hd, nil
		}
		if hd.rdma || hd.offered || !s.canOffer(h.Receiver) {
			hd.mu.Unlock()
			return hd, nil
		}
		noInline := hd.noInline
		hd.mu.Unlock()
		s.wmu.Lock()
		if s.held[k] == hd {
			s.held[k] = &held{noInline: noInline}
		}
		s.wmu.Unlock()
		s.log.Debug("push: the receiver's UCX address is known now; asking it for the grant's path again",
			"receiver", fmt.Sprintf("%016x", uint64(h.Receiver)), "grant", h.ID)
	}
}

// canOffer reports whether this side can offer the receiver RDMA now.
func (s *Service) canOffer(receiver transport.InstanceID) bool {
	return s.cfg.Writer != nil && s.cfg.CanRMA != nil && s.cfg.CanRMA(receiver)
}

// ask asks the receiver for the grant's path and fills hd (hd.mu held).
func (s *Service) ask(ctx context.Context, h GrantHandle, k heldKey, hd *held) error {
	offer := s.canOffer(h.Receiver)
	// A transport that refuses the pair (release_mismatch, no_ucx_lane) said why, once.
	pr, refuses := s.cfg.Writer.(transport.PathRefuser)
	refused := !offer && refuses && pr.PathRefusal(h.Receiver) != ""
	if !offer && s.cfg.Writer != nil && !refused {
		// This side writes by RDMA but knows no UCX address of the receiver: not yet (discovery has
		// not reported it), or it has none. Later puts ask again once one is known.
		s.slow.Once(s.log, "push: puts to this receiver go by chunks: this instance knows no UCX address of it yet (or it has none); the first put after one is known takes RDMA",
			uint64(h.Receiver), string(metrics.ReasonNoOffer), "grant", h.ID)
	}
	req := wire.PushAcquire{Ref: wire.GrantRef{ID: h.ID, Nonce: h.Nonce}, Offer: offer}
	ans, err := s.cfg.Messenger.Request(ctx, h.Receiver, opAcquire, wire.AppendPushAcquire(nil, req))
	if err != nil {
		s.forget(k)
		return opErr("acquire", err)
	}
	resp, err := wire.DecodePushAcquireResponse(ans)
	if err != nil {
		s.forget(k)
		return opErr("acquire", fmt.Errorf("%w: the receiver's answer: %v", messenger.ErrProtocol, err))
	}
	if resp.RDMA && len(resp.Keys) != len(h.Ranges) {
		s.forget(k)
		return opErr("acquire", fmt.Errorf("%w: %d keys for %d ranges", messenger.ErrProtocol, len(resp.Keys), len(h.Ranges)))
	}
	hd.acquired, hd.offered, hd.rdma, hd.keys = true, offer, resp.RDMA, resp.Keys
	hd.path = s.keysPath(resp.Keys)
	hd.reason = metrics.Reason(resp.Reason)
	// A chunk travels inside its request, behind its header, in one frame (RequestParts, never
	// staged); the receiver reads it straight into the region.
	frame := s.cfg.Messenger.MaxParts(h.Receiver, opWrite) - wire.PushWriteLen
	hd.chunk = max(min(int(resp.ChunkSize), s.cfg.ChunkSize, frame), 1<<10)
	if !resp.RDMA && offer {
		s.log.Debug("push: the receiver answered a grant on the chunked path", "receiver", fmt.Sprintf("%016x", uint64(h.Receiver)), "grant", h.ID, "reason", resp.Reason)
	}
	return nil
}

// keysPath is the lane of a grant's keys on the RDMA path: shm when every one is a same-host
// key (Config.SameHostKey), rdma otherwise (a range on UCX counts the grant there).
func (s *Service) keysPath(keys [][]byte) metrics.Path {
	if s.cfg.SameHostKey == nil || len(keys) == 0 {
		return metrics.PathRDMA
	}
	for _, k := range keys {
		if !s.cfg.SameHostKey(k) {
			return metrics.PathRDMA
		}
	}
	return metrics.PathSameHost
}

// forget drops an acquired grant (it ended, or its acquire failed).
func (s *Service) forget(k heldKey) {
	s.wmu.Lock()
	delete(s.held, k)
	s.wmu.Unlock()
}

// putRDMA writes the valid entries through the grant's keys.
func (s *Service) putRDMA(ctx context.Context, h GrantHandle, hd *held, reqs []PutRequest, valid []int, window int, written func(int, error)) {
	ws := make([]transport.Write, len(valid))
	for j, i := range valid {
		r := reqs[i]
		k := h.rangeOf(r.Offset, uint64(len(r.Src)))
		ws[j] = transport.Write{Key: hd.keys[k], Offset: r.Offset - h.Ranges[k].Offset, Src: r.Src}
	}
	s.m.countPath("writer", hd.path, metrics.ReasonOK, len(valid))
	s.cfg.Writer.WriteMany(ctx, h.Receiver, ws, window, func(j int, err error) {
		i := valid[j]
		if err != nil {
			// The next put asks the receiver again, and learns why (or gets a fresh path).
			s.forget(heldKey{h.Receiver, h.ID})
			if errors.Is(err, transport.ErrKeyRevoked) {
				err = fmt.Errorf("the receiver revoked the grant's key: %w: %w", ErrGrantEnded, err)
			}
			written(i, opErr("put", err))
			return
		}
		s.m.addBytes("sent", hd.path, len(reqs[i].Src))
		written(i, nil)
	})
}

// putChunked sends the valid entries to the receiver in chunks, window of them in flight.
func (s *Service) putChunked(ctx context.Context, h GrantHandle, hd *held, ref wire.GrantRef, reqs []PutRequest, valid []int, window int, written func(int, error)) {
	s.m.countPath("writer", metrics.PathChunked, hd.reason, len(valid))
	type piece struct {
		i   int
		off int
		n   int
	}
	var pieces []piece
	left := map[int]int{}
	for _, i := range valid {
		for off := 0; off < len(reqs[i].Src); off += hd.chunk {
			pieces = append(pieces, piece{i, off, min(hd.chunk, len(reqs[i].Src)-off)})
			left[i]++
		}
	}
	var mu sync.Mutex
	failed := map[int]error{}
	finish := func(p piece, err error) {
		mu.Lock()
		if err != nil && failed[p.i] == nil {
			failed[p.i] = err
		}
		left[p.i]--
		last := left[p.i] == 0
		ferr := failed[p.i]
		mu.Unlock()
		if last {
			if ferr == nil {
				s.m.addBytes("sent", metrics.PathChunked, len(reqs[p.i].Src))
			}
			written(p.i, ferr)
		}
	}
	work := make(chan piece)
	var wg sync.WaitGroup
	for range min(window, len(pieces)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range work {
				mu.Lock()
				skip := failed[p.i]
				mu.Unlock()
				if skip != nil {
					finish(p, skip)
					continue
				}
				finish(p, s.sendChunk(ctx, h, ref, reqs[p.i], p.off, p.n))
			}
		}()
	}
	for _, p := range pieces {
		work <- p
	}
	close(work)
	wg.Wait()
}

func (s *Service) sendChunk(ctx context.Context, h GrantHandle, ref wire.GrantRef, r PutRequest, off, n int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	// The chunk leaves from the caller's buffer behind its header (the transport writes both in
	// one go): no copy on this side.
	hdr := wire.AppendPushWrite(make([]byte, 0, wire.PushWriteLen), wire.PushWrite{Ref: ref, Offset: r.Offset + uint64(off)})
	if _, err := s.cfg.Messenger.RequestParts(ctx, h.Receiver, opWrite, hdr, r.Src[off:off+n]); err != nil {
		err = opErr("put", err)
		if errors.Is(err, ErrGrantEnded) || errors.Is(err, ErrBadGrant) {
			s.forget(heldKey{h.Receiver, h.ID})
		}
		return err
	}
	return nil
}

// notifier sends one writer's notifications to one receiver: one message at a time, each carrying
// every notification queued meanwhile (of one grant), so they arrive in the order they were queued
// and none overtakes another.
type notifier struct {
	s    *Service
	peer transport.InstanceID

	mu    sync.Mutex
	queue []pendingNote
	busy  bool
}

type pendingNote struct {
	ref   wire.GrantRef
	rdma  bool // the grant's writes go by RDMA: the note may travel on the writes' transport
	entry wire.NotifyEntry
	// write, when set, is a notified small put: its bytes travel in the message and entry is
	// unused. ctx is its caller's: a put whose context ended before its turn is not sent.
	write *wire.NoteWrite
	ctx   context.Context
	done  func(error)
}

// size is what the note adds to its message.
func (p pendingNote) size() int {
	if p.write != nil {
		return wire.NoteWriteEntryLen + len(p.write.Payload) + len(p.write.Data)
	}
	return len(p.entry.Payload)
}

func (s *Service) notifier(peer transport.InstanceID) *notifier {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	n := s.notifiers[peer]
	if n == nil {
		n = &notifier{s: s, peer: peer}
		s.notifiers[peer] = n
	}
	return n
}

// enqueue queues a notification whose bytes are already in the receiver's memory; done gets its
// outcome. rdma says the grant's writes went by RDMA.
func (n *notifier) enqueue(ref wire.GrantRef, rdma bool, e wire.NotifyEntry, done func(error)) {
	n.push(pendingNote{ref: ref, rdma: rdma, entry: e, done: done})
}

// enqueueWrites queues notified small puts (pendingNote.write set). With here, and the notifier
// idle, the caller's goroutine sends what is queued itself and returns once it has: a hand-off to
// the notifier's goroutine and back costs a lone small put more than its message does on a busy
// host. Notes queued meanwhile by others go on on the notifier's goroutine.
func (n *notifier) enqueueWrites(notes []pendingNote, here bool) {
	n.mu.Lock()
	n.queue = append(n.queue, notes...)
	start := !n.busy
	n.busy = true
	owed := len(n.queue)
	n.mu.Unlock()
	switch {
	case !start:
	case here:
		n.run(owed)
	default:
		go n.run(-1)
	}
}

func (n *notifier) push(p pendingNote) {
	n.mu.Lock()
	n.queue = append(n.queue, p)
	start := !n.busy
	n.busy = true
	n.mu.Unlock()
	if start {
		go n.run(-1)
	}
}

// maxNotifyBytes bounds the payload bytes of one notification message.
const maxNotifyBytes = 4 << 20

// run sends what is queued, one message at a time, until the queue is empty; with owed >= 0 (a
// caller's goroutine) only that many notes, and what is queued after them goes on on a goroutine
// of its own.
func (n *notifier) run(owed int) {
	for {
		n.mu.Lock()
		if len(n.queue) == 0 {
			n.busy = false
			n.mu.Unlock()
			return
		}
		if owed == 0 {
			n.mu.Unlock()
			go n.run(-1) // still busy: the notes queued behind the caller's
			return
		}
		first := n.queue[0]
		limit := maxNotifyBytes
		if first.write != nil {
			limit = maxNoteWriteBytes
		}
		// One message holds consecutive notes of one grant and one kind (notifications, or
		// notified writes), so the order they were queued in is the order they are delivered in.
		k, bytes := 0, 0
		for k < len(n.queue) && k < wire.MaxNotifyEntries {
			q := n.queue[k]
			if q.ref != first.ref || q.rdma != first.rdma || (q.write != nil) != (first.write != nil) || (k > 0 && bytes+q.size() > limit) {
				break
			}
			bytes += q.size()
			k++
		}
		batch := append([]pendingNote(nil), n.queue[:k]...)
		n.queue = append(n.queue[:0], n.queue[k:]...)
		if owed > 0 {
			owed = max(owed-k, 0)
		}
		n.mu.Unlock()
		if first.write != nil {
			n.sendWrites(first.ref, first.rdma, batch)
		} else {
			n.send(first.ref, first.rdma, batch)
		}
	}
}

// send delivers one message of notifications and hands each its outcome.
func (n *notifier) send(ref wire.GrantRef, rdma bool, batch []pendingNote) {
	m := wire.Notify{Ref: ref}
	for _, p := range batch {
		m.Entries = append(m.Entries, p.entry)
	}
	b, err := wire.AppendNotify(nil, m)
	if err != nil {
		failNotes(batch, err)
		return
	}
	n.exchange(ref, rdma, opNotify, b, batch)
}

// sendWrites sends one message of notified small puts (leaving out those whose caller gave up
// before their turn) and hands each its outcome.
func (n *notifier) sendWrites(ref wire.GrantRef, rdma bool, batch []pendingNote) {
	m := wire.NoteWrites{Ref: ref}
	live := batch[:0:0]
	for _, p := range batch {
		if err := p.ctx.Err(); err != nil {
			p.done(err)
			continue
		}
		m.Entries = append(m.Entries, *p.write)
		live = append(live, p)
	}
	if len(live) == 0 {
		return
	}
	b, err := wire.AppendNoteWrites(make([]byte, 0, m.Size()), m)
	if err != nil {
		failNotes(live, err)
		return
	}
	n.exchange(ref, rdma, opNoteWrite, b, live)
}

// failNotes hands every note of batch the same error.
func failNotes(batch []pendingNote, err error) {
	for _, p := range batch {
		p.done(err)
	}
}

// exchange sends one message (op, b) carrying batch's notes and hands each note its answer. The
// notes of a grant written by RDMA go on the writes' own transport when it reaches the receiver
// and carries the message (Config.WriterVia): the writes just used it, and on a small host the
// control plane's TCP socket, right after UCX traffic, waits for CPUs the UCX progress threads
// still hold. Either way a notification goes only after the writes it covers completed at the
// receiver (a notified write carries its own bytes), and one message at a time, so the order holds
// across the two transports.
func (n *notifier) exchange(ref wire.GrantRef, rdma bool, op string, b []byte, batch []pendingNote) {
	ctx, cancel := bg()
	defer cancel()
	start := time.Now()
	var ans []byte
	var err error
	g := n.s.cfg.Messenger
	if via := n.s.cfg.WriterVia; rdma && n.s.cfg.Writer != nil && g.CarriesOver(via, n.peer, op, len(b)) {
		ans, err = g.RequestOver(ctx, via, n.peer, op, b)
	} else {
		ans, err = g.Request(ctx, n.peer, op, b)
	}
	if err != nil {
		if errors.Is(opErr("notify", err), ErrGrantEnded) {
			n.s.forget(heldKey{n.peer, ref.ID})
		}
		failNotes(batch, err)
		return
	}
	codes, err := wire.DecodeNotifyAnswer(ans, len(batch))
	if err != nil {
		failNotes(batch, fmt.Errorf("%w: %v", messenger.ErrProtocol, err))
		return
	}
	for i, p := range batch {
		switch code := codes[i]; {
		case code == wire.NotifyOK:
			p.done(nil)
		case code == wire.NotifyEnded && p.write != nil:
			p.done(fmt.Errorf("grant %d ended before the put landed or was notified: %w", ref.ID, ErrGrantEnded))
		case code == wire.NotifyEnded:
			p.done(fmt.Errorf("grant %d ended before the notification was delivered: %w", ref.ID, ErrGrantEnded))
		case code == wire.NotifyRange && p.write != nil:
			p.done(fmt.Errorf("[%d, +%d) is not inside a range of grant %d at the receiver: %w", p.write.Offset, len(p.write.Data), ref.ID, ErrOutOfGrant))
		case code == wire.NotifyRange:
			p.done(fmt.Errorf("the notification names a range outside grant %d: %w", ref.ID, ErrOutOfGrant))
		case code == wire.NotifyCopy:
			p.done(fmt.Errorf("the receiver could not copy the bytes into grant %d's region (its log says why): retry, or send the put without a notification", ref.ID))
		default:
			p.done(fmt.Errorf("%w: notification answer code %d", messenger.ErrProtocol, code))
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		n.s.log.Warn("push: a notification took long to be delivered (the receiver's handler or channel holds it up)", "receiver", fmt.Sprintf("%016x", uint64(n.peer)), "took", d)
	}
}
