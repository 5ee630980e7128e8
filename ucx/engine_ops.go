package ucx

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/velo-go/velo/ucx/internal/capi"
)

// Conn is an endpoint owned by an engine. All methods are safe for concurrent use.
type Conn struct {
	e    *Engine
	opts ConnectOptions
	done chan struct{}

	errMu sync.Mutex
	err   error

	// Guarded by the engine's wmu.
	ep        *Endpoint
	id        uint64
	rmaMode   RMAMode // resolved on first use; RMAAuto until then
	gets      map[uint64]*engineOp
	closing   bool
	waiters   []*Op
	closedErr error
	isClosed  bool
}

// Connect creates an endpoint to the engine (or worker) whose address is addr. It returns
// once the endpoint exists; wireup finishes in the background and the first operation
// waits for it. A peer that cannot be reached surfaces as the first operation's error and
// through OnError.
func (e *Engine) Connect(ctx context.Context, addr []byte, opts ConnectOptions) (*Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c := &Conn{e: e, opts: opts, done: make(chan struct{}), gets: map[uint64]*engineOp{}}
	if err := e.lockRunning(); err != nil {
		return nil, err
	}
	defer e.wmu.Unlock()
	ep, err := e.w.Connect(addr, EndpointOptions{ErrorMode: opts.ErrorMode})
	if err != nil {
		return nil, err
	}
	c.ep, c.id = ep, ep.ID()
	e.conns[c.id] = c
	// Wireup messages are queued on the new endpoint: have the progressor send them.
	e.kick()
	return c, nil
}

// Done is closed when the endpoint failed or was closed.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err is why the endpoint is no longer usable (nil while it is).
func (c *Conn) Err() error {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	return c.err
}

func (c *Conn) setErr(err error) bool {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	if c.err != nil {
		return false
	}
	c.err = err
	close(c.done)
	return true
}

// usable is checked under wmu before an operation starts.
func (c *Conn) usable() error {
	if c.isClosed || c.closing {
		if err := c.Err(); err != nil && !errors.Is(err, ErrClosed) {
			return fmt.Errorf("%w: %w", ErrEndpointFailed, err)
		}
		return fmt.Errorf("ucx: connection closed: %w", ErrClosed)
	}
	return nil
}

// fail handles the endpoint's error event.
func (c *Conn) fail(e *Engine, err error) {
	if c.setErr(err) && c.opts.OnError != nil {
		cb := c.opts.OnError
		e.deliver(func() { cb(err) })
	}
	for _, op := range c.gets {
		op.abandon(e, err)
	}
	c.startClose(e, CloseForce, nil)
}

func (c *Conn) startClose(e *Engine, mode CloseMode, waiter *Op) {
	if c.isClosed {
		if waiter != nil {
			waiter.finish(c.closedErr, 0)
		}
		return
	}
	if waiter != nil {
		c.waiters = append(c.waiters, waiter)
	}
	if c.closing {
		return
	}
	c.closing = true
	for _, op := range c.gets {
		op.abandon(e, fmt.Errorf("ucx: connection closing: %w", ErrClosed))
	}
	if c.ep.Err() != nil {
		mode = CloseForce
	}
	op := &engineOp{kind: opClose, op: newOp(), conn: c}
	req, err := c.ep.Close(mode)
	if err != nil {
		// The endpoint is released even when its close reports an error.
		c.closed(e, err)
	}
	e.started(op, req, err)
}

// closed runs when the endpoint's close completed (or the worker was destroyed).
func (c *Conn) closed(e *Engine, err error) {
	if c.isClosed {
		return
	}
	c.isClosed = true
	if err != nil && (errors.Is(err, ErrPeerFailure) || errors.Is(err, StatusCanceled)) {
		// Closing an endpoint to a dead peer reports the failure; the close still worked.
		err = nil
	}
	c.closedErr = err
	c.setErr(fmt.Errorf("ucx: connection closed: %w", ErrClosed))
	delete(e.conns, c.id)
	for _, w := range c.waiters {
		w.finish(err, 0)
	}
	c.waiters = nil
}

// Close closes the endpoint. CloseFlush lets outstanding operations finish and tells the
// peer; CloseForce cancels them. Close returns when UCX released the endpoint or when
// ctx ends (the close then still completes in the background).
func (c *Conn) Close(ctx context.Context, mode CloseMode) error {
	e := c.e
	if err := e.lockRunning(); err != nil {
		// The engine is closing and closes this endpoint itself.
		select {
		case <-c.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	}
	res := newOp()
	c.startClose(e, mode, res)
	e.wmu.Unlock()
	if err := e.await(ctx, res.done); err != nil {
		return err
	}
	return res.err
}

// Info returns ucp_ep_print_info for the endpoint (lanes, transports, thresholds).
func (c *Conn) Info(ctx context.Context) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if err := c.e.lockRunning(); err != nil {
		return "", err
	}
	defer c.e.wmu.Unlock()
	if c.usable() != nil {
		return "", nil
	}
	return c.ep.Info(), nil
}

// RMAMode reports which GET path this connection uses (RMAGuarded or RMADirect), resolving
// RMAAuto from the endpoint's lanes.
func (c *Conn) RMAMode(ctx context.Context) (RMAMode, error) {
	if err := ctx.Err(); err != nil {
		return RMAAuto, err
	}
	if err := c.e.lockRunning(); err != nil {
		return RMAAuto, err
	}
	defer c.e.wmu.Unlock()
	return c.resolveRMA(c.e), nil
}

func (c *Conn) resolveRMA(e *Engine) RMAMode {
	if e.cfg.RMA != RMAAuto {
		return e.cfg.RMA
	}
	if c.rmaMode == RMAAuto {
		c.rmaMode = RMAGuarded
		if c.usable() == nil && rmaLanesKeyed(c.ep.Info()) {
			c.rmaMode = RMADirect
		}
	}
	return c.rmaMode
}

