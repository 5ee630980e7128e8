package ucx

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo/ucx/internal/capi"
)

// Active-message ids of the guarded GET and of its vectored form (within the reserved range).
const (
	guardReqID  = 0xFFF0
	guardRepID  = 0xFFF1
	guardVReqID = 0xFFF2
	guardVRepID = 0xFFF3
)

// engineSettings adds the engine's own UCX defaults to the program's settings (the
// environment still wins over both).
//
// On UCX 1.13 that is UCX_ZCOPY_THRESH=inf: its tcp transport can complete a zero-copy
// active-message fragment twice when the endpoint fails while the send is in flight,
// which trips an assertion and aborts the sending process (measured: about 1 run in 12
// of TestPeerGoesAwayWithSendsInFlight; none in 30 with the threshold at inf). Eager
// frames are bounded by MaxEagerSize, so copying them costs little; RMA and the guarded
// GET's bulk replies are unaffected.
func engineSettings(user map[string]string, v VersionInfo) map[string]string {
	out := make(map[string]string, len(user)+1)
	for k, val := range user {
		out[normalizeSettingName(k)] = val
	}
	if traitsOf(v).zcopyDoubleCompletion {
		if _, ok := out["ZCOPY_THRESH"]; !ok {
			out["ZCOPY_THRESH"] = "inf"
		}
	}
	return out
}

// parkTimeout bounds one sleep of the progressor. UCX runs keepalive and other timers
// from ucp_worker_progress, so an idle engine still wakes a few times a second; the cost
// is measured in docs/ucx.md (an idle engine uses well under 0.1% of a core).
const parkTimeout = 250 * time.Millisecond

// closingParkTimeout bounds a sleep while Close waits for endpoints to finish.
const closingParkTimeout = 10 * time.Millisecond

// stallAfter is how long the progressor may spend in one active-message handler before a
// fresh goroutine takes over progress (see runDeliveries). A handler that blocks — on a
// full channel, on a lock, on an engine operation of its own — then delays only its own
// and later messages, never the completions and keepalives of everyone else.
const stallAfter = 200 * time.Microsecond

// Engine owns one UCX context and worker and offers goroutine-safe operations on them.
// See the package documentation for the design.
type Engine struct {
	cfg     EngineConfig
	log     *slog.Logger
	metrics *engineMetrics

	// Set once by NewEngine.
	ctx         *Context
	w           *Worker
	addr        []byte
	maxAMHeader int
	park        *parker
	loopEnd     chan struct{} // closed when the last progressor returned
	endOnce     sync.Once
	stall       *time.Timer // the progressor's handler watchdog (runDeliveries)

	// wmu serialises every call into UCX (the worker runs in UCX's serialized thread mode)
	// and guards everything below it up to the delivery queue.
	wmu       sync.Mutex
	state     int    // stateRunning, stateClosing, stateClosed
	gen       uint64 // generation of the goroutine that is the progressor now
	handlers  map[uint16]AMHandler
	conns     map[uint64]*Conn
	gets      map[uint64]*engineOp // guarded GETs waiting for their reply, by request id
	nextGetID uint64
	regs      map[*Registration]struct{}
	unmapping []*Registration
	inflight  int // operations started and not finished
	closing   *closeState

	guardServed, guardRefused uint64    // last values folded into the metrics
	puts                      putTarget // the guarded PUT as target: counts folded, refusals logged
	unclaimed                 uint64    // likewise: messages the worker dropped for want of a handler
	// tokens draws each registration's token: ChaCha8 seeded from crypto/rand, a stream as
	// unpredictable as crypto/rand itself without a system call per registration.
	tokens *mrand.ChaCha8

	// genNow mirrors gen for the watchdog and for waiters, which read it without wmu.
	genNow atomic.Uint64
	// handlerSince is when the progressor entered the handler it is running (sinceEpoch),
	// 0 outside handlers. No one sleeps on the event fd meanwhile, so blocking callers
	// progress the worker themselves (await), and the watchdog (onStall) looks at it.
	handlerSince atomic.Int64
	// stallArmed says the watchdog timer is pending: a handler re-arms it only when it is
	// not, so a stream of short handlers costs a timer operation per stallAfter, not one
	// per message (re-arming a timer can wake Go's network poller: a system call).
	stallArmed atomic.Bool
	// parkFor bounds one sleep: parkTimeout, shorter while closing. Atomic because the
	// progressor reads it before it takes wmu to arm.
	parkFor atomic.Int64
	// lockWaiters counts goroutines waiting for wmu to post or revoke (lock).
	lockWaiters atomic.Int32

	// The delivery queue: handlers and error callbacks, run in order, one at a time, by
	// whichever goroutine holds the delivery token (delivering), outside wmu.
	dmu        sync.Mutex
	dq         []func()
	delivering bool
	dIdle      *sync.Cond // signalled when the token is put down with the queue empty
}

