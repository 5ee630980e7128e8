//go:build cgo && linux

package capi

// #include "capi.h"
import "C"

// Guarded-PUT wire constants and access bits (capi.h).
const (
	GuardPutMagic     = uint32(C.VELO_UCX_GUARDPUT_MAGIC)
	GuardPutReqHdrLen = int(C.sizeof_velo_ucx_put_req_hdr_t)
	GuardPutRepHdrLen = int(C.sizeof_velo_ucx_put_rep_hdr_t)

	// The vectored guarded PUT: a request header and GuardPutVMax entries at most (the vectored
	// GET's, GuardVEntryLen each); the reply header is followed by a 32-bit status per entry.
	GuardPutVMagic     = uint32(C.VELO_UCX_GUARDPUTV_MAGIC)
	GuardPutVMax       = int(C.VELO_UCX_GUARDPUTV_MAX)
	GuardPutVReqHdrLen = int(C.sizeof_velo_ucx_putv_req_hdr_t)
	GuardPutVRepHdrLen = int(C.sizeof_velo_ucx_putv_rep_hdr_t)

	AccessRead  = uint32(C.VELO_UCX_ACCESS_READ)
	AccessWrite = uint32(C.VELO_UCX_ACCESS_WRITE)

	// Indexes of GuardPutStats.Refused: why the target refused a request.
	PutRefusedMalformed = int(C.VELO_UCX_PUT_REFUSED_MALFORMED)
	PutRefusedRevoked   = int(C.VELO_UCX_PUT_REFUSED_REVOKED)
	PutRefusedReadOnly  = int(C.VELO_UCX_PUT_REFUSED_READONLY)
	PutRefusedRange     = int(C.VELO_UCX_PUT_REFUSED_RANGE)
	PutRefusedKinds     = int(C.VELO_UCX_PUT_REFUSED_KINDS)
)

// GuardAddAccess wraps velo_ucx_guard_add_access: a live registration [base, base+length)
// with token that grants access (AccessRead, AccessWrite or both).
func GuardAddAccess(r Ring, token, base, length uint64, access uint32) (uint32, Status) {
	var slot C.uint32_t
	if C.velo_ucx_guard_add_access(r.p, C.uint64_t(token), C.uint64_t(base), C.uint64_t(length), C.uint32_t(access), &slot) != 0 {
		return 0, ErrNoMem
	}
	return uint32(slot), OK
}

// GuardPutEnable wraps velo_ucx_guardput_enable: this worker answers guarded PUT requests on
// AM id reqID with replies on repID, and vectored ones on vreqID with replies on vrepID (after
// GuardEnable, whose table it checks).
func GuardPutEnable(r Ring, reqID, repID, vreqID, vrepID uint16) Status {
	return Status(C.velo_ucx_guardput_enable(r.p, C.uint(reqID), C.uint(repID), C.uint(vreqID), C.uint(vrepID)))
}

// GuardPutStats is what this worker did as a guarded PUT's target: the ring's counters, read as
// fields (no call into C; the engine reads them after every progress call). The caller holds the
// worker, as for RingGuardStats.
func GuardPutStats(r Ring) PutStats {
	s := &r.p.gput_stats
	out := PutStats{
		Served:      uint64(s.served),
		ServedBytes: uint64(s.served_bytes),
		LastReason:  int(s.last_reason),
		LastSlot:    uint32(s.last_slot),
		LastAddress: uint64(s.last_address),
		LastLength:  uint64(s.last_length),
	}
	for i := range out.Refused {
		out.Refused[i] = uint64(s.refused[i])
	}
	return out
}

// PutStats.Refused has one counter per refusal reason of capi.h.
var _ [PutRefusedKinds]struct{} = [len(PutStats{}.Refused)]struct{}{}
