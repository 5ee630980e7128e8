//go:build cgo && linux

package capi

// #include <stdlib.h>
// #include "capi.h"
import "C"

import (
	"unsafe"
)

// Compiled is true: UCX is linked into this binary.
const Compiled = true

// Statuses this package returns itself.
const (
	OK         Status = C.UCS_OK
	InProgress Status = C.UCS_INPROGRESS
	ErrBusy    Status = C.UCS_ERR_BUSY
	ErrNoMem   Status = C.UCS_ERR_NO_MEMORY
	ErrNoElem  Status = C.UCS_ERR_NO_ELEM
)

// Feature bits of ucp_params_t.features.
const (
	FeatureRMA    = uint64(C.UCP_FEATURE_RMA)
	FeatureAM     = uint64(C.UCP_FEATURE_AM)
	FeatureWakeup = uint64(C.UCP_FEATURE_WAKEUP)
	FeatureAMO32  = uint64(C.UCP_FEATURE_AMO32)
	FeatureAMO64  = uint64(C.UCP_FEATURE_AMO64)
)

// Thread modes of ucp_worker_params_t.thread_mode.
const (
	ThreadModeSingle     = int(C.UCS_THREAD_MODE_SINGLE)
	ThreadModeSerialized = int(C.UCS_THREAD_MODE_SERIALIZED)
	ThreadModeMulti      = int(C.UCS_THREAD_MODE_MULTI)
)

// Flags of ucp_am_send_nbx and of ucp_am_recv_param_t.recv_attr.
const (
	AMSendFlagReply = uint32(C.UCP_AM_SEND_FLAG_REPLY)
	AMSendFlagEager = uint32(C.UCP_AM_SEND_FLAG_EAGER)
	AMSendFlagRndv  = uint32(C.UCP_AM_SEND_FLAG_RNDV)

	AMRecvAttrReplyEP = uint32(C.UCP_AM_RECV_ATTR_FIELD_REPLY_EP)
	AMRecvAttrData    = uint32(C.UCP_AM_RECV_ATTR_FLAG_DATA)
	AMRecvAttrRndv    = uint32(C.UCP_AM_RECV_ATTR_FLAG_RNDV)
	// AMDataInArena marks an AM whose data the callback copied into the ring's arena
	// (UCX refused to keep it); Event.Length is then its offset.
	AMDataInArena = uint32(1) << 31
)

// Flags of ucp_mem_map.
const (
	MemMapNonblock = uint32(C.UCP_MEM_MAP_NONBLOCK)
)

// Event kinds of the ring (capi.h).
const (
	EventAM      = uint32(C.VELO_EV_AM)
	EventEPError = uint32(C.VELO_EV_EP_ERROR)
	EventReqDone = uint32(C.VELO_EV_REQ_DONE)
)

// Guarded-GET wire constants (capi.h).
const (
	GuardMagic     = uint32(C.VELO_UCX_GUARD_MAGIC)
	GuardReqHdrLen = int(C.sizeof_velo_ucx_get_req_hdr_t)
	GuardRepHdrLen = int(C.sizeof_velo_ucx_get_rep_hdr_t)
	// The vectored guarded GET: a request header, then GuardVMax entries at most; the reply
	// header, then one int32 status per entry.
	GuardVMagic     = uint32(C.VELO_UCX_GUARDV_MAGIC)
	GuardVMax       = int(C.VELO_UCX_GUARDV_MAX)
	GuardVReqHdrLen = int(C.sizeof_velo_ucx_getv_req_hdr_t)
	GuardVEntryLen  = int(C.sizeof_velo_ucx_getv_entry_t)
	GuardVRepHdrLen = int(C.sizeof_velo_ucx_getv_rep_hdr_t)
)

// Handles. Each wraps one C pointer; the zero value is NULL.
type (
	Config  struct{ p *C.ucp_config_t }
	Context struct{ p C.ucp_context_h }
	Worker  struct{ p C.ucp_worker_h }
	Ep      struct{ p C.ucp_ep_h }
	MemH    struct{ p C.ucp_mem_h }
	RKey    struct{ p C.ucp_rkey_h }
	Request struct{ p unsafe.Pointer }
	Ring    struct{ p *C.velo_ucx_ring_t }
)

