package push

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/velo-go/velo/velo/transport"
)

// The push protocol's byte layouts, big-endian like the rest of velo's wire. Every decoder checks
// lengths before it reads and refuses trailing bytes; the fuzz tests hold them to that.

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
const MaxRanges = 1024

var handleMagic = [4]byte{'V', 'P', 'G', 1}

const handleFixedLen = 4 + 8 + 8 + 8 + 16 + 8 + 2

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

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
	b := make([]byte, 0, handleFixedLen+16*len(h.Ranges)+4)
	b = append(b, handleMagic[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(h.Receiver))
	b = binary.BigEndian.AppendUint64(b, uint64(h.Writer))
	b = binary.BigEndian.AppendUint64(b, h.ID)
	b = append(b, h.Nonce[:]...)
	b = binary.BigEndian.AppendUint64(b, h.Expires)
	b = binary.BigEndian.AppendUint16(b, uint16(len(h.Ranges)))
	b = appendRanges(b, h.Ranges)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli)), nil
}

// UnmarshalBinary decodes what MarshalBinary produced; anything else wraps ErrBadGrant.
func (h *GrantHandle) UnmarshalBinary(b []byte) error {
	if len(b) < handleFixedLen+4 {
		return fmt.Errorf("push: %w: %d bytes is shorter than a grant handle", ErrBadGrant, len(b))
	}
	if [4]byte(b[:4]) != handleMagic {
		return fmt.Errorf("push: %w: not a grant handle (magic %x); pass what GrantHandle.MarshalBinary or MarshalText wrote", ErrBadGrant, b[:4])
	}
	body := b[:len(b)-4]
	if crc32.Checksum(body, castagnoli) != binary.BigEndian.Uint32(b[len(b)-4:]) {
		return fmt.Errorf("push: %w: checksum mismatch (a damaged or altered handle)", ErrBadGrant)
	}
	var g GrantHandle
	g.Receiver = transport.InstanceID(binary.BigEndian.Uint64(b[4:]))
	g.Writer = transport.InstanceID(binary.BigEndian.Uint64(b[12:]))
	g.ID = binary.BigEndian.Uint64(b[20:])
	copy(g.Nonce[:], b[28:44])
	g.Expires = binary.BigEndian.Uint64(b[44:])
	n := int(binary.BigEndian.Uint16(b[52:]))
	rs, rest, err := decodeRanges(body[handleFixedLen:], n)
	if err != nil {
		return fmt.Errorf("push: %w: %w", ErrBadGrant, err)
	}
	if len(rest) != 0 {
		return fmt.Errorf("push: %w: %d trailing bytes", ErrBadGrant, len(rest))
	}
	if n == 0 || g.ID == 0 || g.Receiver == 0 || g.Writer == 0 {
		return fmt.Errorf("push: %w: a handle names a receiver, a writer, a grant and at least one range", ErrBadGrant)
	}
	g.Ranges = rs
	*h = g
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

func appendRanges(b []byte, rs []Range) []byte {
	for _, r := range rs {
		b = binary.BigEndian.AppendUint64(b, r.Offset)
		b = binary.BigEndian.AppendUint64(b, r.Length)
	}
	return b
}

var errShort = errors.New("message too short")

func decodeRanges(b []byte, n int) ([]Range, []byte, error) {
	if n > MaxRanges {
		return nil, nil, fmt.Errorf("%d ranges (at most %d)", n, MaxRanges)
	}
	if len(b) < 16*n {
		return nil, nil, fmt.Errorf("%w: %d ranges in %d bytes", errShort, n, len(b))
	}
	rs := make([]Range, n)
	for i := range rs {
		rs[i] = Range{Offset: binary.BigEndian.Uint64(b[16*i:]), Length: binary.BigEndian.Uint64(b[16*i+8:])}
		if rs[i].Length == 0 || rs[i].Offset+rs[i].Length < rs[i].Offset {
			return nil, nil, fmt.Errorf("range %d [%d, +%d) is empty or wraps", i, rs[i].Offset, rs[i].Length)
		}
	}
	return rs, b[16*n:], nil
}

// grantRef is what every request after the grant names: the grant and its nonce.
type grantRef struct {
	ID    uint64
	Nonce [16]byte
}

const refLen = 24

func (r grantRef) append(b []byte) []byte {
	b = binary.BigEndian.AppendUint64(b, r.ID)
	return append(b, r.Nonce[:]...)
}

func decodeRef(b []byte) (grantRef, []byte, error) {
	if len(b) < refLen {
		return grantRef{}, nil, errShort
	}
	var r grantRef
	r.ID = binary.BigEndian.Uint64(b)
	copy(r.Nonce[:], b[8:24])
	return r, b[refLen:], nil
}

// acquireRequest: the grant, and whether the writer can write by RDMA to this receiver.
type acquireRequest struct {
	Ref   grantRef
	Offer bool
}

func (a acquireRequest) append(b []byte) []byte {
	b = a.Ref.append(b)
	if a.Offer {
		return append(b, 1)
	}
	return append(b, 0)
}

func decodeAcquireRequest(b []byte) (acquireRequest, error) {
	ref, rest, err := decodeRef(b)
	if err != nil {
		return acquireRequest{}, err
	}
	if len(rest) != 1 || rest[0] > 1 {
		return acquireRequest{}, fmt.Errorf("acquire: want one offer byte of 0 or 1, have %d bytes", len(rest))
	}
	return acquireRequest{Ref: ref, Offer: rest[0] == 1}, nil
}

// acquireResponse: the path the receiver chose and why, the largest chunk it takes on the chunked
// path, the grant's time left, and on the RDMA path one key per grant range, in order.
type acquireResponse struct {
	RDMA      bool
	Reason    string
	ChunkSize uint32
	TTLMillis uint64
	Keys      [][]byte
}

func (a acquireResponse) append(b []byte) ([]byte, error) {
	if len(a.Reason) > 255 || len(a.Keys) > MaxRanges {
		return nil, errors.New("acquire response: reason or key count too large")
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
			return nil, errors.New("acquire response: key too large")
		}
		b = binary.BigEndian.AppendUint16(b, uint16(len(k)))
		b = append(b, k...)
	}
	return b, nil
}

