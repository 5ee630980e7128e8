// GetMany: many reads on one Conn, windowed, each completing on its own.

package ucx

import (
	"context"
	"fmt"

	"github.com/velo-go/velo/ucx/internal/capi"
)

// KeyRead is one read of GetMany: len(Dst) bytes at Offset of the region Key names.
type KeyRead struct {
	Key    *RegionKey
	Offset uint64
	Dst    []byte
	// DstMemory is the memory type of Dst (default MemoryHost), as GetOptions.DstMemory. A
	// read into or from memory other than host memory is posted on its own, never in a
	// vectored request.
	DstMemory MemoryType
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
	b := &getBatch{batch: newBatch(c, len(reads), window), reads: reads}
	b.run(ctx, b, done)
}

// getBatch is one GetMany. Its fields are guarded by the engine's wmu.
type getBatch struct {
	batch
	reads   []KeyRead
	next    int // the next read to post
	reading int // reads the requests in flight carry
}

// failRest fails every read not yet posted.
func (b *getBatch) failRest(err error) {
	for ; b.next < len(b.reads); b.next++ {
		b.record(b.next, err)
	}
}

// pump posts reads until the window is full. It runs under wmu; a post that completes inside
// the call re-enters through finished, which leaves the posting to the loop here. Where GETs are
// guarded, consecutive reads are posted together as one vectored request (half the window at
// most, and no more than the owner answers in one reply): one message each way for
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
			if err := rd.Key.readErr(rd.Offset, uint64(len(rd.Dst))); err != nil {
				b.next++
				b.record(i, err)
				continue
			}
			if err := checkMemory("GET destination", uintptr(bufPtr(rd.Dst)), len(rd.Dst), rd.DstMemory); err != nil {
				b.next++
				b.record(i, err)
				continue
			}
			// One vectored reply has one memory type: only host-to-host reads share one.
			alone := len(rd.Dst) > vectorReadMax || rd.DstMemory != MemoryHost || rd.Key.MemoryType() != MemoryHost
			if len(idx) > 0 && (alone || bytes+len(rd.Dst) > vectorBytesMax) {
				break // this one starts the next request
			}
			b.next++
			idx = append(idx, i)
			bytes += len(rd.Dst)
			if alone {
				break // a large read, or one of device memory, goes alone
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
// beside their bytes), and a request carries vectorBytesMax at most (half a window of 64 KiB
// reads at the default window).
const (
	vectorReadMax  = 256 << 10
	vectorBytesMax = 2 << 20
)

// vector is how many reads one vectored request may carry: half the window, so that two requests
// are in flight, one filling while the other's reply is read; at most what the owner's reply
// handles and what fits the worker's largest AM header. Each request costs a message and a
// handshake each way besides its bytes: over tcp, a batch of 64 KiB reads moved about a tenth
// faster in halves of the window than in quarters (docs/performance.md, "Small transfers").
func (b *getBatch) vector() int {
	v := min(max(b.window/2, 1), capi.GuardVMax)
	if h := (b.c.e.maxAMHeader - guardVReqLen) / guardVEntLen; h < v {
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
	op.dst, op.dstMem, op.batchIdx = rd.Dst, rd.DstMemory, i
	if len(rd.Dst) > 0 {
		op.pin.Pin(&rd.Dst[0])
	}
	b.reading++
	b.c.e.track(op)
	return op, rd
}

func (b *getBatch) postDirect(i int) {
	op, rd := b.newReadOp(opGetDirect, i)
	if rk, err := b.remoteKey(rd.Key); err == nil {
		op.rk, op.sharedRK = rk, true
	}
	b.c.e.getDirect(op, rd.Key.k, rd.Key.Base()+rd.Offset)
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