// Nil reports whether the handle is NULL.
func (c Context) Nil() bool { return c.p == nil }

// Nil reports whether the handle is NULL.
func (w Worker) Nil() bool { return w.p == nil }

// Nil reports whether the handle is NULL.
func (e Ep) Nil() bool { return e.p == nil }

// Nil reports whether the handle is NULL.
func (r Request) Nil() bool { return r.p == nil }

// Nil reports whether the handle is NULL.
func (r Ring) Nil() bool { return r.p == nil }

// ID is the endpoint's address as an integer: a comparable identity for maps, never
// dereferenced.
func (e Ep) ID() uintptr { return uintptr(unsafe.Pointer(e.p)) }

// RequestFromHandle is the request an EventReqDone reported.
func RequestFromHandle(h unsafe.Pointer) Request { return Request{h} }

// ID is the request's address as an integer (for maps).
func (r Request) ID() uintptr { return uintptr(r.p) }

// UcsStatusString wraps ucs_status_string.
func UcsStatusString(s Status) string {
	return C.GoString(C.ucs_status_string(C.ucs_status_t(s)))
}

// UcpGetVersion wraps ucp_get_version.
func UcpGetVersion() (major, minor, release uint) {
	var ma, mi, re C.uint
	C.ucp_get_version(&ma, &mi, &re)
	return uint(ma), uint(mi), uint(re)
}

// UcpGetVersionString wraps ucp_get_version_string.
func UcpGetVersionString() string { return C.GoString(C.ucp_get_version_string()) }

// UcpAPIVersion is the UCP_API_MAJOR/MINOR of the headers this package was compiled with.
func UcpAPIVersion() (major, minor uint) { return uint(C.UCP_API_MAJOR), uint(C.UCP_API_MINOR) }

// UcpConfigRead wraps ucp_config_read(NULL, NULL, &config): the UCX_* environment.
func UcpConfigRead() (Config, Status) {
	var c *C.ucp_config_t
	s := Status(C.ucp_config_read(nil, nil, &c))
	return Config{c}, s
}

// UcpConfigModify wraps ucp_config_modify. name is without the UCX_ prefix.
func UcpConfigModify(c Config, name, value string) Status {
	cn, cv := C.CString(name), C.CString(value)
	defer C.free(unsafe.Pointer(cn))
	defer C.free(unsafe.Pointer(cv))
	return Status(C.ucp_config_modify(c.p, cn, cv))
}

// UcpConfigRelease wraps ucp_config_release.
func UcpConfigRelease(c Config) {
	if c.p != nil {
		C.ucp_config_release(c.p)
	}
}

// UcpConfigPrint wraps ucp_config_print(UCS_CONFIG_PRINT_CONFIG) into a string
// (helper velo_ucx_config_print).
func UcpConfigPrint(c Config) (string, Status) {
	var out *C.char
	var n C.size_t
	s := Status(C.velo_ucx_config_print(c.p, &out, &n))
	if s != OK {
		return "", s
	}
	defer C.free(unsafe.Pointer(out))
	return C.GoStringN(out, C.int(n)), OK
}

// UcpInit wraps ucp_init with the given features (helper velo_ucx_init).
func UcpInit(c Config, features uint64, mtWorkersShared bool) (Context, Status) {
	var ctx C.ucp_context_h
	s := Status(C.velo_ucx_init(c.p, C.uint64_t(features), cbool(mtWorkersShared), &ctx))
	return Context{ctx}, s
}

// UcpCleanup wraps ucp_cleanup.
func UcpCleanup(c Context) { C.ucp_cleanup(c.p) }

// UcpWorkerCreate wraps ucp_worker_create (helper velo_ucx_worker_create).
func UcpWorkerCreate(c Context, threadMode int) (Worker, Status) {
	var w C.ucp_worker_h
	s := Status(C.velo_ucx_worker_create(c.p, C.int(threadMode), &w))
	return Worker{w}, s
}

