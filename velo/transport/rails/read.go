package rails

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/transport"
)

// errNoRail is wrapped when no rail shared with the owner can take a read: every one is paused,
// or the read failed on each.
var errNoRail = errors.New("rails: no rail left")

// errRailTimeout is the failure of a read that outlived the slice timeout on its rail.
var errRailTimeout = errors.New("rails: read timed out on its rail")

// piece is one read over one rail: len(dst) bytes at off of the region keys name. A large read is
// cut into pieces of SliceSize; a small one is one piece.
type piece struct {
	read    int      // index of the caller's read
	keys    [][]byte // by rail; nil where the rail has no key (a plain key is rail 0's alone)
	off     uint64
	dst     []byte
	tried   uint32 // rails it failed on
	suspect []*rail
	err     error
	final   bool
}

// RMABackend is the first rail's ("ucx").
func (t *Transport) RMABackend() string { return t.rails[0].rma.RMABackend() }

// RegistersRuns implements transport.RunRegisterer when every rail's transport does: a key of
// several rails names a part by naming it on each.
func (t *Transport) RegistersRuns() bool {
	for _, r := range t.rails {
		if rr, ok := r.rma.(transport.RunRegisterer); !ok || !rr.RegistersRuns() {
			return false
		}
	}
	return true
}

// CanGet reports whether any rail can read from peer.
func (t *Transport) CanGet(peer transport.InstanceID) bool {
	for _, r := range t.rails {
		if r.rma.CanGet(peer) {
			return true
		}
	}
	return false
}

// PathRefusal implements transport.PathRefuser: the first rail's reason, the rail every peer is
// registered on first.
func (t *Transport) PathRefusal(peer transport.InstanceID) string {
	if pr, ok := t.rails[0].rma.(transport.PathRefuser); ok {
		return pr.PathRefusal(peer)
	}
	return ""
}

// ForceClosePeer closes the peer's endpoints on every rail.
func (t *Transport) ForceClosePeer(peer transport.InstanceID) error {
	var errs []error
	for _, r := range t.rails {
		if err := r.rma.ForceClosePeer(peer); err != nil {
			errs = append(errs, fmt.Errorf("rail %d (%s): %w", r.idx, r.name, err))
		}
	}
	return errors.Join(errs...)
}

// Get reads len(dst) bytes at offset of the region key names. A rail-set key of a read above
// SplitAbove is sliced over every rail it names that is up and reaches peer; anything else goes
// whole over one rail.
func (t *Transport) Get(ctx context.Context, peer transport.InstanceID, key []byte, offset uint64, dst []byte) error {
	var out error
	t.ReadMany(ctx, peer, []transport.Read{{Key: key, Offset: offset, Dst: dst}}, t.cfg.Window, func(_ int, err error) { out = err })
	return out
}

// ReadMany implements transport.ManyReader: each read is planned as in Get, and the pieces of all
// of them are read together, each rail pulling the next ones as it finishes its own (so a faster
// rail reads more), up to window (at least the rails' Config.Window) in flight per rail. A piece
// whose rail failed is read again over another; a read fails only when one of its pieces failed
// on every rail that could take it. done runs on the calling goroutine.
func (t *Transport) ReadMany(ctx context.Context, peer transport.InstanceID, reads []transport.Read, window int, done func(i int, err error)) {
	report := func(i int, err error) {
		if done != nil {
			done(i, err)
		}
	}
	var pieces []*piece
	left := make([]int, len(reads)) // pieces not final, by read
	for i, rd := range reads {
		ps, err := t.plan(i, rd)
		if err != nil {
			report(i, fmt.Errorf("rails: GET of %d bytes from %s: %w", len(rd.Dst), peer, err))
			continue
		}
		left[i] = len(ps)
		pieces = append(pieces, ps...)
	}
	if len(pieces) == 0 {
		return
	}
	window = max(window, t.cfg.Window)
	s := &sched{t: t, ctx: ctx, peer: peer, pending: pieces, left: left, events: make(chan event, len(reads)), window: window}
	s.cond = sync.NewCond(&s.mu)
	s.remaining = len(pieces)
	n := 0 // the reads with pieces, each reported once through events
	for _, l := range left {
		if l > 0 {
			n++
		}
	}
	s.run()
	for range n {
		ev := <-s.events
		report(ev.read, ev.err)
	}
	s.wg.Wait()
}