const (
	stateRunning = iota
	stateClosing
	stateClosed
)

type closeState struct {
	forceAt time.Time
	done    *Op
}

// NewEngine creates the context and worker and starts the progressor. ctx bounds only the
// start-up.
func NewEngine(ctx context.Context, cfg EngineConfig) (*Engine, error) {
	if !capi.Compiled {
		return nil, errNoUCX
	}
	if cfg.MaxEagerSize == 0 {
		cfg.MaxEagerSize = defaultMaxEagerSize
	}
	if cfg.MaxEagerSize < 0 {
		return nil, fmt.Errorf("ucx: EngineConfig.MaxEagerSize %d must not be negative", cfg.MaxEagerSize)
	}
	if cfg.SpinFor == 0 {
		cfg.SpinFor = defaultSpinFor
	}
	if cfg.Name == "" {
		cfg.Name = "ucx"
	}
	if cfg.Context.Logger == nil {
		cfg.Context.Logger = cfg.Logger
	}
	cfg.Context.Features |= FeatureAM | FeatureRMA | FeatureWakeup
	cfg.Context.Settings = engineSettings(cfg.Context.Settings, Version())
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	e := &Engine{
		cfg:      cfg,
		log:      logger(cfg.Logger).With("engine", cfg.Name),
		loopEnd:  make(chan struct{}),
		handlers: map[uint16]AMHandler{},
		conns:    map[uint64]*Conn{},
		gets:     map[uint64]*engineOp{},
		regs:     map[*Registration]struct{}{},
	}
	e.dIdle = sync.NewCond(&e.dmu)
	var seed [32]byte
	if _, err := crand.Read(seed[:]); err != nil {
		return nil, fmt.Errorf("ucx: seeding registration tokens: %w", err)
	}
	e.tokens = mrand.NewChaCha8(seed)
	e.parkFor.Store(int64(parkTimeout))
	m, err := newEngineMetrics(cfg.Name, cfg.Metrics)
	if err != nil {
		return nil, err
	}
	e.metrics = m
	if err := e.start(); err != nil {
		e.metrics.unregister()
		return nil, err
	}
	e.stall = time.AfterFunc(time.Hour, e.onStall)
	e.stall.Stop()
	e.gen = 1
	e.genNow.Store(1)
	go e.progress(1)
	return e, nil
}

// Address is the engine's worker address: give it to peers for Connect.
func (e *Engine) Address() []byte { return append([]byte(nil), e.addr...) }

// MaxEagerSize is the largest header+payload SendAM accepts. Larger frames are refused
// with ErrMessageTooLarge, never sent by rendezvous.
func (e *Engine) MaxEagerSize() int { return e.cfg.MaxEagerSize }

// MaxAMHeader is the largest AM header the worker can send.
func (e *Engine) MaxAMHeader() int { return e.maxAMHeader }

// Settings returns the engine context's effective UCX settings and their sources.
func (e *Engine) Settings() []Setting { return e.ctx.Settings() }

