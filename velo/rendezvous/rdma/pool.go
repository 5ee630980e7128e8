package rdma

import (
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/transport"
	"github.com/velo-go/velo/verbs"
)

// pool owns the arenas and the budget. One mutex guards the bookkeeping; mapping, copying and
// unmapping happen outside it.
type pool struct {
	cfg    PoolConfig
	log    *slog.Logger
	g      *gauges
	mapper transport.PayloadMapper // maps payloads of their own (nil: arenas only)

	mapMu    sync.Mutex // serialises arena maps
	mu       sync.Mutex
	arenas   []*arena // pooled arenas, oldest first; dedicated ones are not listed
	pinned   int64    // mapped arena bytes + live registrations + reservations being mapped
	arenaB   int64    // mapped arena bytes (pooled and dedicated)
	mapped   int      // mapped arenas (pooled and dedicated)
	outs     int      // slots handed out and not yet freed
	held     int      // freed slots whose pages a live registration still holds
	closed   bool
	nextID   int
	lastFail error
}

// arena is one mapping. Its pages are handed out as slots; free holds the unused page runs,
// sorted by start and never adjacent (they coalesce).
type arena struct {
	id        int
	mem       []byte
	dedicated bool
	release   func() error // unmaps a payload's own memory (the mapper's); nil: an anonymous mapping
	free      []pageRun
	usedPages int
	idleSince time.Time
}

type pageRun struct{ start, n int }

// Slot is pinned memory handed out by the pool: a whole number of pages of one arena, the
// payload at its start and zeros after it up to the page boundary.
//
// A slot's pages go back to its arena only when it was freed and no registration of it is still
// alive (regs == 0): a remote key that may still be honoured keeps them out of use, and so keeps
// its arena mapped, however long that takes.
type Slot struct {
	p     *pool
	a     *arena
	start int // first page
	pages int
	n     int
	freed bool // freed by its owner
	regs  int  // registrations whose key is not known dead yet
}

// Bytes is the payload's memory (n bytes).
func (s *Slot) Bytes() []byte {
	off := s.start * pageSize
	return s.a.mem[off : off+s.n : off+s.n]
}

// PinnedRegion is the slot's whole pages: what a per-lease registration covers (it implements
// rendezvous.PinnedMemory).
func (s *Slot) PinnedRegion() []byte {
	off := s.start * pageSize
	end := off + s.pages*pageSize
	return s.a.mem[off:end:end]
}

func newPool(cfg PoolConfig, log *slog.Logger, g *gauges) *pool {
	return &pool{cfg: cfg, log: log, g: g}
}

