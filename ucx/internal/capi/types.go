package capi

import "unsafe"

// The declarations below are plain Go, the same in every build: the cgo build fills them
// from C (capi_cgo.go), the build without cgo never does (capi_nocgo.go).

// Status is a raw ucs_status_t. Package ucx turns it into an error with the UCX name.
type Status int32

// NotCompiled is the status every function returns in a build without cgo (or off Linux):
// there is no UCX in the binary. It lies outside UCX's range of codes (UCS_ERR_LAST is -100),
// and package ucx turns it into ErrNotCompiled or ErrUnsupported.
const NotCompiled Status = -1000

// Event mirrors velo_ucx_event_t.
type Event struct {
	Kind      uint32
	Status    Status
	AMID      uint32
	AMFlags   uint32
	User      uint64
	Handle    unsafe.Pointer // request, ucp_ep_h or reply ep; C memory, never Go memory
	HeaderOff uintptr
	HeaderLen uintptr
	Data      unsafe.Pointer // C memory owned by UCX until released or received
	DataLen   uintptr
	Length    uintptr
}

// Resource mirrors velo_ucx_resource_t: one transport on one device of one memory domain
// (or a memory domain / component with no transport).
type Resource struct {
	Component      string
	ComponentFlags uint64
	MD             string
	MDStatus       Status
	MDFlags        uint64
	RKeyPackedSize uint64
	RegCostC       float64
	RegCostM       float64
	Transport      string
	Device         string
	DeviceType     int
	SysDevice      int
	IfaceStatus    Status
	IfaceFlags     uint64
	PutMaxShort    uint64
	PutMaxBcopy    uint64
	PutMaxZcopy    uint64
	GetMaxShort    uint64
	GetMaxBcopy    uint64
	GetMaxZcopy    uint64
	AMMaxShort     uint64
	AMMaxBcopy     uint64
	AMMaxZcopy     uint64
	AMMaxHdr       uint64
	LatencySec     float64
	BWDedicated    float64
	BWShared       float64
	OverheadSec    float64
	MaxEndpoints   uint64
	Priority       int
}

// IOV is one ucp_dt_iov_t entry, laid out as UCX reads it.
type IOV struct {
	Buffer unsafe.Pointer
	Length uintptr
}

// HandleID is the identity of an Event.Handle, comparable with Ep.ID and Request.ID.
func HandleID(h unsafe.Pointer) uintptr { return uintptr(h) }

// CBytes is a view of n bytes of C memory at p (valid as long as the C memory is).
func CBytes(p unsafe.Pointer, n uintptr) []byte {
	if p == nil || n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(p), int(n))
}

// LayoutField is where one field of a C struct that crosses a process lies: its offset and size
// as the C compiler lays them out. Name is "struct.field", or "struct" alone for the struct's size
// (Offset 0).
type LayoutField struct {
	Name         string
	Offset, Size int
}
