// One-sided operations on a Conn: GET (direct, guarded, vectored), PUT and flush.

package ucx

import (
	"context"
	"fmt"

	"github.com/velo-go/velo/ucx/internal/capi"
)

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
	return c.GetAsyncWith(ctx, dst, remoteAddr, key, GetOptions{})
}

// GetOptions configure the GETs that take them (GetWith, GetKeyWith and their Async forms).
type GetOptions struct {
	// DstMemory is the memory type of the destination (default MemoryHost). With MemoryCUDA
	// dst is a device pointer viewed as a []byte, which this package never touches itself:
	// UCX receives into it with that memory type, and a small reply that arrives in a UCX
	// buffer is copied over with the CUDA driver (CopyMemory). Only a binary built with
	// -tags cuda,ucx_static takes it; any other fails the GET with ErrCUDANotBuilt before
	// anything is sent.
	DstMemory MemoryType
}

// GetWith is Get into a destination of the memory type opts names.
func (c *Conn) GetWith(ctx context.Context, dst []byte, remoteAddr uint64, key []byte, opts GetOptions) error {
	o := c.GetAsyncWith(ctx, dst, remoteAddr, key, opts)
	c.e.awaitDone(o)
	return o.Err()
}

// GetAsyncWith is GetAsync into a destination of the memory type opts names.
func (c *Conn) GetAsyncWith(ctx context.Context, dst []byte, remoteAddr uint64, key []byte, opts GetOptions) *Op {
	k, err := ParseRegionKey(key)
	if err != nil {
		return completedOp(err)
	}
	if remoteAddr < k.Base() {
		return completedOp(fmt.Errorf("%w: address %#x is below the key's region at %#x", ErrOutOfRange, remoteAddr, k.Base()))
	}
	return c.GetKeyAsyncWith(ctx, dst, k, remoteAddr-k.Base(), opts)
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
	return c.GetKeyAsyncWith(ctx, dst, k, offset, GetOptions{})
}

// GetKeyWith is GetKey into a destination of the memory type opts names.
func (c *Conn) GetKeyWith(ctx context.Context, dst []byte, k *RegionKey, offset uint64, opts GetOptions) error {
	o := c.GetKeyAsyncWith(ctx, dst, k, offset, opts)
	c.e.awaitDone(o)
	return o.Err()
}

// GetKeyAsyncWith is GetKeyAsync into a destination of the memory type opts names.
func (c *Conn) GetKeyAsyncWith(ctx context.Context, dst []byte, k *RegionKey, offset uint64, opts GetOptions) *Op {
	if k == nil || k.raw == nil {
		return completedOp(fmt.Errorf("%w: no key (use ParseRegionKey)", ErrInvalidRemoteKey))
	}
	if err := k.readErr(offset, uint64(len(dst))); err != nil {
		return completedOp(err)
	}
	if err := checkMemory("GET destination", uintptr(bufPtr(dst)), len(dst), opts.DstMemory); err != nil {
		return completedOp(err)
	}
	e := c.e
	remoteAddr := k.Base() + offset
	op := &engineOp{kind: opGetGuarded, op: newOp(), conn: c, dst: dst, dstMem: opts.DstMemory}
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
	req, err := op.conn.ep.get(op.dst, remoteAddr, op.rk, op.dstMem.ucs())
	if err != nil {
		op.dropRK()
	}
	e.started(op, req, err)
}

func (e *Engine) getGuarded(op *engineOp, k SealedKey, remoteAddr uint64) {
	e.nextGetID++
	op.getID = e.nextGetID
	op.hdr = new([guardReqLen]byte)
	h := op.hdr[:]
	putGuardRequest(h, capi.GuardMagic, k, remoteAddr, uint64(len(op.dst)), op.getID)
	op.pin.Pin(op.hdr)
	e.sendGuardRequest(op, guardReqID, h)
}

// sendGuardRequest sends a guarded GET's request (hdr, pinned by op) and files op as waiting
// for the owner's reply, which carries its getID.
func (e *Engine) sendGuardRequest(op *engineOp, id uint16, hdr []byte, parts ...[]byte) {
	op.waiting = true
	e.gets[op.getID] = op
	op.conn.gets[op.getID] = op
	req, err := op.conn.ep.SendAMParts(id, hdr, parts, AMEager|AMReply)
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
	h := newGuardVRequest(n)
	putGuardVHeader(h, capi.GuardVMagic, n, op.getID)
	for j := range op.vdst {
		putGuardEntry(h, j, ks[j], addrs[j], uint64(len(op.vdst[j])))
	}
	op.pin.Pin(&h[0])
	e.sendGuardRequest(op, guardVReqID, h)
}

