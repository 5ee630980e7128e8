package push

import (
	"encoding/hex"
	"fmt"

	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/transport"
)

// The push protocol's byte layouts live in velo/internal/wire (push.go there), with every other
// layout that crosses a process, and their fuzz targets beside them. This file keeps the public
// grant handle, which encodes through them, and the conversions between this package's ranges and
// the wire's.

// Range is a byte range of a receiver's region: Length bytes at Offset.
type Range struct {
	Offset uint64
	Length uint64
}

// End is the offset one past the range.
func (r Range) End() uint64 { return r.Offset + r.Length }

// contains reports whether [off, off+n) lies inside r.
func (r Range) contains(off, n uint64) bool {
	return off >= r.Offset && n <= r.Length && off-r.Offset <= r.Length-n
}

func (r Range) overlaps(o Range) bool { return r.Offset < o.End() && o.Offset < r.End() }

// MaxRanges bounds the ranges of one grant and of one notification.
const MaxRanges = wire.MaxGrantRanges

func toWire(rs []Range) []wire.GrantRange {
	out := make([]wire.GrantRange, len(rs))
	for i, r := range rs {
		out[i] = wire.GrantRange(r)
	}
	return out
}

func fromWire(rs []wire.GrantRange) []Range {
	out := make([]Range, len(rs))
	for i, r := range rs {
		out[i] = Range(r)
	}
	return out
}

// GrantHandle names one write grant. The receiver hands it to its writer (in a message, any way
// the application likes); it says who may write what and until when, and it is meaningless without
// the receiver: the key behind it is only given, by the receiver, to the writer it names, and the
// 128-bit nonce makes it unguessable.
type GrantHandle struct {
	Receiver transport.InstanceID
	Writer   transport.InstanceID
	ID       uint64
	Nonce    [16]byte
	// Expires is when the grant ends at the latest, in Unix milliseconds of the receiver's clock.
	Expires uint64
	// Ranges are the ranges of the receiver's region the writer may write, in the region's offsets.
	Ranges []Range
}

// IsZero reports whether h is the zero GrantHandle.
func (h GrantHandle) IsZero() bool { return h.ID == 0 && h.Receiver == 0 }

// MarshalBinary encodes h: a magic and version, the fields, the ranges and a CRC-32C.
func (h GrantHandle) MarshalBinary() ([]byte, error) {
	if len(h.Ranges) > MaxRanges {
		return nil, fmt.Errorf("push: %w: %d ranges (at most %d)", ErrBadGrant, len(h.Ranges), MaxRanges)
	}
	return wire.AppendGrantHandle(make([]byte, 0, wire.GrantHandleLen(len(h.Ranges))), wire.GrantHandle{
		Receiver: uint64(h.Receiver), Writer: uint64(h.Writer), ID: h.ID, Nonce: h.Nonce,
		Expires: h.Expires, Ranges: toWire(h.Ranges)})
}

// UnmarshalBinary decodes what MarshalBinary produced; anything else wraps ErrBadGrant.
func (h *GrantHandle) UnmarshalBinary(b []byte) error {
	g, err := wire.DecodeGrantHandle(b)
	if err != nil {
		return fmt.Errorf("push: %w: %w", ErrBadGrant, err)
	}
	*h = GrantHandle{Receiver: transport.InstanceID(g.Receiver), Writer: transport.InstanceID(g.Writer),
		ID: g.ID, Nonce: g.Nonce, Expires: g.Expires, Ranges: fromWire(g.Ranges)}
	return nil
}

// MarshalText encodes h as hex, so handles travel in JSON and on command lines.
func (h GrantHandle) MarshalText() ([]byte, error) {
	b, err := h.MarshalBinary()
	if err != nil {
		return nil, err
	}
	return []byte(hex.EncodeToString(b)), nil
}

// UnmarshalText decodes what MarshalText produced.
func (h *GrantHandle) UnmarshalText(s []byte) error {
	b, err := hex.DecodeString(string(s))
	if err != nil {
		return fmt.Errorf("push: %w: not hex: %v", ErrBadGrant, err)
	}
	return h.UnmarshalBinary(b)
}

// String is a short human-readable form (not parseable; use MarshalText).
func (h GrantHandle) String() string {
	return fmt.Sprintf("grant{receiver %016x, writer %016x, id %d, %d ranges}", uint64(h.Receiver), uint64(h.Writer), h.ID, len(h.Ranges))
}

// rangeOf returns the index of the grant range that holds [off, off+n), or -1.
func (h GrantHandle) rangeOf(off, n uint64) int {
	for i, r := range h.Ranges {
		if r.contains(off, n) {
			return i
		}
	}
	return -1
}