// UcpWorkerDestroy wraps ucp_worker_destroy.
func UcpWorkerDestroy(w Worker) { C.ucp_worker_destroy(w.p) }

// UcpWorkerGetAddress wraps ucp_worker_get_address and ucp_worker_release_address,
// returning a Go copy of the address.
func UcpWorkerGetAddress(w Worker) ([]byte, Status) {
	var addr *C.ucp_address_t
	var n C.size_t
	s := Status(C.ucp_worker_get_address(w.p, &addr, &n))
	if s != OK {
		return nil, s
	}
	out := C.GoBytes(unsafe.Pointer(addr), C.int(n))
	C.ucp_worker_release_address(w.p, addr)
	return out, OK
}

// UcpWorkerQueryMaxAMHeader wraps ucp_worker_query(UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER).
func UcpWorkerQueryMaxAMHeader(w Worker) (int, Status) {
	var n C.size_t
	s := Status(C.velo_ucx_worker_max_am_header(w.p, &n))
	return int(n), s
}

// UcpWorkerProgress wraps ucp_worker_progress.
func UcpWorkerProgress(w Worker) uint { return uint(C.ucp_worker_progress(w.p)) }

// UcpWorkerGetEfd wraps ucp_worker_get_efd.
func UcpWorkerGetEfd(w Worker) (int, Status) {
	var fd C.int
	s := Status(C.ucp_worker_get_efd(w.p, &fd))
	return int(fd), s
}

// UcpWorkerArm wraps ucp_worker_arm.
func UcpWorkerArm(w Worker) Status { return Status(C.ucp_worker_arm(w.p)) }

// UcpWorkerSignal wraps ucp_worker_signal. UCX documents it as safe from any thread.
func UcpWorkerSignal(w Worker) Status { return Status(C.ucp_worker_signal(w.p)) }

// RingNew wraps velo_ucx_ring_new: the event ring that the worker's callbacks fill.
func RingNew(w Worker) Ring { return Ring{C.velo_ucx_ring_new(w.p)} }

// RingFree wraps velo_ucx_ring_free.
func RingFree(r Ring) { C.velo_ucx_ring_free(r.p) }

// RingReset wraps velo_ucx_ring_reset: forget the drained events and header bytes.
func RingReset(r Ring) { C.velo_ucx_ring_reset(r.p) }

// RingLen is the number of events waiting in the ring.
func RingLen(r Ring) int { return int(r.p.count) }

// RingDropped is the number of events lost because malloc failed.
func RingDropped(r Ring) uint64 { return uint64(r.p.dropped) }

// RingUnclaimed is the number of active messages dropped because their id had no handler.
func RingUnclaimed(r Ring) uint64 { return uint64(r.p.unclaimed) }

// RingGuardStats returns how many guarded GET requests this worker served and refused.
func RingGuardStats(r Ring) (served, refused uint64) {
	return uint64(r.p.guard_served), uint64(r.p.guard_refused)
}

// RingEvents appends the ring's events to dst (no allocation when dst has room).
func RingEvents(r Ring, dst []Event) []Event {
	n := int(r.p.count)
	if n == 0 {
		return dst
	}
	evs := unsafe.Slice(r.p.events, n)
	for i := range evs {
		e := &evs[i]
		dst = append(dst, Event{
			Kind:      uint32(e.kind),
			Status:    Status(e.status),
			AMID:      uint32(e.am_id),
			AMFlags:   uint32(e.am_flags),
			User:      uint64(e.user),
			Handle:    e.handle,
			HeaderOff: uintptr(e.header_off),
			HeaderLen: uintptr(e.header_len),
			Data:      e.data,
			DataLen:   uintptr(e.data_len),
			Length:    uintptr(e.length),
		})
	}
	return dst
}

// RingBytes is a view of the ring's header arena, valid until the next RingReset or
// progress call. Copy what you keep.
func RingBytes(r Ring) []byte {
	if r.p.bytes_len == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(r.p.bytes)), int(r.p.bytes_len))
}

