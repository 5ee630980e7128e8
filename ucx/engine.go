package ucx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo/ucx/internal/capi"
)

// Active-message ids of the guarded GET (within the reserved range).
const (
	guardReqID = 0xFFF0
	guardRepID = 0xFFF1
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

// parkTimeout bounds one sleep of the progress thread. UCX runs keepalive and other
// timers from ucp_worker_progress, so an idle engine still wakes a few times a second;
// the cost is measured in docs/ucx.md (an idle engine uses well under 0.1% of a core).
const parkTimeout = 250 * time.Millisecond

// closingParkTimeout bounds a sleep while Close waits for endpoints to finish.
const closingParkTimeout = 10 * time.Millisecond

// Engine owns one UCX context and worker on one locked OS thread and offers
// goroutine-safe asynchronous operations on it. See the package documentation.
type Engine struct {
	cfg     EngineConfig
	log     *slog.Logger
	metrics *engineMetrics

	// Set once by the progress thread before NewEngine returns.
	ctx         *Context
	w           *Worker
	addr        []byte
	maxAMHeader int
	park        *parker

	mu      sync.Mutex // guards queue, state, handlers
	queue   []func()
	state   int // stateRunning, stateClosing, stateClosed
	loopEnd chan struct{}

	handlers map[uint16]AMHandler

	deliverMu   sync.Mutex
	deliverQ    []func()
	deliverWake chan struct{}
	deliverEnd  chan struct{}

	// Progress-thread state.
	conns     map[uint64]*Conn
	gets      map[uint64]*engineOp // guarded GETs waiting for their reply, by request id
	nextGetID uint64
	regs      map[*Registration]struct{}
	unmapping []*Registration
	inflight  int // operations started and not finished
	closing   *closeState
	spinning  bool          // holds one of the process's spin slots (spinSlots)
	parkFor   time.Duration // bound of one sleep: parkTimeout, shorter while closing

	guardServed, guardRefused uint64 // last values folded into the metrics
}

const (
	stateRunning = iota
	stateClosing
	stateClosed
)

type closeState struct {
	forceAt time.Time
	done    chan error
}

// NewEngine creates the context and worker on a new locked OS thread and starts the
// progress loop. ctx bounds only the start-up.
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
	e := &Engine{
		cfg:         cfg,
		log:         logger(cfg.Logger).With("engine", cfg.Name),
		loopEnd:     make(chan struct{}),
		handlers:    map[uint16]AMHandler{},
		deliverWake: make(chan struct{}, 1),
		deliverEnd:  make(chan struct{}),
		parkFor:     parkTimeout,
		conns:       map[uint64]*Conn{},
		gets:        map[uint64]*engineOp{},
		regs:        map[*Registration]struct{}{},
	}
	m, err := newEngineMetrics(cfg.Name, cfg.Metrics)
	if err != nil {
		return nil, err
	}
	e.metrics = m
	ready := make(chan error, 1)
	go e.loop(ready)
	select {
	case err := <-ready:
		if err != nil {
			<-e.loopEnd
			e.metrics.unregister()
			return nil, err
		}
	case <-ctx.Done():
		// The start-up is cheap and cannot be interrupted safely; finish it, then close.
		if err := <-ready; err == nil {
			_ = e.Close(context.Background())
		} else {
			<-e.loopEnd
			e.metrics.unregister()
		}
		return nil, ctx.Err()
	}
	go e.deliverLoop()
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

// loop is the progress thread: it owns the worker from creation to destruction.
func (e *Engine) loop(ready chan<- error) {
	runtime.LockOSThread()
	// The thread stays locked and exits with the goroutine: UCX may have left
	// thread-local state on it.
	defer close(e.loopEnd)
	if err := e.start(); err != nil {
		ready <- err
		return
	}
	ready <- nil

	lastBusy := time.Now()
	var batch []func()
	for {
		batch = e.takeQueue(batch[:0])
		for _, fn := range batch {
			fn()
		}
		busy := len(batch) > 0
		if e.w.Progress() > 0 {
			busy = true
		}
		if e.w.Poll(e.onEvent) > 0 {
			busy = true
		}
		if len(e.unmapping) > 0 {
			e.finishUnmaps()
		}
		e.foldGuardStats()
		if e.closing != nil && e.closeStep() {
			e.stopSpinning()
			return
		}
		if busy {
			lastBusy = time.Now()
			continue
		}
		if e.cfg.SpinFor > 0 && time.Since(lastBusy) < e.cfg.SpinFor && e.startSpinning() {
			continue
		}
		e.stopSpinning()
		e.sleep()
	}
}

// spinSlots counts the engines of this process that are spinning (polling without
// events, after recent activity). A spinning progress thread runs Go code and so holds
// one of GOMAXPROCS Ps; if every P were held so, the goroutines the engines wake (their
// delivery goroutines, callers waiting for completions) could not run until the spin
// ended. At most GOMAXPROCS-1 engines spin at once; the others sleep at once, and with
// GOMAXPROCS=1 no engine spins. Spinning where no core is free costs more than it saves
// (docs/ucx.md, "Progress": on two cores, 2 ms of spinning on both engines of a pair made
// round trips ten times slower).
var spinSlots atomic.Int32

// liveEngines counts this process's started engines (for the one-engine-per-process
// warning on releases where that is the supported shape).
var (
	liveEngines           atomic.Int32
	sharedProcessWarnOnce sync.Once
)

// startSpinning takes a spin slot unless the engine holds one; false means sleep.
func (e *Engine) startSpinning() bool {
	if e.spinning {
		return true
	}
	limit := int32(runtime.GOMAXPROCS(0) - 1)
	for {
		n := spinSlots.Load()
		if n >= limit {
			return false
		}
		if spinSlots.CompareAndSwap(n, n+1) {
			e.spinning = true
			return true
		}
	}
}

func (e *Engine) stopSpinning() {
	if e.spinning {
		e.spinning = false
		spinSlots.Add(-1)
	}
}

func (e *Engine) start() error {
	ctx, err := NewContext(e.cfg.Context)
	if err != nil {
		return err
	}
	w, err := ctx.NewWorker()
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
	if err := w.SetAMHandler(guardRepID); err != nil {
		liveEngines.Add(-1)
		return fail(err)
	}
	e.ctx, e.w = ctx, w
	return nil
}

func (e *Engine) foldGuardStats() {
	served, refused := e.w.GuardStats()
	if served != e.guardServed {
		e.metrics.guardReplies.WithLabelValues("served").Add(float64(served - e.guardServed))
		e.guardServed = served
	}
	if refused != e.guardRefused {
		e.metrics.guardReplies.WithLabelValues("refused").Add(float64(refused - e.guardRefused))
		e.guardRefused = refused
	}
}

// sleep waits for the worker's next event with UCX's arm protocol: announce the intent
// to sleep, look at the submission queue a last time (a submitter that queued after that
// look also saw the announcement and wakes the waiter), arm the event fd (UCS_ERR_BUSY
// means events are pending: progress instead), then wait for the fd, a wake or the
// timeout. See parker for how the wait works and why.
func (e *Engine) sleep() {
	e.park.prepare(e.parkFor)
	defer e.park.done()
	e.mu.Lock()
	pending := len(e.queue) > 0
	e.mu.Unlock()
	if pending {
		return
	}
	if err := e.w.Arm(); err != nil {
		if !errors.Is(err, StatusBusy) {
			e.log.Error("ucx: ucp_worker_arm failed; polling instead of parking", "err", err)
		}
		return
	}
	e.metrics.parks.Inc()
	err := e.park.wait()
	if err != nil {
		e.log.Error("ucx: waiting on the worker event fd failed", "err", err)
	}
}

func (e *Engine) takeQueue(dst []func()) []func() {
	e.mu.Lock()
	dst = append(dst, e.queue...)
	clear(e.queue)
	e.queue = e.queue[:0]
	e.mu.Unlock()
	return dst
}

// submit runs fn on the progress thread. It fails with ErrClosed once Close started.
func (e *Engine) submit(fn func()) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.state != stateRunning {
		return ErrClosed
	}
	e.queue = append(e.queue, fn)
	// Under e.mu: the progress thread's last look at the queue before it sleeps is too,
	// and Close cannot close the parker meanwhile (the progress thread does that only
	// after it saw stateClosing under e.mu).
	e.park.wake()
	return nil
}

