package wire

import "fmt"

// The batched acquire: one request takes leases on many handles of one owner, one answer says,
// entry by entry, either the lease (an AcquireResponse) or why not (the error's kind and text).
// A consumer that fetches many blocks asks for their descriptors together instead of paying a
// round trip per block before its reads can start.

// AcquireBatchVersion is the version byte of both batch messages.
const AcquireBatchVersion = 1

// MaxAcquireBatch bounds the entries of one batch message (a count field of 16 bits, and a
// bound on what one request may make an owner do).
const MaxAcquireBatch = 4096

// AcquireBatchRequest asks for a lease on each handle; the one offer (empty for none) applies to
// every entry.
type AcquireBatchRequest struct {
	Offer   []byte
	Handles []Handle
}

// AppendAcquireBatchRequest appends a's encoding to b.
func AppendAcquireBatchRequest(b []byte, a AcquireBatchRequest) ([]byte, error) {
	if len(a.Handles) == 0 || len(a.Handles) > MaxAcquireBatch {
		return b, fmt.Errorf("%w: an acquire batch of %d handles (1 to %d)", ErrMalformed, len(a.Handles), MaxAcquireBatch)
	}
	w := writer{b: append(b, AcquireBatchVersion)}
	w.bytes16("offer", a.Offer)
	w.u16(uint16(len(a.Handles)))
	for _, h := range a.Handles {
		w.b = AppendHandle(w.b, h)
	}
	return w.b, w.err
}

// DecodeAcquireBatchRequest decodes an acquire batch request.
func DecodeAcquireBatchRequest(b []byte) (AcquireBatchRequest, error) {
	r := newReader("acquire batch request", b)
	if v := r.u8("version"); r.err == nil && v != AcquireBatchVersion {
		return AcquireBatchRequest{}, fmt.Errorf("%w: %w: acquire batch version %d (this build speaks %d)", ErrMalformed, ErrVersion, v, AcquireBatchVersion)
	}
	a := AcquireBatchRequest{Offer: r.bytes16("offer")}
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

// AcquireBatchEntry is one entry of the answer: Response when the lease was granted, else the
// kind the error's sentinel travels under (as in a remote error) and the owner's text.
type AcquireBatchEntry struct {
	Response AcquireResponse
	ErrKind  string
	ErrText  string
}

// Failed reports whether the entry carries an error instead of a lease.
func (e AcquireBatchEntry) Failed() bool { return e.ErrKind != "" || e.ErrText != "" }

// AppendAcquireBatchResponse appends the entries' encoding to b, in request order.
func AppendAcquireBatchResponse(b []byte, entries []AcquireBatchEntry) ([]byte, error) {
	if len(entries) == 0 || len(entries) > MaxAcquireBatch {
		return b, fmt.Errorf("%w: an acquire batch answer of %d entries (1 to %d)", ErrMalformed, len(entries), MaxAcquireBatch)
	}
	w := writer{b: append(b, AcquireBatchVersion)}
	w.u16(uint16(len(entries)))
	for _, e := range entries {
		if e.Failed() {
			w.u8(1)
			w.bytes8("error kind", []byte(e.ErrKind))
			w.bytes16("error text", []byte(e.ErrText))
			continue
		}
		w.u8(0)
		resp, err := AppendAcquireResponse(nil, e.Response)
		if err != nil {
			return b, err
		}
		w.bytes16("acquire response", resp)
	}
	return w.b, w.err
}

// DecodeAcquireBatchResponse decodes an acquire batch answer. Each granted entry passes the same
// checks as a single acquire response.
func DecodeAcquireBatchResponse(b []byte) ([]AcquireBatchEntry, error) {
	r := newReader("acquire batch response", b)
	if v := r.u8("version"); r.err == nil && v != AcquireBatchVersion {
		return nil, fmt.Errorf("%w: %w: acquire batch version %d (this build speaks %d)", ErrMalformed, ErrVersion, v, AcquireBatchVersion)
	}
	n := int(r.u16("count"))
	if r.err == nil && (n == 0 || n > MaxAcquireBatch) {
		r.fail("%d entries (1 to %d)", n, MaxAcquireBatch)
	}
	var out []AcquireBatchEntry
	for i := 0; i < n && r.err == nil; i++ {
		switch tag := r.u8("entry tag"); {
		case r.err != nil:
		case tag == 1:
			e := AcquireBatchEntry{ErrKind: string(r.bytes8("error kind")), ErrText: string(r.bytes16("error text"))}
			if r.err == nil && !e.Failed() {
				r.fail("entry %d: an error with neither kind nor text", i)
			}
			out = append(out, e)
		case tag == 0:
			raw := r.bytes16("acquire response")
			if r.err != nil {
				break
			}
			resp, err := DecodeAcquireResponse(raw)
			if err != nil {
				r.fail("entry %d: %v", i, err)
				break
			}
			out = append(out, AcquireBatchEntry{Response: resp})
		default:
			r.fail("entry %d: tag %d", i, tag)
		}
	}
	if err := r.done(); err != nil {
		return nil, err
	}
	return out, nil
}
