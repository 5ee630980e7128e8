package wire

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// The push protocol's layouts (package push): the grant handle a receiver gives its writer, and
// the requests a writer sends under a grant — acquire, chunked write, notify, notified write — with
// their answers. Unlike the layouts written with the reader cursor, these decoders check lengths
// by hand before each read; like them, they never panic, refuse trailing bytes and wrap
// ErrMalformed, and what they accept encodes back to exactly the bytes read (one encoding per
// value), which the fuzz targets in push_test.go hold them to.

// GrantRange is a byte range of a receiver's region: Length bytes at Offset.
type GrantRange struct {
	Offset uint64
	Length uint64
}

// MaxGrantRanges bounds the ranges of one grant and of one notification.
const MaxGrantRanges = 1024

// MaxNotifyEntries bounds the notifications (and the notified writes) of one message.
const MaxNotifyEntries = 4096

func pushErrorf(format string, args ...any) error {
	return fmt.Errorf("%w: push: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

var errPushShort = pushErrorf("message too short")

var grantHandleMagic = [4]byte{'V', 'P', 'G', 1}

const grantHandleFixedLen = 4 + 8 + 8 + 8 + 16 + 8 + 2

// GrantHandle is the layout of push.GrantHandle: a magic and version, the receiver, the writer,
// the grant's id and nonce, its expiry in Unix milliseconds, the ranges, and a CRC-32C.
type GrantHandle struct {
	Receiver, Writer uint64
	ID               uint64
	Nonce            [16]byte
	Expires          uint64
	Ranges           []GrantRange
}

// AppendGrantHandle appends h's encoding to b.
func AppendGrantHandle(b []byte, h GrantHandle) ([]byte, error) {
	if len(h.Ranges) > MaxGrantRanges {
		return nil, fmt.Errorf("%d ranges (at most %d)", len(h.Ranges), MaxGrantRanges)
	}
	start := len(b)
	b = append(b, grantHandleMagic[:]...)
	b = binary.BigEndian.AppendUint64(b, h.Receiver)
	b = binary.BigEndian.AppendUint64(b, h.Writer)
	b = binary.BigEndian.AppendUint64(b, h.ID)
	b = append(b, h.Nonce[:]...)
	b = binary.BigEndian.AppendUint64(b, h.Expires)
	b = binary.BigEndian.AppendUint16(b, uint16(len(h.Ranges)))
	b = appendGrantRanges(b, h.Ranges)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli)), nil
}

// GrantHandleLen is the length of the encoding of a grant handle with n ranges.
func GrantHandleLen(n int) int { return grantHandleFixedLen + 16*n + 4 }

// DecodeGrantHandle decodes what AppendGrantHandle produced. A handle names a receiver, a
// writer, a grant and at least one range.
func DecodeGrantHandle(b []byte) (GrantHandle, error) {
	if len(b) < grantHandleFixedLen+4 {
		return GrantHandle{}, pushErrorf("%d bytes is shorter than a grant handle", len(b))
	}
	if [4]byte(b[:4]) != grantHandleMagic {
		return GrantHandle{}, pushErrorf("not a grant handle (magic %x); pass what GrantHandle.MarshalBinary or MarshalText wrote", b[:4])
	}
	body := b[:len(b)-4]
	if crc32.Checksum(body, castagnoli) != binary.BigEndian.Uint32(b[len(b)-4:]) {
		return GrantHandle{}, pushErrorf("grant handle checksum mismatch (a damaged or altered handle)")
	}
	var g GrantHandle
	g.Receiver = binary.BigEndian.Uint64(b[4:])
	g.Writer = binary.BigEndian.Uint64(b[12:])
	g.ID = binary.BigEndian.Uint64(b[20:])
	copy(g.Nonce[:], b[28:44])
	g.Expires = binary.BigEndian.Uint64(b[44:])
	n := int(binary.BigEndian.Uint16(b[52:]))
	rs, rest, err := decodeGrantRanges(body[grantHandleFixedLen:], n)
	if err != nil {
		return GrantHandle{}, err
	}
	if len(rest) != 0 {
		return GrantHandle{}, pushErrorf("grant handle: %d trailing bytes", len(rest))
	}
	if n == 0 || g.ID == 0 || g.Receiver == 0 || g.Writer == 0 {
		return GrantHandle{}, pushErrorf("a handle names a receiver, a writer, a grant and at least one range")
	}
	g.Ranges = rs
	return g, nil
}