func decodeAcquireResponse(b []byte) (acquireResponse, error) {
	var a acquireResponse
	if len(b) < 2 || b[0] > 1 {
		return a, errShort
	}
	a.RDMA = b[0] == 1
	n := int(b[1])
	b = b[2:]
	if len(b) < n+4+8+2 {
		return a, errShort
	}
	a.Reason = string(b[:n])
	b = b[n:]
	a.ChunkSize = binary.BigEndian.Uint32(b)
	a.TTLMillis = binary.BigEndian.Uint64(b[4:])
	nk := int(binary.BigEndian.Uint16(b[12:]))
	b = b[14:]
	if nk > MaxRanges {
		return a, fmt.Errorf("%d keys (at most %d)", nk, MaxRanges)
	}
	for range nk {
		if len(b) < 2 {
			return a, errShort
		}
		kl := int(binary.BigEndian.Uint16(b))
		if len(b) < 2+kl {
			return a, errShort
		}
		a.Keys = append(a.Keys, append([]byte(nil), b[2:2+kl]...))
		b = b[2+kl:]
	}
	if len(b) != 0 {
		return a, fmt.Errorf("%d trailing bytes", len(b))
	}
	if a.RDMA && nk == 0 {
		return a, errors.New("an RDMA answer without keys")
	}
	return a, nil
}

// writeHeader is a chunked write's header: the grant and the region offset of the bytes after it.
type writeHeader struct {
	Ref    grantRef
	Offset uint64
}

const writeHeaderLen = refLen + 8

func (w writeHeader) append(b []byte) []byte {
	return binary.BigEndian.AppendUint64(w.Ref.append(b), w.Offset)
}

func decodeWrite(b []byte) (writeHeader, []byte, error) {
	ref, rest, err := decodeRef(b)
	if err != nil || len(rest) < 8 {
		return writeHeader{}, nil, errShort
	}
	return writeHeader{Ref: ref, Offset: binary.BigEndian.Uint64(rest)}, rest[8:], nil
}

// notifyEntry is one notification: the ranges it covers and its payload.
type notifyEntry struct {
	Ranges  []Range
	Payload []byte
}

// notifyMessage carries the notifications of one grant, in the order they are delivered.
type notifyMessage struct {
	Ref     grantRef
	Entries []notifyEntry
}

// maxNotifyEntries bounds the notifications of one message.
const maxNotifyEntries = 4096

func (m notifyMessage) append(b []byte) ([]byte, error) {
	if len(m.Entries) > maxNotifyEntries {
		return nil, errors.New("notify: too many entries")
	}
	b = m.Ref.append(b)
	b = binary.BigEndian.AppendUint16(b, uint16(len(m.Entries)))
	for _, e := range m.Entries {
		if len(e.Ranges) > MaxRanges {
			return nil, errors.New("notify: too many ranges")
		}
		b = binary.BigEndian.AppendUint16(b, uint16(len(e.Ranges)))
		b = appendRanges(b, e.Ranges)
		b = binary.BigEndian.AppendUint32(b, uint32(len(e.Payload)))
		b = append(b, e.Payload...)
	}
	return b, nil
}

// decodeNotes reads the start every message of notes has: the grant and the count of entries.
func decodeNotes(b []byte, what string) (grantRef, int, []byte, error) {
	ref, b, err := decodeRef(b)
	if err != nil || len(b) < 2 {
		return ref, 0, nil, errShort
	}
	n := int(binary.BigEndian.Uint16(b))
	if n == 0 || n > maxNotifyEntries {
		return ref, 0, nil, fmt.Errorf("%d %s (1 to %d)", n, what, maxNotifyEntries)
	}
	return ref, n, b[2:], nil
}

