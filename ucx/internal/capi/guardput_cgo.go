//go:build cgo && linux

package capi

// #include "capi.h"
import "C"

import "unsafe"

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
	PutRefusedHolder    = int(C.VELO_UCX_PUT_REFUSED_HOLDER)
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

// GuardLayouts lists every field of the guarded GET's and PUT's wire structs (capi.h) with the
// offset and size the C compiler gives it, and each struct's size, so the Go side that builds
// and reads the same messages (package ucx, guardwire.go) is checked against the C side.
func GuardLayouts() []LayoutField {
	var (
		getReq  C.velo_ucx_get_req_hdr_t
		getRep  C.velo_ucx_get_rep_hdr_t
		getvReq C.velo_ucx_getv_req_hdr_t
		getvEnt C.velo_ucx_getv_entry_t
		getvRep C.velo_ucx_getv_rep_hdr_t
		putReq  C.velo_ucx_put_req_hdr_t
		putRep  C.velo_ucx_put_rep_hdr_t
		putvReq C.velo_ucx_putv_req_hdr_t
		putvRep C.velo_ucx_putv_rep_hdr_t
	)
	f := func(name string, off, size uintptr) LayoutField {
		return LayoutField{Name: name, Offset: int(off), Size: int(size)}
	}
	return []LayoutField{
		f("velo_ucx_get_req_hdr_t", 0, unsafe.Sizeof(getReq)),
		f("velo_ucx_get_req_hdr_t.magic", unsafe.Offsetof(getReq.magic), unsafe.Sizeof(getReq.magic)),
		f("velo_ucx_get_req_hdr_t.slot", unsafe.Offsetof(getReq.slot), unsafe.Sizeof(getReq.slot)),
		f("velo_ucx_get_req_hdr_t.token", unsafe.Offsetof(getReq.token), unsafe.Sizeof(getReq.token)),
		f("velo_ucx_get_req_hdr_t.address", unsafe.Offsetof(getReq.address), unsafe.Sizeof(getReq.address)),
		f("velo_ucx_get_req_hdr_t.length", unsafe.Offsetof(getReq.length), unsafe.Sizeof(getReq.length)),
		f("velo_ucx_get_req_hdr_t.req_id", unsafe.Offsetof(getReq.req_id), unsafe.Sizeof(getReq.req_id)),
		f("velo_ucx_put_req_hdr_t", 0, unsafe.Sizeof(putReq)),
		f("velo_ucx_put_req_hdr_t.magic", unsafe.Offsetof(putReq.magic), unsafe.Sizeof(putReq.magic)),
		f("velo_ucx_put_req_hdr_t.slot", unsafe.Offsetof(putReq.slot), unsafe.Sizeof(putReq.slot)),
		f("velo_ucx_put_req_hdr_t.token", unsafe.Offsetof(putReq.token), unsafe.Sizeof(putReq.token)),
		f("velo_ucx_put_req_hdr_t.address", unsafe.Offsetof(putReq.address), unsafe.Sizeof(putReq.address)),
		f("velo_ucx_put_req_hdr_t.length", unsafe.Offsetof(putReq.length), unsafe.Sizeof(putReq.length)),
		f("velo_ucx_put_req_hdr_t.req_id", unsafe.Offsetof(putReq.req_id), unsafe.Sizeof(putReq.req_id)),
		f("velo_ucx_get_rep_hdr_t", 0, unsafe.Sizeof(getRep)),
		f("velo_ucx_get_rep_hdr_t.req_id", unsafe.Offsetof(getRep.req_id), unsafe.Sizeof(getRep.req_id)),
		f("velo_ucx_get_rep_hdr_t.status", unsafe.Offsetof(getRep.status), unsafe.Sizeof(getRep.status)),
		f("velo_ucx_get_rep_hdr_t.magic", unsafe.Offsetof(getRep.magic), unsafe.Sizeof(getRep.magic)),
		f("velo_ucx_put_rep_hdr_t", 0, unsafe.Sizeof(putRep)),
		f("velo_ucx_put_rep_hdr_t.req_id", unsafe.Offsetof(putRep.req_id), unsafe.Sizeof(putRep.req_id)),
		f("velo_ucx_put_rep_hdr_t.status", unsafe.Offsetof(putRep.status), unsafe.Sizeof(putRep.status)),
		f("velo_ucx_put_rep_hdr_t.magic", unsafe.Offsetof(putRep.magic), unsafe.Sizeof(putRep.magic)),
		f("velo_ucx_getv_req_hdr_t", 0, unsafe.Sizeof(getvReq)),
		f("velo_ucx_getv_req_hdr_t.magic", unsafe.Offsetof(getvReq.magic), unsafe.Sizeof(getvReq.magic)),
		f("velo_ucx_getv_req_hdr_t.count", unsafe.Offsetof(getvReq.count), unsafe.Sizeof(getvReq.count)),
		f("velo_ucx_getv_req_hdr_t.req_id", unsafe.Offsetof(getvReq.req_id), unsafe.Sizeof(getvReq.req_id)),
		f("velo_ucx_putv_req_hdr_t", 0, unsafe.Sizeof(putvReq)),
		f("velo_ucx_putv_req_hdr_t.magic", unsafe.Offsetof(putvReq.magic), unsafe.Sizeof(putvReq.magic)),
		f("velo_ucx_putv_req_hdr_t.count", unsafe.Offsetof(putvReq.count), unsafe.Sizeof(putvReq.count)),
		f("velo_ucx_putv_req_hdr_t.req_id", unsafe.Offsetof(putvReq.req_id), unsafe.Sizeof(putvReq.req_id)),
		f("velo_ucx_getv_entry_t", 0, unsafe.Sizeof(getvEnt)),
		f("velo_ucx_getv_entry_t.slot", unsafe.Offsetof(getvEnt.slot), unsafe.Sizeof(getvEnt.slot)),
		f("velo_ucx_getv_entry_t.reserved", unsafe.Offsetof(getvEnt.reserved), unsafe.Sizeof(getvEnt.reserved)),
		f("velo_ucx_getv_entry_t.token", unsafe.Offsetof(getvEnt.token), unsafe.Sizeof(getvEnt.token)),
		f("velo_ucx_getv_entry_t.address", unsafe.Offsetof(getvEnt.address), unsafe.Sizeof(getvEnt.address)),
		f("velo_ucx_getv_entry_t.length", unsafe.Offsetof(getvEnt.length), unsafe.Sizeof(getvEnt.length)),
		f("velo_ucx_getv_rep_hdr_t", 0, unsafe.Sizeof(getvRep)),
		f("velo_ucx_getv_rep_hdr_t.req_id", unsafe.Offsetof(getvRep.req_id), unsafe.Sizeof(getvRep.req_id)),
		f("velo_ucx_getv_rep_hdr_t.magic", unsafe.Offsetof(getvRep.magic), unsafe.Sizeof(getvRep.magic)),
		f("velo_ucx_getv_rep_hdr_t.count", unsafe.Offsetof(getvRep.count), unsafe.Sizeof(getvRep.count)),
		f("velo_ucx_putv_rep_hdr_t", 0, unsafe.Sizeof(putvRep)),
		f("velo_ucx_putv_rep_hdr_t.req_id", unsafe.Offsetof(putvRep.req_id), unsafe.Sizeof(putvRep.req_id)),
		f("velo_ucx_putv_rep_hdr_t.magic", unsafe.Offsetof(putvRep.magic), unsafe.Sizeof(putvRep.magic)),
		f("velo_ucx_putv_rep_hdr_t.count", unsafe.Offsetof(putvRep.count), unsafe.Sizeof(putvRep.count)),
	}
}
