package wire

import "fmt"

// HandleVersion is the version byte of an encoded handle.
const HandleVersion = 1

// HandleLen is the length of an encoded handle.
const HandleLen = 1 + 8 + 8 + 8 + 8

// Handle names one staged payload: its owner, its slot there, the slot's random nonce and its size.
type Handle struct {
	Owner uint64
	Slot  uint64
	Nonce uint64
	Size  uint64
}

// AppendHandle appends h's encoding to b.
func AppendHandle(b []byte, h Handle) []byte {
	w := writer{b: b}
	w.u8(HandleVersion)
	w.u64(h.Owner)
	w.u64(h.Slot)
	w.u64(h.Nonce)
	w.u64(h.Size)
	return w.b
}

func readHandle(r *reader) Handle {
	v := r.u8("handle version")
	if r.err == nil && v != HandleVersion {
		r.err = fmt.Errorf("%w: %w: handle version %d, this build reads %d", ErrMalformed, ErrVersion, v, HandleVersion)
	}
	h := Handle{Owner: r.u64("owner"), Slot: r.u64("slot"), Nonce: r.u64("nonce"), Size: r.u64("size")}
	if r.err == nil && h.Owner == 0 {
		r.fail("owner 0 is reserved")
	}
	return h
}

// DecodeHandle decodes an encoded handle.
func DecodeHandle(b []byte) (Handle, error) {
	r := newReader("handle", b)
	h := readHandle(r)
	return h, r.done()
}

// AcquireRequest asks the owner for a lease on a handle's slot.
type AcquireRequest struct {
	Handle Handle
	// Offer is the consumer's RDMA offer (EncodeOffer), empty when it offers none.
	Offer []byte
}

// AppendAcquireRequest appends a's encoding to b.
func AppendAcquireRequest(b []byte, a AcquireRequest) ([]byte, error) {
	w := writer{b: AppendHandle(b, a.Handle)}
	w.bytes16("offer", a.Offer)
	return w.b, w.err
}

// DecodeAcquireRequest decodes an acquire request.
func DecodeAcquireRequest(b []byte) (AcquireRequest, error) {
	r := newReader("acquire request", b)
	a := AcquireRequest{Handle: readHandle(r), Offer: r.bytes16("offer")}
	return a, r.done()
}

// AcquireResponse is the owner's answer: a lease and either a chunked plan or an RDMA descriptor.
// Path and Reason are the metric label values the owner counted ("chunked"/"not_configured", ...).
type AcquireResponse struct {
	Path      string
	Reason    string
	Lease     uint64
	TTLMillis uint64
	// Size is the payload size; ChunkSize is the largest pull the owner serves in one frame.
	Size      uint64
	ChunkSize uint32
	// Descriptor is the RDMA descriptor when Path is "rdma", empty otherwise.
	Descriptor []byte
}

// AppendAcquireResponse appends a's encoding to b.
func AppendAcquireResponse(b []byte, a AcquireResponse) ([]byte, error) {
	var err error
	b = appendAcquireResponse(b, a, &err)
	return b, err
}

// appendAcquireResponse appends a's encoding to b and sets *err (when nil) if a field is too long.
func appendAcquireResponse(b []byte, a AcquireResponse, err *error) []byte {
	w := writer{b: b, err: *err}
	w.bytes8("path", []byte(a.Path))
	w.bytes8("reason", []byte(a.Reason))
	w.u64(a.Lease)
	w.u64(a.TTLMillis)
	w.u64(a.Size)
	w.u32(a.ChunkSize)
	w.bytes16("descriptor", a.Descriptor)
	*err = w.err
	return w.b
}

// DecodeAcquireResponse decodes an acquire response. It checks framing and the invariants any
// consumer relies on (a lease, a chunk size); the path and reason values are checked against the
// metric enums by the caller.
func DecodeAcquireResponse(b []byte) (AcquireResponse, error) {
	r := newReader("acquire response", b)
	a := AcquireResponse{
		Path:      internLabel(r.bytes8("path")),
		Reason:    internLabel(r.bytes8("reason")),
		Lease:     r.u64("lease"),
		TTLMillis: r.u64("ttl"),
		Size:      r.u64("size"),
		ChunkSize: r.u32("chunk size"),
	}
	a.Descriptor = r.bytes16("descriptor")
	if err := r.done(); err != nil {
		return AcquireResponse{}, err
	}
	if a.Lease == 0 {
		return AcquireResponse{}, fmt.Errorf("%w: acquire response without a lease", ErrMalformed)
	}
	if a.ChunkSize == 0 {
		return AcquireResponse{}, fmt.Errorf("%w: acquire response with chunk size 0", ErrMalformed)
	}
	return a, nil
}