// rmaLanesKeyed reads ucp_ep_print_info and reports whether the endpoint has RMA lanes
// and every one of them is an InfiniBand RC/DC transport, whose NIC rejects a bad remote
// key. A lane line looks like
//
//	lane[1]:  2:rc_mlx5/mlx5_0:1.0 md[1] -> md[1]/ib/sysdev[255] rma_bw#0 wireup
//
// and over tcp no lane carries an rma tag at all (UCX emulates RMA through the AM lane).
// Anything unrecognised means "not keyed", which selects the guarded GET: safe, slower.
func rmaLanesKeyed(info string) bool {
	found := false
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimLeft(line, "# \t")
		if !strings.HasPrefix(line, "lane[") {
			continue
		}
		arrow := strings.Index(line, "->")
		if arrow < 0 {
			continue
		}
		rma := false
		for _, tag := range strings.Fields(line[arrow+2:]) {
			if strings.HasPrefix(tag, "rma") {
				rma = true
			}
		}
		if !rma {
			continue
		}
		fields := strings.Fields(line[:arrow])
		if len(fields) < 2 {
			return false
		}
		tl := fields[1]
		if i := strings.IndexByte(tl, ':'); i >= 0 {
			tl = tl[i+1:]
		}
		if i := strings.IndexByte(tl, '/'); i >= 0 {
			tl = tl[:i]
		}
		if !strings.HasPrefix(tl, "rc_") && !strings.HasPrefix(tl, "dc_") {
			return false
		}
		found = true
	}
	return found
}

// ---------------------------------------------------------------- operations

type opKind int

const (
	opSend opKind = iota
	opGetGuarded
	opGetGuardedV
	opGetDirect
	opPut
	opFlush
	opRecvAM
	opClose
)

var opNames = [...]string{"send_am", "get_guarded", "get_guarded_vector", "get_direct", "put", "flush", "recv_am", "close"}

// engineOp is one operation of the engine, its state guarded by wmu. It may own several UCX requests (a
// guarded GET owns its request message and the receive of the reply); it settles on the
// first result and finishes — unpinning its buffers and completing its Op — only when
// no UCX request of it is outstanding.
type engineOp struct {
	kind    opKind
	op      *Op
	conn    *Conn
	pin     runtime.Pinner
	cbuf    unsafe.Pointer // C bounce buffer (SendOptions.Copy)
	live    []*Request     // UCX requests of this op still outstanding
	counted bool           // counted in Engine.inflight
	settled bool
	result  error
	n       int
	stop    func() bool // stops the context watcher
	// onFinish, when set, runs under wmu once the op finished (GetMany's refill).
	onFinish func(op *engineOp)
	batchIdx int
	sharedRK bool // rk belongs to the batch, which destroys it
	// vectored guarded GET: the batch indexes and destinations of its reads, and each read's
	// own outcome
	vidx  []int
	vdst  [][]byte
	verrs []error

	// GET
	dst     []byte
	rk      *RemoteKey
	getID   uint64
	hdr     *[capi.GuardReqHdrLen]byte
	waiting bool     // guarded: request sent, reply not yet seen
	sendReq *Request // guarded: the request message, while UCX holds it
	// received AM (rendezvous)
	recvBuf []byte
	amID    uint16
	hdrLen  int
	sender  uint64
	handler AMHandler
}

// track counts op as in flight until it finishes.
func (e *Engine) track(op *engineOp) {
	if !op.counted {
		op.counted = true
		e.inflight++
		e.metrics.inflight.Inc()
	}
}

// started files the outcome of posting one UCX request for op.
func (e *Engine) started(op *engineOp, req *Request, err error) {
	e.track(op)
	switch {
	case err != nil:
		op.settle(err)
	case req == nil:
		op.immediate(e)
	default:
		op.live = append(op.live, req)
		req.UserData = op
		// A request UCX could not finish inside the call needs progress: if the progressor
		// armed the event fd before this was posted, the fd may not fire for it.
		e.kick()
	}
	op.tryFinish(e)
}

// immediate handles a request that completed inside the posting call.
func (op *engineOp) immediate(e *Engine) {
	switch op.kind {
	case opGetGuarded, opGetGuardedV:
		// The request message went out; the reply is still to come.
	case opGetDirect:
		op.dropRK()
		op.n = len(op.dst)
		op.settle(nil)
	case opClose:
		op.conn.closed(e, nil)
		op.settle(nil)
	case opRecvAM:
		op.deliverRecv(e)
		op.settle(nil)
	default:
		op.settle(nil)
	}
}

// completed handles a request of op that completed through the event ring.
func (op *engineOp) completed(e *Engine, req *Request) {
	for i, r := range op.live {
		if r == req {
			op.live = append(op.live[:i], op.live[i+1:]...)
			break
		}
	}
	err := req.Err()
	switch op.kind {
	case opGetGuarded, opGetGuardedV:
		if req == op.sendReq {
			op.sendReq = nil
			if err != nil {
				// The request message failed: no reply will come.
				op.unwait(e)
				op.settle(err)
			}
			break
		}
		// The receive of the reply's data.
		if op.kind == opGetGuardedV {
			op.settle(err) // received in place (ReceiveAMDataIov)
			break
		}
		if err == nil && req.Length() != len(op.dst) {
			err = fmt.Errorf("ucx: guarded GET reply carried %d bytes, want %d: %w", req.Length(), len(op.dst), StatusMessageTruncated)
		}
		op.n = req.Length()
		op.settle(err)
	case opGetDirect:
		op.dropRK()
		op.n = len(op.dst)
		op.settle(err)
	case opClose:
		op.conn.closed(e, err)
		op.settle(nil)
	case opRecvAM:
		if err == nil {
			op.deliverRecv(e)
		}
		op.settle(err)
	default:
		op.settle(err)
	}
	op.tryFinish(e)
}

