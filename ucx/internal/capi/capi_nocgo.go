//go:build !cgo || !linux

package capi

import "unsafe"

// The build without UCX: CGO_ENABLED=0, or a system other than Linux. It declares what
// capi_cgo.go declares, so package ucx has one copy of its code on every platform; every
// call that could reach UCX returns NotCompiled (or a zero value where the C function
// returns nothing), and package ucx reports ErrNotCompiled / ErrUnsupported. Nothing here
// ever runs against a UCX, so the constants only have to be distinct; they carry the values
// of UCX 1.13's headers. TestNoCgoTwinDeclaresTheSameAPI keeps the two files in step.

// Compiled is false: this binary has no UCX.
const Compiled = false

// Statuses this package returns itself.
const (
	OK         Status = 0
	InProgress Status = 1
	ErrBusy    Status = -15
	ErrNoMem   Status = -4
	ErrNoElem  Status = -12
)

// Feature bits of ucp_params_t.features.
const (
	FeatureRMA    = uint64(0x2)
	FeatureAM     = uint64(0x40)
	FeatureWakeup = uint64(0x10)
	FeatureAMO32  = uint64(0x4)
	FeatureAMO64  = uint64(0x8)
)

// Thread modes of ucp_worker_params_t.thread_mode.
const (
	ThreadModeSingle     = int(0)
	ThreadModeSerialized = int(1)
	ThreadModeMulti      = int(2)
)

// Flags of ucp_am_send_nbx and of ucp_am_recv_param_t.recv_attr.
const (
	AMSendFlagReply = uint32(0x1)
	AMSendFlagEager = uint32(0x2)
	AMSendFlagRndv  = uint32(0x4)

	AMRecvAttrReplyEP = uint32(0x1)
	AMRecvAttrData    = uint32(0x10000)
	AMRecvAttrRndv    = uint32(0x20000)
	// AMDataInArena: see capi_cgo.go.
	AMDataInArena = uint32(1) << 31
)

// Flags of ucp_mem_map.
const (
	MemMapNonblock = uint32(0x1)
)

// Event kinds of the ring (capi.h).
const (
	EventAM      = uint32(1)
	EventEPError = uint32(2)
	EventReqDone = uint32(3)
)

// Guarded-GET wire constants (capi.h).
const (
	GuardMagic     = uint32(0x56474731)
	GuardReqHdrLen = int(40)
	GuardRepHdrLen = int(16)
	// The vectored guarded GET: a request header, then GuardVMax entries at most; the reply
	// header, then one int32 status per entry.
	GuardVMagic     = uint32(0x56475631)
	GuardVMax       = int(64)
	GuardVReqHdrLen = int(16)
	GuardVEntryLen  = int(32)
	GuardVRepHdrLen = int(16)
)