// progress is the progressor: the goroutine that keeps calling ucp_worker_progress and
// sleeps on the worker's event fd when there is nothing to do. It is an ordinary goroutine,
// not locked to a thread: the worker runs in UCX's serialized mode and every call into it
// holds wmu, so any goroutine may make one. Events found by a progress call are handled
// under wmu (completions finish their operations there); handlers and error callbacks run
// after wmu is released, in order, on this goroutine (runDeliveries).
//
// gen is this goroutine's generation. The handler watchdog may hand progress to a new
// goroutine while this one is stuck in a handler; this one then returns as soon as it is
// back (it never sleeps on the event fd again).
func (e *Engine) progress(gen uint64) {
	var spin spinSlot
	defer spin.release()
	lastBusy := time.Now()
	for {
		if e.lockWaiters.Load() > 0 {
			// Someone waits to post: let them have the worker first. Go's mutex lets the
			// goroutine that unlocks take it again at once, and the progressor does so in a
			// tight loop; without this, a post could wait for the mutex's starvation mode.
			runtime.Gosched()
		}
		e.wmu.Lock()
		if e.gen != gen {
			e.wmu.Unlock()
			return
		}
		busy := e.w.Progress() > 0
		if e.w.Poll(e.onEvent) > 0 {
			busy = true
		}
		if len(e.unmapping) > 0 {
			e.finishUnmaps()
		}
		e.foldWorkerCounts()
		if e.closing != nil && e.closeStep() {
			e.wmu.Unlock()
			spin.release()
			e.runDeliveries(gen)
			e.endOnce.Do(func() { close(e.loopEnd) })
			return
		}
		e.wmu.Unlock()
		if e.runDeliveries(gen) {
			busy = true
			// A handler often readies a goroutine (a caller waiting for its answer). Yield, so
			// that it runs on this thread now rather than on another one that must first be
			// woken and find a free core (docs/ucx.md, "Where a round trip went").
			runtime.Gosched()
		}
		if busy {
			lastBusy = time.Now()
			continue
		}
		if e.cfg.SpinFor > 0 && time.Since(lastBusy) < e.cfg.SpinFor && spin.take() {
			// Between two looks, let this P run whatever is runnable (a handler's caller, a
			// goroutine waiting for the engine's lock): a spin never keeps the process's own
			// work from running.
			runtime.Gosched()
			continue
		}
		spin.release()
		e.sleep(gen)
	}
}

// spinSlots counts the engines of this process that are spinning (polling without
// events, after recent activity). A spinning progressor holds one of GOMAXPROCS Ps; it
// yields between looks, but at most GOMAXPROCS-1 engines spin at once so that one P is
// always free for the goroutines they wake, and with GOMAXPROCS=1 no engine spins
// (docs/ucx.md, "Progress").
var spinSlots atomic.Int32

// liveEngines counts this process's started engines (for the one-engine-per-process
// warning on releases where that is the supported shape).
var (
	liveEngines           atomic.Int32
	sharedProcessWarnOnce sync.Once
)

// spinSlot is a progressor's claim on one of spinSlots.
type spinSlot struct{ held bool }

// take claims a slot unless this progressor holds one; false means sleep.
func (s *spinSlot) take() bool {
	if s.held {
		return true
	}
	limit := int32(runtime.GOMAXPROCS(0) - 1)
	for {
		n := spinSlots.Load()
		if n >= limit {
			return false
		}
		if spinSlots.CompareAndSwap(n, n+1) {
			s.held = true
			return true
		}
	}
}

func (s *spinSlot) release() {
	if s.held {
		s.held = false
		spinSlots.Add(-1)
	}
}

