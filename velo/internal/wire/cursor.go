package wire

import (
	"encoding/binary"
	"fmt"
)

// reader is a bounds-checked cursor over untrusted bytes. The first failure sticks: later reads
// return zero values, so a decoder can read every field and check err once at the end.
type reader struct {
	buf []byte
	off int
	err error
	ctx string // what is being decoded, for error text
}

func newReader(ctx string, b []byte) *reader { return &reader{buf: b, ctx: ctx} }

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s: %s", ErrMalformed, r.ctx, fmt.Sprintf(format, args...))
	}
}

func (r *reader) take(n int, field string) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || len(r.buf)-r.off < n {
		r.fail("%s needs %d bytes at offset %d, only %d left", field, n, r.off, len(r.buf)-r.off)
		return nil
	}
	b := r.buf[r.off : r.off+n : r.off+n]
	r.off += n
	return b
}

func (r *reader) u8(field string) uint8 {
	b := r.take(1, field)
	if b == nil {
		return 0
	}
	return b[0]
}

func (r *reader) u16(field string) uint16 {
	b := r.take(2, field)
	if b == nil {
		return 0
	}
	return binary.BigEndian.Uint16(b)
}

func (r *reader) u32(field string) uint32 {
	b := r.take(4, field)
	if b == nil {
		return 0
	}
	return binary.BigEndian.Uint32(b)
}

func (r *reader) u64(field string) uint64 {
	b := r.take(8, field)
	if b == nil {
		return 0
	}
	return binary.BigEndian.Uint64(b)
}

// bytes8/16 read a length of that width and then that many bytes. The length's field name is
// built only when it is missing: these run for every field of every entry of a batch answer.
func (r *reader) bytes8(field string) []byte {
	if r.err == nil && len(r.buf)-r.off < 1 {
		r.take(1, field+" length")
	}
	return r.take(int(r.u8("")), field)
}

func (r *reader) bytes16(field string) []byte {
	if r.err == nil && len(r.buf)-r.off < 2 {
		r.take(2, field+" length")
	}
	return r.take(int(r.u16("")), field)
}

func (r *reader) rest() []byte {
	if r.err != nil {
		return nil
	}
	b := r.buf[r.off:]
	r.off = len(r.buf)
	return b
}

// done reports the sticky error, or an error if bytes remain unread.
func (r *reader) done() error {
	if r.err == nil && r.off != len(r.buf) {
		r.fail("%d trailing bytes", len(r.buf)-r.off)
	}
	return r.err
}

// writer appends fields to a byte slice. Length overflows are programming errors of the caller
// (every caller checks its limits first), so they are reported, not truncated.
type writer struct {
	b   []byte
	err error
}

func (w *writer) u8(v uint8)   { w.b = append(w.b, v) }
func (w *writer) u16(v uint16) { w.b = binary.BigEndian.AppendUint16(w.b, v) }
func (w *writer) u32(v uint32) { w.b = binary.BigEndian.AppendUint32(w.b, v) }
func (w *writer) u64(v uint64) { w.b = binary.BigEndian.AppendUint64(w.b, v) }

func (w *writer) bytesN(field string, v []byte, max uint64, put func(uint64)) {
	if uint64(len(v)) > max {
		if w.err == nil {
			w.err = fmt.Errorf("wire: %s is %d bytes, the limit is %d", field, len(v), max)
		}
		return
	}
	put(uint64(len(v)))
	w.b = append(w.b, v...)
}

func (w *writer) bytes8(field string, v []byte) {
	w.bytesN(field, v, 0xff, func(n uint64) { w.u8(uint8(n)) })
}
func (w *writer) bytes16(field string, v []byte) {
	w.bytesN(field, v, 0xffff, func(n uint64) { w.u16(uint16(n)) })
}
