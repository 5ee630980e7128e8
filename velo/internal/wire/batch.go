package wire

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// The batched acquire: one request takes leases on many handles of one owner, one answer says,
// entry by entry, either the lease (an AcquireResponse) or why not (the error's kind and text).
// A consumer that fetches many blocks asks for their descriptors together instead of paying a
// round trip per block before its reads can start.

// AcquireBatchVersion is the version byte of both batch messages.
const AcquireBatchVersion = 1

// AcquireBatchInlineVersion is the version byte of a request that asks for small payloads inside
// the answer (AcquireBatchRequest.InlineMax): version 1 with the limit after the offer. It travels
// under a message name of its own, so that an owner of an earlier release answers it as an
// unknown handler instead of as a malformed request.
const AcquireBatchInlineVersion = 2

// MaxInlinePayload bounds one entry's inline payload (and so what InlineMax may ask for).
const MaxInlinePayload = 64 << 10

// MaxAcquireBatch bounds the entries of one batch message (a count field of 16 bits, and a
// bound on what one request may make an owner do).
const MaxAcquireBatch = 4096

// AcquireBatchRequest asks for a lease on each handle; the one offer (empty for none) applies to
// every entry.
type AcquireBatchRequest struct {
	Offer []byte
	// InlineMax asks the owner to send each payload of at most this many bytes inside its entry
	// of the answer (AcquireBatchEntry.Inline); 0 asks for none.
	InlineMax uint32
	Handles   []Handle
}

// AppendAcquireBatchRequest appends a's encoding to b.
func AppendAcquireBatchRequest(b []byte, a AcquireBatchRequest) ([]byte, error) {
	if len(a.Handles) == 0 || len(a.Handles) > MaxAcquireBatch {
		return b, fmt.Errorf("%w: an acquire batch of %d handles (1 to %d)", ErrMalformed, len(a.Handles), MaxAcquireBatch)
	}
	if a.InlineMax > MaxInlinePayload {
		return b, fmt.Errorf("%w: an inline limit of %d bytes (at most %d)", ErrMalformed, a.InlineMax, MaxInlinePayload)
	}
	version := uint8(AcquireBatchVersion)
	if a.InlineMax > 0 {
		version = AcquireBatchInlineVersion
	}
	// Grown once: a part of a batch carries up to a thousand handles.
	b = slices.Grow(b, 1+2+len(a.Offer)+4+2+len(a.Handles)*HandleLen)
	w := writer{b: append(b, version)}
	w.bytes16("offer", a.Offer)
	if a.InlineMax > 0 {
		w.u32(a.InlineMax)
	}
	w.u16(uint16(len(a.Handles)))
	for _, h := range a.Handles {
		w.b = AppendHandle(w.b, h)
	}
	return w.b, w.err
}

// DecodeAcquireBatchRequest decodes an acquire batch request.
func DecodeAcquireBatchRequest(b []byte) (AcquireBatchRequest, error) {
	r := newReader("acquire batch request", b)
	v := r.u8("version")
	if r.err == nil && v != AcquireBatchVersion && v != AcquireBatchInlineVersion {
		return AcquireBatchRequest{}, fmt.Errorf("%w: %w: acquire batch version %d (this build speaks %d and %d)", ErrMalformed, ErrVersion, v, AcquireBatchVersion, AcquireBatchInlineVersion)
	}
	a := AcquireBatchRequest{Offer: r.bytes16("offer")}
	if v == AcquireBatchInlineVersion {
		// Zero travels as version 1, so that each request has one encoding.
		if a.InlineMax = r.u32("inline max"); r.err == nil && (a.InlineMax == 0 || a.InlineMax > MaxInlinePayload) {
			r.fail("inline limit %d (1 to %d)", a.InlineMax, MaxInlinePayload)
		}
	}
	n := int(r.u16("count"))
	if r.err == nil && (n == 0 || n > MaxAcquireBatch) {
		r.fail("%d entries (1 to %d)", n, MaxAcquireBatch)
	}
	if r.err == nil && len(r.buf)-r.off < n*HandleLen {
		r.fail("%d handles need %d bytes, %d left", n, n*HandleLen, len(r.buf)-r.off)
	}
	if r.err == nil {
		a.Handles = make([]Handle, n)
		for i := range a.Handles {
			a.Handles[i] = readHandle(r)
		}
	}
	if err := r.done(); err != nil {
		return AcquireBatchRequest{}, err
	}
	return a, nil
}