// UcpWorkerClaimAmIds gives every AM id the ring's dropping callback (helper
// velo_ucx_claim_am_ids); call it once, right after the ring is made.
func UcpWorkerClaimAmIds(r Ring) Status { return Status(C.velo_ucx_claim_am_ids(r.p)) }

// UcpWorkerSetAmRecvHandler wraps ucp_worker_set_am_recv_handler with the ring's callback
// (helper velo_ucx_set_am_handler); enable=false gives the id back to the dropping callback.
func UcpWorkerSetAmRecvHandler(r Ring, id uint16, enable bool) Status {
	return Status(C.velo_ucx_set_am_handler(r.p, C.uint(id), cbool(enable)))
}

// UcpEpCreate wraps ucp_ep_create from a worker address, with the ring's error handler
// (helper velo_ucx_ep_create). addr is only read during the call.
func UcpEpCreate(r Ring, addr []byte, errModePeer bool) (Ep, Status) {
	var ep C.ucp_ep_h
	if len(addr) == 0 {
		return Ep{}, Status(C.UCS_ERR_INVALID_PARAM)
	}
	s := Status(C.velo_ucx_ep_create(r.p, unsafe.Pointer(&addr[0]), cbool(errModePeer), &ep))
	return Ep{ep}, s
}

// UcpEpPrintInfo wraps ucp_ep_print_info into a string (helper velo_ucx_ep_print_info).
func UcpEpPrintInfo(ep Ep) string {
	var out *C.char
	var n C.size_t
	if Status(C.velo_ucx_ep_print_info(ep.p, &out, &n)) != OK {
		return ""
	}
	defer C.free(unsafe.Pointer(out))
	return C.GoStringN(out, C.int(n))
}

// result splits a ucs_status_ptr_t into a request or a status.
func result(p unsafe.Pointer) (Request, Status) {
	if C.velo_ucx_ptr_is_req(p) != 0 {
		return Request{p}, InProgress
	}
	return Request{}, Status(C.velo_ucx_ptr_status(p))
}

// UcpAmSendNbx wraps ucp_am_send_nbx (helper velo_ucx_am_send). header and buffer must stay
// valid until the request completes (pinned Go memory or C memory). With iov, buffer points
// to count ucp_dt_iov_t entries in C memory.
func UcpAmSendNbx(r Ring, ep Ep, id uint16, header unsafe.Pointer, headerLen uintptr,
	buffer unsafe.Pointer, count uintptr, iov bool, flags uint32, user uint64) (Request, Status) {
	return result(C.velo_ucx_am_send(r.p, ep.p, C.uint(id), header, C.size_t(headerLen),
		buffer, C.size_t(count), cbool(iov), C.uint32_t(flags), C.uint64_t(user)))
}

// UcpAmRecvDataNbx wraps ucp_am_recv_data_nbx (helper velo_ucx_am_recv_data).
func UcpAmRecvDataNbx(r Ring, desc, buffer unsafe.Pointer, length uintptr, memType int, user uint64) (Request, Status) {
	return result(C.velo_ucx_am_recv_data(r.p, desc, buffer, C.size_t(length), C.int(memType), C.uint64_t(user)))
}

// UcpAmRecvDataIovNbx wraps ucp_am_recv_data_nbx with an iov datatype (helper
// velo_ucx_am_recv_data_iov): the message's bytes land in bufs[0], then bufs[1], ... The iov
// is copied to C memory for the operation's life; the buffers must stay pinned until it
// completes.
func UcpAmRecvDataIovNbx(r Ring, desc unsafe.Pointer, bufs []unsafe.Pointer, lens []uintptr, memType int, user uint64) (Request, Status) {
	var pb *unsafe.Pointer
	var pl *C.size_t
	if len(bufs) > 0 {
		pb, pl = &bufs[0], (*C.size_t)(unsafe.Pointer(&lens[0]))
	}
	return result(C.velo_ucx_am_recv_data_iov(r.p, desc, pb, pl, C.size_t(len(bufs)), C.int(memType), C.uint64_t(user)))
}