func appendGrantRanges(b []byte, rs []GrantRange) []byte {
	for _, r := range rs {
		b = binary.BigEndian.AppendUint64(b, r.Offset)
		b = binary.BigEndian.AppendUint64(b, r.Length)
	}
	return b
}

func decodeGrantRanges(b []byte, n int) ([]GrantRange, []byte, error) {
	if n > MaxGrantRanges {
		return nil, nil, pushErrorf("%d ranges (at most %d)", n, MaxGrantRanges)
	}
	if len(b) < 16*n {
		return nil, nil, pushErrorf("message too short: %d ranges in %d bytes", n, len(b))
	}
	rs := make([]GrantRange, n)
	for i := range rs {
		rs[i] = GrantRange{Offset: binary.BigEndian.Uint64(b[16*i:]), Length: binary.BigEndian.Uint64(b[16*i+8:])}
		if rs[i].Length == 0 || rs[i].Offset+rs[i].Length < rs[i].Offset {
			return nil, nil, pushErrorf("range %d [%d, +%d) is empty or wraps", i, rs[i].Offset, rs[i].Length)
		}
	}
	return rs, b[16*n:], nil
}

// GrantRef is what every request after the grant names: the grant and its nonce.
type GrantRef struct {
	ID    uint64
	Nonce [16]byte
}

// GrantRefLen is the length of a GrantRef's encoding.
const GrantRefLen = 24

// AppendGrantRef appends r's encoding to b.
func AppendGrantRef(b []byte, r GrantRef) []byte {
	b = binary.BigEndian.AppendUint64(b, r.ID)
	return append(b, r.Nonce[:]...)
}

func decodeGrantRef(b []byte) (GrantRef, []byte, error) {
	if len(b) < GrantRefLen {
		return GrantRef{}, nil, errPushShort
	}
	var r GrantRef
	r.ID = binary.BigEndian.Uint64(b)
	copy(r.Nonce[:], b[8:24])
	return r, b[GrantRefLen:], nil
}

// PushAcquire is a writer's acquire request: the grant, and whether the writer can write by
// RDMA to this receiver.
type PushAcquire struct {
	Ref   GrantRef
	Offer bool
}

// AppendPushAcquire appends a's encoding to b.
func AppendPushAcquire(b []byte, a PushAcquire) []byte {
	b = AppendGrantRef(b, a.Ref)
	if a.Offer {
		return append(b, 1)
	}
	return append(b, 0)
}

// DecodePushAcquire decodes an acquire request.
func DecodePushAcquire(b []byte) (PushAcquire, error) {
	ref, rest, err := decodeGrantRef(b)
	if err != nil {
		return PushAcquire{}, err
	}
	if len(rest) != 1 || rest[0] > 1 {
		return PushAcquire{}, pushErrorf("acquire: want one offer byte of 0 or 1, have %d bytes", len(rest))
	}
	return PushAcquire{Ref: ref, Offer: rest[0] == 1}, nil
}

// PushAcquireResponse is the receiver's answer to an acquire: the path it chose and why, the
// largest chunk it takes on the chunked path, the grant's time left, and on the RDMA path one key
// per grant range, in order.
type PushAcquireResponse struct {
	RDMA      bool
	Reason    string
	ChunkSize uint32
	TTLMillis uint64
	Keys      [][]byte
}