// plan turns one read into pieces.
func (t *Transport) plan(i int, rd transport.Read) ([]*piece, error) {
	var keys [][]byte
	if wire.IsRailKey(rd.Key) {
		var err error
		if keys, err = wire.DecodeRailKey(rd.Key); err != nil {
			return nil, err
		}
		if len(keys) > len(t.rails) {
			keys = keys[:len(t.rails)] // the owner has more rails than this side: those are not shared
		}
	} else {
		keys = [][]byte{rd.Key}
	}
	n := 0
	for _, k := range keys {
		if k != nil {
			n++
		}
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: the key names none of this side's %d rails", errNoRail, len(t.rails))
	}
	if n == 1 || len(rd.Dst) <= t.cfg.SplitAbove {
		return []*piece{{read: i, keys: keys, off: rd.Offset, dst: rd.Dst}}, nil
	}
	var out []*piece
	for at := 0; at < len(rd.Dst); at += t.cfg.SliceSize {
		end := min(at+t.cfg.SliceSize, len(rd.Dst))
		out = append(out, &piece{read: i, keys: keys, off: rd.Offset + uint64(at), dst: rd.Dst[at:end:end]})
	}
	return out, nil
}

type event struct {
	read int
	err  error
}

// sched is one ReadMany's pieces and the rails' workers that read them.
type sched struct {
	t      *Transport
	ctx    context.Context
	peer   transport.InstanceID
	window int

	mu        sync.Mutex
	cond      *sync.Cond
	pending   []*piece // not final and not in flight
	inflight  int
	remaining int   // pieces not final
	left      []int // by read
	events    chan event
	wg        sync.WaitGroup
	lastErr   error
	errs      map[int]error // each read's first error
}

// run starts the workers: two per rail that reaches the peer and is up (or probing), each
// reading batches of up to half the window. When none can start, every piece fails at once.
//
// Every lane is handed its first batch before any worker starts, lane by lane across the rails
// (from a rail that turns with each transfer, so that reads too small to slice spread over the
// rails too): a worker takes from pending at once, and a rail that is quick off the mark could
// otherwise take every piece before the others start. A probing rail gets one piece, set aside
// for it the same way.
func (s *sched) run() {
	stop := context.AfterFunc(s.ctx, func() {
		s.mu.Lock()
		s.cond.Broadcast()
		s.mu.Unlock()
	})
	type launch struct {
		r            *rail
		lanes, batch int
		first        [][]*piece // by lane
		probe        bool
	}
	var launches []*launch
	var paused []string
	now := time.Now()
	n := len(s.t.rails)
	turn := int(s.t.turn.Add(1) % uint64(n))
	s.mu.Lock()
	for k := range n {
		r := s.t.rails[(turn+k)%n]
		if !s.wanted(r) || !r.rma.CanGet(s.peer) {
			continue
		}
		ok, probe := r.usable(now)
		if !ok {
			paused = append(paused, r.name)
			continue
		}
		l := &launch{r: r, lanes: 2, batch: max(s.window/2, 1), probe: probe}
		if probe || s.remaining == 1 {
			l.lanes, l.batch = 1, 1
		}
		l.first = make([][]*piece, l.lanes)
		launches = append(launches, l)
	}
	for lane := range 2 {
		for _, l := range launches {
			if lane < l.lanes {
				l.first[lane] = s.takeNow(l.r, l.batch)
			}
		}
	}
	kept := launches[:0]
	for _, l := range launches {
		if l.probe && len(l.first[0]) == 0 {
			l.r.endProbe() // nothing for the probe: the next transfer probes
			continue
		}
		kept = append(kept, l)
	}
	launches = kept
	if len(launches) == 0 {
		s.failRest(fmt.Errorf("%w: no rail reaches %s and is up (paused: %v)", errNoRail, s.peer, paused))
	}
	s.mu.Unlock()
	for _, l := range launches {
		for lane := range l.lanes {
			s.wg.Add(1)
			go s.worker(l.r, l.batch, l.first[lane], l.probe && lane == 0)
		}
	}
	go func() {
		s.wg.Wait()
		stop()
		// Every worker is gone: what no rail could take fails now.
		s.mu.Lock()
		err := s.lastErr
		if err == nil {
			err = s.ctx.Err()
		}
		if err == nil {
			err = errNoRail
		}
		s.failRest(err)
		s.mu.Unlock()
	}()
}