// UcpAmDataRelease wraps ucp_am_data_release.
func UcpAmDataRelease(w Worker, data unsafe.Pointer) { C.ucp_am_data_release(w.p, data) }

// UcpGetNbx wraps ucp_get_nbx (helper velo_ucx_get); memType is the destination's (MemTypeUnset:
// UCX detects it).
func UcpGetNbx(r Ring, ep Ep, buffer unsafe.Pointer, length uintptr, remoteAddr uint64, rk RKey, memType int, user uint64) (Request, Status) {
	return result(C.velo_ucx_get(r.p, ep.p, buffer, C.size_t(length), C.uint64_t(remoteAddr), rk.p, C.int(memType), C.uint64_t(user)))
}

// UcpPutNbx wraps ucp_put_nbx (helper velo_ucx_put).
func UcpPutNbx(r Ring, ep Ep, buffer unsafe.Pointer, length uintptr, remoteAddr uint64, rk RKey, user uint64) (Request, Status) {
	return result(C.velo_ucx_put(r.p, ep.p, buffer, C.size_t(length), C.uint64_t(remoteAddr), rk.p, C.uint64_t(user)))
}

// UcpAtomicOpNbx wraps ucp_atomic_op_nbx on one word of size bytes (helper velo_ucx_atomic);
// reply may be nil for an operation that fetches nothing.
func UcpAtomicOpNbx(r Ring, ep Ep, op uint32, value, reply unsafe.Pointer, size uintptr, remoteAddr uint64, rk RKey, user uint64) (Request, Status) {
	return result(C.velo_ucx_atomic(r.p, ep.p, C.unsigned(op), value, reply, C.size_t(size), C.uint64_t(remoteAddr), rk.p, C.uint64_t(user)))
}

// UcpEpFlushNbx wraps ucp_ep_flush_nbx (helper velo_ucx_ep_flush).
func UcpEpFlushNbx(r Ring, ep Ep, user uint64) (Request, Status) {
	return result(C.velo_ucx_ep_flush(r.p, ep.p, C.uint64_t(user)))
}

// UcpWorkerFlushNbx wraps ucp_worker_flush_nbx (helper velo_ucx_worker_flush).
func UcpWorkerFlushNbx(r Ring, user uint64) (Request, Status) {
	return result(C.velo_ucx_worker_flush(r.p, C.uint64_t(user)))
}

// UcpEpCloseNbx wraps ucp_ep_close_nbx (helper velo_ucx_ep_close); force selects
// UCP_EP_CLOSE_FLAG_FORCE.
func UcpEpCloseNbx(r Ring, ep Ep, force bool, user uint64) (Request, Status) {
	return result(C.velo_ucx_ep_close(r.p, ep.p, cbool(force), C.uint64_t(user)))
}

// UcpRequestCheckStatus wraps ucp_request_check_status.
func UcpRequestCheckStatus(req Request) Status { return Status(C.ucp_request_check_status(req.p)) }

// UcpRequestCancel wraps ucp_request_cancel.
func UcpRequestCancel(w Worker, req Request) { C.ucp_request_cancel(w.p, req.p) }

// UcpRequestFree wraps ucp_request_free.
func UcpRequestFree(req Request) { C.ucp_request_free(req.p) }

// UcpMemMap wraps ucp_mem_map of existing memory (helper velo_ucx_mem_map); memType is the
// memory's type (UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE), or MemTypeUnset to let UCX detect it.
func UcpMemMap(c Context, addr unsafe.Pointer, length uintptr, flags uint32, memType int) (MemH, Status) {
	var m C.ucp_mem_h
	s := Status(C.velo_ucx_mem_map(c.p, addr, C.size_t(length), C.uint(flags), C.int(memType), &m))
	return MemH{m}, s
}

// UcpMemUnmap wraps ucp_mem_unmap.
func UcpMemUnmap(c Context, m MemH) Status { return Status(C.ucp_mem_unmap(c.p, m.p)) }