func (op *engineOp) settle(err error) {
	if op.settled {
		return
	}
	op.settled = true
	op.result = err
}

// abandon ends op early (context cancelled, connection failed, engine closing). A
// guarded GET still waiting for its reply settles at once: the reply, if it comes, is
// dropped and never touches dst. Requests UCX already holds are left to complete (or to
// fail with their endpoint, or to be purged when the worker is destroyed) rather than
// cancelled: ucp_request_cancel on UCX 1.13 applies to receives, not to sends or RMA, and
// a data transfer that already started is short anyway. The op finishes when they do.
func (op *engineOp) abandon(e *Engine, err error) {
	if op.settled {
		return
	}
	if (op.kind == opGetGuarded || op.kind == opGetGuardedV) && op.waiting {
		op.unwait(e)
		op.settle(err)
	}
	op.tryFinish(e)
}

func (op *engineOp) unwait(e *Engine) {
	if op.waiting {
		op.waiting = false
		delete(e.gets, op.getID)
		delete(op.conn.gets, op.getID)
	}
}

func (op *engineOp) tryFinish(e *Engine) {
	if !op.settled || len(op.live) > 0 || op.waiting || op.op == nil {
		return
	}
	if op.counted {
		op.counted = false
		e.inflight--
		e.metrics.inflight.Dec()
	}
	op.pin.Unpin()
	if op.cbuf != nil {
		capi.Free(op.cbuf)
		op.cbuf = nil
	}
	if op.stop != nil {
		op.stop()
	}
	result := "ok"
	switch {
	case errors.Is(op.result, context.Canceled) || errors.Is(op.result, context.DeadlineExceeded) || errors.Is(op.result, StatusCanceled):
		result = "canceled"
	case op.result != nil:
		result = "error"
	}
	e.metrics.ops.WithLabelValues(opNames[op.kind], result).Inc()
	o := op.op
	op.op = nil
	o.finish(op.result, op.n)
	if op.onFinish != nil {
		op.onFinish(op)
	}
}

// dropRK destroys the op's unpacked remote key unless a batch shares it.
func (op *engineOp) dropRK() {
	if op.rk != nil && !op.sharedRK {
		op.rk.Destroy()
	}
	op.rk = nil
}

func (op *engineOp) deliverRecv(e *Engine) {
	msg := AMMessage{ID: op.amID, Header: op.recvBuf[:op.hdrLen:op.hdrLen], Payload: op.recvBuf[op.hdrLen:], Sender: op.sender}
	h := op.handler
	e.metrics.amReceived.Inc()
	e.deliver(func() { h(msg) })
}

// watch arranges for ctx's end to abandon op. The caller holds wmu, and op is started and
// not finished (tryFinish stops the watch).
func (e *Engine) watch(ctx context.Context, op *engineOp) {
	if ctx.Done() == nil {
		return
	}
	op.stop = context.AfterFunc(ctx, func() {
		e.wmu.Lock()
		op.abandon(e, ctx.Err())
		e.wmu.Unlock()
	})
}

// run posts an operation from the calling goroutine: start runs under wmu and posts to UCX
// directly, so an operation UCX finishes inside the call (a short eager send, say) costs no
// hand-off at all. A refused operation completes the Op with the error at once.
func (e *Engine) run(ctx context.Context, op *engineOp, start func()) *Op {
	o := op.op
	o.e = e
	if err := ctx.Err(); err != nil {
		op.release()
		return completedOp(err)
	}
	if err := e.lockRunning(); err != nil {
		e.metrics.opsRejected.Inc()
		op.release()
		return completedOp(err)
	}
	e.track(op)
	start()
	if op.op != nil {
		e.watch(ctx, op)
	}
	e.wmu.Unlock()
	return o
}

// release gives back what an operation that never reached UCX holds.
func (op *engineOp) release() {
	op.pin.Unpin()
	if op.cbuf != nil {
		capi.Free(op.cbuf)
		op.cbuf = nil
	}
}

// SendAM sends one active message and returns when UCX no longer needs header and
// payload. The message goes out eagerly: header+payload above MaxEagerSize fail with
// ErrMessageTooLarge. The payload is the concatenation of parts, sent without copying
// them together.
func (c *Conn) SendAM(ctx context.Context, id uint16, header []byte, parts ...[]byte) error {
	o := c.SendAMAsync(ctx, id, header, parts, SendOptions{})
	c.e.awaitDone(o)
	return o.Err()
}