// Handles: never anything but NULL in this build.
type (
	Config  struct{ p unsafe.Pointer }
	Context struct{ p unsafe.Pointer }
	Worker  struct{ p unsafe.Pointer }
	Ep      struct{ p unsafe.Pointer }
	MemH    struct{ p unsafe.Pointer }
	RKey    struct{ p unsafe.Pointer }
	Request struct{ p unsafe.Pointer }
	Ring    struct{ p unsafe.Pointer }
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

// ID is the endpoint's identity.
func (e Ep) ID() uintptr { return uintptr(e.p) }

// RequestFromHandle is the request an EventReqDone reported.
func RequestFromHandle(h unsafe.Pointer) Request { return Request{h} }

// ID is the request's identity.
func (r Request) ID() uintptr { return uintptr(r.p) }

// UcsStatusString names the status.
func UcsStatusString(s Status) string {
	if s == NotCompiled {
		return "UCX not compiled in"
	}
	return "unknown status"
}

// UcpGetVersion reports 0.0.0: no UCX is linked.
func UcpGetVersion() (major, minor, release uint) { return 0, 0, 0 }

// UcpGetVersionString reports "": no UCX is linked.
func UcpGetVersionString() string { return "" }

// UcpAPIVersion reports 0.0: there were no headers.
func UcpAPIVersion() (major, minor uint) { return 0, 0 }

// UcpConfigRead fails.
func UcpConfigRead() (Config, Status) { return Config{}, NotCompiled }

// UcpConfigModify fails.
func UcpConfigModify(c Config, name, value string) Status { return NotCompiled }

// UcpConfigRelease does nothing.
func UcpConfigRelease(c Config) {}

// UcpConfigPrint fails.
func UcpConfigPrint(c Config) (string, Status) { return "", NotCompiled }

// UcpInit fails.
func UcpInit(c Config, features uint64, mtWorkersShared bool) (Context, Status) {
	return Context{}, NotCompiled
}

// UcpCleanup does nothing.
func UcpCleanup(c Context) {}

// UcpWorkerCreate fails.
func UcpWorkerCreate(c Context, threadMode int) (Worker, Status) { return Worker{}, NotCompiled }

// UcpWorkerDestroy does nothing.
func UcpWorkerDestroy(w Worker) {}

// UcpWorkerGetAddress fails.
func UcpWorkerGetAddress(w Worker) ([]byte, Status) { return nil, NotCompiled }

// UcpWorkerQueryMaxAMHeader fails.
func UcpWorkerQueryMaxAMHeader(w Worker) (int, Status) { return 0, NotCompiled }

// UcpWorkerProgress makes no progress.
func UcpWorkerProgress(w Worker) uint { return 0 }

// UcpWorkerGetEfd fails.
func UcpWorkerGetEfd(w Worker) (int, Status) { return -1, NotCompiled }

// UcpWorkerArm fails.
func UcpWorkerArm(w Worker) Status { return NotCompiled }

// UcpWorkerSignal fails.
func UcpWorkerSignal(w Worker) Status { return NotCompiled }

// RingNew returns no ring.
func RingNew(w Worker) Ring { return Ring{} }

// RingFree does nothing.
func RingFree(r Ring) {}

// RingReset does nothing.
func RingReset(r Ring) {}

// RingLen is 0.
func RingLen(r Ring) int { return 0 }

// RingDropped is 0.
func RingDropped(r Ring) uint64 { return 0 }

// RingUnclaimed is 0.
func RingUnclaimed(r Ring) uint64 { return 0 }

// RingGuardStats is 0, 0.
func RingGuardStats(r Ring) (served, refused uint64) { return 0, 0 }

// RingEvents appends nothing.
func RingEvents(r Ring, dst []Event) []Event { return dst }

// RingBytes is empty.
func RingBytes(r Ring) []byte { return nil }

// UcpWorkerClaimAmIds fails.
func UcpWorkerClaimAmIds(r Ring) Status { return NotCompiled }

// UcpWorkerSetAmRecvHandler fails.
func UcpWorkerSetAmRecvHandler(r Ring, id uint16, enable bool) Status { return NotCompiled }

// UcpEpCreate fails.
func UcpEpCreate(r Ring, addr []byte, errModePeer bool) (Ep, Status) { return Ep{}, NotCompiled }

// UcpEpPrintInfo is "".
func UcpEpPrintInfo(ep Ep) string { return "" }

// UcpAmSendNbx fails.
func UcpAmSendNbx(r Ring, ep Ep, id uint16, header unsafe.Pointer, headerLen uintptr,
	buffer unsafe.Pointer, count uintptr, iov bool, flags uint32, user uint64) (Request, Status) {
	return Request{}, NotCompiled
}

// UcpAmRecvDataNbx fails.
func UcpAmRecvDataNbx(r Ring, desc, buffer unsafe.Pointer, length uintptr, memType int, user uint64) (Request, Status) {
	return Request{}, NotCompiled
}

// UcpAmRecvDataIovNbx fails.
func UcpAmRecvDataIovNbx(r Ring, desc unsafe.Pointer, bufs []unsafe.Pointer, lens []uintptr, memType int, user uint64) (Request, Status) {
	return Request{}, NotCompiled
}

// UcpAmDataRelease does nothing.
func UcpAmDataRelease(w Worker, data unsafe.Pointer) {}

// UcpGetNbx fails.
func UcpGetNbx(r Ring, ep Ep, buffer unsafe.Pointer, length uintptr, remoteAddr uint64, rk RKey, memType int, user uint64) (Request, Status) {
	return Request{}, NotCompiled
}

// UcpPutNbx fails.
func UcpPutNbx(r Ring, ep Ep, buffer unsafe.Pointer, length uintptr, remoteAddr uint64, rk RKey, user uint64) (Request, Status) {
	return Request{}, NotCompiled
}

// UcpAtomicOpNbx fails.
func UcpAtomicOpNbx(r Ring, ep Ep, op uint32, value, reply unsafe.Pointer, size uintptr, remoteAddr uint64, rk RKey, user uint64) (Request, Status) {
	return Request{}, NotCompiled
}

// UcpEpFlushNbx fails.
func UcpEpFlushNbx(r Ring, ep Ep, user uint64) (Request, Status) { return Request{}, NotCompiled }

// UcpWorkerFlushNbx fails.
func UcpWorkerFlushNbx(r Ring, user uint64) (Request, Status) { return Request{}, NotCompiled }

// UcpEpCloseNbx fails.
func UcpEpCloseNbx(r Ring, ep Ep, force bool, user uint64) (Request, Status) {
	return Request{}, NotCompiled
}

// UcpRequestCheckStatus fails.
func UcpRequestCheckStatus(req Request) Status { return NotCompiled }

// UcpRequestCancel does nothing.
func UcpRequestCancel(w Worker, req Request) {}

// UcpRequestFree does nothing.
func UcpRequestFree(req Request) {}

// UcpMemMap fails.
func UcpMemMap(c Context, addr unsafe.Pointer, length uintptr, flags uint32, memType int) (MemH, Status) {
	return MemH{}, NotCompiled
}

// UcpMemUnmap fails.
func UcpMemUnmap(c Context, m MemH) Status { return NotCompiled }

// UcpRkeyPack fails.
func UcpRkeyPack(c Context, m MemH) ([]byte, Status) { return nil, NotCompiled }

// UcpEpRkeyUnpack fails.
func UcpEpRkeyUnpack(ep Ep, buf []byte) (RKey, Status) { return RKey{}, NotCompiled }

// UcpRkeyDestroy does nothing.
func UcpRkeyDestroy(rk RKey) {}

// GuardEnable fails.
func GuardEnable(r Ring, reqID, repID uint16) Status { return NotCompiled }

// GuardVEnable fails.
func GuardVEnable(r Ring, reqID, repID uint16) Status { return NotCompiled }

// GuardAdd fails.
func GuardAdd(r Ring, token, base, length uint64) (uint32, Status) { return 0, NotCompiled }

// GuardSetMemType does nothing.
func GuardSetMemType(r Ring, slot uint32, memType int) {}

// GuardRevoke does nothing.
func GuardRevoke(r Ring, slot uint32) {}

// GuardInflight is 0.
func GuardInflight(r Ring, slot uint32) uint32 { return 0 }

// GuardRelease does nothing.
func GuardRelease(r Ring, slot uint32) {}

// GuardSetHolder does nothing.
func GuardSetHolder(r Ring, slot uint32, holder uint64) {}

// GuardBindEp fails.
func GuardBindEp(r Ring, ep Ep, holder uint64) bool { return false }

// GuardUnbindEp does nothing.
func GuardUnbindEp(r Ring, ep Ep) {}

// RingGuardRefusedHolder is 0.
func RingGuardRefusedHolder(r Ring) uint64 { return 0 }

// Capability bits of Resource.IfaceFlags (UCT_IFACE_FLAG_*) and Resource.MDFlags.
const (
	IfaceFlagAMShort           = uint64(0x1)
	IfaceFlagAMBcopy           = uint64(0x2)
	IfaceFlagAMZcopy           = uint64(0x4)
	IfaceFlagPutShort          = uint64(0x10)
	IfaceFlagPutBcopy          = uint64(0x20)
	IfaceFlagPutZcopy          = uint64(0x40)
	IfaceFlagGetShort          = uint64(0x100)
	IfaceFlagGetBcopy          = uint64(0x200)
	IfaceFlagGetZcopy          = uint64(0x400)
	IfaceFlagErrPeerFailure    = uint64(0x4000000000)
	IfaceFlagConnectToIface    = uint64(0x10000000000)
	IfaceFlagConnectToEP       = uint64(0x20000000000)
	IfaceFlagConnectToSockaddr = uint64(0x40000000000)
	IfaceFlagEPKeepalive       = uint64(0x400000000000)

	MDFlagAlloc    = uint64(0x1)
	MDFlagReg      = uint64(0x2)
	MDFlagNeedRKey = uint64(0x8)
	MDFlagRKeyPtr  = uint64(0x40)
	MDFlagSockaddr = uint64(0x80)

	ComponentFlagCM = uint64(0x1)

	DeviceTypeNet  = int(0)
	DeviceTypeShm  = int(1)
	DeviceTypeAcc  = int(2)
	DeviceTypeSelf = int(3)
)

// QueryResources fails.
func QueryResources() ([]Resource, Status) { return nil, NotCompiled }

// SymbolLoaded is false: nothing of UCX is loaded.
func SymbolLoaded(name string) bool { return false }

// IOVSize is sizeof(ucp_dt_iov_t) on 64-bit systems.
const IOVSize = int(16)

// Malloc returns nil: this build never needs C memory.
func Malloc(n uintptr) unsafe.Pointer { return nil }

// Calloc returns nil.
func Calloc(n uintptr) unsafe.Pointer { return nil }

// Free does nothing.
func Free(p unsafe.Pointer) {}

// MemoryTypeLimit is 0: there were no headers.
const MemoryTypeLimit = int(0)

// Memory types, with the values of UCX's headers.
const (
	MemTypeUnset = int(-1)
	MemTypeHost  = int(0)
	MemTypeCUDA  = int(1)
)

// UcmEventsEnabled is false.
func UcmEventsEnabled() bool { return false }

// FaultSignalsYielded is -1: no constructor ran, UCX's handlers (there are none) were left alone.
func FaultSignalsYielded() int { return -1 }

// UcmSetEvents does nothing.
func UcmSetEvents(enable bool) {}