// EntryError is why one entry of a batch answer failed: the kind its error's sentinel travels
// under (as in a remote error) and the owner's text. It is zero for an entry that succeeded.
type EntryError struct {
	ErrKind string
	ErrText string
}

// Failed reports whether the entry carries an error.
func (e EntryError) Failed() bool { return e.ErrKind != "" || e.ErrText != "" }

// AcquireBatchEntry is one entry of the answer: Response when the lease was granted, else why not.
// Inline, when not nil, is the whole payload (Response.Size bytes, path "inline"), sent by an
// owner asked for it (AcquireBatchRequest.InlineMax).
type AcquireBatchEntry struct {
	Response AcquireResponse
	Inline   []byte
	EntryError
}

// AppendAcquireBatchResponse appends the entries' encoding to b, in request order.
func AppendAcquireBatchResponse(b []byte, entries []AcquireBatchEntry) ([]byte, error) {
	parts, err := AcquireBatchResponseParts(entries, nil)
	if err != nil {
		return b, err
	}
	for _, p := range parts {
		b = append(b, p...)
	}
	return b, nil
}

// PartsBuffer is the memory answers in parts are encoded in, kept by an owner that sends many of
// them, so that each does not allocate its own: the parts of one encoding view it until the next.
type PartsBuffer struct {
	head  []byte
	parts [][]byte
}

// Reset drops what the last encoding's parts viewed (its inline payloads), keeping the memory.
func (pb *PartsBuffer) Reset() { clear(pb.parts[:cap(pb.parts)]) }

// AcquireBatchResponseParts is the answer's encoding in parts, to be sent one after the other: the
// inline payloads are not copied but are parts of their own, views of the entries' Inline (which
// must stay unchanged until the parts are sent). With pb not nil, the encoding reuses pb's memory.
func AcquireBatchResponseParts(entries []AcquireBatchEntry, pb *PartsBuffer) ([][]byte, error) {
	// One buffer holds everything but the payloads, sized up front so that it is never copied.
	room := 3
	inline := 0
	for _, e := range entries {
		room += 1 + 2 + 64 + len(e.Response.Path) + len(e.Response.Reason) + len(e.Response.Descriptor) + len(e.ErrKind) + len(e.ErrText) + 4
		if e.Inline != nil {
			inline++
		}
	}
	if pb == nil {
		pb = &PartsBuffer{}
	}
	if cap(pb.head) < room {
		pb.head = make([]byte, 0, room)
	}
	if cap(pb.parts) < 2*inline+1 {
		pb.parts = make([][]byte, 0, 2*inline+1)
	}
	w, err := answerHead(pb.head[:0], AcquireBatchVersion, len(entries), MaxAcquireBatch, "an acquire batch answer")
	if err != nil {
		return nil, err
	}
	parts := pb.parts[:0]
	cut := 0 // where the part of w.b not yet in parts begins
	for _, e := range entries {
		if e.Failed() {
			w.entryError(e.ErrKind, e.ErrText)
			continue
		}
		tag := uint8(0)
		if e.Inline != nil {
			if err := checkInline(e.Response, len(e.Inline)); err != nil {
				return nil, err
			}
			tag = 2
		}
		w.u8(tag)
		at := len(w.b)
		w.u16(0) // the response's length, known once it is written
		w.b = appendAcquireResponse(w.b, e.Response, &w.err)
		n := len(w.b) - at - 2
		if n > 0xffff {
			return nil, fmt.Errorf("wire: acquire response is %d bytes, the limit is %d", n, 0xffff)
		}
		binary.BigEndian.PutUint16(w.b[at:], uint16(n))
		if e.Inline != nil {
			w.u32(uint32(len(e.Inline)))
			parts = append(parts, w.b[cut:len(w.b):len(w.b)], e.Inline)
			cut = len(w.b)
		}
	}
	if w.err != nil {
		return nil, w.err
	}
	return append(parts, w.b[cut:]), nil
}