// SendAMAsync starts SendAM and returns its Op. Unless opts.Copy, header and parts belong
// to the operation until Done.
func (c *Conn) SendAMAsync(ctx context.Context, id uint16, header []byte, parts [][]byte, opts SendOptions) *Op {
	e := c.e
	if id >= ReservedAMIDs {
		return completedOp(fmt.Errorf("ucx: AM id %#x is reserved for the engine", id))
	}
	total := len(header)
	for _, p := range parts {
		total += len(p)
	}
	if total > e.cfg.MaxEagerSize {
		return completedOp(fmt.Errorf("%w: %d bytes of header and payload exceed the eager limit of %d (EngineConfig.MaxEagerSize)", ErrMessageTooLarge, total, e.cfg.MaxEagerSize))
	}
	if len(header) > e.maxAMHeader {
		return completedOp(fmt.Errorf("%w: AM header of %d bytes exceeds the worker's %d", ErrMessageTooLarge, len(header), e.maxAMHeader))
	}
	op := &engineOp{kind: opSend, op: newOp(), conn: c}
	flags := AMEager
	if opts.Reply {
		flags |= AMReply
	}
	if opts.Copy && total > 0 {
		op.cbuf = capi.Malloc(uintptr(total))
		if op.cbuf == nil {
			return completedOp(statusErr("send bounce buffer", StatusNoMemory))
		}
		buf := unsafe.Slice((*byte)(op.cbuf), total)
		n := copy(buf, header)
		for _, p := range parts {
			n += copy(buf[n:], p)
		}
		header, parts = buf[:len(header):len(header)], [][]byte{buf[len(header):]}
	} else {
		if len(header) > 0 {
			op.pin.Pin(&header[0])
		}
		for _, p := range parts {
			if len(p) > 0 {
				op.pin.Pin(&p[0])
			}
		}
	}
	return e.run(ctx, op, func() {
		if err := c.usable(); err != nil {
			op.settle(err)
			op.tryFinish(e)
			return
		}
		req, err := c.ep.SendAMParts(id, header, parts, flags)
		e.started(op, req, err)
	})
}

// Get reads len(dst) bytes at remoteAddr of the peer into dst, through the remote key a
// peer's Registration.RemoteKey produced. It returns when the bytes are in dst or with an
// error; if ctx ends first, Get still returns only once dst is no longer in UCX's hands.
//
// A key that fails validation, a range outside the registration, and (guarded path) a
// registration the owner revoked all fail without reading any owner byte.
func (c *Conn) Get(ctx context.Context, dst []byte, remoteAddr uint64, key []byte) error {
	o := c.GetAsync(ctx, dst, remoteAddr, key)
	c.e.awaitDone(o)
	return o.Err()
}

// GetAsync starts Get and returns its Op; dst belongs to the operation until Done.
func (c *Conn) GetAsync(ctx context.Context, dst []byte, remoteAddr uint64, key []byte) *Op {
	k, err := ParseRegionKey(key)
	if err != nil {
		return completedOp(err)
	}
	if remoteAddr < k.Base() {
		return completedOp(fmt.Errorf("%w: address %#x is below the key's region at %#x", ErrOutOfRange, remoteAddr, k.Base()))
	}
	return c.GetKeyAsync(ctx, dst, k, remoteAddr-k.Base())
}

// GetKey reads len(dst) bytes at offset of the region k names into dst; it is Get for a key
// that was parsed already. It returns when the bytes are in dst or with an error.
func (c *Conn) GetKey(ctx context.Context, dst []byte, k *RegionKey, offset uint64) error {
	o := c.GetKeyAsync(ctx, dst, k, offset)
	c.e.awaitDone(o)
	return o.Err()
}

// GetKeyAsync starts GetKey and returns its Op; dst belongs to the operation until Done. A
// range outside the region fails here, before anything is posted.
func (c *Conn) GetKeyAsync(ctx context.Context, dst []byte, k *RegionKey, offset uint64) *Op {
	if k == nil || k.raw == nil {
		return completedOp(fmt.Errorf("%w: no key (use ParseRegionKey)", ErrInvalidRemoteKey))
	}
	if err := k.rangeErr(offset, uint64(len(dst))); err != nil {
		return completedOp(err)
	}
	e := c.e
	remoteAddr := k.Base() + offset
	op := &engineOp{kind: opGetGuarded, op: newOp(), conn: c, dst: dst}
	if len(dst) > 0 {
		op.pin.Pin(&dst[0])
	}
	return e.run(ctx, op, func() {
		if err := c.usable(); err != nil {
			op.settle(err)
			op.tryFinish(e)
			return
		}
		if c.resolveRMA(e) == RMADirect {
			op.kind = opGetDirect
			e.getDirect(op, k.k, remoteAddr)
			return
		}
		e.getGuarded(op, k.k, remoteAddr)
	})
}

func (e *Engine) getDirect(op *engineOp, k SealedKey, remoteAddr uint64) {
	if op.rk == nil {
		rk, err := op.conn.ep.unpackChecked(k.UCXKey) // ParseRegionKey walked it already
		if err != nil {
			op.settle(err)
			op.tryFinish(e)
			return
		}
		op.rk = rk
	}
	req, err := op.conn.ep.Get(op.dst, remoteAddr, op.rk)
	if err != nil {
		op.dropRK()
	}
	e.started(op, req, err)
}

func (e *Engine) getGuarded(op *engineOp, k SealedKey, remoteAddr uint64) {
	e.nextGetID++
	op.getID = e.nextGetID
	op.hdr = new([capi.GuardReqHdrLen]byte)
	h := op.hdr[:]
	binary.LittleEndian.PutUint32(h[0:], capi.GuardMagic)
	binary.LittleEndian.PutUint32(h[4:], k.Slot)
	binary.LittleEndian.PutUint64(h[8:], k.Token)
	binary.LittleEndian.PutUint64(h[16:], remoteAddr)
	binary.LittleEndian.PutUint64(h[24:], uint64(len(op.dst)))
	binary.LittleEndian.PutUint64(h[32:], op.getID)
	op.pin.Pin(op.hdr)
	e.sendGuardRequest(op, guardReqID, h)
}

// sendGuardRequest sends a guarded GET's request (hdr, pinned by op) and files op as waiting
// for the owner's reply, which carries its getID.
func (e *Engine) sendGuardRequest(op *engineOp, id uint16, hdr []byte) {
	op.waiting = true
	e.gets[op.getID] = op
	op.conn.gets[op.getID] = op
	req, err := op.conn.ep.SendAM(id, hdr, nil, AMEager|AMReply)
	if err != nil {
		op.unwait(e)
	}
	op.sendReq = req
	e.started(op, req, err)
}