// UcpRkeyPack wraps ucp_rkey_pack and ucp_rkey_buffer_release, returning a Go copy.
func UcpRkeyPack(c Context, m MemH) ([]byte, Status) {
	var buf unsafe.Pointer
	var n C.size_t
	s := Status(C.ucp_rkey_pack(c.p, m.p, &buf, &n))
	if s != OK {
		return nil, s
	}
	out := C.GoBytes(buf, C.int(n))
	C.ucp_rkey_buffer_release(buf)
	return out, OK
}

// UcpEpRkeyUnpack wraps ucp_ep_rkey_unpack. UCX takes no length: the caller must have
// checked that buf holds a complete packed key (package ucx walks it first).
func UcpEpRkeyUnpack(ep Ep, buf []byte) (RKey, Status) {
	var rk C.ucp_rkey_h
	if len(buf) == 0 {
		return RKey{}, Status(C.UCS_ERR_INVALID_PARAM)
	}
	s := Status(C.ucp_ep_rkey_unpack(ep.p, unsafe.Pointer(&buf[0]), &rk))
	return RKey{rk}, s
}

// UcpRkeyDestroy wraps ucp_rkey_destroy.
func UcpRkeyDestroy(rk RKey) { C.ucp_rkey_destroy(rk.p) }

// GuardEnable wraps velo_ucx_guard_enable: this worker answers guarded GET requests on AM
// id reqID with replies on repID.
func GuardEnable(r Ring, reqID, repID uint16) Status {
	return Status(C.velo_ucx_guard_enable(r.p, C.uint(reqID), C.uint(repID)))
}

// GuardVEnable wraps velo_ucx_guardv_enable: this worker also answers vectored guarded GET
// requests on reqID, with replies on repID (after GuardEnable).
func GuardVEnable(r Ring, reqID, repID uint16) Status {
	return Status(C.velo_ucx_guardv_enable(r.p, C.uint(reqID), C.uint(repID)))
}

// GuardAdd wraps velo_ucx_guard_add: a live registration [base, base+length) with token.
func GuardAdd(r Ring, token, base, length uint64) (uint32, Status) {
	var slot C.uint32_t
	if C.velo_ucx_guard_add(r.p, C.uint64_t(token), C.uint64_t(base), C.uint64_t(length), &slot) != 0 {
		return 0, ErrNoMem
	}
	return uint32(slot), OK
}

// GuardSetMemType wraps velo_ucx_guard_set_memtype: slot's memory is of memType, which
// guarded replies from it tell UCX.
func GuardSetMemType(r Ring, slot uint32, memType int) {
	C.velo_ucx_guard_set_memtype(r.p, C.uint32_t(slot), C.int(memType))
}

// GuardRevoke wraps velo_ucx_guard_revoke: later requests for slot are refused.
func GuardRevoke(r Ring, slot uint32) { C.velo_ucx_guard_revoke(r.p, C.uint32_t(slot)) }

// GuardInflight wraps velo_ucx_guard_inflight: replies still reading slot's memory.
func GuardInflight(r Ring, slot uint32) uint32 {
	return uint32(C.velo_ucx_guard_inflight(r.p, C.uint32_t(slot)))
}

// GuardRelease wraps velo_ucx_guard_release: slot may be reused.
func GuardRelease(r Ring, slot uint32) { C.velo_ucx_guard_release(r.p, C.uint32_t(slot)) }

// GuardSetHolder wraps velo_ucx_guard_set_holder: slot serves only requests arriving on an
// endpoint bound to holder (0: any endpoint).
func GuardSetHolder(r Ring, slot uint32, holder uint64) {
	C.velo_ucx_guard_set_holder(r.p, C.uint32_t(slot), C.uint64_t(holder))
}

// GuardBindEp wraps velo_ucx_guard_bind_ep: requests arriving on ep come from holder. It fails
// only when memory runs out (or the guard is not enabled).
func GuardBindEp(r Ring, ep Ep, holder uint64) bool {
	return C.velo_ucx_guard_bind_ep(r.p, ep.p, C.uint64_t(holder)) == 0
}

// GuardUnbindEp wraps velo_ucx_guard_unbind_ep: ep speaks for no holder any more.
func GuardUnbindEp(r Ring, ep Ep) { C.velo_ucx_guard_unbind_ep(r.p, ep.p) }

