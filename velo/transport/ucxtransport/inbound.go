package ucxtransport

import "time"

// inbound keeps one sender's frames in the order it sent them, across its endpoints and within
// each.
//
// A sender replaces its endpoint to us whenever one is retired (its idle reaper, or our fin) or
// fails, and a frame on the new endpoint can overtake the tail of the old one: they are different
// connections. Nor does one endpoint keep order on every release: while a fresh endpoint waits for
// its wireup, UCX 1.22 sends short messages ahead of a multi-fragment one submitted before them
// (TestReaperWithALaggingPeer caught a fin arriving before the frame it counted). So every frame
// names its epoch (the endpoint) and its seq within it, and the hello that opens an endpoint names
// the epoch before it and that epoch's last seq. inbound delivers an epoch's frames in seq order,
// holding any that arrive ahead of a missing one, and holds frames of a newer epoch until the
// epoch before it is complete — its fin has arrived and every frame the fin counts, or the hello
// of its successor told us its last seq and we delivered that far. A gap is given up on, and
// counted as lost, only when it has stood for holdTimeout: frames behind it waited that long, or
// the epoch's fin did (its endpoint died with the missing frames).
//
// It is pure bookkeeping with no locks and no clock of its own, so it is tested exhaustively
// without UCX; the transport calls it under its receive lock.
type inbound struct {
	started   bool
	cur       uint32 // the epoch being delivered
	delivered uint64 // last seq of cur handed on (or skipped as lost)
	end       uint64 // cur's last seq, when endKnown
	endKnown  bool
	next      uint32 // the epoch that follows cur, when nextKnown
	nextKnown bool
	open      bool      // cur's endpoint is open at the sender as far as we know (no fin yet)
	finned    bool      // cur's fin arrived
	finGapAt  time.Time // when cur's fin arrived with frames it counts still missing (zero: none)

	held []inFrame // frames not deliverable yet: cur's beyond a gap, and newer epochs'
}

// inFrame is one received frame as inbound sees it.
type inFrame struct {
	kind      frameKind
	epoch     uint32
	seq       uint64
	prevEpoch uint32    // hello only
	payload   []byte    // data only
	at        time.Time // when it arrived (set by accept)
}

// inResult is what accepting or expiring produced: payloads to deliver, in order, and how many
// frames are now known to be lost or were dropped as stale.
type inResult struct {
	deliver [][]byte
	lost    uint64
	stale   uint64
	// finsAgain counts fins for an endpoint already finished: the peer sends one fin per
	// endpoint, so another is a recorded one played again (or a forged one, without a gate).
	finsAgain uint64
}

// accept takes one frame and returns what may be delivered now.
func (in *inbound) accept(f inFrame, now time.Time) inResult {
	var r inResult
	f.at = now
	if !in.started {
		in.started = true
		in.cur = f.epoch
		switch f.kind {
		case kindData:
			in.delivered = f.seq - 1 // what came before predates our state: not counted as lost
		case kindFin:
			in.delivered = f.seq
		}
	}
	switch {
	case f.epoch == in.cur:
		in.apply(f, &r)
	case f.epoch < in.cur:
		// An epoch we already gave up on (its frames were counted lost) or finished.
		switch f.kind {
		case kindData:
			r.stale++
		case kindFin:
			r.finsAgain++
		}
		return r
	default:
		in.noteHello(f, in.cur)
		in.held = append(in.held, f)
	}
	in.advance(&r)
	return r
}

// apply takes one frame of the current epoch.
func (in *inbound) apply(f inFrame, r *inResult) {
	switch f.kind {
	case kindData:
		switch {
		case f.seq <= in.delivered || in.holds(f.epoch, f.seq):
			r.stale++ // a duplicate
		case f.seq > in.delivered+1:
			in.held = append(in.held, f) // ahead of a missing frame
		default:
			in.deliverNext(f, r)
		}
		in.open = !in.finned
	case kindHello:
		in.open = !in.finned
	case kindFin:
		if in.finned {
			r.finsAgain++
			return
		}
		in.open, in.finned = false, true
		in.end, in.endKnown = f.seq, true
		if in.delivered < in.end {
			in.finGapAt = f.at // the fin overtook frames it counts: they get holdTimeout to arrive
		}
	}
}

// deliverNext hands on f, the frame after the last delivered one, and every held frame of the
// current epoch that follows it without a gap.
func (in *inbound) deliverNext(f inFrame, r *inResult) {
	for {
		in.delivered = f.seq
		r.deliver = append(r.deliver, f.payload)
		i := in.heldIndex(in.cur, in.delivered+1)
		if i < 0 {
			break
		}
		f = in.held[i]
		in.held = append(in.held[:i], in.held[i+1:]...)
	}
	if in.endKnown && in.delivered >= in.end {
		in.finGapAt = time.Time{}
	}
}

// heldIndex is the position of the held data frame (epoch, seq), or -1.
func (in *inbound) heldIndex(epoch uint32, seq uint64) int {
	for i, f := range in.held {
		if f.kind == kindData && f.epoch == epoch && f.seq == seq {
			return i
		}
	}
	return -1
}

func (in *inbound) holds(epoch uint32, seq uint64) bool { return in.heldIndex(epoch, seq) >= 0 }