// getGuardedV posts one vectored guarded GET for the reads of op (op.vdst, at remote addresses
// addrs of keys ks): one request message naming every read's registration, range and token.
func (e *Engine) getGuardedV(op *engineOp, ks []SealedKey, addrs []uint64) {
	e.nextGetID++
	op.getID = e.nextGetID
	n := len(op.vdst)
	h := make([]byte, capi.GuardVReqHdrLen+n*capi.GuardVEntryLen)
	binary.LittleEndian.PutUint32(h[0:], capi.GuardVMagic)
	binary.LittleEndian.PutUint32(h[4:], uint32(n))
	binary.LittleEndian.PutUint64(h[8:], op.getID)
	for j := range op.vdst {
		ent := h[capi.GuardVReqHdrLen+j*capi.GuardVEntryLen:]
		binary.LittleEndian.PutUint32(ent[0:], ks[j].Slot)
		binary.LittleEndian.PutUint64(ent[8:], ks[j].Token)
		binary.LittleEndian.PutUint64(ent[16:], addrs[j])
		binary.LittleEndian.PutUint64(ent[24:], uint64(len(op.vdst[j])))
	}
	op.pin.Pin(&h[0])
	e.sendGuardRequest(op, guardVReqID, h)
}

// onGuardVReply handles the owner's answer to a vectored guarded GET: a status per read, then the
// bytes of the served reads back to back.
func (e *Engine) onGuardVReply(am *AMEvent) {
	hdr := am.Header
	if len(hdr) < capi.GuardVRepHdrLen || binary.LittleEndian.Uint32(hdr[8:]) != capi.GuardVMagic {
		e.metrics.amDropped.WithLabelValues("bad_guard_reply").Inc()
		return
	}
	op := e.gets[binary.LittleEndian.Uint64(hdr[0:])]
	if op == nil || op.kind != opGetGuardedV {
		return // abandoned: the reply's data is released unread
	}
	op.unwait(e)
	n := int(binary.LittleEndian.Uint32(hdr[12:]))
	if n != len(op.vdst) || len(hdr) != capi.GuardVRepHdrLen+4*n {
		e.metrics.amDropped.WithLabelValues("bad_guard_reply").Inc()
		op.settle(fmt.Errorf("ucx: vectored guarded GET reply for %d reads, want %d: %w", n, len(op.vdst), StatusMessageTruncated))
		op.tryFinish(e)
		return
	}
	want := 0
	for j := range op.vdst {
		switch status := Status(int32(binary.LittleEndian.Uint32(hdr[capi.GuardVRepHdrLen+4*j:]))); {
		case status == StatusOK:
			want += len(op.vdst[j])
		case status == StatusRejected:
			op.verrs[j] = fmt.Errorf("%w: %w", ErrRemoteKeyRevoked, status)
		case status == StatusInvalidAddr:
			op.verrs[j] = fmt.Errorf("%w (checked by the owner): %w", ErrOutOfRange, status)
		default:
			op.verrs[j] = fmt.Errorf("ucx: guarded GET refused by the owner: %w", status)
		}
	}
	switch {
	case am.Length != want:
		op.settle(fmt.Errorf("ucx: vectored guarded GET reply carried %d bytes, want %d: %w", am.Length, want, StatusMessageTruncated))
	case am.Rendezvous:
		// Straight into the served reads' destinations (pinned since the post).
		var dsts [][]byte
		for j, d := range op.vdst {
			if op.verrs[j] == nil {
				dsts = append(dsts, d)
			}
		}
		req, err := e.w.ReceiveAMDataIov(am, dsts)
		switch {
		case err != nil:
			op.settle(err)
		case req == nil:
			op.settle(nil)
		default:
			e.started(op, req, nil)
			return
		}
	default:
		op.scatter(am.Data)
		op.settle(nil)
	}
	op.tryFinish(e)
}

// scatter copies a vectored reply's bytes to the destinations of the reads the owner served.
func (op *engineOp) scatter(data []byte) {
	off := 0
	for j, dst := range op.vdst {
		if op.verrs[j] == nil {
			off += copy(dst, data[off:])
		}
	}
}

// onGuardReply handles the owner's answer to a guarded GET.
func (e *Engine) onGuardReply(am *AMEvent) {
	if len(am.Header) != capi.GuardRepHdrLen || binary.LittleEndian.Uint32(am.Header[12:]) != capi.GuardMagic {
		e.metrics.amDropped.WithLabelValues("bad_guard_reply").Inc()
		return
	}
	id := binary.LittleEndian.Uint64(am.Header[0:])
	status := Status(int32(binary.LittleEndian.Uint32(am.Header[8:])))
	op := e.gets[id]
	if op == nil {
		return // abandoned: the reply's data is released unread
	}
	op.unwait(e)
	switch {
	case status == StatusRejected:
		op.settle(fmt.Errorf("%w: %w", ErrRemoteKeyRevoked, status))
	case status == StatusInvalidAddr:
		op.settle(fmt.Errorf("%w (checked by the owner): %w", ErrOutOfRange, status))
	case status != StatusOK:
		op.settle(fmt.Errorf("ucx: guarded GET refused by the owner: %w", status))
	case am.Length != len(op.dst):
		op.settle(fmt.Errorf("ucx: guarded GET reply carried %d bytes, want %d: %w", am.Length, len(op.dst), StatusMessageTruncated))
	case am.Rendezvous:
		req, err := e.w.ReceiveAMData(am, op.dst)
		switch {
		case err != nil:
			op.settle(err)
		case req == nil:
			op.n = len(op.dst)
			op.settle(nil)
		default:
			e.started(op, req, nil)
			return
		}
	default:
		op.n = copy(op.dst, am.Data)
		op.settle(nil)
	}
	op.tryFinish(e)
}

