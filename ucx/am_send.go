// Sending active messages on a Conn.

package ucx

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/velo-go/velo/ucx/internal/capi"
)

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
