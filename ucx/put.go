// Writes into a peer's registered memory: PutKey and PutMany, on the direct path (ucp_put_nbx
// and a flush, where the NIC checks the key) or the guarded one (velo's write request, checked
// by the target's engine), and PutNotify, a write whose active message reaches the peer only
// after every byte it covers is in the peer's memory.

package ucx

import (
	"context"
	"fmt"

	"github.com/velo-go/velo/ucx/internal/capi"
)

// putChunkMax bounds one guarded write request. A write goes out eagerly (the target copies it
// inside its callback and answers there, guardput.c), so it is cut into pieces that the target
// buffers whole; a window of them keeps the link busy. 256 KiB measured the same as 1 MiB over
// tcp here and keeps what a target buffers per writer small.
const putChunkMax = 256 << 10

// DefaultPutWindow is PutKey's window: pieces of one write in flight at once.
const DefaultPutWindow = 8

// KeyWrite is one write of PutMany: Src to Offset of the region Key names.
type KeyWrite struct {
	Key    *RegionKey
	Offset uint64
	Src    []byte
}

// PutKey writes src at offset of the region k names and returns once every byte is in the peer's
// memory, or with an error. On the direct path (hardware-keyed lanes, or RMADirect) it is
// ucp_put_nbx followed by ucp_ep_flush_nbx, which completes only when the write is complete at
// the target; on the guarded path the target's engine checks the key's slot, token, write access
// and range and copies the bytes before it answers. A key without write access and a range
// outside the region fail here, before anything is sent. If ctx ends first PutKey still returns
// only once src is no longer in UCX's hands; a write that failed or was abandoned may have
// written part of the range.
func (c *Conn) PutKey(ctx context.Context, src []byte, k *RegionKey, offset uint64) error {
	var err error
	c.PutMany(ctx, []KeyWrite{{Key: k, Offset: offset, Src: src}}, DefaultPutWindow, func(_ int, e error) { err = e })
	return err
}

// PutNotify writes src at offset of the region k names and then sends the active message id
// (header and parts, eager, as SendAM) on the same connection. The message is posted only after
// the write completed at the target (the guarded write's answer, or the flush on the direct
// path), so a handler of id on the peer that reads the range sees the new bytes. If the write
// fails, no message is sent. A message the engine would refuse (reserved id, above the eager
// limit) fails before anything is written.
func (c *Conn) PutNotify(ctx context.Context, src []byte, k *RegionKey, offset uint64, id uint16, header []byte, parts ...[]byte) error {
	if err := c.e.checkAM(id, header, parts); err != nil {
		return err
	}
	if err := c.PutKey(ctx, src, k, offset); err != nil {
		return fmt.Errorf("ucx: PutNotify: the write failed, no notification was sent: %w", err)
	}
	return c.SendAM(ctx, id, header, parts...)
}

// checkAM refuses what SendAMAsync would refuse, without sending.
func (e *Engine) checkAM(id uint16, header []byte, parts [][]byte) error {
	if id >= ReservedAMIDs {
		return fmt.Errorf("ucx: AM id %#x is reserved for the engine", id)
	}
	total := len(header)
	for _, p := range parts {
		total += len(p)
	}
	if total > e.cfg.MaxEagerSize {
		return fmt.Errorf("%w: %d bytes of header and payload exceed the eager limit of %d (EngineConfig.MaxEagerSize)", ErrMessageTooLarge, total, e.cfg.MaxEagerSize)
	}
	if len(header) > e.maxAMHeader {
		return fmt.Errorf("%w: AM header of %d bytes exceeds the worker's %d", ErrMessageTooLarge, len(header), e.maxAMHeader)
	}
	return nil
}