// Put writes src to remoteAddr of the peer and returns when src is free again; call
// Flush to make it visible at the target. Put exists only on the direct path: over
// transports where UCX emulates RMA in software the owner would write wherever the
// request says, so there Put fails with StatusUnsupported (configure RMADirect to allow
// it anyway).
func (c *Conn) Put(ctx context.Context, src []byte, remoteAddr uint64, key []byte) error {
	e := c.e
	k, err := parseSealedKey(key, capi.MemoryTypeLimit)
	if err != nil {
		return err
	}
	if !k.Covers(remoteAddr, uint64(len(src))) {
		return fmt.Errorf("%w: [%#x, +%d) is outside the key's region [%#x, +%d)", ErrOutOfRange, remoteAddr, len(src), k.Base, k.Length)
	}
	ucxKey := append([]byte(nil), k.UCXKey...)
	op := &engineOp{kind: opPut, op: newOp(), conn: c}
	if len(src) > 0 {
		op.pin.Pin(&src[0])
	}
	o := e.run(ctx, op, func() {
		if err := c.usable(); err != nil {
			op.settle(err)
			op.tryFinish(e)
			return
		}
		if c.resolveRMA(e) != RMADirect {
			op.settle(fmt.Errorf("ucx: Put over a transport without keyed RMA: %w (set EngineConfig.RMA to RMADirect to allow unguarded writes)", StatusUnsupported))
			op.tryFinish(e)
			return
		}
		rk, err := c.ep.UnpackRemoteKey(ucxKey)
		if err != nil {
			op.settle(err)
			op.tryFinish(e)
			return
		}
		req, err := c.ep.Put(src, remoteAddr, rk)
		rk.Destroy() // UCX copies what it needs from the key when it posts the put
		e.started(op, req, err)
	})
	e.awaitDone(o)
	return o.Err()
}

// Flush completes every RMA operation issued on the connection at origin and target.
func (c *Conn) Flush(ctx context.Context) error {
	e := c.e
	op := &engineOp{kind: opFlush, op: newOp(), conn: c}
	o := e.run(ctx, op, func() {
		if err := c.usable(); err != nil {
			op.settle(err)
			op.tryFinish(e)
			return
		}
		req, err := c.ep.Flush()
		e.started(op, req, err)
	})
	e.awaitDone(o)
	return o.Err()
}

// ---------------------------------------------------------------- registrations

// Registration is memory the engine mapped (ucp_mem_map) and serves to guarded GETs.
// Each registration has its own remote key; Unregister kills it.
type Registration struct {
	e      *Engine
	addr   uint64
	length int
	key    []byte
	done   chan struct{}
	pin    runtime.Pinner

	// Guarded by the engine's wmu.
	memh    *MemHandle
	slot    uint32
	revoked bool
	waiters []*Op
	err     error
}

// Register maps mem for remote reads. mem must stay valid until Done: mmap'd memory
// (AllocMemory) is the intended kind; Go memory is pinned for the registration's life.
func (e *Engine) Register(ctx context.Context, mem []byte) (*Registration, error) {
	regs, errs := e.RegisterMany(ctx, [][]byte{mem})
	return regs[0], errs[0]
}

// RegisterMany is Register for many regions under one hold of the engine's lock: an owner that
// grants many leases at once (a batch of small blocks) waits for the worker once, not once per
// region behind a progressor that is busy serving reads. Each region gets its own registration
// and key, or its own error.
func (e *Engine) RegisterMany(ctx context.Context, mems [][]byte) ([]*Registration, []error) {
	regs := make([]*Registration, len(mems))
	errs := make([]error, len(mems))
	failAll := func(err error) ([]*Registration, []error) {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
		return regs, errs
	}
	for i, mem := range mems {
		if len(mem) == 0 {
			errs[i] = fmt.Errorf("ucx: Register: %w: empty region", StatusInvalidParam)
		}
	}
	if err := ctx.Err(); err != nil {
		return failAll(err)
	}
	if err := e.lockRunning(); err != nil {
		return failAll(err)
	}
	defer e.wmu.Unlock()
	for i, mem := range mems {
		if errs[i] == nil {
			regs[i], errs[i] = e.registerLocked(mem)
		}
	}
	return regs, errs
}

// registerLocked maps mem, packs its key and enters it in the guard table. The caller holds wmu.
func (e *Engine) registerLocked(mem []byte) (*Registration, error) {
	r := &Registration{e: e, addr: uint64(uintptr(unsafe.Pointer(&mem[0]))), length: len(mem), done: make(chan struct{})}
	r.pin.Pin(&mem[0])
	memh, err := e.ctx.MapMemory(mem)
	if err != nil {
		r.pin.Unpin()
		return nil, err
	}
	packed, err := memh.PackRemoteKey()
	if err != nil {
		memh.Unmap()
		r.pin.Unpin()
		return nil, err
	}
	token := e.tokens.Uint64()
	slot, err := e.w.guardAdd(token, r.addr, uint64(r.length))
	if err != nil {
		memh.Unmap()
		r.pin.Unpin()
		return nil, err
	}
	r.memh, r.slot = memh, slot
	r.key = AppendSealedKey(nil, SealedKey{Slot: slot, Token: token, Base: r.addr, Length: uint64(r.length), UCXKey: packed})
	e.regs[r] = struct{}{}
	return r, nil
}

// Addr is the registered region's address, the base a remote Get names.
func (r *Registration) Addr() uint64 { return r.addr }

// Len is the registered length.
func (r *Registration) Len() int { return r.length }

// RemoteKey is the sealed key a peer passes to Conn.Get. Every registration has its own.
func (r *Registration) RemoteKey() []byte { return append([]byte(nil), r.key...) }

