package ucx

import "time"

// inbound keeps one sender's frames in the order it sent them, across its endpoints.
//
// UCX keeps order on one endpoint only. A sender replaces its endpoint to us whenever one is
// retired (its idle reaper, or our fin) or fails, and a frame on the new endpoint can overtake
// the tail of the old one: they are different connections. So every frame names its epoch (the
// endpoint) and its seq within it, and the hello that opens an endpoint names the epoch before
// it and that epoch's last seq. inbound delivers an epoch's frames in seq order and holds frames
// of a newer epoch until the epoch before it is complete — its fin has arrived, or the hello of
// its successor told us its last seq and we delivered that far. If the old epoch's missing frames
// never come (its endpoint died with them), the held frames go out after holdTimeout and the gap
// is counted as lost.
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
	open      bool // cur's endpoint is open at the sender as far as we know (no fin yet)

	held []inFrame // frames of newer epochs, in arrival order
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
}

// accept takes one frame and returns what may be delivered now.
func (in *inbound) accept(f inFrame, now time.Time) inResult {
	var r inResult
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
		if f.kind == kindData {
			r.stale++
		}
		return r
	default:
		in.noteHello(f, in.cur)
		f.at = now
		in.held = append(in.held, f)
	}
	in.advance(&r)
	return r
}

func (in *inbound) apply(f inFrame, r *inResult) {
	switch f.kind {
	case kindData:
		if f.seq <= in.delivered {
			r.stale++
			return
		}
		r.lost += f.seq - in.delivered - 1
		in.delivered = f.seq
		in.open = true
		r.deliver = append(r.deliver, f.payload)
	case kindHello:
		in.open = true
	case kindFin:
		in.open = false
		// The fin follows every frame of its endpoint, so anything still missing is gone.
		if f.seq > in.delivered {
			r.lost += f.seq - in.delivered
			in.delivered = f.seq
		}
		in.end, in.endKnown = f.seq, true
	}
}

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

// switchTo makes epoch the current one and applies its held frames.
func (in *inbound) switchTo(epoch uint32, r *inResult) {
	in.cur, in.delivered, in.end, in.endKnown, in.next, in.nextKnown, in.open = epoch, 0, 0, false, 0, false, false
	keep := in.held[:0]
	for _, f := range in.held {
		switch {
		case f.epoch == epoch:
			in.apply(f, r)
		case f.epoch < epoch:
			if f.kind == kindData {
				r.stale++
			}
		default:
			in.noteHello(f, epoch)
			keep = append(keep, f)
		}
	}
	clear(in.held[len(keep):])
	in.held = keep
}

// expire gives up on the current epoch when a frame of a newer one has waited holdTimeout since
// it arrived: the missing frames are counted lost and delivery moves on, as far as the held
// frames' own waits allow. No frame waits much longer than holdTimeout.
func (in *inbound) expire(now time.Time, holdTimeout time.Duration) inResult {
	var r inResult
	for len(in.held) > 0 && now.Sub(in.held[0].at) >= holdTimeout {
		if in.endKnown && in.end > in.delivered {
			r.lost += in.end - in.delivered
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
	return r
}

// view is a snapshot of what we know of the sender's endpoints, for decisions taken outside the
// receive lock.
func (in *inbound) view() peerView {
	v := peerView{started: in.started, cur: in.cur, open: in.open, latest: in.cur}
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
}

// finishedThrough reports whether every endpoint of the sender up to epoch e is finished: its fin
// arrived, a successor took over, or we gave up on it. Epoch 0 (none) is always finished.
func (v peerView) finishedThrough(e uint32) bool {
	switch {
	case !v.started || e == 0:
		return true
	case v.minHeld != 0 && v.minHeld <= e:
		return false
	case v.cur > e:
		return true
	case v.cur == e:
		return !v.open
	}
	return false
}
