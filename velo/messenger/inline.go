package messenger

import (
	"context"
	"sync"
	"time"

	"github.com/velo-go/velo/velo/transport"
)

// Handlers on the reader's goroutine.
//
// A transport that reads each connection on a goroutine of its own (TCP) delivers through
// DeliverInline. When no earlier message of that peer is being handled, the reader runs the handler
// itself and writes the answer: a request costs no goroutine hand-off on the receiving side, which
// on a two-core machine is most of a round trip's cost beyond the raw socket's. The connection must
// not go unread while a handler runs, though, so reading moves to a new goroutine (the transport's
// handOff) as soon as the handler
//
//   - is about to wait for a request of its own (Request, RequestInto, a rendezvous get: they take
//     the handler's ctx, which is the inline run and says so), or for a staged payload's fetch, or
//   - is still running when the rescuer looks twice (see rescueLook), a goroutine that lives while
//     inline runs happen, so a handler that blocks on anything else holds up its connection for at
//     most rescueLook+rescueConfirm (9 ms).
//
// After a hand-off the old goroutine finishes the handler, then drains the peer's queue like the
// drain goroutine would. Per-peer order holds throughout: the inbox's running flag says some
// goroutine owns the peer's handlers, and frames that arrive meanwhile queue behind it.

// The rescuer looks at inline runs every rescueLook. A run it sees running gets a second look
// rescueConfirm later, and is handed off if it still runs; so a handler that blocks on something
// velo cannot see holds its connection for at most rescueLook+rescueConfirm. The first interval is
// long on purpose: a Go timer due within a millisecond or two, kept pending while messages flow,
// slows every round trip in the process by several microseconds (it changes how the runtime parks
// idle threads), and most looks find nothing.
const (
	rescueLook    = 8 * time.Millisecond
	rescueConfirm = time.Millisecond
)

// rescueIdleLooks is how many looks without an inline run the rescuer waits before it exits; the
// next inline run starts it again.
const rescueIdleLooks = 4

type runState uint8

const (
	runInline    runState = iota // the handler runs and its goroutine is still the connection's reader
	runHandedOff                 // another goroutine reads the connection now
	runFinished                  // the handler returned while its goroutine was still the reader
)

// inlineRun is one user handler running on a connection reader's goroutine. It is the handler's
// context too (the messenger's context plus a Value that finds the run), so that a request the
// handler makes with that context can hand reading off before it waits.
type inlineRun struct {
	context.Context
	handOff func()

	mu    sync.Mutex
	state runState

	seen bool // the rescuer saw it running at one tick already (guarded by rescuer.mu)
}

type inlineRunKey struct{}

// Value returns the run itself for inlineRunKey, and the messenger context's values otherwise.
func (r *inlineRun) Value(key any) any {
	if key == (inlineRunKey{}) {
		return r
	}
	return r.Context.Value(key)
}

// inlineRunOf returns the inline run whose handler ctx came from, or nil.
func inlineRunOf(ctx context.Context) *inlineRun {
	r, _ := ctx.Value(inlineRunKey{}).(*inlineRun)
	return r
}

// release moves reading off the run's goroutine, if that goroutine is still the reader and the
// handler has not returned. It may be called from any goroutine, any number of times.
func (r *inlineRun) release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state == runInline {
		r.state = runHandedOff
		r.handOff()
	}
}

// finish ends the run and reports whether its goroutine is still the connection's reader.
func (r *inlineRun) finish() (stillReading bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	stillReading = r.state == runInline
	r.state = runFinished
	return stillReading
}

// rescuer keeps the set of inline runs and, on its own goroutine, hands off those that run long.
type rescuer struct {
	mu      sync.Mutex
	runs    map[*inlineRun]struct{}
	started bool // a run started since the last tick
	active  bool // the goroutine is running
	closed  bool // the messenger closed: runs are handed off at once
}

// startInline registers a run for the handler about to execute on a reader's goroutine.
func (g *Messenger) startInline(handOff func()) *inlineRun {
	r := &inlineRun{Context: g.ctx, handOff: handOff}
	w := &g.rescue
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		r.release() // nothing may hold a reader after Close: the transport waits for its readers
		return r
	}
	if w.runs == nil {
		w.runs = map[*inlineRun]struct{}{}
	}
	w.runs[r] = struct{}{}
	w.started = true
	spawn := !w.active
	w.active = true
	w.mu.Unlock()
	if spawn {
		go g.rescueLoop()
	}
	return r
}

// endInline unregisters a run whose handler returned and reports whether its goroutine is still
// the connection's reader.
func (g *Messenger) endInline(r *inlineRun) (stillReading bool) {
	w := &g.rescue
	w.mu.Lock()
	delete(w.runs, r)
	w.mu.Unlock()
	return r.finish()
}

func (g *Messenger) rescueLoop() {
	w := &g.rescue
	var late []*inlineRun
	pause := rescueLook
	for idle := 0; ; {
		time.Sleep(pause)
		w.mu.Lock()
		if len(w.runs) == 0 && !w.started {
			if idle++; idle >= rescueIdleLooks || w.closed {
				w.active = false
				w.mu.Unlock()
				return
			}
		} else {
			idle = 0
		}
		w.started = false
		pause = rescueLook
		for r := range w.runs {
			if r.seen {
				delete(w.runs, r)
				late = append(late, r)
			} else {
				r.seen = true
				pause = rescueConfirm
			}
		}
		w.mu.Unlock()
		for i, r := range late {
			g.log.Debug("messenger: a handler runs long; its connection is read by another goroutine now")
			r.release()
			late[i] = nil
		}
		late = late[:0]
	}
}

// rescueAll hands off every inline run at once and makes later ones hand off as they start: after
// Close no handler may keep a transport's reader, because closing the transport waits for them.
func (g *Messenger) rescueAll() {
	w := &g.rescue
	w.mu.Lock()
	w.closed = true
	runs := make([]*inlineRun, 0, len(w.runs))
	for r := range w.runs {
		runs = append(runs, r)
		delete(w.runs, r)
	}
	w.mu.Unlock()
	for _, r := range runs {
		r.release()
	}
}

// DeliverInline is Deliver for a transport that reads each connection on a goroutine of its own
// (transport.InlineHost): a one-way message or request whose peer has no handler running is handled
// on the calling goroutine, which hands reading off through handOff when the handler is slow. It
// returns false when it did: the caller must then leave the connection alone.
func (g *Messenger) DeliverInline(idx int, from transport.InstanceID, frame []byte, handOff func()) (stillReading bool) {
	return g.deliver(idx, from, frame, handOff)
}