// Done is closed once the registration is gone from UCX and no reply reads its memory:
// from then on the memory may be freed.
func (r *Registration) Done() <-chan struct{} { return r.done }

// Unregister revokes the key at once (later guarded GETs with it fail without reading a
// byte), waits for replies that are already reading the region, then unmaps it
// (ucp_mem_unmap). If ctx ends first it returns ctx.Err() and the unmap still happens;
// wait for Done before freeing the memory.
func (r *Registration) Unregister(ctx context.Context) error {
	e := r.e
	e.lock()
	if e.state == stateClosed {
		e.wmu.Unlock()
		<-r.done // the engine unmapped every registration as it closed
		return nil
	}
	res := newOp()
	e.revoke(r, res)
	e.wmu.Unlock()
	if err := e.await(ctx, res.done); err != nil {
		return err
	}
	return res.err
}

// Revoke revokes the key at once, like Unregister, but returns without waiting for replies
// that are already reading the region: later guarded GETs with the key are refused from the
// moment it returns. Done says when the memory may be freed.
func (r *Registration) Revoke(ctx context.Context) error {
	e := r.e
	e.lock()
	defer e.wmu.Unlock()
	if e.state != stateClosed {
		e.revoke(r, nil)
	}
	return nil
}

func (e *Engine) revoke(r *Registration, waiter *Op) {
	if waiter != nil {
		select {
		case <-r.done:
			waiter.finish(r.err, 0)
			return
		default:
		}
		r.waiters = append(r.waiters, waiter)
	}
	if r.revoked {
		return
	}
	r.revoked = true
	delete(e.regs, r)
	e.w.guardRevoke(r.slot)
	e.unmapping = append(e.unmapping, r)
	e.finishUnmaps()
}

// finishUnmaps unmaps revoked registrations whose replies have all completed.
func (e *Engine) finishUnmaps() {
	keep := e.unmapping[:0]
	for _, r := range e.unmapping {
		if e.w.guardInflight(r.slot) > 0 {
			keep = append(keep, r)
			continue
		}
		err := r.memh.Unmap()
		e.w.guardRelease(r.slot)
		r.finish(err)
	}
	clear(e.unmapping[len(keep):])
	e.unmapping = keep
}

func (r *Registration) finish(err error) {
	r.err = err
	r.pin.Unpin()
	close(r.done)
	for _, w := range r.waiters {
		w.finish(err, 0)
	}
	r.waiters = nil
}

// ---------------------------------------------------------------- many reads

// KeyRead is one read of GetMany: len(Dst) bytes at Offset of the region Key names.
type KeyRead struct {
	Key    *RegionKey
	Offset uint64
	Dst    []byte
}