// AppendPushAcquireResponse appends a's encoding to b.
func AppendPushAcquireResponse(b []byte, a PushAcquireResponse) ([]byte, error) {
	if len(a.Reason) > 255 || len(a.Keys) > MaxGrantRanges {
		return nil, pushErrorf("acquire response: reason or key count too large")
	}
	if a.RDMA {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	b = append(b, byte(len(a.Reason)))
	b = append(b, a.Reason...)
	b = binary.BigEndian.AppendUint32(b, a.ChunkSize)
	b = binary.BigEndian.AppendUint64(b, a.TTLMillis)
	b = binary.BigEndian.AppendUint16(b, uint16(len(a.Keys)))
	for _, k := range a.Keys {
		if len(k) > 0xffff {
			return nil, pushErrorf("acquire response: key too large")
		}
		b = binary.BigEndian.AppendUint16(b, uint16(len(k)))
		b = append(b, k...)
	}
	return b, nil
}

// DecodePushAcquireResponse decodes an acquire response; the keys are copies.
func DecodePushAcquireResponse(b []byte) (PushAcquireResponse, error) {
	var a PushAcquireResponse
	if len(b) < 2 || b[0] > 1 {
		return a, errPushShort
	}
	a.RDMA = b[0] == 1
	n := int(b[1])
	b = b[2:]
	if len(b) < n+4+8+2 {
		return a, errPushShort
	}
	a.Reason = string(b[:n])
	b = b[n:]
	a.ChunkSize = binary.BigEndian.Uint32(b)
	a.TTLMillis = binary.BigEndian.Uint64(b[4:])
	nk := int(binary.BigEndian.Uint16(b[12:]))
	b = b[14:]
	if nk > MaxGrantRanges {
		return a, pushErrorf("%d keys (at most %d)", nk, MaxGrantRanges)
	}
	for range nk {
		if len(b) < 2 {
			return a, errPushShort
		}
		kl := int(binary.BigEndian.Uint16(b))
		if len(b) < 2+kl {
			return a, errPushShort
		}
		a.Keys = append(a.Keys, append([]byte(nil), b[2:2+kl]...))
		b = b[2+kl:]
	}
	if len(b) != 0 {
		return a, pushErrorf("acquire response: %d trailing bytes", len(b))
	}
	if a.RDMA && nk == 0 {
		return a, pushErrorf("an RDMA answer without keys")
	}
	return a, nil
}

// PushWrite is a chunked write's header: the grant and the region offset of the bytes after it.
type PushWrite struct {
	Ref    GrantRef
	Offset uint64
}

// PushWriteLen is the length of a chunked write's header.
const PushWriteLen = GrantRefLen + 8

// AppendPushWrite appends w's encoding to b.
func AppendPushWrite(b []byte, w PushWrite) []byte {
	return binary.BigEndian.AppendUint64(AppendGrantRef(b, w.Ref), w.Offset)
}

// DecodePushWrite decodes a chunked write's header and returns the bytes after it.
func DecodePushWrite(b []byte) (PushWrite, []byte, error) {
	ref, rest, err := decodeGrantRef(b)
	if err != nil || len(rest) < 8 {
		return PushWrite{}, nil, errPushShort
	}
	return PushWrite{Ref: ref, Offset: binary.BigEndian.Uint64(rest)}, rest[8:], nil
}

// NotifyEntry is one notification: the ranges it covers and its payload.
type NotifyEntry struct {
	Ranges  []GrantRange
	Payload []byte
}

// Notify carries the notifications of one grant, in the order they are delivered.
type Notify struct {
	Ref     GrantRef
	Entries []NotifyEntry
}

// AppendNotify appends m's encoding to b.
func AppendNotify(b []byte, m Notify) ([]byte, error) {
	if len(m.Entries) > MaxNotifyEntries {
		return nil, pushErrorf("notify: too many entries")
	}
	b = AppendGrantRef(b, m.Ref)
	b = binary.BigEndian.AppendUint16(b, uint16(len(m.Entries)))
	for _, e := range m.Entries {
		if len(e.Ranges) > MaxGrantRanges {
			return nil, pushErrorf("notify: too many ranges")
		}
		b = binary.BigEndian.AppendUint16(b, uint16(len(e.Ranges)))
		b = appendGrantRanges(b, e.Ranges)
		b = binary.BigEndian.AppendUint32(b, uint32(len(e.Payload)))
		b = append(b, e.Payload...)
	}
	return b, nil
}

// decodeNotes reads the start every message of notes has: the grant and the count of entries.
func decodeNotes(b []byte, what string) (GrantRef, int, []byte, error) {
	ref, b, err := decodeGrantRef(b)
	if err != nil || len(b) < 2 {
		return ref, 0, nil, errPushShort
	}
	n := int(binary.BigEndian.Uint16(b))
	if n == 0 || n > MaxNotifyEntries {
		return ref, 0, nil, pushErrorf("%d %s (1 to %d)", n, what, MaxNotifyEntries)
	}
	return ref, n, b[2:], nil
}

// DecodeNotify decodes a notify message; the payloads are copies.
func DecodeNotify(b []byte) (Notify, error) {
	var m Notify
	ref, n, b, err := decodeNotes(b, "notifications")
	if err != nil {
		return m, err
	}
	m.Ref = ref
	for range n {
		if len(b) < 2 {
			return m, errPushShort
		}
		nr := int(binary.BigEndian.Uint16(b))
		rs, rest, err := decodeGrantRanges(b[2:], nr)
		if err != nil {
			return m, err
		}
		if len(rest) < 4 {
			return m, errPushShort
		}
		pl := binary.BigEndian.Uint32(rest)
		if uint64(len(rest)-4) < uint64(pl) {
			return m, errPushShort
		}
		m.Entries = append(m.Entries, NotifyEntry{Ranges: rs, Payload: append([]byte(nil), rest[4:4+pl]...)})
		b = rest[4+pl:]
	}
	if len(b) != 0 {
		return m, pushErrorf("notify: %d trailing bytes", len(b))
	}
	return m, nil
}

// The answer to a notify or notified-write message: a code per entry, in order.
const (
	NotifyOK    byte = 0
	NotifyEnded byte = 1 // the grant ended before the notification was delivered
	NotifyRange byte = 2 // a range outside the grant
	NotifyCopy  byte = 3 // a notified write's bytes could not be copied in (device memory)
)

// DecodeNotifyAnswer checks an answer to a message of n entries: one code each.
func DecodeNotifyAnswer(b []byte, n int) ([]byte, error) {
	if len(b) != n {
		return nil, pushErrorf("notify answer: %d codes for %d notifications", len(b), n)
	}
	return b, nil
}

// NoteWrite is a small put that travels inside its own notification: where the bytes go, the
// notification's payload, and the bytes.
type NoteWrite struct {
	Offset  uint64
	Payload []byte
	Data    []byte
}

// NoteWrites carries the notified small puts of one grant, in the order they are delivered.
type NoteWrites struct {
	Ref     GrantRef
	Entries []NoteWrite
}

// NoteWriteEntryLen is an entry's fixed part: offset, payload length, data length.
const NoteWriteEntryLen = 8 + 4 + 4

// Size is the length of m's encoding.
func (m NoteWrites) Size() int {
	n := GrantRefLen + 2
	for _, e := range m.Entries {
		n += NoteWriteEntryLen + len(e.Payload) + len(e.Data)
	}
	return n
}

// AppendNoteWrites appends m's encoding to b.
func AppendNoteWrites(b []byte, m NoteWrites) ([]byte, error) {
	if len(m.Entries) == 0 || len(m.Entries) > MaxNotifyEntries {
		return nil, pushErrorf("notified write: %d entries (1 to %d)", len(m.Entries), MaxNotifyEntries)
	}
	b = AppendGrantRef(b, m.Ref)
	b = binary.BigEndian.AppendUint16(b, uint16(len(m.Entries)))
	for _, e := range m.Entries {
		if len(e.Data) == 0 || uint64(len(e.Data)) > 0xffffffff || uint64(len(e.Payload)) > 0xffffffff {
			return nil, pushErrorf("notified write: an entry's data is empty or too large")
		}
		b = binary.BigEndian.AppendUint64(b, e.Offset)
		b = binary.BigEndian.AppendUint32(b, uint32(len(e.Payload)))
		b = binary.BigEndian.AppendUint32(b, uint32(len(e.Data)))
		b = append(b, e.Payload...)
		b = append(b, e.Data...)
	}
	return b, nil
}

// DecodeNoteWrites decodes a notified-write message. Payloads are copies (a notification
// outlives the message); Data aliases b, which the receiver copies into the region before its
// handler returns.
func DecodeNoteWrites(b []byte) (NoteWrites, error) {
	var m NoteWrites
	ref, n, b, err := decodeNotes(b, "notified writes")
	if err != nil {
		return m, err
	}
	m.Ref = ref
	for range n {
		if len(b) < NoteWriteEntryLen {
			return m, errPushShort
		}
		off := binary.BigEndian.Uint64(b)
		pl := uint64(binary.BigEndian.Uint32(b[8:]))
		dl := uint64(binary.BigEndian.Uint32(b[12:]))
		b = b[NoteWriteEntryLen:]
		if dl == 0 {
			return m, pushErrorf("a notified write of no bytes")
		}
		if uint64(len(b)) < pl+dl {
			return m, errPushShort
		}
		m.Entries = append(m.Entries, NoteWrite{Offset: off, Payload: append([]byte(nil), b[:pl]...), Data: b[pl : pl+dl]})
		b = b[pl+dl:]
	}
	if len(b) != 0 {
		return m, pushErrorf("notified writes: %d trailing bytes", len(b))
	}
	return m, nil
}