// submitInternal queues follow-up work from the engine itself (cancellations), which must
// run even while closing.
func (e *Engine) submitInternal(fn func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.state == stateClosed {
		return
	}
	e.queue = append(e.queue, fn)
	e.park.wake()
}

// deliver hands fn to the delivery goroutine (handlers and error callbacks run there,
// in order, never on the progress thread).
func (e *Engine) deliver(fn func()) {
	e.deliverMu.Lock()
	e.deliverQ = append(e.deliverQ, fn)
	e.deliverMu.Unlock()
	select {
	case e.deliverWake <- struct{}{}:
	default:
	}
}

func (e *Engine) deliverLoop() {
	defer close(e.deliverEnd)
	var batch []func()
	for {
		e.deliverMu.Lock()
		batch = append(batch[:0], e.deliverQ...)
		clear(e.deliverQ)
		e.deliverQ = e.deliverQ[:0]
		e.deliverMu.Unlock()
		for i, fn := range batch {
			fn()
			batch[i] = nil
		}
		if len(batch) > 0 {
			continue
		}
		select {
		case <-e.deliverWake:
		case <-e.loopEnd:
			e.deliverMu.Lock()
			empty := len(e.deliverQ) == 0
			e.deliverMu.Unlock()
			if empty {
				return
			}
		}
	}
}