// internLabel is b as a string: a path or reason that every answer repeats comes back as the
// same constant instead of a string allocated per answer (a batch decodes hundreds of them).
func internLabel(b []byte) string {
	switch string(b) { // compared without a copy
	case "rdma":
		return "rdma"
	case "chunked":
		return "chunked"
	case "inline":
		return "inline"
	case "ok":
		return "ok"
	}
	return string(b)
}

// PullRequest asks for Length bytes at Offset of a leased slot.
type PullRequest struct {
	Lease  uint64
	Offset uint64
	Length uint32
}

// PullRequestLen is the length of an encoded pull request.
const PullRequestLen = 8 + 8 + 4

// AppendPullRequest appends p's encoding to b.
func AppendPullRequest(b []byte, p PullRequest) []byte {
	w := writer{b: b}
	w.u64(p.Lease)
	w.u64(p.Offset)
	w.u32(p.Length)
	return w.b
}

// DecodePullRequest decodes a pull request.
func DecodePullRequest(b []byte) (PullRequest, error) {
	r := newReader("pull request", b)
	p := PullRequest{Lease: r.u64("lease"), Offset: r.u64("offset"), Length: r.u32("length")}
	return p, r.done()
}

// LeaseRequest names a lease to detach or release.
type LeaseRequest struct{ Lease uint64 }

// AppendLeaseRequest appends l's encoding to b.
func AppendLeaseRequest(b []byte, l LeaseRequest) []byte {
	w := writer{b: b}
	w.u64(l.Lease)
	return w.b
}

// DecodeLeaseRequest decodes a lease request.
func DecodeLeaseRequest(b []byte) (LeaseRequest, error) {
	r := newReader("lease request", b)
	l := LeaseRequest{Lease: r.u64("lease")}
	return l, r.done()
}

// Metadata is the owner's view of a live slot.
type Metadata struct {
	Size   uint64
	Refs   uint32
	Leases uint32
	// Staging is the reason recorded when the payload was staged ("not_pinned" for plain memory).
	Staging string
}

// AppendMetadata appends m's encoding to b.
func AppendMetadata(b []byte, m Metadata) ([]byte, error) {
	w := writer{b: b}
	w.u64(m.Size)
	w.u32(m.Refs)
	w.u32(m.Leases)
	w.bytes8("staging reason", []byte(m.Staging))
	return w.b, w.err
}

// DecodeMetadata decodes a metadata response.
func DecodeMetadata(b []byte) (Metadata, error) {
	r := newReader("metadata", b)
	m := Metadata{Size: r.u64("size"), Refs: r.u32("refs"), Leases: r.u32("leases")}
	m.Staging = string(r.bytes8("staging reason"))
	return m, r.done()
}

// Offer is a consumer's RDMA offer: the backend it can read with and backend-specific bytes.
type Offer struct {
	Backend string
	Blob    []byte
}

// AppendOffer appends o's encoding to b.
func AppendOffer(b []byte, o Offer) ([]byte, error) {
	w := writer{b: b}
	w.bytes8("backend", []byte(o.Backend))
	w.bytes16("offer blob", o.Blob)
	return w.b, w.err
}

// DecodeOffer decodes an offer. An empty backend is malformed: "no offer" is an empty offer field,
// not an offer naming nothing.
func DecodeOffer(b []byte) (Offer, error) {
	r := newReader("rdma offer", b)
	o := Offer{Backend: string(r.bytes8("backend"))}
	o.Blob = r.bytes16("blob")
	if err := r.done(); err != nil {
		return Offer{}, err
	}
	if o.Backend == "" {
		return Offer{}, fmt.Errorf("%w: rdma offer names no backend", ErrMalformed)
	}
	return o, nil
}