// PutMany writes every entry of writes into the peer's memory, with up to window requests in
// flight (at least one). done(i, err) is called once for every write, on the calling goroutine,
// once that write completed at the target (every byte in the peer's memory) or failed; one
// write's failure fails only that write. A write whose key lacks write access (ErrAccessDenied)
// or whose range lies outside its key's region (ErrOutOfRange) fails without being sent. On the
// guarded path a write is cut into pieces of up to 256 KiB, and the window counts pieces; the
// pieces of a write that failed are not sent. To a peer that answers them
// (ConnectOptions.VectoredPut), consecutive smaller writes go several to a request (up to 256
// KiB), each still checked and reported on its own, and the request counts once in the window. PutMany returns once no Src is in UCX's hands.
// When ctx ends, pieces not yet posted fail with ctx.Err() and pieces waiting for their answer
// are abandoned (their bytes may still land).
func (c *Conn) PutMany(ctx context.Context, writes []KeyWrite, window int, done func(i int, err error)) {
	if len(writes) == 0 {
		return
	}
	b := &putBatch{batch: newBatch(c, len(writes), window), writes: writes,
		pending: make([]int, len(writes)), errs: make([]error, len(writes))}
	b.chunk = min(putChunkMax, max(c.e.cfg.MaxEagerSize, 1))
	b.run(ctx, b, done)
}

// putBatch is one PutMany. Its fields are guarded by the engine's wmu.
type putBatch struct {
	batch
	writes  []KeyWrite
	chunk   int     // the largest guarded piece
	next    int     // the write the next piece comes from
	nextOff int     // where in it the next piece starts
	started bool    // the next write's first piece was cut (or it failed)
	pending []int   // pieces of each write posted and not finished
	errs    []error // each write's first failure
}

// fail ends write i with err once its posted pieces are done.
func (b *putBatch) fail(i int, err error) {
	if b.errs[i] == nil {
		b.errs[i] = err
	}
	if b.pending[i] == 0 {
		b.record(i, b.errs[i])
	}
}

// failRest fails the write being cut and every later one.
func (b *putBatch) failRest(err error) {
	for ; b.next < len(b.writes); b.next++ {
		b.fail(b.next, err)
		b.nextOff, b.started = 0, false
	}
}

// pump posts pieces until the window is full. It runs under wmu; a piece that finishes inside
// its post re-enters through finished, which leaves the posting to the loop here.
func (b *putBatch) pump() {
	if b.pumping {
		return
	}
	b.pumping = true
	defer func() { b.pumping = false }()
	c, e := b.c, b.c.e
	for len(b.inflight) < b.window && b.next < len(b.writes) && b.canceled == nil {
		if err := c.usable(); err != nil {
			b.failRest(err)
			return
		}
		i := b.next
		w := b.writes[i]
		if !b.started {
			if err := writeErr(w); err != nil {
				b.next++
				b.fail(i, err)
				continue
			}
			b.started = true
		}
		if b.errs[i] != nil {
			// An earlier piece failed: the rest of this write is not sent.
			b.next, b.nextOff, b.started = i+1, 0, false
			b.fail(i, b.errs[i])
			continue
		}
		direct := c.resolveRMA(e) == RMADirect
		if !direct && c.opts.VectoredPut && b.nextOff == 0 && len(w.Src) < b.chunk {
			// A small write, with the small writes after it, in one request (gather moves
			// b.next past them); alone if none follows.
			if idx := b.gather(); len(idx) > 1 {
				b.postVector(idx)
			} else {
				b.postPiece(i, 0, len(w.Src), false)
			}
			continue
		}
		n := len(w.Src) - b.nextOff
		if !direct {
			n = min(n, b.chunk)
		}
		off := b.nextOff
		b.nextOff += n
		if b.nextOff == len(w.Src) {
			b.next, b.nextOff, b.started = i+1, 0, false
		}
		b.postPiece(i, off, n, direct)
	}
}