// RingGuardRefusedHolder is how many guarded GETs and PUTs this worker refused because they
// arrived on no endpoint of the key's holder.
func RingGuardRefusedHolder(r Ring) uint64 { return uint64(r.p.guard_refused_holder) }

// Capability bits of Resource.IfaceFlags (UCT_IFACE_FLAG_*) and Resource.MDFlags.
const (
	IfaceFlagAMShort           = uint64(C.UCT_IFACE_FLAG_AM_SHORT)
	IfaceFlagAMBcopy           = uint64(C.UCT_IFACE_FLAG_AM_BCOPY)
	IfaceFlagAMZcopy           = uint64(C.UCT_IFACE_FLAG_AM_ZCOPY)
	IfaceFlagPutShort          = uint64(C.UCT_IFACE_FLAG_PUT_SHORT)
	IfaceFlagPutBcopy          = uint64(C.UCT_IFACE_FLAG_PUT_BCOPY)
	IfaceFlagPutZcopy          = uint64(C.UCT_IFACE_FLAG_PUT_ZCOPY)
	IfaceFlagGetShort          = uint64(C.UCT_IFACE_FLAG_GET_SHORT)
	IfaceFlagGetBcopy          = uint64(C.UCT_IFACE_FLAG_GET_BCOPY)
	IfaceFlagGetZcopy          = uint64(C.UCT_IFACE_FLAG_GET_ZCOPY)
	IfaceFlagErrPeerFailure    = uint64(C.UCT_IFACE_FLAG_ERRHANDLE_PEER_FAILURE)
	IfaceFlagConnectToIface    = uint64(C.UCT_IFACE_FLAG_CONNECT_TO_IFACE)
	IfaceFlagConnectToEP       = uint64(C.UCT_IFACE_FLAG_CONNECT_TO_EP)
	IfaceFlagConnectToSockaddr = uint64(C.UCT_IFACE_FLAG_CONNECT_TO_SOCKADDR)
	IfaceFlagEPKeepalive       = uint64(C.UCT_IFACE_FLAG_EP_KEEPALIVE)

	MDFlagAlloc    = uint64(C.UCT_MD_FLAG_ALLOC)
	MDFlagReg      = uint64(C.UCT_MD_FLAG_REG)
	MDFlagNeedRKey = uint64(C.UCT_MD_FLAG_NEED_RKEY)
	MDFlagRKeyPtr  = uint64(C.UCT_MD_FLAG_RKEY_PTR)
	MDFlagSockaddr = uint64(C.UCT_MD_FLAG_SOCKADDR)

	ComponentFlagCM = uint64(C.UCT_COMPONENT_FLAG_CM)

	DeviceTypeNet  = int(C.UCT_DEVICE_TYPE_NET)
	DeviceTypeShm  = int(C.UCT_DEVICE_TYPE_SHM)
	DeviceTypeAcc  = int(C.UCT_DEVICE_TYPE_ACC)
	DeviceTypeSelf = int(C.UCT_DEVICE_TYPE_SELF)
)