// wanted reports whether any piece has a key for r (s.mu held).
func (s *sched) wanted(r *rail) bool {
	for _, p := range s.pending {
		if r.idx < len(p.keys) && p.keys[r.idx] != nil {
			return true
		}
	}
	return false
}

// failRest fails every piece not final (s.mu held).
func (s *sched) failRest(err error) {
	for _, p := range s.pending {
		if !p.final {
			s.finish(p, err)
		}
	}
	s.pending = nil
}

// finish makes p final (s.mu held) and reports its read once all its pieces are.
func (s *sched) finish(p *piece, err error) {
	if p.final {
		return
	}
	p.final = true
	s.remaining--
	if p.err == nil {
		p.err = err
	}
	l := &s.left[p.read]
	*l--
	// The first error of a read is its error; pieces report into the read's first failure.
	if err != nil && s.readErr(p.read) == nil {
		s.setReadErr(p.read, err)
	}
	if *l == 0 {
		s.events <- event{read: p.read, err: s.readErr(p.read)}
	}
	s.cond.Broadcast()
}

func (s *sched) readErr(i int) error {
	if s.errs == nil {
		return nil
	}
	return s.errs[i]
}

func (s *sched) setReadErr(i int, err error) {
	if s.errs == nil {
		s.errs = make(map[int]error)
	}
	s.errs[i] = err
}

// take hands r up to n pieces it has a key for and has not failed; it waits while there are none
// but others are in flight (they may come back), and returns nil when r has nothing left to do.
func (s *sched) take(r *rail, n int) []*piece {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if s.ctx.Err() != nil || s.remaining == 0 {
			return nil
		}
		if got := s.takeNow(r, n); len(got) > 0 {
			return got
		}
		if s.inflight == 0 {
			return nil
		}
		s.cond.Wait()
	}
}

// takeNow takes up to n pieces for r from pending, without waiting (s.mu held, or no worker yet).
func (s *sched) takeNow(r *rail, n int) []*piece {
	var got []*piece
	rest := s.pending[:0]
	for _, p := range s.pending {
		if len(got) < n && r.idx < len(p.keys) && p.keys[r.idx] != nil && p.tried&(1<<r.idx) == 0 {
			got = append(got, p)
			continue
		}
		rest = append(rest, p)
	}
	s.pending = rest
	s.inflight += len(got)
	return got
}

// worker reads batches of pieces over r, starting with first, until there is nothing left for it
// or r fails. probe says that first is the probe of a rail whose pause ended: its success alone
// takes the rail back up.
func (s *sched) worker(r *rail, batch int, first []*piece, probe bool) {
	defer s.wg.Done()
	for {
		ps := first
		if first = nil; len(ps) == 0 {
			ps = s.take(r, batch)
		}
		if len(ps) == 0 {
			return
		}
		failed := s.read(r, ps, probe)
		if probe {
			// A probe that neither succeeded nor was blamed (it failed on every rail alike)
			// settles nothing: the next transfer probes again.
			r.endProbe()
			probe = false
		}
		if failed {
			return
		}
		if !r.up() {
			return // paused by another lane's failure or a lost peer
		}
	}
}

