// The engine of GetMany and PutMany: a window of operations posted by the caller and refilled by
// their completions, their outcomes handed back to the caller in groups.

package ucx

import (
	"context"
	"sync"
)

// batch is what one GetMany or PutMany shares with the other: the window, the operations in
// flight, the cancellation, the unpacked keys of the direct path and the outcomes waiting for
// the caller. What differs, how entries become operations, is the poster's. Its fields up to mu
// are guarded by the engine's wmu.
type batch struct {
	c        *Conn
	entries  int // reads or writes
	window   int
	inflight map[*engineOp]struct{} // posted, not finished
	pumping  bool
	canceled error
	rks      map[*RegionKey]*RemoteKey // direct path: one unpacked key per region
	stop     func() bool
	left     int // entries not yet reported to done; the caller's

	mu      sync.Mutex
	results []batchResult
	posted  int // results recorded (under mu)
	wake    chan struct{}
}

type batchResult struct {
	i   int
	err error
}

// poster turns a batch's entries into operations: getBatch for reads, putBatch for writes.
type poster interface {
	// pump posts until the window is full; it runs under wmu.
	pump()
	// failRest fails every entry not yet posted; it runs under wmu, or before anything was
	// posted.
	failRest(err error)
}

func newBatch(c *Conn, entries, window int) batch {
	return batch{c: c, entries: entries, window: max(window, 1), inflight: map[*engineOp]struct{}{},
		wake: make(chan struct{}, 1), left: entries, rks: map[*RegionKey]*RemoteKey{}}
}

// run posts the first window from the calling goroutine, then hands done each outcome on it as
// they come, and returns once every entry is reported: nothing of the batch is in UCX's hands
// then but guarded operations abandoned when ctx ended.
func (b *batch) run(ctx context.Context, p poster, done func(i int, err error)) {
	e := b.c.e
	if err := ctx.Err(); err != nil {
		p.failRest(err)
	} else if err := e.lockRunning(); err != nil {
		p.failRest(err)
	} else {
		p.pump()
		if b.left > b.reported() && ctx.Done() != nil {
			b.stop = context.AfterFunc(ctx, func() {
				e.wmu.Lock()
				b.cancel(p, ctx.Err())
				e.wmu.Unlock()
			})
		}
		e.wmu.Unlock()
	}
	var out []batchResult
	for {
		b.mu.Lock()
		out = append(out[:0], b.results...)
		b.results = b.results[:0]
		b.mu.Unlock()
		for _, r := range out {
			b.left--
			if done != nil {
				done(r.i, r.err)
			}
		}
		if b.left == 0 {
			break
		}
		_ = e.await(context.Background(), b.wake)
	}
	if b.stop != nil {
		b.stop()
	}
	if len(b.rks) > 0 {
		e.wmu.Lock()
		for _, rk := range b.rks {
			rk.Destroy()
		}
		e.wmu.Unlock()
	}
}

func (b *batch) reported() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.posted
}

// record files one entry's outcome for the caller. The caller is woken once a quarter of the
// window has piled up, or by the last entry: waking it for every completion would cost a
// goroutine hand-off (and on a busy machine a thread wake-up) per entry, more than a small read.
func (b *batch) record(i int, err error) {
	b.mu.Lock()
	b.results = append(b.results, batchResult{i, err})
	b.posted++
	wake := len(b.results) >= max(b.window/4, 1) || b.posted == b.entries
	b.mu.Unlock()
	if wake {
		select {
		case b.wake <- struct{}{}:
		default:
		}
	}
}

// cancel runs under wmu when the caller's context ends.
func (b *batch) cancel(p poster, err error) {
	if b.canceled != nil {
		return
	}
	b.canceled = err
	p.failRest(err)
	for op := range b.inflight {
		op.abandon(b.c.e, err)
	}
}

// remoteKey is the region's key unpacked on the batch's endpoint, once per region and batch.
func (b *batch) remoteKey(k *RegionKey) (*RemoteKey, error) {
	if rk := b.rks[k]; rk != nil {
		return rk, nil
	}
	rk, err := b.c.ep.unpackChecked(k.k.UCXKey)
	if err != nil {
		return nil, err
	}
	b.rks[k] = rk
	return rk, nil
}