func (e *Engine) start() error {
	ctx, err := NewContext(e.cfg.Context)
	if err != nil {
		return err
	}
	w, err := ctx.newWorker(capi.ThreadModeSerialized)
	if err != nil {
		ctx.Close()
		return err
	}
	fail := func(err error) error {
		w.Close()
		ctx.Close()
		return err
	}
	if e.addr, err = w.Address(); err != nil {
		return fail(err)
	}
	if e.maxAMHeader, err = w.MaxAMHeader(); err != nil {
		return fail(err)
	}
	efd, err := w.EventFD()
	if err != nil {
		return fail(fmt.Errorf("%w (the engine parks on the worker's event fd)", err))
	}
	if e.park, err = newParker(efd); err != nil {
		return fail(err)
	}
	fail = func(err error) error {
		e.park.close()
		w.Close()
		ctx.Close()
		return err
	}
	if err := w.enableGuard(guardReqID, guardRepID); err != nil {
		return fail(err)
	}
	if err := w.enableGuardV(guardVReqID, guardVRepID); err != nil {
		return fail(err)
	}
	if err := w.enableGuardPut(guardPutReqID, guardPutRepID, guardPutVReqID, guardPutVRepID); err != nil {
		return fail(err)
	}
	if ctx.replyBroken {
		e.log.Warn("ucx: WARNING: protocol v2 is enabled on UCX 1.13, where it is experimental: AM sends with the reply " +
			"flag abort the process (refused here, so guarded GETs fail with UCS_ERR_UNSUPPORTED), and an RMA " +
			"operation on an endpoint whose peer died trips an assertion inside UCX; unset UCX_PROTO_ENABLE")
	}
	if n := liveEngines.Add(1); n > 1 && ctx.traits.sharedProcessWireup {
		sharedProcessWarnOnce.Do(func() {
			e.log.Warn(fmt.Sprintf("ucx: WARNING: %d UCX engines in one process on UCX %d.%d: closing one while another "+
				"still sends it large messages trips a wireup assertion in this release; run one engine per process, "+
				"or link a newer UCX (make ucx-static)", n, Version().Major, Version().Minor))
		})
	}
	for _, id := range []uint16{guardRepID, guardVRepID, guardPutRepID, guardPutVRepID} {
		if err := w.SetAMHandler(id); err != nil {
			liveEngines.Add(-1)
			return fail(err)
		}
	}
	e.ctx, e.w = ctx, w
	return nil
}

func (e *Engine) foldWorkerCounts() {
	if n := e.w.Unclaimed(); n != e.unclaimed {
		// Ids no handler ever had never reach Go: the worker drops them in its callback.
		e.metrics.amDropped.WithLabelValues("no_handler").Add(float64(n - e.unclaimed))
		e.unclaimed = n
	}
	served, refused := e.w.GuardStats()
	if served != e.guardServed {
		e.metrics.guardReplies.WithLabelValues("served").Add(float64(served - e.guardServed))
		e.guardServed = served
	}
	if refused != e.guardRefused {
		e.metrics.guardReplies.WithLabelValues("refused").Add(float64(refused - e.guardRefused))
		e.guardRefused = refused
	}
	e.metrics.rmaGuard.holder.Store(e.w.guardRefusedHolder())
	e.foldPutCounts()
}

// sleep waits for the worker's next event with UCX's arm protocol: announce the intent to
// sleep (after which a kick is never lost), arm the event fd under wmu (UCS_ERR_BUSY means
// events are pending: progress instead), then wait for the fd, a kick or the timeout. An
// operation posted after the arm kicks the sleeper under wmu; one posted before it is
// part of the state UCX armed for. See parker for how the wait works and why.
func (e *Engine) sleep(gen uint64) {
	e.park.prepare(time.Duration(e.parkFor.Load()))
	defer e.park.done()
	e.wmu.Lock()
	if e.gen != gen || e.closing != nil && e.closeDue() {
		e.wmu.Unlock()
		return
	}
	err := e.w.Arm()
	e.wmu.Unlock()
	if err != nil {
		if !errors.Is(err, StatusBusy) {
			e.log.Error("ucx: ucp_worker_arm failed; polling instead of parking", "err", err)
		}
		return
	}
	if e.deliveriesWaiting() {
		return // queued by a caller that progressed the worker meanwhile
	}
	e.metrics.parks.Inc()
	if err := e.park.wait(); err != nil {
		e.log.Error("ucx: waiting on the worker event fd failed", "err", err)
	}
}

// awaitDone waits for an operation that watches its own context.
func (e *Engine) awaitDone(o *Op) { _ = e.await(context.Background(), o.done) }

// kick makes a sleeping progressor look at the worker again. The caller holds wmu.
func (e *Engine) kick() { e.park.wake() }

// lock takes wmu for a goroutine other than the progressor, which lets it go first.
func (e *Engine) lock() {
	e.lockWaiters.Add(1)
	e.wmu.Lock()
	e.lockWaiters.Add(-1)
}

// lockRunning takes wmu for an operation; it fails with ErrClosed once Close started.
func (e *Engine) lockRunning() error {
	e.lock()
	if e.state != stateRunning {
		e.wmu.Unlock()
		return ErrClosed
	}
	return nil
}