// postPiece sends n bytes of write i from off: a guarded request, or on the direct path a put and
// a flush.
func (b *putBatch) postPiece(i, off, n int, direct bool) {
	c, e := b.c, b.c.e
	w := b.writes[i]
	op := &engineOp{kind: opPutGuarded, op: newOp(), conn: c, onFinish: b.finished, batchIdx: i}
	src := w.Src[off : off+n]
	if n > 0 {
		op.pin.Pin(&src[0])
	}
	b.inflight[op] = struct{}{}
	b.pending[i]++
	e.track(op)
	addr := w.Key.Base() + w.Offset + uint64(off)
	if direct {
		op.kind = opPutDirect
		b.postDirect(op, w.Key, addr, src)
	} else {
		e.putGuarded(op, w.Key.k, addr, src)
	}
}

// gather takes write b.next (checked, smaller than a piece) and the writes after it that fit one
// vectored request with it: each smaller than a piece, a piece's bytes in all, no more entries
// than the request carries. A write that fails its local check on the way fails here. It leaves
// b.next after the last write taken (or failed); the caller sends what it took, whatever the
// writes after it hold.
func (b *putBatch) gather() []int {
	idx := []int{b.next}
	bytes := len(b.writes[b.next].Src)
	j := b.next + 1
	for j < len(b.writes) && len(idx) < b.vector() {
		w := b.writes[j]
		if len(w.Src) >= b.chunk || bytes+len(w.Src) > b.chunk {
			break
		}
		if err := writeErr(w); err != nil {
			b.fail(j, err)
			j++
			continue
		}
		idx = append(idx, j)
		bytes += len(w.Src)
		j++
	}
	b.next, b.nextOff, b.started = j, 0, false
	return idx
}

// vector is how many writes one vectored request carries: what the target answers in one reply
// and what fits the worker's largest AM header.
func (b *putBatch) vector() int {
	v := capi.GuardPutVMax
	if h := (b.c.e.maxAMHeader - guardVReqLen) / guardVEntLen; h < v {
		v = max(h, 1)
	}
	return v
}

// postVector sends the writes idx names as one vectored guarded request, their bytes straight
// from the callers' buffers (an iov).
func (b *putBatch) postVector(idx []int) {
	c, e := b.c, b.c.e
	op := &engineOp{kind: opPutGuardedV, op: newOp(), conn: c, onFinish: b.finished, vidx: idx, verrs: make([]error, len(idx))}
	h := newGuardVRequest(len(idx))
	parts := make([][]byte, 0, len(idx))
	for j, i := range idx {
		w := b.writes[i]
		putGuardEntry(h, j, w.Key.k, w.Key.Base()+w.Offset, uint64(len(w.Src)))
		if len(w.Src) > 0 {
			op.pin.Pin(&w.Src[0])
			parts = append(parts, w.Src)
		}
		b.pending[i]++
	}
	b.inflight[op] = struct{}{}
	e.track(op)
	e.putGuardedV(op, h, parts)
}

// writeErr refuses a write that cannot succeed, before anything is sent.
func writeErr(w KeyWrite) error {
	k := w.Key
	if k == nil || k.raw == nil {
		return fmt.Errorf("%w: no key (use ParseRegionKey)", ErrInvalidRemoteKey)
	}
	if !k.Access().Has(AccessWrite) {
		return fmt.Errorf("%w: the key's registration grants %v, a write needs write access (register with AccessWrite)", ErrAccessDenied, k.Access())
	}
	return k.rangeErr(w.Offset, uint64(len(w.Src)))
}

// postDirect posts one write as ucp_put_nbx and a flush of the endpoint behind it: the op
// settles when the flush says the write is complete at the target.
func (b *putBatch) postDirect(op *engineOp, k *RegionKey, addr uint64, src []byte) {
	c, e := b.c, b.c.e
	rk, err := b.remoteKey(k)
	if err != nil {
		op.settle(err)
		op.tryFinish(e)
		return
	}
	req, err := c.ep.Put(src, addr, rk)
	e.started(op, req, err)
	if op.settled {
		return
	}
	op.flushing = true
	req, err = c.ep.Flush()
	e.started(op, req, err)
}