// HandleAM installs handler for active messages with id (below ReservedAMIDs). A nil
// handler removes it. Handlers run one at a time on the engine's delivery goroutine;
// messages queue (without bound) while a handler blocks, so a handler that cannot keep up
// should hand work off rather than stall.
func (e *Engine) HandleAM(id uint16, handler AMHandler) error {
	if id >= ReservedAMIDs {
		return fmt.Errorf("ucx: AM id %#x is reserved for the engine; use ids below %#x", id, ReservedAMIDs)
	}
	done := make(chan error, 1)
	err := e.submit(func() {
		var err error
		if handler == nil {
			err = e.w.RemoveAMHandler(id)
		} else {
			err = e.w.SetAMHandler(id)
		}
		if err == nil {
			e.mu.Lock()
			if handler == nil {
				delete(e.handlers, id)
			} else {
				e.handlers[id] = handler
			}
			e.mu.Unlock()
		}
		done <- err
	})
	if err != nil {
		return err
	}
	return <-done
}

// onEvent runs on the progress thread for each event of the worker's ring.
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
		if am.ID == guardRepID {
			e.onGuardReply(am)
			return
		}
		e.onUserAM(am)
	}
}

func (e *Engine) onUserAM(am *AMEvent) {
	e.mu.Lock()
	h := e.handlers[am.ID]
	e.mu.Unlock()
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
// progress thread and the delivery goroutine have exited, so no buffer of any operation
// is still in UCX's hands. It is idempotent.
func (e *Engine) Close(ctx context.Context) error {
	done := make(chan error, 1)
	e.mu.Lock()
	if e.state != stateRunning {
		e.mu.Unlock()
		<-e.loopEnd
		<-e.deliverEnd
		return nil
	}
	e.state = stateClosing
	grace := 2 * time.Second
	if d, ok := ctx.Deadline(); ok && time.Until(d) < grace {
		grace = max(time.Until(d), 0)
	}
	forceAt := time.Now().Add(grace)
	e.queue = append(e.queue, func() { e.beginClose(forceAt, done) })
	e.park.wake()
	e.mu.Unlock()
	stop := context.AfterFunc(ctx, func() {
		e.submitInternal(func() {
			if e.closing != nil {
				e.closing.forceAt = time.Now()
			}
		})
	})
	defer stop()
	err := <-done
	<-e.loopEnd
	<-e.deliverEnd
	e.metrics.unregister()
	return err
}

func (e *Engine) beginClose(forceAt time.Time, done chan error) {
	e.closing = &closeState{forceAt: forceAt, done: done}
	e.parkFor = closingParkTimeout
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

// closeStep runs once per loop turn while closing; it returns true when the loop may exit.
func (e *Engine) closeStep() bool {
	graceful := e.inflight == 0 && len(e.conns) == 0 && len(e.unmapping) == 0 && e.w.Pending() == 0
	if !graceful && time.Now().Before(e.closing.forceAt) {
		return false
	}
	if !graceful {
		e.log.Debug("ucx: closing with operations in flight; destroying the worker cancels them",
			"inflight", e.inflight, "endpoints", len(e.conns))
	}
	e.mu.Lock()
	e.state = stateClosed
	rest := e.queue
	e.queue = nil
	e.mu.Unlock()
	// Submissions that raced with Close: they never reached UCX.
	for range rest {
		e.metrics.opsRejected.Inc()
	}
	e.destroy()
	e.log.Debug("ucx: engine closed", "engine", e.cfg.Name, "graceful", graceful)
	e.closing.done <- nil
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
	e.park.close()
	e.ctx.Close()
	liveEngines.Add(-1)
}