// deliver queues fn for the delivery token's holder (handlers and error callbacks run
// there, in order, never under wmu). The caller holds wmu; a sleeping progressor is
// kicked so that it runs what a helping caller queued.
func (e *Engine) deliver(fn func()) {
	e.dmu.Lock()
	e.dq = append(e.dq, fn)
	e.dmu.Unlock()
	e.kick()
}

func (e *Engine) deliveriesWaiting() bool {
	e.dmu.Lock()
	defer e.dmu.Unlock()
	return len(e.dq) > 0 && !e.delivering
}

// runDeliveries runs queued handlers until the queue is empty, unless another goroutine
// holds the delivery token (it then runs them: it drains the queue before it lets go).
// gen is the caller's progressor generation (0 for a caller that is not the progressor).
// While the progressor runs a handler the watchdog watches it: if one handler takes longer
// than stallAfter, onStall starts a new progressor, so that completions, keepalives and
// other callers' operations go on while the handler blocks. It reports whether it ran any.
//
// Running handlers on the progressor itself, rather than handing each message to a
// delivery goroutine, is what makes a round trip cheap: docs/ucx.md ("Where a round trip
// went") measured the hand-off at most of the engine's latency.
func (e *Engine) runDeliveries(gen uint64) bool {
	e.dmu.Lock()
	if e.delivering || len(e.dq) == 0 {
		e.dmu.Unlock()
		return false
	}
	e.delivering = true
	var batch []func()
	for len(e.dq) > 0 {
		batch, e.dq = e.dq, batch[:0]
		e.dmu.Unlock()
		for i, fn := range batch {
			watched := gen != 0 && e.genNow.Load() == gen
			if watched {
				e.handlerSince.Store(sinceEpoch())
				if !e.stallArmed.Load() {
					e.stallArmed.Store(true)
					e.stall.Reset(stallAfter)
				}
			}
			fn()
			if watched && e.genNow.Load() == gen {
				e.handlerSince.Store(0)
			}
			batch[i] = nil
		}
		e.dmu.Lock()
	}
	e.delivering = false
	e.dIdle.Broadcast()
	e.dmu.Unlock()
	return true
}

// epoch is the origin of sinceEpoch.
var epoch = time.Now()

// sinceEpoch is a monotonic clock reading in nanoseconds, never 0.
func sinceEpoch() int64 { return int64(time.Since(epoch)) + 1 }

// onStall is the handler watchdog. If the progressor has been inside one handler for
// stallAfter, a new goroutine becomes the progressor; the old one finishes its handlers (it
// holds the delivery token, so order is kept) and then returns. If it is in a younger
// handler the timer waits for the rest of that one's allowance; outside handlers it stops.
func (e *Engine) onStall() {
	since := e.handlerSince.Load()
	if since == 0 {
		e.stallArmed.Store(false)
		// A handler that began after the load saw the timer still armed: watch it.
		if e.handlerSince.Load() != 0 && e.stallArmed.CompareAndSwap(false, true) {
			e.stall.Reset(stallAfter)
		}
		return
	}
	if ran := time.Duration(sinceEpoch() - since); ran < stallAfter {
		e.stall.Reset(stallAfter - ran)
		return
	}
	e.wmu.Lock()
	defer e.wmu.Unlock()
	e.stallArmed.Store(false)
	if e.state == stateClosed || e.handlerSince.Load() != since {
		if e.state != stateClosed && e.stallArmed.CompareAndSwap(false, true) {
			e.stall.Reset(stallAfter)
		}
		return
	}
	e.gen++
	e.genNow.Store(e.gen)
	e.handlerSince.Store(0)
	e.metrics.handoffs.Inc()
	go e.progress(e.gen)
}