func decodeNotify(b []byte) (notifyMessage, error) {
	var m notifyMessage
	ref, n, b, err := decodeNotes(b, "notifications")
	if err != nil {
		return m, err
	}
	m.Ref = ref
	for range n {
		if len(b) < 2 {
			return m, errShort
		}
		nr := int(binary.BigEndian.Uint16(b))
		rs, rest, err := decodeRanges(b[2:], nr)
		if err != nil {
			return m, err
		}
		if len(rest) < 4 {
			return m, errShort
		}
		pl := binary.BigEndian.Uint32(rest)
		if uint64(len(rest)-4) < uint64(pl) {
			return m, errShort
		}
		m.Entries = append(m.Entries, notifyEntry{Ranges: rs, Payload: append([]byte(nil), rest[4:4+pl]...)})
		b = rest[4+pl:]
	}
	if len(b) != 0 {
		return m, fmt.Errorf("%d trailing bytes", len(b))
	}
	return m, nil
}

// Per-notification answers: a code each, in order.
const (
	notifyOK    byte = 0
	notifyEnded byte = 1 // the grant ended before the notification was delivered
	notifyRange byte = 2 // a range outside the grant
	notifyCopy  byte = 3 // a notified write's bytes could not be copied in (device memory)
)

func decodeNotifyAnswer(b []byte, n int) ([]byte, error) {
	if len(b) != n {
		return nil, fmt.Errorf("notify answer: %d codes for %d notifications", len(b), n)
	}
	return b, nil
}

// noteWrite is a small put that travels inside its own notification: where the bytes go, the
// notification's payload, and the bytes. The receiver copies the bytes into the range and then
// delivers the notification, in one handler, so one message does what a write and a notification
// behind it do in two round trips.
type noteWrite struct {
	Offset  uint64
	Payload []byte
	Data    []byte
}

// noteWriteMessage carries the notified small puts of one grant, in the order they are delivered.
type noteWriteMessage struct {
	Ref     grantRef
	Entries []noteWrite
}

// noteWriteEntryLen is an entry's fixed part: offset, payload length, data length.
const noteWriteEntryLen = 8 + 4 + 4

func (m noteWriteMessage) size() int {
	n := refLen + 2
	for _, e := range m.Entries {
		n += noteWriteEntryLen + len(e.Payload) + len(e.Data)
	}
	return n
}

func (m noteWriteMessage) append(b []byte) ([]byte, error) {
	if len(m.Entries) == 0 || len(m.Entries) > maxNotifyEntries {
		return nil, fmt.Errorf("notified write: %d entries (1 to %d)", len(m.Entries), maxNotifyEntries)
	}
	b = m.Ref.append(b)
	b = binary.BigEndian.AppendUint16(b, uint16(len(m.Entries)))
	for _, e := range m.Entries {
		if len(e.Data) == 0 || uint64(len(e.Data)) > 0xffffffff || uint64(len(e.Payload)) > 0xffffffff {
			return nil, errors.New("notified write: an entry's data is empty or too large")
		}
		b = binary.BigEndian.AppendUint64(b, e.Offset)
		b = binary.BigEndian.AppendUint32(b, uint32(len(e.Payload)))
		b = binary.BigEndian.AppendUint32(b, uint32(len(e.Data)))
		b = append(b, e.Payload...)
		b = append(b, e.Data...)
	}
	return b, nil
}

// decodeNoteWrites reads a noteWriteMessage. Payloads are copied (a notification outlives the
// message); Data points into b, which the handler copies into the region before it returns.
func decodeNoteWrites(b []byte) (noteWriteMessage, error) {
	var m noteWriteMessage
	ref, n, b, err := decodeNotes(b, "notified writes")
	if err != nil {
		return m, err
	}
	m.Ref = ref
	for range n {
		if len(b) < noteWriteEntryLen {
			return m, errShort
		}
		off := binary.BigEndian.Uint64(b)
		pl := uint64(binary.BigEndian.Uint32(b[8:]))
		dl := uint64(binary.BigEndian.Uint32(b[12:]))
		b = b[noteWriteEntryLen:]
		if dl == 0 {
			return m, errors.New("a notified write of no bytes")
		}
		if uint64(len(b)) < pl+dl {
			return m, errShort
		}
		m.Entries = append(m.Entries, noteWrite{Offset: off, Payload: append([]byte(nil), b[:pl]...), Data: b[pl : pl+dl]})
		b = b[pl+dl:]
	}
	if len(b) != 0 {
		return m, fmt.Errorf("%d trailing bytes", len(b))
	}
	return m, nil
}