// alloc returns a slot of n bytes. mayMap allows mapping a new arena (StageDataPinned and
// consumer buffers may; the transparent stager may not, so a message send never waits for a
// 64 MiB pin). On refusal it returns the reason the transfer will report and an error that says
// why (wrapping ErrPoolExhausted, ErrBudget, ErrArenaMap or ErrClosed).
func (p *pool) alloc(n int, mayMap bool) (*Slot, metrics.Reason, error) {
	if n <= 0 {
		return nil, metrics.ReasonNotPinned, fmt.Errorf("rdma: a slot of %d bytes: only payloads of at least one byte are pinned", n)
	}
	pages := roundPages(n) / pageSize
	dedicated := pages*pageSize > p.cfg.ArenaSize
	if !dedicated {
		if s, err := p.carve(pages, n); err != nil {
			return nil, metrics.ReasonPoolExhausted, err
		} else if s != nil {
			return s, "", nil
		}
	}
	if !mayMap {
		p.mu.Lock()
		mapped := len(p.arenas)
		p.mu.Unlock()
		if mapped == 0 {
			return nil, metrics.ReasonPoolExhausted, fmt.Errorf("rdma: %w: no arena is mapped yet and transparent staging never maps one: call StageDataPinned once at startup", ErrPoolExhausted)
		}
		return nil, metrics.ReasonPoolExhausted, fmt.Errorf("rdma: %w: the %d mapped arenas have no room for %s", ErrPoolExhausted, mapped, verbs.FormatBytes(uint64(n)))
	}
	// One map at a time: two stagings that find the pool full would otherwise map two arenas where
	// one does. The second one finds room in the first's arena below.
	p.mapMu.Lock()
	defer p.mapMu.Unlock()
	if !dedicated {
		if s, err := p.carve(pages, n); err != nil {
			return nil, metrics.ReasonPoolExhausted, err
		} else if s != nil {
			return s, "", nil
		}
	}
	size := p.cfg.ArenaSize
	if dedicated {
		size = pages * pageSize
	}
	if err := p.reserveMapping(size, "an arena", " or set ArenaReclaimAfter"); err != nil {
		return nil, metrics.ReasonBudget, err
	}
	mem, err := mapArena(size)
	if err != nil {
		p.mu.Lock()
		p.pinned -= int64(size)
		p.lastFail = err
		p.mu.Unlock()
		p.g.arenaFailures.Inc()
		return nil, metrics.ReasonPoolExhausted, err
	}
	s, err := p.addArena(&arena{mem: mem, dedicated: dedicated}, pages, n)
	if err != nil {
		return nil, metrics.ReasonPoolExhausted, err
	}
	return s, "", nil
}

// reserveMapping counts a mapping of size bytes about to be made against the budget (what names
// it in the refusal, fix adds to its advice), or refuses.
func (p *pool) reserveMapping(size int, what, fix string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pinned+int64(size) > p.cfg.RegisteredBytesBudget {
		return fmt.Errorf("rdma: %w: %s of %s would pin %s, the budget is %s: raise RDMAPoolConfig.RegisteredBytesBudget%s",
			ErrBudget, what, verbs.FormatBytes(uint64(size)), verbs.FormatBytes(uint64(p.pinned)+uint64(size)), verbs.FormatBytes(uint64(p.cfg.RegisteredBytesBudget)), fix)
	}
	p.pinned += int64(size) // reserved while the map runs
	return nil
}

// addArena books a new mapping a (its memory reserved with reserveMapping, its mem, dedicated and
// release set) and carves an n-byte slot of pages from it; it gives the mapping straight back
// with ErrClosed when Close ran while it was mapped.
func (p *pool) addArena(a *arena, pages, n int) (*Slot, error) {
	size := len(a.mem)
	p.mu.Lock()
	p.nextID++
	a.id, a.free, a.idleSince = p.nextID, []pageRun{{0, size / pageSize}}, time.Now()
	if p.closed {
		p.pinned -= int64(size)
		p.mu.Unlock()
		p.unmap(a)
		return nil, ErrClosed
	}
	p.arenaB += int64(size)
	p.mapped++
	if !a.dedicated {
		p.arenas = append(p.arenas, a)
	}
	s := p.carveLocked(a, pages, n)
	p.g.setArenas(p.mapped, p.arenaB)
	pinned := p.pinned
	p.mu.Unlock()
	p.log.Debug("rdma: mapped an arena", "arena", a.id, "bytes", size, "dedicated", a.dedicated, "own", a.release != nil, "pinned", pinned)
	return s, nil
}