// vectorReply finds the operation a vectored reply answers (by its request id, magic and kind)
// and checks that the reply carries a status per entry of it. A reply it cannot use is counted
// and dropped; one whose count is wrong fails the operation. It returns nil in both cases, and
// for an operation already abandoned.
func (e *Engine) vectorReply(am *AMEvent, magic uint32, kind opKind, what string) (*engineOp, guardVReply) {
	r, ok := parseGuardVReply(am.Header, magic)
	if !ok {
		e.metrics.amDropped.WithLabelValues("bad_guard_reply").Inc()
		return nil, r
	}
	op := e.gets[r.ID]
	if op == nil || op.kind != kind {
		return nil, r
	}
	op.unwait(e)
	if r.Count != len(op.vidx) || !r.complete() {
		e.metrics.amDropped.WithLabelValues("bad_guard_reply").Inc()
		op.settle(fmt.Errorf("ucx: %s reply for %d entries, want %d: %w", what, r.Count, len(op.vidx), StatusMessageTruncated))
		op.tryFinish(e)
		return nil, r
	}
	return op, r
}

// onGuardVReply handles the owner's answer to a vectored guarded GET: a status per read, then the
// bytes of the served reads back to back.
func (e *Engine) onGuardVReply(am *AMEvent) {
	op, r := e.vectorReply(am, capi.GuardVMagic, opGetGuardedV, "vectored guarded GET")
	if op == nil {
		return // malformed, or abandoned: the reply's data is released unread
	}
	want := 0
	for j := range op.vdst {
		switch status := r.status(j); {
		case status == StatusOK:
			want += len(op.vdst[j])
		case status == StatusRejected:
			op.verrs[j] = fmt.Errorf("%w: %w", ErrRemoteKeyRevoked, status)
		case status == StatusInvalidAddr:
			op.verrs[j] = fmt.Errorf("%w (checked by the owner): %w", ErrOutOfRange, status)
		case status == StatusNotConnected:
			op.verrs[j] = errNotHolder(status)
		case status == StatusUnsupported:
			op.verrs[j] = fmt.Errorf("ucx: vectored guarded GET: the owner serves one memory type per reply and this read's differs: %w", status)
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
		req, err := e.w.receiveAMDataIov(am, dsts, op.dstMem.ucs())
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
	r, ok := parseGuardReply(am.Header, capi.GuardMagic)
	if !ok {
		e.metrics.amDropped.WithLabelValues("bad_guard_reply").Inc()
		return
	}
	status := r.Status
	op := e.gets[r.ID]
	if op == nil {
		return // abandoned: the reply's data is released unread
	}
	op.unwait(e)
	switch {
	case status == StatusRejected:
		op.settle(fmt.Errorf("%w: %w", ErrRemoteKeyRevoked, status))
	case status == StatusInvalidAddr:
		op.settle(fmt.Errorf("%w (checked by the owner): %w", ErrOutOfRange, status))
	case status == StatusNotConnected:
		op.settle(errNotHolder(status))
	case status != StatusOK:
		op.settle(fmt.Errorf("ucx: guarded GET refused by the owner: %w", status))
	case am.Length != len(op.dst):
		op.settle(fmt.Errorf("ucx: guarded GET reply carried %d bytes, want %d: %w", am.Length, len(op.dst), StatusMessageTruncated))
	case am.Rendezvous:
		req, err := e.w.receiveAMData(am, op.dst, op.dstMem.ucs())
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
	case op.dstMem == MemoryCUDA:
		// A small reply came in UCX's own buffer: the driver copies it to the device.
		if err := CopyMemory(uintptr(bufPtr(op.dst)), uintptr(bufPtr(am.Data)), len(am.Data)); err != nil {
			op.settle(fmt.Errorf("ucx: guarded GET: copying the reply to CUDA memory: %w", err))
		} else {
			op.n = len(am.Data)
			op.settle(nil)
		}
	default:
		op.n = copy(op.dst, am.Data)
		op.settle(nil)
	}
	op.tryFinish(e)
}

// errNotHolder is the owner's answer to a guarded request through a key bound to its holder
// (RegisterOptions.Holder) that came on an endpoint the owner has not connected itself: an
// outsider's, or the holder's own before the owner connected back to it. The holder tries
// again; to anyone else it stays the answer.
func errNotHolder(status Status) error {
	return fmt.Errorf("ucx: guarded request refused by the owner: the key is served only on the owner's endpoints to its holder, and this endpoint is not one of them (yet): %w", status)
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