// checkInline checks an inline entry's invariants: the whole payload, within the bound, and no
// descriptor beside it.
func checkInline(resp AcquireResponse, n int) error {
	switch {
	case n > MaxInlinePayload:
		return fmt.Errorf("%w: an inline payload of %d bytes (at most %d)", ErrMalformed, n, MaxInlinePayload)
	case uint64(n) != resp.Size:
		return fmt.Errorf("%w: an inline payload of %d bytes for a %d-byte lease", ErrMalformed, n, resp.Size)
	case len(resp.Descriptor) > 0:
		return fmt.Errorf("%w: an inline payload beside a %d-byte RDMA descriptor", ErrMalformed, len(resp.Descriptor))
	}
	return nil
}

// DecodeAcquireBatchResponse decodes an acquire batch answer. Each granted entry passes the same
// checks as a single acquire response.
func DecodeAcquireBatchResponse(b []byte) ([]AcquireBatchEntry, error) {
	r := newReader("acquire batch response", b)
	n, err := r.answerHead(AcquireBatchVersion, MaxAcquireBatch, "acquire batch")
	if err != nil {
		return nil, err
	}
	out := make([]AcquireBatchEntry, 0, min(n, len(r.buf)/3)) // an entry takes 3 bytes at least
	for i := 0; i < n && r.err == nil; i++ {
		switch tag := r.u8("entry tag"); {
		case r.err != nil:
		case tag == 1:
			kind, text := r.entryError(i)
			out = append(out, AcquireBatchEntry{EntryError: EntryError{ErrKind: kind, ErrText: text}})
		case tag == 0 || tag == 2:
			raw := r.bytes16("acquire response")
			if r.err != nil {
				break
			}
			resp, err := DecodeAcquireResponse(raw)
			if err != nil {
				r.fail("entry %d: %v", i, err)
				break
			}
			e := AcquireBatchEntry{Response: resp}
			if tag == 2 {
				n := r.u32("inline length")
				if r.err == nil {
					if err := checkInline(resp, int(min(n, MaxInlinePayload+1))); err != nil {
						r.fail("entry %d: %v", i, err)
						break
					}
				}
				if e.Inline = r.take(int(n), "inline payload"); r.err != nil {
					break
				}
				if e.Inline == nil {
					e.Inline = []byte{}
				}
			}
			out = append(out, e)
		default:
			r.fail("entry %d: tag %d", i, tag)
		}
	}
	if err := r.done(); err != nil {
		return nil, err
	}
	return out, nil
}

// answerHead starts a batch answer of n entries: its version byte and count.
func answerHead(b []byte, version uint8, n, max int, what string) (writer, error) {
	if n == 0 || n > max {
		return writer{}, fmt.Errorf("%w: %s of %d entries (1 to %d)", ErrMalformed, what, n, max)
	}
	w := writer{b: append(b, version)}
	w.u16(uint16(n))
	return w, nil
}

// answerHead reads what answerHead wrote: the entry count, once the version is this build's.
func (r *reader) answerHead(version uint8, max int, what string) (int, error) {
	if v := r.u8("version"); r.err == nil && v != version {
		return 0, fmt.Errorf("%w: %w: %s version %d (this build speaks %d)", ErrMalformed, ErrVersion, what, v, version)
	}
	n := int(r.u16("count"))
	if r.err == nil && (n == 0 || n > max) {
		r.fail("%d entries (1 to %d)", n, max)
	}
	return n, r.err
}

// An entry's error in a batch answer: tag 1, the kind its sentinel travels under, the owner's text.
func (w *writer) entryError(kind, text string) {
	w.u8(1)
	w.bytes8("error kind", []byte(kind))
	w.bytes16("error text", []byte(text))
}

// entryError reads what writer.entryError wrote after its tag; an error needs a kind or a text.
func (r *reader) entryError(i int) (kind, text string) {
	kind, text = string(r.bytes8("error kind")), string(r.bytes16("error text"))
	if r.err == nil && kind == "" && text == "" {
		r.fail("entry %d: an error with neither kind nor text", i)
	}
	return kind, text
}

// The batched end of leases: one request ends many leases a consumer holds on one owner (each
// detached, or released with its handle's reference), one answer says entry by entry whether it
// ended. A consumer done with the thousands of blocks of a batch pays one round trip per
// MaxEndBatch leases instead of one per lease.