// allocPayload returns a slot for an n-byte staged payload: memory of its own from the mapper when
// it takes payloads of that size and a new mapping is allowed, else alloc's. The mapper's memory is
// a dedicated arena of one slot, locked as any arena, counted against the budget, and unmapped
// (release) once the slot is freed and no registration of it is alive; it is never carved again.
// When the mapper fails, the payload goes to the arenas as before.
func (p *pool) allocPayload(n int, mayMap bool) (*Slot, metrics.Reason, error) {
	if p.mapper == nil || !mayMap || n <= 0 {
		return p.alloc(n, mayMap)
	}
	if m := p.mapper.PayloadMin(); m <= 0 || n < m {
		return p.alloc(n, mayMap)
	}
	size := roundPages(n)
	if err := p.reserveMapping(size, "a payload", ""); err != nil {
		return nil, metrics.ReasonBudget, err
	}
	mem, release, err := p.mapper.MapPayload(size)
	if err == nil {
		if err = lockArena(mem); err != nil {
			release()
		}
	}
	if err != nil {
		p.mu.Lock()
		p.pinned -= int64(size)
		p.mu.Unlock()
		p.log.Debug("rdma: no memory of its own for a payload; staging it in an arena", "bytes", n, "err", err)
		return p.alloc(n, mayMap)
	}
	s, err := p.addArena(&arena{mem: mem, dedicated: true, release: release}, size/pageSize, n)
	if err != nil {
		return nil, metrics.ReasonPoolExhausted, err
	}
	return s, "", nil
}

// carve finds room in a mapped pooled arena, or returns nil (and ErrClosed once closed).
func (p *pool) carve(pages, n int) (*Slot, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	for _, a := range p.arenas {
		if s := p.carveLocked(a, pages, n); s != nil {
			return s, nil
		}
	}
	return nil, nil
}

// carveLocked takes pages from a's first run that fits, or returns nil.
func (p *pool) carveLocked(a *arena, pages, n int) *Slot {
	for i, r := range a.free {
		if r.n < pages {
			continue
		}
		if r.n == pages {
			a.free = append(a.free[:i], a.free[i+1:]...)
		} else {
			a.free[i] = pageRun{r.start + pages, r.n - pages}
		}
		a.usedPages += pages
		p.outs++
		s := &Slot{p: p, a: a, start: r.start, pages: pages, n: n}
		clear(s.PinnedRegion()[n:]) // the tail of the last page may hold an earlier payload's bytes
		return s
	}
	return nil
}

// free gives a slot back. If a registration of it may still be read, its pages stay out of use
// until regDead says the last one died.
func (p *pool) free(s *Slot) {
	p.mu.Lock()
	if s.freed {
		p.mu.Unlock()
		return
	}
	s.freed = true
	p.outs--
	var drop *arena
	if s.regs == 0 {
		drop = p.releaseLocked(s)
	} else {
		p.held++
	}
	p.mu.Unlock()
	if drop != nil {
		p.unmap(drop)
	}
}

// addReg counts a registration of s, which must not be freed yet.
func (p *pool) addReg(s *Slot) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if s.freed {
		return fmt.Errorf("rdma: %w: the slot was freed before its lease was served", ErrClosed)
	}
	s.regs++
	return nil
}

// regDead says a registration of s can read nothing any more. The last one of a freed slot
// gives its pages back.
func (p *pool) regDead(s *Slot) {
	p.mu.Lock()
	s.regs--
	var drop *arena
	if s.freed && s.regs == 0 {
		p.held--
		drop = p.releaseLocked(s)
	}
	p.mu.Unlock()
	if drop != nil {
		p.unmap(drop)
	}
}

// releaseLocked returns s's pages to its arena; it returns the arena when that is now to be
// unmapped (a dedicated arena, or any arena after close), for the caller to unmap outside the lock.
func (p *pool) releaseLocked(s *Slot) *arena {
	a := s.a
	a.usedPages -= s.pages
	a.free = insertRun(a.free, pageRun{s.start, s.pages})
	if a.usedPages == 0 {
		a.idleSince = time.Now()
		if a.dedicated || p.closed {
			return p.forgetLocked(a)
		}
	}
	return nil
}

// insertRun adds r to the sorted runs, merging it with its neighbours.
func insertRun(runs []pageRun, r pageRun) []pageRun {
	i := sort.Search(len(runs), func(i int) bool { return runs[i].start > r.start })
	runs = append(runs, pageRun{})
	copy(runs[i+1:], runs[i:])
	runs[i] = r
	if i+1 < len(runs) && runs[i].start+runs[i].n == runs[i+1].start {
		runs[i].n += runs[i+1].n
		runs = append(runs[:i+1], runs[i+2:]...)
	}
	if i > 0 && runs[i-1].start+runs[i-1].n == runs[i].start {
		runs[i-1].n += runs[i].n
		runs = append(runs[:i], runs[i+1:]...)
	}
	return runs
}