// putGuarded sends one guarded write request: the header names the registration (slot, token),
// the address and the length, and src follows it eagerly. op waits for the target's answer,
// which carries its id.
func (e *Engine) putGuarded(op *engineOp, k SealedKey, remoteAddr uint64, src []byte) {
	e.nextGetID++
	op.getID = e.nextGetID
	op.hdr = new([guardReqLen]byte)
	h := op.hdr[:]
	putGuardRequest(h, capi.GuardPutMagic, k, remoteAddr, uint64(len(src)), op.getID)
	op.pin.Pin(op.hdr)
	e.sendGuardRequest(op, guardPutReqID, h, src)
}

// putGuardedV sends one vectored guarded write request: the header (its entries filled in by
// the caller) gets its request id, and parts, the writes' bytes, follow it eagerly. op waits for
// the target's answer, a status per write.
func (e *Engine) putGuardedV(op *engineOp, h []byte, parts [][]byte) {
	e.nextGetID++
	op.getID = e.nextGetID
	putGuardVHeader(h, capi.GuardPutVMagic, len(op.vidx), op.getID)
	op.pin.Pin(&h[0])
	e.sendGuardRequest(op, guardPutVReqID, h, parts...)
}

// onGuardPutVReply handles the target's answer to a vectored guarded write: a status per write.
func (e *Engine) onGuardPutVReply(am *AMEvent) {
	op, r := e.vectorReply(am, capi.GuardPutVMagic, opPutGuardedV, "vectored guarded PUT")
	if op == nil {
		return
	}
	for j := range op.vidx {
		op.verrs[j] = putStatusErr(r.status(j))
	}
	op.settle(nil)
	op.tryFinish(e)
}

// finished runs under wmu when one piece (or one vectored request) finished: it settles its
// write once every posted piece of it is done, and refills the window.
func (b *putBatch) finished(op *engineOp) {
	delete(b.inflight, op)
	if op.kind == opPutGuardedV {
		for j, i := range op.vidx {
			b.pending[i]--
			err := op.result
			if err == nil {
				err = op.verrs[j]
			}
			if err != nil && b.errs[i] == nil {
				b.errs[i] = err
			}
			if b.pending[i] == 0 {
				b.record(i, b.errs[i])
			}
		}
		b.pump()
		return
	}
	i := op.batchIdx
	b.pending[i]--
	if op.result != nil && b.errs[i] == nil {
		b.errs[i] = op.result
	}
	cutting := b.next == i && b.started
	if b.pending[i] == 0 && (!cutting || b.errs[i] != nil) {
		if cutting {
			b.next, b.nextOff, b.started = i+1, 0, false
		}
		b.record(i, b.errs[i])
	}
	b.pump()
}

// onGuardPutReply handles the target's answer to a guarded write.
func (e *Engine) onGuardPutReply(am *AMEvent) {
	r, ok := parseGuardReply(am.Header, capi.GuardPutMagic)
	if !ok {
		e.metrics.amDropped.WithLabelValues("bad_guard_reply").Inc()
		return
	}
	op := e.gets[r.ID]
	if op == nil || op.kind != opPutGuarded {
		return // abandoned
	}
	op.unwait(e)
	op.settle(putStatusErr(r.Status))
	op.tryFinish(e)
}

// putStatusErr is the error of a guarded write the target answered with status.
func putStatusErr(status Status) error {
	switch status {
	case StatusOK:
		return nil
	case StatusRejected:
		return fmt.Errorf("%w (the target has no live registration for the key): %w", ErrRemoteKeyRevoked, status)
	case StatusUnsupported:
		return fmt.Errorf("%w (checked by the target: the registration is not writable): %w", ErrAccessDenied, status)
	case StatusInvalidAddr:
		return fmt.Errorf("%w (checked by the target): %w", ErrOutOfRange, status)
	case StatusNotConnected:
		return errNotHolder(status)
	case StatusMessageTruncated:
		return fmt.Errorf("ucx: the target refused the write request as malformed (a peer of another release?): %w", status)
	}
	return fmt.Errorf("ucx: guarded PUT refused by the target: %w", status)
}