// EndBatchVersion is the version byte of both end-batch messages.
const EndBatchVersion = 1

// MaxEndBatch bounds the leases of one end-batch message.
const MaxEndBatch = MaxAcquireBatch

// EndBatchRequest ends each lease: Release drops the handle's reference too (as a single
// release does), otherwise the payload stays staged (detach).
type EndBatchRequest struct {
	Release bool
	Leases  []uint64
}

// AppendEndBatchRequest appends a's encoding to b.
func AppendEndBatchRequest(b []byte, a EndBatchRequest) ([]byte, error) {
	if len(a.Leases) == 0 || len(a.Leases) > MaxEndBatch {
		return b, fmt.Errorf("%w: an end batch of %d leases (1 to %d)", ErrMalformed, len(a.Leases), MaxEndBatch)
	}
	w := writer{b: append(b, EndBatchVersion)}
	if a.Release {
		w.u8(1)
	} else {
		w.u8(0)
	}
	w.u16(uint16(len(a.Leases)))
	for _, id := range a.Leases {
		w.u64(id)
	}
	return w.b, w.err
}

// DecodeEndBatchRequest decodes an end-batch request.
func DecodeEndBatchRequest(b []byte) (EndBatchRequest, error) {
	r := newReader("end batch request", b)
	if v := r.u8("version"); r.err == nil && v != EndBatchVersion {
		return EndBatchRequest{}, fmt.Errorf("%w: %w: end batch version %d (this build speaks %d)", ErrMalformed, ErrVersion, v, EndBatchVersion)
	}
	var a EndBatchRequest
	switch mode := r.u8("mode"); {
	case r.err != nil:
	case mode <= 1:
		a.Release = mode == 1
	default:
		r.fail("mode %d (0 detach, 1 release)", mode)
	}
	n := int(r.u16("count"))
	if r.err == nil && (n == 0 || n > MaxEndBatch) {
		r.fail("%d leases (1 to %d)", n, MaxEndBatch)
	}
	if r.err == nil && len(r.buf)-r.off < n*8 {
		r.fail("%d leases need %d bytes, %d left", n, n*8, len(r.buf)-r.off)
	}
	if r.err == nil {
		a.Leases = make([]uint64, n)
		for i := range a.Leases {
			a.Leases[i] = r.u64("lease")
		}
	}
	if err := r.done(); err != nil {
		return EndBatchRequest{}, err
	}
	return a, nil
}

// EndBatchEntry is one entry of the answer: zero when the lease ended, else why not.
type EndBatchEntry = EntryError

// AppendEndBatchResponse appends the entries' encoding to b, in request order.
func AppendEndBatchResponse(b []byte, entries []EndBatchEntry) ([]byte, error) {
	w, err := answerHead(b, EndBatchVersion, len(entries), MaxEndBatch, "an end batch answer")
	if err != nil {
		return b, err
	}
	for _, e := range entries {
		if e.Failed() {
			w.entryError(e.ErrKind, e.ErrText)
			continue
		}
		w.u8(0)
	}
	return w.b, w.err
}

// DecodeEndBatchResponse decodes an end-batch answer.
func DecodeEndBatchResponse(b []byte) ([]EndBatchEntry, error) {
	r := newReader("end batch response", b)
	n, err := r.answerHead(EndBatchVersion, MaxEndBatch, "end batch")
	if err != nil {
		return nil, err
	}
	if len(r.buf)-r.off < n {
		r.fail("%d entries need at least %d bytes, %d left", n, n, len(r.buf)-r.off)
	}
	var out []EndBatchEntry
	for i := 0; i < n && r.err == nil; i++ {
		switch tag := r.u8("entry tag"); {
		case r.err != nil:
		case tag == 0:
			out = append(out, EndBatchEntry{})
		case tag == 1:
			kind, text := r.entryError(i)
			out = append(out, EndBatchEntry{ErrKind: kind, ErrText: text})
		default:
			r.fail("entry %d: tag %d", i, tag)
		}
	}
	if err := r.done(); err != nil {
		return nil, err
	}
	return out, nil
}