// QueryResources walks uct_query_components, uct_component_query, uct_md_open,
// uct_md_query, uct_md_query_tl_resources and uct_iface_open/uct_iface_query
// (helper velo_ucx_query_resources).
func QueryResources() ([]Resource, Status) {
	var items *C.velo_ucx_resource_t
	var n C.size_t
	s := Status(C.velo_ucx_query_resources(&items, &n))
	if s != OK {
		return nil, s
	}
	defer C.free(unsafe.Pointer(items))
	out := make([]Resource, 0, int(n))
	for _, r := range unsafe.Slice(items, int(n)) {
		out = append(out, Resource{
			Component:      C.GoString(&r.component[0]),
			ComponentFlags: uint64(r.component_flags),
			MD:             C.GoString(&r.md[0]),
			MDStatus:       Status(r.md_status),
			MDFlags:        uint64(r.md_flags),
			RKeyPackedSize: uint64(r.rkey_packed_size),
			RegCostC:       float64(r.reg_cost_c),
			RegCostM:       float64(r.reg_cost_m),
			Transport:      C.GoString(&r.tl[0]),
			Device:         C.GoString(&r.dev[0]),
			DeviceType:     int(r.dev_type),
			SysDevice:      int(r.sys_dev),
			IfaceStatus:    Status(r.iface_status),
			IfaceFlags:     uint64(r.iface_flags),
			PutMaxShort:    uint64(r.put_max_short),
			PutMaxBcopy:    uint64(r.put_max_bcopy),
			PutMaxZcopy:    uint64(r.put_max_zcopy),
			GetMaxShort:    uint64(r.get_max_short),
			GetMaxBcopy:    uint64(r.get_max_bcopy),
			GetMaxZcopy:    uint64(r.get_max_zcopy),
			AMMaxShort:     uint64(r.am_max_short),
			AMMaxBcopy:     uint64(r.am_max_bcopy),
			AMMaxZcopy:     uint64(r.am_max_zcopy),
			AMMaxHdr:       uint64(r.am_max_hdr),
			LatencySec:     float64(r.latency_c),
			BWDedicated:    float64(r.bw_dedicated),
			BWShared:       float64(r.bw_shared),
			OverheadSec:    float64(r.overhead),
			MaxEndpoints:   uint64(r.max_num_eps),
			Priority:       int(r.priority),
		})
	}
	return out, OK
}

// SymbolLoaded reports whether any object loaded in this process (the program, a shared
// library, or a UCX plugin that UCX dlopen'ed) exports name (helper velo_ucx_symbol_loaded,
// dl_iterate_phdr + dlsym).
func SymbolLoaded(name string) bool {
	cn := C.CString(name)
	defer C.free(unsafe.Pointer(cn))
	return C.velo_ucx_symbol_loaded(cn) != 0
}

// IOVSize is sizeof(ucp_dt_iov_t).
const IOVSize = int(C.sizeof_ucp_dt_iov_t)

// Malloc wraps malloc (C memory for iov arrays and bounce buffers); Free wraps free.
func Malloc(n uintptr) unsafe.Pointer { return C.malloc(C.size_t(n)) }

// Calloc wraps calloc: n zeroed bytes. Memory that Go code stores pointers into must start
// zeroed: the store goes through the write barrier, which reads the slot's old value as a
// pointer, and malloc's leftovers there are a bad pointer to the collector.
func Calloc(n uintptr) unsafe.Pointer { return C.calloc(1, C.size_t(n)) }

// Free wraps free.
func Free(p unsafe.Pointer) { C.free(p) }

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// MemoryTypeLimit is UCS_MEMORY_TYPE_LAST of the compile-time headers: the number of
// memory types this UCX knows.
const MemoryTypeLimit = int(C.UCS_MEMORY_TYPE_LAST)

// Memory types (ucs_memory_type_t), and MemTypeUnset: the field is left unset and UCX detects
// the memory's type itself.
const (
	MemTypeUnset = int(C.VELO_UCX_MEMTYPE_UNSET)
	MemTypeHost  = int(C.UCS_MEMORY_TYPE_HOST)
	MemTypeCUDA  = int(C.UCS_MEMORY_TYPE_CUDA)
)

// UcmEventsEnabled reads ucm_global_opts.enable_events (UCX_MEM_EVENTS as UCM applies it).
func UcmEventsEnabled() bool { return C.velo_ucx_ucm_events_enabled() != 0 }

// FaultSignalsYielded reports what the library constructor velo_ucx_yield_fault_signals did: -1
// when the user set UCX_HANDLE_ERRORS (UCX's handlers were left alone), otherwise how many of UCX's
// fault handlers it removed (UCX_HANDLE_ERRORS=none was set for a UCX initialised later).
func FaultSignalsYielded() int { return int(C.velo_ucx_fault_signals_yielded()) }

// UcmSetEvents wraps ucm_set_global_opts with enable_events changed (helper
// velo_ucx_ucm_set_events).
func UcmSetEvents(enable bool) { C.velo_ucx_ucm_set_events(cbool(enable)) }
