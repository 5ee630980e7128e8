// engineOp: one operation of the engine (a send, a read, a write, a flush, a close), the UCX
// requests it owns and how it settles, finishes and releases what it pinned.

package ucx

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"github.com/velo-go/velo/ucx/internal/capi"
)

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
	opPutGuarded  // one piece of a guarded write (put.go)
	opPutDirect   // ucp_put_nbx and the flush behind it (put.go)
	opPutGuardedV // many small guarded writes in one request (put.go)
)

var opNames = [...]string{"send_am", "get_guarded", "get_guarded_vector", "get_direct", "put", "flush", "recv_am", "close", "put_guarded", "put_direct", "put_guarded_vector"}

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
	// own outcome (a vectored guarded PUT: its writes' indexes and outcomes)
	vidx  []int
	vdst  [][]byte
	verrs []error

	// GET
	dst     []byte
	dstMem  MemoryType // the memory type of dst (and of every vdst: vectored reads are host)
	rk      *RemoteKey
	getID   uint64
	hdr     *[guardReqLen]byte
	waiting bool     // guarded: request sent, reply not yet seen
	sendReq *Request // guarded: the request message, while UCX holds it
	// direct PUT: the flush behind the write was posted, and its completion settles the op
	flushing bool
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
	case opGetGuarded, opGetGuardedV, opPutGuarded:
		// The request message went out; the reply is still to come.
	case opPutDirect:
		// The write is only complete at the target once the flush behind it is.
		if op.flushing && len(op.live) == 0 {
			op.settle(nil)
		}
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
	case opPutDirect:
		if err != nil {
			op.settle(err)
		} else if op.flushing && len(op.live) == 0 {
			op.settle(nil)
		}
	case opGetGuarded, opGetGuardedV, opPutGuarded:
		if req == op.sendReq {
			op.sendReq = nil
			if err != nil {
				// The request message failed: no reply will come.
				op.unwait(e)
				op.settle(err)
			}
			break
		}
		// The receive of the reply's data (a guarded PUT has none).
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
	if (op.kind == opGetGuarded || op.kind == opGetGuardedV || op.kind == opPutGuarded) && op.waiting {
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
