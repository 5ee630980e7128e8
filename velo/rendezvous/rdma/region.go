package rdma

import (
	"errors"
	"fmt"
	"sync"

	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/rendezvous"
)

// registrable is pinned memory Serve can register for a lease: a pool slot, or memory the owner
// registered itself (WrapRegion). holdReg counts one registration that may still be read, and
// fails once the memory is being given back; dropReg ends that count when the registration is
// dead.
type registrable interface {
	rendezvous.PinnedMemory
	of(r *Registry) bool
	holdReg() error
	dropReg()
	// memory is what the memory is: pool slots are host memory; a region the caller described
	// (WrapRegionMemory) is registered with its type.
	memory() rendezvous.Memory
}

func (s *Slot) of(r *Registry) bool       { return s.p == r.pool }
func (s *Slot) holdReg() error            { return s.p.addReg(s) }
func (s *Slot) dropReg()                  { s.p.regDead(s) }
func (s *Slot) memory() rendezvous.Memory { return rendezvous.Memory{} }

// Region is memory an owner writes in place and stages without a copy, for as long as it likes:
// a KV cache, a weight shard, a ring of blocks. Each staging is a handle on the whole region
// (consumers read all of it, or ranges of it); stagings share the memory and nothing is copied.
//
// A region is pinned memory from the registry's pool (NewRegion), memory the owner already has
// (WrapRegion), or, when neither can be had, plain memory that consumers read by chunks
// (Pinned false, and Reason says why). Free ends it: no new stagings, and the memory goes back
// once the last staging of it was freed and no remote read of it can run any more; Done says
// when.
type Region struct {
	mem    []byte
	pin    registrable    // nil: plain memory
	reason metrics.Reason // plain memory: why it is not pinned
	back   func()         // gives pool memory back (nil for the caller's own)
	memory rendezvous.Memory

	mu    sync.Mutex
	uses  int // stagings not freed yet
	freed bool
	done  chan struct{}
	once  sync.Once
}

// ErrRegionFreed: a staging of a region that was freed.
var ErrRegionFreed = errors.New("region already freed")

// Bytes is the region's memory, for the owner to write.
func (g *Region) Bytes() []byte { return g.mem }

// Memory is what the region's memory is (zero for host memory staged as before memory types).
func (g *Region) Memory() rendezvous.Memory { return g.memory }

// Pinned reports whether consumers can read the region by RDMA.
func (g *Region) Pinned() bool { return g.pin != nil }

// Reason is why the region is in plain memory ("" when it is pinned).
func (g *Region) Reason() metrics.Reason { return g.reason }

// Done is closed once the region is over: it was freed and every staging of it was freed. For
// memory given to WrapRegion it also waits until no remote read of it can run any more: the
// caller may reuse or unmap the memory from then on. (Pool memory goes back to the pool at that
// point, which keeps its pages out of use for as long as a key of them may still be read.)
func (g *Region) Done() <-chan struct{} { return g.done }

// Free ends the region: later stagings fail with ErrRegionFreed, and the memory goes back once the
// last staging of it was freed (its handles released, its leases ended). It is idempotent.
func (g *Region) Free() {
	g.mu.Lock()
	g.freed = true
	idle := g.uses == 0
	g.mu.Unlock()
	if idle {
		g.release()
	}
}

// Stage returns the options to stage the whole region with (rendezvous.Stage, no copy) and
// counts the staging; its OnFree gives the count back. It fails once the region was freed.
func (g *Region) Stage() (rendezvous.StageOptions, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.freed {
		return rendezvous.StageOptions{}, fmt.Errorf("rdma: %w: stage it before Free", ErrRegionFreed)
	}
	g.uses++
	var once sync.Once
	o := rendezvous.StageOptions{Reason: g.reason, OnFree: func() { once.Do(g.unuse) }, Memory: g.memory}
	if g.pin != nil {
		o.Pinned = g.pin
	}
	return o, nil
}

func (g *Region) unuse() {
	g.mu.Lock()
	g.uses--
	idle := g.uses == 0 && g.freed
	g.mu.Unlock()
	if idle {
		g.release()
	}
}

// release gives the memory back: to the pool (which keeps the pages out of use while a
// registration of them may be read), or, for the caller's memory, by closing Done once no
// registration of it is alive.
func (g *Region) release() {
	g.once.Do(func() {
		if g.back != nil {
			g.back()
			close(g.done)
			return
		}
		if ext, ok := g.pin.(*external); ok {
			ext.free(g.done)
			return
		}
		close(g.done)
	})
}

// PlainRegion is a region of plain memory: consumers read it by chunks, and reason (not_pinned,
// not_configured, budget, ...) is what an RDMA offer for it is answered with.
func PlainRegion(mem []byte, reason metrics.Reason) *Region {
	return &Region{mem: mem, reason: reason, done: make(chan struct{})}
}

// NewRegion returns n bytes of pinned memory from the pool (mapping an arena when none has room;
// a region larger than an arena gets one of its own). When the pool has none to give — the kill
// switch, the budget, the memlock limit — it returns a plain region and says why in Reason; the
// error is for what no region can come of (n < 1).
func (r *Registry) NewRegion(n int) (*Region, error) {
	if n <= 0 {
		return nil, fmt.Errorf("rdma: NewRegion(%d): a region holds at least one byte", n)
	}
	mem, o := r.Pin(n, true)
	if mem == nil {
		return PlainRegion(make([]byte, n), o.Reason), nil
	}
	s := o.Pinned.(*Slot)
	return &Region{mem: mem, pin: s, back: o.OnFree, done: make(chan struct{})}, nil
}

// WrapRegion makes memory the owner already has a region, without copying it. mem must stay
// valid, and not move, until Done: memory outside the Go heap (mmap'd, a device allocator's host
// memory) is the intended kind; the transport pins Go memory for each registration's life. Each
// lease on a staging registers the whole region with its own key, counted against the budget
// while it lives; the memory itself is the caller's and is not. With the kill switch on it
// returns a plain region (reason kill_switch).
func (r *Registry) WrapRegion(mem []byte) (*Region, error) {
	if len(mem) == 0 {
		return nil, errors.New("rdma: WrapRegion: an empty region")
	}
	if r.disabled {
		return PlainRegion(mem, metrics.ReasonKillSwitch), nil
	}
	return &Region{mem: mem, pin: &external{r: r, mem: mem}, done: make(chan struct{})}, nil
}

// external is the caller's memory behind a region: it counts the registrations that may still be
// read, so that Done closes only once none can.
type external struct {
	r   *Registry
	mem []byte
	mt  rendezvous.Memory

	mu    sync.Mutex
	regs  int
	freed bool
	done  chan struct{} // the region's, once it was freed
}

func (x *external) PinnedRegion() []byte      { return x.mem }
func (x *external) of(r *Registry) bool       { return x.r == r }
func (x *external) memory() rendezvous.Memory { return x.mt }
func (x *external) free(done chan struct{}) {
	x.mu.Lock()
	x.freed, x.done = true, done
	idle := x.regs == 0
	x.mu.Unlock()
	if idle {
		close(done)
	}
}

func (x *external) holdReg() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.freed {
		return fmt.Errorf("rdma: %w: the region was freed before its lease was served", ErrClosed)
	}
	x.regs++
	return nil
}

func (x *external) dropReg() {
	x.mu.Lock()
	x.regs--
	idle := x.freed && x.regs == 0
	done := x.done
	x.mu.Unlock()
	if idle {
		close(done)
	}
}