// noteHello learns from a held hello what follows the current epoch. A hello naming the current
// epoch as its predecessor also says where that epoch ends. A hello naming no predecessor comes
// from a sender that forgot us (RemovePeer) and retired its old endpoint with a fin: it follows
// the current epoch once that one is complete.
func (in *inbound) noteHello(f inFrame, cur uint32) {
	if f.kind != kindHello || in.nextKnown {
		return
	}
	switch f.prevEpoch {
	case cur:
		if !in.endKnown {
			in.end, in.endKnown = f.seq, true
		}
		in.next, in.nextKnown = f.epoch, true
	case 0:
		in.next, in.nextKnown = f.epoch, true
	}
}

// advance moves to the next epoch while the current one is complete and its successor known.
func (in *inbound) advance(r *inResult) {
	for in.endKnown && in.delivered >= in.end && in.nextKnown {
		in.switchTo(in.next, r)
	}
}

// switchTo makes epoch the current one and applies its held frames, in the order they arrived.
func (in *inbound) switchTo(epoch uint32, r *inResult) {
	in.cur, in.delivered, in.end, in.endKnown, in.next, in.nextKnown, in.open = epoch, 0, 0, false, 0, false, false
	in.finned, in.finGapAt = false, time.Time{}
	var mine []inFrame
	keep := in.held[:0]
	for _, f := range in.held {
		switch {
		case f.epoch == epoch:
			mine = append(mine, f)
		case f.epoch < epoch:
			switch f.kind {
			case kindData:
				r.stale++
			case kindFin:
				r.finsAgain++
			}
		default:
			in.noteHello(f, epoch)
			keep = append(keep, f)
		}
	}
	clear(in.held[len(keep):])
	in.held = keep
	for _, f := range mine {
		in.apply(f, r)
	}
}

// expire gives up on the current epoch's gap once it has stood for holdTimeout — a frame behind
// it waited that long, or the fin that counts the missing frames did: the missing frames are
// counted lost and delivery moves on, to the current epoch's next held frame or to the next
// epoch, as far as the other frames' own waits allow. No frame waits much longer than
// holdTimeout.
func (in *inbound) expire(now time.Time, holdTimeout time.Duration) inResult {
	var r inResult
	for {
		since, ok := in.gapSince()
		if !ok || now.Sub(since) < holdTimeout {
			return r
		}
		if next, ok := in.nextHeldSeq(); ok {
			// Skip to the current epoch's first held frame; what is before it is gone.
			r.lost += next.seq - in.delivered - 1
			i := in.heldIndex(next.epoch, next.seq)
			in.held = append(in.held[:i], in.held[i+1:]...)
			in.deliverNext(next, &r)
			in.advance(&r)
			continue
		}
		if in.endKnown && in.end > in.delivered {
			r.lost += in.end - in.delivered
			in.delivered = in.end
			in.finGapAt = time.Time{}
		}
		if len(in.held) == 0 {
			return r // the epoch is complete now; nothing newer is waiting
		}
		next := in.next
		if !in.nextKnown {
			next = in.held[0].epoch
			for _, f := range in.held {
				next = min(next, f.epoch)
			}
		}
		in.switchTo(next, &r)
		in.advance(&r)
	}
}

// gapSince is when the oldest wait behind a gap began: the earliest held frame's arrival, or the
// arrival of a fin that came before frames it counts.
func (in *inbound) gapSince() (time.Time, bool) {
	since := in.finGapAt
	for _, f := range in.held {
		if since.IsZero() || f.at.Before(since) {
			since = f.at
		}
	}
	return since, !since.IsZero()
}

// nextHeldSeq is the current epoch's held data frame with the lowest seq.
func (in *inbound) nextHeldSeq() (inFrame, bool) {
	var best inFrame
	found := false
	for _, f := range in.held {
		if f.kind == kindData && f.epoch == in.cur && (!found || f.seq < best.seq) {
			best, found = f, true
		}
	}
	return best, found
}

// view is a snapshot of what we know of the sender's endpoints, for decisions taken outside the
// receive lock.
func (in *inbound) view() peerView {
	v := peerView{started: in.started, cur: in.cur, open: in.open, latest: in.cur, missing: in.endKnown && in.delivered < in.end}
	for _, f := range in.held {
		if v.minHeld == 0 || f.epoch < v.minHeld {
			v.minHeld = f.epoch
		}
		v.latest = max(v.latest, f.epoch)
	}
	return v
}

// peerView is what inbound knew of a sender at one moment.
type peerView struct {
	started bool
	cur     uint32
	open    bool
	latest  uint32 // the newest epoch of the sender seen (0: none)
	minHeld uint32 // the oldest epoch with frames held (0: none)
	missing bool   // cur's last seq is known and frames up to it have not all arrived
}

// finishedThrough reports whether every endpoint of the sender up to epoch e is finished: its fin
// arrived, a successor took over, or we gave up on it. Epoch 0 (none) is always finished. A sender
// not heard from yet has finished nothing: it may have opened epoch e already (its hello and its
// first frames can still be on their way), and closing our endpoint of that epoch would tear the
// pairing its frames travel on. It answers our fin with its own (or finWait bounds the wait).
func (v peerView) finishedThrough(e uint32) bool {
	switch {
	case e == 0:
		return true
	case !v.started:
		return false
	case v.minHeld != 0 && v.minHeld <= e:
		return false
	case v.cur > e:
		return true
	case v.cur == e:
		return !v.open && !v.missing
	}
	return false
}
