package ucx

import "encoding/binary"

// The guarded GET's and guarded PUT's messages, as Go reads and writes them: the one Go copy of
// layouts whose other side is C. The owner's engine (ucx/internal/capi) reads the requests and
// writes the replies as the structs of ucx/internal/capi/capi.h — velo_ucx_get_req_hdr_t and
// velo_ucx_get_rep_hdr_t (capi.c), velo_ucx_put_req_hdr_t and velo_ucx_put_rep_hdr_t
// (guardput.c), velo_ucx_getv_req_hdr_t, velo_ucx_getv_entry_t and velo_ucx_getv_rep_hdr_t
// (capi.c), velo_ucx_putv_req_hdr_t and velo_ucx_putv_rep_hdr_t (guardput.c) — so the offsets
// below are those structs' and the integers are little-endian, the byte order of the C side on
// every host the binding builds for. TestGuardLayoutMatchesC checks each offset and size against
// the C compiler's; the reply decoders, which read what a peer sent, have fuzz targets in
// guardwire_test.go. The single and vectored forms of GET and PUT share one layout each and
// differ only in their magic (capi.GuardMagic, GuardPutMagic, GuardVMagic, GuardPutVMagic).

// A single request: velo_ucx_get_req_hdr_t, velo_ucx_put_req_hdr_t. A PUT's data follows it.
const (
	guardReqMagicOff   = 0  // uint32
	guardReqSlotOff    = 4  // uint32: the registration's slot in the owner's table
	guardReqTokenOff   = 8  // uint64: the registration's random token
	guardReqAddressOff = 16 // uint64
	guardReqLengthOff  = 24 // uint64
	guardReqIDOff      = 32 // uint64: the request's id, which the reply carries back
	guardReqLen        = 40
)

// A single reply: velo_ucx_get_rep_hdr_t, velo_ucx_put_rep_hdr_t. A GET's data follows it.
const (
	guardRepIDOff     = 0  // uint64
	guardRepStatusOff = 8  // int32: a ucs_status_t
	guardRepMagicOff  = 12 // uint32
	guardRepLen       = 16
)

// A vectored request: velo_ucx_getv_req_hdr_t, velo_ucx_putv_req_hdr_t, then count entries of
// velo_ucx_getv_entry_t (the same for reads and writes). A PUT's data follows, back to back.
const (
	guardVReqMagicOff = 0 // uint32
	guardVReqCountOff = 4 // uint32
	guardVReqIDOff    = 8 // uint64
	guardVReqLen      = 16

	guardVEntSlotOff     = 0 // uint32
	guardVEntReservedOff = 4 // uint32, zero
	guardVEntTokenOff    = 8
	guardVEntAddressOff  = 16
	guardVEntLengthOff   = 24
	guardVEntLen         = 32
)

// A vectored reply: velo_ucx_getv_rep_hdr_t, velo_ucx_putv_rep_hdr_t, then count int32 statuses.
// A GET's data of the served reads follows, back to back.
const (
	guardVRepIDOff    = 0 // uint64
	guardVRepMagicOff = 8 // uint32
	guardVRepCountOff = 12
	guardVRepLen      = 16
)

// putGuardRequest writes a single guarded request into h (guardReqLen bytes): magic says GET or
// PUT, k names the registration, addr and n the range, id the request.
func putGuardRequest(h []byte, magic uint32, k SealedKey, addr, n, id uint64) {
	_ = h[guardReqLen-1]
	binary.LittleEndian.PutUint32(h[guardReqMagicOff:], magic)
	binary.LittleEndian.PutUint32(h[guardReqSlotOff:], k.Slot)
	binary.LittleEndian.PutUint64(h[guardReqTokenOff:], k.Token)
	binary.LittleEndian.PutUint64(h[guardReqAddressOff:], addr)
	binary.LittleEndian.PutUint64(h[guardReqLengthOff:], n)
	binary.LittleEndian.PutUint64(h[guardReqIDOff:], id)
}

// newGuardVRequest returns a vectored request's buffer for count entries, to be filled with
// putGuardEntry and putGuardVHeader.
func newGuardVRequest(count int) []byte { return make([]byte, guardVReqLen+count*guardVEntLen) }

// putGuardVHeader writes a vectored request's header into h.
func putGuardVHeader(h []byte, magic uint32, count int, id uint64) {
	_ = h[guardVReqLen-1]
	binary.LittleEndian.PutUint32(h[guardVReqMagicOff:], magic)
	binary.LittleEndian.PutUint32(h[guardVReqCountOff:], uint32(count))
	binary.LittleEndian.PutUint64(h[guardVReqIDOff:], id)
}

// putGuardEntry writes entry j of a vectored request h: the registration's slot and token, the
// address, the length.
func putGuardEntry(h []byte, j int, k SealedKey, addr, n uint64) {
	ent := h[guardVReqLen+j*guardVEntLen:][:guardVEntLen]
	binary.LittleEndian.PutUint32(ent[guardVEntSlotOff:], k.Slot)
	binary.LittleEndian.PutUint32(ent[guardVEntReservedOff:], 0)
	binary.LittleEndian.PutUint64(ent[guardVEntTokenOff:], k.Token)
	binary.LittleEndian.PutUint64(ent[guardVEntAddressOff:], addr)
	binary.LittleEndian.PutUint64(ent[guardVEntLengthOff:], n)
}

// guardReply is a single reply's header.
type guardReply struct {
	ID     uint64
	Status Status
}

// parseGuardReply decodes a single reply's header; ok is false unless it is exactly one header
// with the wanted magic.
func parseGuardReply(h []byte, magic uint32) (r guardReply, ok bool) {
	if len(h) != guardRepLen || binary.LittleEndian.Uint32(h[guardRepMagicOff:]) != magic {
		return guardReply{}, false
	}
	return guardReply{
		ID:     binary.LittleEndian.Uint64(h[guardRepIDOff:]),
		Status: Status(int32(binary.LittleEndian.Uint32(h[guardRepStatusOff:]))),
	}, true
}

// guardVReply is a vectored reply's header and its statuses.
type guardVReply struct {
	ID    uint64
	Count int    // the entries the reply says it answers
	stats []byte // what follows the header: 4*Count bytes in a complete reply
}

// parseGuardVReply decodes a vectored reply's header; ok is false when it is short or its magic
// is not the wanted one. Whether the statuses match the count is complete's to say: a reply
// with a good header but a wrong count still names the request it fails.
func parseGuardVReply(h []byte, magic uint32) (r guardVReply, ok bool) {
	if len(h) < guardVRepLen || binary.LittleEndian.Uint32(h[guardVRepMagicOff:]) != magic {
		return guardVReply{}, false
	}
	return guardVReply{
		ID:    binary.LittleEndian.Uint64(h[guardVRepIDOff:]),
		Count: int(binary.LittleEndian.Uint32(h[guardVRepCountOff:])),
		stats: h[guardVRepLen:],
	}, true
}

// complete reports whether the reply carries exactly one status per entry of its count.
func (r guardVReply) complete() bool { return uint64(len(r.stats)) == 4*uint64(r.Count) }

// status is entry j's status; only for j below Count of a complete reply.
func (r guardVReply) status(j int) Status {
	return Status(int32(binary.LittleEndian.Uint32(r.stats[4*j:])))
}