// forgetLocked removes an empty arena from the books; the caller unmaps it outside the lock.
func (p *pool) forgetLocked(a *arena) *arena {
	for i, x := range p.arenas {
		if x == a {
			p.arenas = append(p.arenas[:i], p.arenas[i+1:]...)
			break
		}
	}
	p.pinned -= int64(len(a.mem))
	p.arenaB -= int64(len(a.mem))
	p.mapped--
	p.g.setArenas(p.mapped, p.arenaB)
	return a
}

func (p *pool) unmap(a *arena) {
	unmap := func() error { return unmapArena(a.mem) }
	if a.release != nil {
		unmap = a.release
	}
	if err := unmap(); err != nil {
		p.log.Error("rdma: unmapping an arena failed; its pages stay mapped", "arena", a.id, "err", err)
	} else {
		p.log.Debug("rdma: unmapped an arena", "arena", a.id, "bytes", len(a.mem))
	}
}

// reserve counts n bytes of a per-lease registration against the budget, or refuses.
func (p *pool) reserve(n int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	if p.pinned+int64(n) > p.cfg.RegisteredBytesBudget {
		return fmt.Errorf("rdma: %w: registering %s for a lease would pin %s, the budget is %s: raise RDMAPoolConfig.RegisteredBytesBudget",
			ErrBudget, verbs.FormatBytes(uint64(n)), verbs.FormatBytes(uint64(p.pinned)+uint64(n)), verbs.FormatBytes(uint64(p.cfg.RegisteredBytesBudget)))
	}
	p.pinned += int64(n)
	return nil
}

func (p *pool) unreserve(n int) {
	p.mu.Lock()
	p.pinned -= int64(n)
	p.mu.Unlock()
}

// reclaim unmaps pooled arenas idle since before now-after, newest first, keeping one.
func (p *pool) reclaim(now time.Time) int {
	if p.cfg.ArenaReclaimAfter <= 0 {
		return 0
	}
	var drop []*arena
	p.mu.Lock()
	for i := len(p.arenas) - 1; i >= 1; i-- {
		a := p.arenas[i]
		if a.usedPages == 0 && now.Sub(a.idleSince) >= p.cfg.ArenaReclaimAfter {
			if d := p.forgetLocked(a); d != nil {
				drop = append(drop, d)
			}
		}
	}
	p.mu.Unlock()
	for _, a := range drop {
		p.unmap(a)
	}
	return len(drop)
}

// close unmaps every arena no slot is left in; arenas that still hold slots (a consumer's pinned
// buffer the caller has not freed yet) are unmapped when their last slot is freed.
func (p *pool) close() (outstanding int) {
	var drop []*arena
	p.mu.Lock()
	p.closed = true
	for _, a := range append([]*arena(nil), p.arenas...) {
		if a.usedPages == 0 {
			if d := p.forgetLocked(a); d != nil {
				drop = append(drop, d)
			}
		}
	}
	outstanding = p.outs
	p.mu.Unlock()
	for _, a := range drop {
		p.unmap(a)
	}
	return outstanding
}

type poolStats struct {
	arenas     int
	arenaBytes int64
	pinned     int64
	slots      int
	held       int
	lastFail   error
}

func (p *pool) stats() poolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return poolStats{arenas: p.mapped, arenaBytes: p.arenaB, pinned: p.pinned, slots: p.outs, held: p.held, lastFail: p.lastFail}
}

// isMapFailure reports an arena that could not be mapped (logged louder than a spent budget).
func isMapFailure(err error) bool { return errors.Is(err, ErrArenaMap) }