// GetMany reads every entry of reads from the peer, with up to window GETs in flight (at least
// one). The reads do not wait for each other: the first window are posted by the caller, and
// each completion posts the next one from the goroutine that saw it complete, so a stream of
// small reads costs no hand-off per read. done(i, err) is called once for every read, on the
// calling goroutine, as reads complete, in groups of up to a quarter of the window (one
// wake-up of the caller per group, not per read); a read whose range lies outside its key's region fails there
// without being posted, and one read's failure fails only that read. GetMany returns once
// every read has completed, so nothing writes any Dst afterwards. When ctx ends, reads not
// yet posted fail with ctx.Err() and guarded reads waiting for their reply are abandoned
// (the reply, if it comes, is dropped).
func (c *Conn) GetMany(ctx context.Context, reads []KeyRead, window int, done func(i int, err error)) {
	if len(reads) == 0 {
		return
	}
	b := &getBatch{c: c, reads: reads, window: max(window, 1), inflight: map[*engineOp]struct{}{},
		wake: make(chan struct{}, 1), left: len(reads), rks: map[*RegionKey]*RemoteKey{}}
	e := c.e
	if err := ctx.Err(); err != nil {
		b.failRest(err)
	} else if err := e.lockRunning(); err != nil {
		b.failRest(err)
	} else {
		b.pump()
		if b.left > b.reported() && ctx.Done() != nil {
			b.stop = context.AfterFunc(ctx, func() {
				e.wmu.Lock()
				b.cancel(ctx.Err())
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

// getBatch is one GetMany. Its fields up to mu are guarded by the engine's wmu.
type getBatch struct {
	c        *Conn
	reads    []KeyRead
	window   int
	next     int                    // the next read to post
	inflight map[*engineOp]struct{} // posted, not finished
	reading  int                    // reads those requests carry
	pumping  bool
	canceled error
	rks      map[*RegionKey]*RemoteKey // direct path: one unpacked key per region
	stop     func() bool
	left     int // reads not yet reported to done; the caller's

	mu      sync.Mutex
	results []batchResult
	posted  int // results recorded (under mu)
	wake    chan struct{}
}

type batchResult struct {
	i   int
	err error
}

func (b *getBatch) reported() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.posted
}

// record files one read's outcome for the caller. The caller is woken once a quarter of the
// window has piled up, or by the last read: waking it for every completion would cost a
// goroutine hand-off (and on a busy machine a thread wake-up) per read, more than a small read.
func (b *getBatch) record(i int, err error) {
	b.mu.Lock()
	b.results = append(b.results, batchResult{i, err})
	b.posted++
	wake := len(b.results) >= max(b.window/4, 1) || b.posted == len(b.reads)
	b.mu.Unlock()
	if wake {
		select {
		case b.wake <- struct{}{}:
		default:
		}
	}
}

// failRest fails every read not yet posted.
func (b *getBatch) failRest(err error) {
	for ; b.next < len(b.reads); b.next++ {
		b.record(b.next, err)
	}
}

// cancel runs under wmu when the caller's context ends.
func (b *getBatch) cancel(err error) {
	if b.canceled != nil {
		return
	}
	b.canceled = err
	b.failRest(err)
	for op := range b.inflight {
		op.abandon(b.c.e, err)
	}
}

// pump posts reads until the window is full. It runs under wmu; a post that completes inside
// the call re-enters through finished, which leaves the posting to the loop here. Where GETs are
// guarded, consecutive reads are posted together as one vectored request (a quarter of the
// window at most, and no more than the owner answers in one reply): one message each way for
// many reads, which is what makes small reads cheap over transports that emulate GET. Only to a
// peer that said it answers them (ConnectOptions.VectoredGet).
func (b *getBatch) pump() {
	if b.pumping {
		return
	}
	b.pumping = true
	defer func() { b.pumping = false }()
	c, e := b.c, b.c.e
	for b.reading < b.window && b.next < len(b.reads) && b.canceled == nil {
		if err := c.usable(); err != nil {
			b.failRest(err)
			return
		}
		direct := c.resolveRMA(e) == RMADirect
		var idx []int
		room := b.window - b.reading
		limit := 1
		if !direct && c.opts.VectoredGet {
			limit = min(room, b.vector(), len(b.reads)-b.next)
		}
		bytes := 0
		for len(idx) < limit && b.next < len(b.reads) {
			i := b.next
			rd := b.reads[i]
			if rd.Key == nil || rd.Key.raw == nil {
				b.next++
				b.record(i, fmt.Errorf("%w: no key (use ParseRegionKey)", ErrInvalidRemoteKey))
				continue
			}
			if err := rd.Key.rangeErr(rd.Offset, uint64(len(rd.Dst))); err != nil {
				b.next++
				b.record(i, err)
				continue
			}
			if len(idx) > 0 && (len(rd.Dst) > vectorReadMax || bytes+len(rd.Dst) > vectorBytesMax) {
				break // this one starts the next request
			}
			b.next++
			idx = append(idx, i)
			bytes += len(rd.Dst)
			if len(rd.Dst) > vectorReadMax {
				break // a large read goes alone
			}
		}
		switch {
		case len(idx) == 0:
		case direct:
			b.postDirect(idx[0])
		case len(idx) == 1:
			b.postGuarded(idx[0])
		default:
			b.postVector(idx)
		}
	}
}

// Bounds of one vectored request: reads above vectorReadMax go alone (their own GET costs little
// beside their bytes), and a request carries vectorBytesMax at most.
const (
	vectorReadMax  = 256 << 10
	vectorBytesMax = 1 << 20
)

// vector is how many reads one vectored request may carry: a quarter of the window (so that
// several requests are in flight), at most what the owner's reply handles and what fits the
// worker's largest AM header.
func (b *getBatch) vector() int {
	v := min(max(b.window/4, 1), capi.GuardVMax)
	if h := (b.c.e.maxAMHeader - capi.GuardVReqHdrLen) / capi.GuardVEntryLen; h < v {
		v = max(h, 1)
	}
	return v
}

func (b *getBatch) newOp(kind opKind) *engineOp {
	op := &engineOp{kind: kind, op: newOp(), conn: b.c, onFinish: b.finished}
	b.inflight[op] = struct{}{}
	return op
}

// newReadOp makes and tracks the operation for read i alone, its
// destination pinned for as long as UCX may write into it.
func (b *getBatch) newReadOp(kind opKind, i int) (*engineOp, KeyRead) {
	rd := b.reads[i]
	op := b.newOp(kind)
	op.dst, op.batchIdx = rd.Dst, i
	if len(rd.Dst) > 0 {
		op.pin.Pin(&rd.Dst[0])
	}
	b.reading++
	b.c.e.track(op)
	return op, rd
}

func (b *getBatch) postDirect(i int) {
	c, e := b.c, b.c.e
	op, rd := b.newReadOp(opGetDirect, i)
	if rk := b.rks[rd.Key]; rk != nil {
		op.rk, op.sharedRK = rk, true
	} else if rk, err := c.ep.unpackChecked(rd.Key.k.UCXKey); err == nil {
		b.rks[rd.Key] = rk
		op.rk, op.sharedRK = rk, true
	}
	e.getDirect(op, rd.Key.k, rd.Key.Base()+rd.Offset)
}

func (b *getBatch) postGuarded(i int) {
	op, rd := b.newReadOp(opGetGuarded, i)
	b.c.e.getGuarded(op, rd.Key.k, rd.Key.Base()+rd.Offset)
}

func (b *getBatch) postVector(idx []int) {
	op := b.newOp(opGetGuardedV)
	op.vidx = idx
	op.vdst = make([][]byte, len(idx))
	op.verrs = make([]error, len(idx))
	ks := make([]SealedKey, len(idx))
	addrs := make([]uint64, len(idx))
	for j, i := range idx {
		rd := b.reads[i]
		op.vdst[j] = rd.Dst
		if len(rd.Dst) > 0 {
			op.pin.Pin(&rd.Dst[0])
		}
		ks[j], addrs[j] = rd.Key.k, rd.Key.Base()+rd.Offset
	}
	b.reading += len(idx)
	b.c.e.track(op)
	b.c.e.getGuardedV(op, ks, addrs)
}

// finished runs under wmu when one posted request finished: it reports its reads and refills
// the window.
func (b *getBatch) finished(op *engineOp) {
	delete(b.inflight, op)
	if op.kind == opGetGuardedV {
		b.reading -= len(op.vidx)
		for j, i := range op.vidx {
			err := op.result
			if err == nil {
				err = op.verrs[j]
			}
			b.record(i, err)
		}
	} else {
		b.reading--
		b.record(op.batchIdx, op.result)
	}
	b.pump()
}