// await blocks until done is closed or ctx ends. While the progressor is inside a handler
// nobody sleeps on the event fd, so the caller — which may be that very handler, waiting
// for an operation of its own — progresses the worker itself until the operation is done or
// the watchdog has handed progress to a new goroutine.
func (e *Engine) await(ctx context.Context, done <-chan struct{}) error {
	for e.handlerSince.Load() != 0 {
		select {
		case <-done:
			return nil
		default:
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		e.wmu.Lock()
		n := 0
		if e.state != stateClosed {
			n = int(e.w.Progress())
			n += e.w.Poll(e.onEvent)
		}
		e.wmu.Unlock()
		if n == 0 {
			runtime.Gosched()
		}
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		select {
		case <-done:
			return nil
		default:
		}
		return ctx.Err()
	}
}

// HandleAM installs handler for active messages with id (below ReservedAMIDs). A nil
// handler removes it: later messages with id are dropped and counted
// (ucx_engine_am_dropped_total, reason no_handler). Handlers run one at a time, in arrival
// order, outside the engine's lock; they may call the engine. A handler that blocks delays
// later messages (they queue without bound) but not the engine: after stallAfter another
// goroutine takes over progress. A handler that cannot keep up should hand work off rather
// than stall.
func (e *Engine) HandleAM(id uint16, handler AMHandler) error {
	if id >= ReservedAMIDs {
		return fmt.Errorf("ucx: AM id %#x is reserved for the engine; use ids below %#x", id, ReservedAMIDs)
	}
	if err := e.lockRunning(); err != nil {
		return err
	}
	defer e.wmu.Unlock()
	if handler == nil {
		// The id goes back to the worker's dropping callback; a message of it already in
		// the event ring finds no handler here and is dropped and counted the same way.
		if err := e.w.RemoveAMHandler(id); err != nil {
			return err
		}
		delete(e.handlers, id)
		return nil
	}
	if err := e.w.SetAMHandler(id); err != nil {
		return err
	}
	e.handlers[id] = handler
	return nil
}

// onEvent runs under wmu for each event of the worker's ring.
func (e *Engine) onEvent(ev *Event) {
	switch ev.Kind {
	case EventCompleted:
		if op, ok := ev.Request.UserData.(*engineOp); ok {
			op.completed(e, ev.Request)
		}
	case EventEndpointError:
		if ev.Endpoint == nil {
			return // an endpoint UCX created for a peer that connected to us
		}
		if c := e.conns[ev.Endpoint.ID()]; c != nil {
			c.fail(e, ev.Err)
		}
	case EventAM:
		am := ev.AM
		switch am.ID {
		case guardRepID:
			e.onGuardReply(am)
			return
		case guardVRepID:
			e.onGuardVReply(am)
			return
		case guardPutRepID:
			e.onGuardPutReply(am)
			return
		case guardPutVRepID:
			e.onGuardPutVReply(am)
			return
		}
		e.onUserAM(am)
	}
}

func (e *Engine) onUserAM(am *AMEvent) {
	h := e.handlers[am.ID]
	if h == nil {
		e.metrics.amDropped.WithLabelValues("no_handler").Inc()
		return
	}
	if am.Rendezvous {
		if am.Length > e.cfg.MaxEagerSize {
			e.metrics.amDropped.WithLabelValues("too_large").Inc()
			e.log.Warn("ucx: dropping a rendezvous active message above the eager limit", "id", am.ID, "bytes", am.Length, "limit", e.cfg.MaxEagerSize)
			return
		}
		// A peer that did not set AMEager: receive it, then deliver it.
		buf := make([]byte, len(am.Header)+am.Length)
		copy(buf, am.Header)
		op := &engineOp{kind: opRecvAM, op: newOp(), recvBuf: buf, amID: am.ID, hdrLen: len(am.Header), sender: am.Sender, handler: h}
		if len(buf) > 0 {
			op.pin.Pin(&buf[0])
		}
		req, err := e.w.ReceiveAMData(am, buf[len(am.Header):])
		e.started(op, req, err)
		return
	}
	buf := make([]byte, len(am.Header)+len(am.Data))
	copy(buf, am.Header)
	copy(buf[len(am.Header):], am.Data)
	msg := AMMessage{ID: am.ID, Header: buf[:len(am.Header):len(am.Header)], Payload: buf[len(am.Header):], Sender: am.Sender}
	e.metrics.amReceived.Inc()
	e.deliver(func() { h(msg) })
}

// Close shuts the engine down: new operations fail with ErrClosed; guarded GETs waiting
// for replies fail; registrations are revoked; every endpoint is closed (flush, then
// force when ctx ends or after a grace period of 2 s); operations still in flight then
// complete with UCS_ERR_CANCELED when the worker is destroyed. Close returns when the
// progressor has exited and every queued handler has run, so no buffer of any operation
// is still in UCX's hands. It is idempotent. Do not call it from a handler: it waits for
// the handlers.
func (e *Engine) Close(ctx context.Context) error {
	e.wmu.Lock()
	if e.state != stateRunning {
		e.wmu.Unlock()
		<-e.loopEnd
		e.waitDeliveries()
		return nil
	}
	e.state = stateClosing
	grace := 2 * time.Second
	if d, ok := ctx.Deadline(); ok && time.Until(d) < grace {
		grace = max(time.Until(d), 0)
	}
	done := newOp()
	e.beginClose(time.Now().Add(grace), done)
	e.kick()
	e.wmu.Unlock()
	stop := context.AfterFunc(ctx, func() {
		e.wmu.Lock()
		if e.closing != nil {
			e.closing.forceAt = time.Now()
			e.kick()
		}
		e.wmu.Unlock()
	})
	defer stop()
	<-done.Done()
	<-e.loopEnd
	e.waitDeliveries()
	e.metrics.unregister()
	return done.err
}

// waitDeliveries returns when no handler runs and none is queued.
func (e *Engine) waitDeliveries() {
	e.dmu.Lock()
	for e.delivering {
		e.dIdle.Wait()
	}
	e.dmu.Unlock()
	e.runDeliveries(0)
	e.dmu.Lock()
	for e.delivering {
		e.dIdle.Wait()
	}
	e.dmu.Unlock()
}

func (e *Engine) beginClose(forceAt time.Time, done *Op) {
	e.closing = &closeState{forceAt: forceAt, done: done}
	e.parkFor.Store(int64(closingParkTimeout))
	for _, op := range e.gets {
		op.abandon(e, fmt.Errorf("ucx: engine closing: %w", ErrClosed))
	}
	for r := range e.regs {
		e.revoke(r, nil)
	}
	for _, c := range e.conns {
		c.startClose(e, CloseFlush, nil)
	}
}

// closeDue reports whether the close may finish now: nothing is left in flight, or the
// grace period is over.
func (e *Engine) closeDue() bool {
	graceful := e.inflight == 0 && len(e.conns) == 0 && len(e.unmapping) == 0 && e.w.Pending() == 0
	return graceful || !time.Now().Before(e.closing.forceAt)
}

// closeStep runs under wmu once per progress turn while closing; it returns true when the
// worker is gone and the progressor may exit.
func (e *Engine) closeStep() bool {
	if !e.closeDue() {
		return false
	}
	graceful := e.inflight == 0 && len(e.conns) == 0 && len(e.unmapping) == 0 && e.w.Pending() == 0
	if !graceful {
		e.log.Debug("ucx: closing with operations in flight; destroying the worker cancels them",
			"inflight", e.inflight, "endpoints", len(e.conns))
	}
	e.state = stateClosed
	e.destroy()
	e.log.Debug("ucx: engine closed", "engine", e.cfg.Name, "graceful", graceful)
	e.closing.done.finish(nil, 0)
	return true
}

// destroy tears down UCX. ucp_worker_destroy purges every endpoint and completes their
// requests (the callbacks still append to the ring, which outlives the worker until the
// final Poll below); only then are pinned buffers released.
func (e *Engine) destroy() {
	for r := range e.regs {
		e.revoke(r, nil)
	}
	w := e.w
	// Requests that survive the worker are finished here without ucp_request_free: their
	// memory went with the worker.
	for _, r := range w.destroyAndDrain() {
		if op, ok := r.UserData.(*engineOp); ok {
			op.completed(e, r)
		}
	}
	for _, c := range e.conns {
		c.closed(e, ErrClosed)
	}
	for _, r := range e.unmapping {
		r.memh.Unmap()
		r.finish(nil)
	}
	e.unmapping = nil
	w.freeRing()
	e.stall.Stop()
	e.park.close()
	e.ctx.Close()
	liveEngines.Add(-1)
}