// read reads ps over r, within r's slice timeout, and settles each piece; it reports whether r
// failed. probe: ps is a probing rail's probe.
func (s *sched) read(r *rail, ps []*piece, probe bool) (railFailed bool) {
	bytes := 0
	for _, p := range ps {
		bytes += len(p.dst)
	}
	r.inflight.Add(int64(bytes))
	defer r.inflight.Add(-int64(bytes))
	ctx, cancel := context.WithTimeout(s.ctx, s.t.sliceTimeout(r))
	defer cancel()
	// A read past the rail's timeout may not return at once: the member gives up a read still
	// waiting for its reply, but one whose bytes are arriving is UCX's until UCX ends it, and
	// over a link that went down that is the endpoint's own timeout (many seconds). Past a short
	// grace the rail's endpoints to the peer are closed, which ends those reads, so their pieces
	// go to the other rails now instead.
	returned := make(chan struct{})
	stopWatch := context.AfterFunc(ctx, func() {
		if s.ctx.Err() != nil {
			return // the caller's end: the member gives its reads up itself
		}
		select {
		case <-returned:
		case <-time.After(forceGrace):
			s.t.forceClose(r, s.peer)
		}
	})
	defer stopWatch()
	errs := make([]error, len(ps))
	start := time.Now()
	if r.many != nil && len(ps) > 1 {
		reads := make([]transport.Read, len(ps))
		for i, p := range ps {
			reads[i] = transport.Read{Key: p.keys[r.idx], Offset: p.off, Dst: p.dst}
		}
		r.many.ReadMany(ctx, s.peer, reads, len(reads), func(i int, err error) { errs[i] = err })
	} else {
		var wg sync.WaitGroup
		for i, p := range ps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = r.rma.Get(ctx, s.peer, p.keys[r.idx], p.off, p.dst)
			}()
		}
		wg.Wait()
	}
	close(returned)
	took := time.Since(start)
	timedOut := ctx.Err() != nil && s.ctx.Err() == nil
	var railErr error
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inflight -= len(ps)
	for i, p := range ps {
		err := errs[i]
		switch {
		case err == nil:
			s.t.succeeded(r, len(p.dst), took, probe)
			for _, sr := range p.suspect {
				// The same bytes came over another rail: the rails they failed on are at fault.
				s.t.railFailed(sr, fmt.Errorf("a read failed there and succeeded on rail %d", r.idx))
			}
			s.finish(p, nil)
		case isCallerEnd(s.ctx, err):
			s.finish(p, err)
		default:
			if timedOut {
				err = fmt.Errorf("%w (%v, rail %d %s): %w", errRailTimeout, s.t.sliceTimeout(r), r.idx, r.name, err)
			}
			railErr, s.lastErr = err, err
			p.tried |= 1 << r.idx
			if timedOut {
				// Past the timeout the rail is at fault whatever the other rails say.
				railFailed = true
			} else {
				p.suspect = append(p.suspect, r)
			}
			if s.untriedRails(p) {
				s.pending = append(s.pending, p)
			} else {
				s.finish(p, err)
			}
		}
	}
	if railErr != nil {
		if railFailed {
			s.t.railFailed(r, railErr)
		}
		railFailed = true // this rail reads no more of this transfer either way
	}
	s.cond.Broadcast()
	return railFailed
}

// forceGrace is how long a read past its rail's timeout may take to return before the rail's
// endpoints to the peer are closed under it.
const forceGrace = 250 * time.Millisecond

// forceClose closes r's endpoints to peer, which ends the reads stalled on them (they fail, and
// their pieces are read over the other rails); the rail's next read to the peer opens a new
// endpoint. The loss this reports is the rail set's own doing and stays with the rail.
func (t *Transport) forceClose(r *rail, peer transport.InstanceID) {
	now := time.Now().UnixNano()
	if last := r.forcedAt.Load(); now-last < int64(forceGrace) || !r.forcedAt.CompareAndSwap(last, now) {
		return // another lane's stalled reads just closed them: these end with that close
	}
	r.forcing.Store(true)
	defer r.forcing.Store(false)
	t.log.Warn("rails: reads stalled past the rail's timeout; closing its endpoints to the peer to end them", "rail", r.idx, "device", r.name, "peer", peer)
	if err := r.rma.ForceClosePeer(peer); err != nil {
		t.log.Debug("rails: closing a stalled rail's endpoints", "rail", r.idx, "device", r.name, "peer", peer, "err", err)
	}
}

// untriedRails reports whether some rail with a key for p has not failed it and may still take
// it (s.mu held).
func (s *sched) untriedRails(p *piece) bool {
	now := time.Now()
	for _, r := range s.t.rails {
		if r.idx < len(p.keys) && p.keys[r.idx] != nil && p.tried&(1<<r.idx) == 0 && r.rma.CanGet(s.peer) {
			r.mu.Lock()
			st := r.stateLocked(now)
			r.mu.Unlock()
			if st != StatePaused {
				return true
			}
		}
	}
	return false
}
