//go:build !cgo || !linux

package capi

// The guarded PUT without UCX: see guardput_cgo.go. The values are capi.h's.
const (
	GuardPutMagic     = uint32(0x56475031)
	GuardPutReqHdrLen = int(40)
	GuardPutRepHdrLen = int(16)

	GuardPutVMagic     = uint32(0x56505631)
	GuardPutVMax       = int(64)
	GuardPutVReqHdrLen = int(16)
	GuardPutVRepHdrLen = int(16)

	AccessRead  = uint32(1)
	AccessWrite = uint32(2)

	PutRefusedMalformed = int(0)
	PutRefusedRevoked   = int(1)
	PutRefusedReadOnly  = int(2)
	PutRefusedRange     = int(3)
	PutRefusedHolder    = int(4)
	PutRefusedKinds     = int(5)
)

// GuardAddAccess fails.
func GuardAddAccess(r Ring, token, base, length uint64, access uint32) (uint32, Status) {
	return 0, NotCompiled
}

// GuardPutEnable fails.
func GuardPutEnable(r Ring, reqID, repID, vreqID, vrepID uint16) Status { return NotCompiled }

// GuardPutStats is all zero.
func GuardPutStats(r Ring) PutStats { return PutStats{LastReason: -1} }

// GuardLayouts returns nil: there is no C compiler's layout to report.
func GuardLayouts() []LayoutField { return nil }
