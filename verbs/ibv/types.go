package ibv

import (
	"fmt"
	"strings"

	"github.com/velo-go/velo/verbs"
)

// Access is the set of IBV_ACCESS_* flags of a memory region. The values are those of verbs.h.
type Access uint32

// Access flags.
const (
	AccessLocalWrite      Access = 1 << 0  // IBV_ACCESS_LOCAL_WRITE
	AccessRemoteWrite     Access = 1 << 1  // IBV_ACCESS_REMOTE_WRITE
	AccessRemoteRead      Access = 1 << 2  // IBV_ACCESS_REMOTE_READ
	AccessRemoteAtomic    Access = 1 << 3  // IBV_ACCESS_REMOTE_ATOMIC
	AccessMWBind          Access = 1 << 4  // IBV_ACCESS_MW_BIND
	AccessZeroBased       Access = 1 << 5  // IBV_ACCESS_ZERO_BASED
	AccessOnDemand        Access = 1 << 6  // IBV_ACCESS_ON_DEMAND
	AccessHugeTLB         Access = 1 << 7  // IBV_ACCESS_HUGETLB
	AccessRelaxedOrdering Access = 1 << 20 // IBV_ACCESS_RELAXED_ORDERING (optional: ignored where unsupported)
)

var accessNames = []struct {
	flag Access
	name string
}{
	{AccessLocalWrite, "LOCAL_WRITE"}, {AccessRemoteWrite, "REMOTE_WRITE"}, {AccessRemoteRead, "REMOTE_READ"},
	{AccessRemoteAtomic, "REMOTE_ATOMIC"}, {AccessMWBind, "MW_BIND"}, {AccessZeroBased, "ZERO_BASED"},
	{AccessOnDemand, "ON_DEMAND"}, {AccessHugeTLB, "HUGETLB"}, {AccessRelaxedOrdering, "RELAXED_ORDERING"},
}

// String lists the flags, e.g. "LOCAL_WRITE|REMOTE_READ".
func (a Access) String() string {
	var parts []string
	rest := a
	for _, n := range accessNames {
		if a&n.flag != 0 {
			parts = append(parts, n.name)
			rest &^= n.flag
		}
	}
	if rest != 0 {
		parts = append(parts, fmt.Sprintf("0x%x", uint32(rest)))
	}
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, "|")
}

const knownAccess = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic | AccessMWBind |
	AccessZeroBased | AccessOnDemand | AccessHugeTLB | AccessRelaxedOrdering

// validate rejects combinations libibverbs would refuse with a bare EINVAL.
func (a Access) validate() error {
	if a&^knownAccess != 0 {
		return fmt.Errorf("%w: unknown access flags 0x%x", verbs.ErrInvalid, uint32(a&^knownAccess))
	}
	if a&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && a&AccessLocalWrite == 0 {
		return fmt.Errorf("%w: access %v: remote write and remote atomic access need AccessLocalWrite too (verbs.h rule)", verbs.ErrInvalid, a)
	}
	return nil
}

// checkBuffer rejects what ibv_reg_mr would fail on with an unexplained EINVAL.
func checkBuffer(buf []byte, access Access) error {
	if len(buf) == 0 {
		return &Error{Op: "ibv_reg_mr", Kind: verbs.ErrInvalid, Detail: "empty buffer"}
	}
	if err := access.validate(); err != nil {
		return &Error{Op: "ibv_reg_mr", Kind: verbs.ErrInvalid, Detail: unwrapText(err, verbs.ErrInvalid)}
	}
	return nil
}

// DeviceInfo is one entry of ibv_get_device_list.
type DeviceInfo struct {
	Name     string         // ibv_get_device_name
	NodeGUID verbs.GUID     // ibv_get_device_guid
	NodeType verbs.NodeType // ibv_device.node_type: 1 CA, 4 RNIC ...
}

// DeviceAttr is the part of struct ibv_device_attr (ibv_query_device) a preflight needs.
type DeviceAttr struct {
	FirmwareVersion string
	NodeGUID        verbs.GUID
	SysImageGUID    verbs.GUID
	MaxMRSize       uint64
	PageSizeCap     uint64
	VendorID        uint32 // IEEE OUI of the vendor, 0x02c9 for Mellanox
	VendorPartID    uint32 // PCI device id: 4129 for ConnectX-7, whose sysfs hca_type is "MT4129"
	HWVersion       uint32
	MaxQP           int
	MaxCQ           int
	MaxMR           int
	MaxPD           int
	PhysPortCount   int
}

// MTU is an InfiniBand path MTU in bytes (256 … 4096); zero when unknown.
type MTU int

func mtuFromEnum(v uint32) MTU {
	if v >= 1 && v <= 5 {
		return MTU(128 << v)
	}
	return 0
}

// PortAttr is struct ibv_port_attr (ibv_query_port), in the types of package verbs where sysfs
// shows the same thing.
type PortAttr struct {
	State        verbs.PortState
	PhysState    verbs.PhysState
	LinkLayer    verbs.LinkLayer
	MaxMTU       MTU
	ActiveMTU    MTU
	LID          uint16
	SMLID        uint16
	LMC          uint8
	SMSL         uint8
	GIDTableLen  int
	PKeyTableLen int
	CapFlags     uint32 // port_cap_flags, the IBA CapabilityMask (sysfs cap_mask)
	ActiveWidth  uint8  // IBV_WIDTH_* code
	ActiveSpeed  uint8  // IBV_SPEED_* code
	Rate         verbs.Rate
}

// GIDEntry is struct ibv_gid_entry (ibv_query_gid_ex).
type GIDEntry struct {
	Index   int
	GID     verbs.GID // zero for an empty entry
	Type    verbs.GIDType
	Ifindex int    // the netdev behind the entry (RoCE); 0 on InfiniBand
	Netdev  string // its name, when it could be looked up
}

// widthLanes maps IBV_WIDTH_* codes to lane counts.
var widthLanes = map[uint8]int{1: 1, 2: 4, 4: 8, 8: 12, 16: 2}

// speedNames maps IBV_SPEED_* codes to IBTA names.
var speedNames = map[uint16]string{1: "SDR", 2: "DDR", 4: "QDR", 8: "FDR10", 16: "FDR", 32: "EDR", 64: "HDR", 128: "NDR", 256: "XDR"}

// laneDeciGbps matches the kernel's per-lane rates, in deci-Gb/s.
var laneDeciGbps = map[string]int{"SDR": 25, "DDR": 50, "QDR": 100, "FDR10": 100, "FDR": 140, "EDR": 250, "HDR": 500, "NDR": 1000, "XDR": 2000}

// rateOf computes a port's rate from its width and speed codes exactly as the kernel's sysfs
// rate attribute does, so the two compare equal: an unknown speed counts as SDR, as there.
func rateOf(width uint8, speed uint16) verbs.Rate {
	lanes := widthLanes[width]
	if lanes == 0 {
		return verbs.Rate{} // the kernel refuses to print a rate for an unknown width
	}
	name, ok := speedNames[speed]
	if !ok {
		name = "SDR"
	}
	return verbs.Rate{DeciGbps: laneDeciGbps[name] * lanes, Width: lanes, Speed: name}
}
