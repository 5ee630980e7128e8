package verbs

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// This file decodes the values the kernel prints in sysfs. Each parser accepts exactly the format
// of drivers/infiniband/core/sysfs.c (quoted in each doc comment) with the trailing newline already
// removed, and returns an error wrapping ErrMalformed for anything else: a probe must never turn
// an unexpected value into a confident answer.

func malformed(what, value string) error {
	return fmt.Errorf("%w: %s %q", ErrMalformed, what, value)
}

// parseNumbered decodes the "<number>: <name>" form of state, phys_state and node_type. names
// holds the kernel's name for each number ("" where it prints none); a known number must carry
// its name, an unknown one may carry anything (the kernel prints a placeholder).
func parseNumbered(what, s string, names []string) (uint8, error) {
	num, name, ok := strings.Cut(s, ": ")
	if !ok {
		return 0, malformed(what, s)
	}
	n, err := strconv.ParseUint(num, 10, 8)
	if err != nil || (int(n) < len(names) && names[n] != "" && name != names[n]) {
		return 0, malformed(what, s)
	}
	return uint8(n), nil
}

// numberedString names a value with the kernel's names, or as Type(n) when it has none.
func numberedString(typ string, v uint8, names []string, first uint8) string {
	if v >= first && int(v) < len(names) && names[v] != "" {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", typ, v)
}

// PortState is a port's logical state. The values are those of the IBA and of enum ibv_port_state,
// so a value read from sysfs and one returned by ibv_query_port compare equal.
type PortState uint8

// Port states.
const (
	PortNOP         PortState = 0
	PortDown        PortState = 1
	PortInit        PortState = 2
	PortArmed       PortState = 3
	PortActive      PortState = 4
	PortActiveDefer PortState = 5
)

var portStateNames = [...]string{"NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"}

// String returns the name ibv_devinfo prints, e.g. "PORT_ACTIVE".
func (s PortState) String() string {
	if int(s) < len(portStateNames) {
		return "PORT_" + portStateNames[s]
	}
	return numberedString("PORT_STATE", uint8(s), nil, 0)
}

// ParsePortState decodes ports/<n>/state, printed as "%d: %s", e.g. "4: ACTIVE". The kernel prints
// "UNKNOWN" as the name of a state it has no name for; the number is what counts then.
func ParsePortState(s string) (PortState, error) {
	n, err := parseNumbered("port state", s, portStateNames[:])
	return PortState(n), err
}

// PhysState is a port's physical state (IBA PortPhysicalState; same values as ibv_port_attr.phys_state).
type PhysState uint8

// Physical states.
const (
	PhysSleep                     PhysState = 1
	PhysPolling                   PhysState = 2
	PhysDisabled                  PhysState = 3
	PhysPortConfigurationTraining PhysState = 4
	PhysLinkUp                    PhysState = 5
	PhysLinkErrorRecovery         PhysState = 6
	PhysPhyTest                   PhysState = 7
)

var physStateNames = [...]string{"<unknown>", "Sleep", "Polling", "Disabled", "PortConfigurationTraining", "LinkUp", "LinkErrorRecovery", "Phy Test"}

// String returns the kernel's name, e.g. "LinkUp" or "Polling".
func (s PhysState) String() string {
	return numberedString("PhysState", uint8(s), physStateNames[:], 1)
}

// ParsePhysState decodes ports/<n>/phys_state, printed as "%u: %s", e.g. "5: LinkUp".
func ParsePhysState(s string) (PhysState, error) {
	n, err := parseNumbered("physical port state", s, physStateNames[:])
	return PhysState(n), err
}

// LinkLayer says what a port speaks. The values are those of IBV_LINK_LAYER_*.
type LinkLayer uint8

// Link layers.
const (
	LinkLayerUnspecified LinkLayer = 0
	LinkLayerInfiniBand  LinkLayer = 1
	LinkLayerEthernet    LinkLayer = 2
)

// String returns "InfiniBand", "Ethernet" or "Unknown", as sysfs prints them.
func (l LinkLayer) String() string {
	switch l {
	case LinkLayerInfiniBand:
		return "InfiniBand"
	case LinkLayerEthernet:
		return "Ethernet"
	}
	return "Unknown"
}

// ParseLinkLayer decodes ports/<n>/link_layer: "InfiniBand", "Ethernet" or "Unknown".
func ParseLinkLayer(s string) (LinkLayer, error) {
	switch s {
	case "InfiniBand":
		return LinkLayerInfiniBand, nil
	case "Ethernet":
		return LinkLayerEthernet, nil
	case "Unknown":
		return LinkLayerUnspecified, nil
	}
	return 0, malformed("link layer", s)
}

// Rate is a port's data rate: active width times per-lane speed.
type Rate struct {
	// DeciGbps is the rate in tenths of Gb/s, the unit the kernel computes in (so 2.5 Gb/s is exact).
	DeciGbps int
	// Width is the number of lanes: 1, 2, 4, 8 or 12.
	Width int
	// Speed is the IBTA per-lane speed name: SDR, DDR, QDR, FDR10, FDR, EDR, HDR, NDR, XDR; empty
	// when the kernel printed none (older kernels did so for SDR).
	Speed string
}

// Gbps returns the rate in Gb/s.
func (r Rate) Gbps() float64 { return float64(r.DeciGbps) / 10 }

// String prints the rate as sysfs does, e.g. "400 Gb/sec (4X NDR)".
func (r Rate) String() string {
	half := ""
	if r.DeciGbps%10 != 0 {
		half = ".5"
	}
	speed := ""
	if r.Speed != "" {
		speed = " " + r.Speed
	}
	return fmt.Sprintf("%d%s Gb/sec (%dX%s)", r.DeciGbps/10, half, r.Width, speed)
}

// laneDeciGbps is the per-lane rate the kernel uses for each speed name, in deci-Gb/s.
var laneDeciGbps = map[string]int{"SDR": 25, "DDR": 50, "QDR": 100, "FDR10": 100, "FDR": 140, "EDR": 250, "HDR": 500, "NDR": 1000, "XDR": 2000}

// ParseRate decodes ports/<n>/rate, printed as "%d%s Gb/sec (%dX%s)", e.g. "400 Gb/sec (4X NDR)" or
// "2.5 Gb/sec (1X SDR)". The rate must equal width times the lane speed, as the kernel computes it.
func ParseRate(s string) (Rate, error) {
	amount, rest, ok := strings.Cut(s, " Gb/sec (")
	if !ok || !strings.HasSuffix(rest, ")") {
		return Rate{}, malformed("rate", s)
	}
	rest = strings.TrimSuffix(rest, ")")
	width, speed, _ := strings.Cut(rest, " ")
	if !strings.HasSuffix(width, "X") {
		return Rate{}, malformed("rate", s)
	}
	w, err := strconv.Atoi(strings.TrimSuffix(width, "X"))
	if err != nil || w <= 0 || w > 64 || !allDigits(strings.TrimSuffix(width, "X")) {
		return Rate{}, malformed("rate", s)
	}
	whole, frac, hasFrac := strings.Cut(amount, ".")
	g, err := strconv.Atoi(whole)
	if err != nil || !allDigits(whole) || g > 1_000_000 || (hasFrac && frac != "5") {
		return Rate{}, malformed("rate", s)
	}
	deci := g * 10
	if hasFrac {
		deci += 5
	}
	if speed != "" {
		lane, known := laneDeciGbps[speed]
		if !known || lane*w != deci {
			return Rate{}, malformed("rate", s)
		}
	}
	return Rate{DeciGbps: deci, Width: w, Speed: speed}, nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// GUID is an EUI-64 identifier: node, system image or port GUID.
type GUID uint64

// String prints the GUID as sysfs does: four groups of four hex digits, "b83f:d203:00a1:b2c4".
func (g GUID) String() string {
	return fmt.Sprintf("%04x:%04x:%04x:%04x", uint16(g>>48), uint16(g>>32), uint16(g>>16), uint16(g))
}

// ParseGUID decodes node_guid and sys_image_guid, printed as "%04x:%04x:%04x:%04x".
func ParseGUID(s string) (GUID, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 4 {
		return 0, malformed("GUID", s)
	}
	var g uint64
	for _, p := range parts {
		if len(p) != 4 {
			return 0, malformed("GUID", s)
		}
		v, err := strconv.ParseUint(p, 16, 16)
		if err != nil {
			return 0, malformed("GUID", s)
		}
		g = g<<16 | v
	}
	return GUID(g), nil
}

// GID is a 128-bit port address. On InfiniBand it is the subnet prefix followed by the port
// GUID; on RoCE it is an IPv6 address or an IPv4-mapped one (::ffff:a.b.c.d) of the netdev.
type GID [16]byte

// IsZero reports whether g is the all-zero GID, which is how sysfs shows an empty table entry.
func (g GID) IsZero() bool { return g == GID{} }

// Addr returns the GID as an IPv6 address (an IPv4-mapped GID yields the IPv4 address).
func (g GID) Addr() netip.Addr { return netip.AddrFrom16(g).Unmap() }

// SubnetPrefix returns the upper 64 bits (InfiniBand subnet prefix, fe80:: by default).
func (g GID) SubnetPrefix() uint64 { return binary.BigEndian.Uint64(g[:8]) }

// InterfaceID returns the lower 64 bits (the port GUID on InfiniBand).
func (g GID) InterfaceID() GUID { return GUID(binary.BigEndian.Uint64(g[8:])) }

// String prints the GID in the compact IPv6 form ("fe80::b83f:d203:a1:b2c4"); an IPv4-mapped GID
// prints as "::ffff:192.168.60.11".
func (g GID) String() string { return netip.AddrFrom16(g).String() }

// SysfsString prints the GID as sysfs does (%pI6: eight groups of four hex digits).
func (g GID) SysfsString() string {
	var b strings.Builder
	for i := 0; i < 16; i += 2 {
		if i > 0 {
			b.WriteByte(':')
		}
		fmt.Fprintf(&b, "%02x%02x", g[i], g[i+1])
	}
	return b.String()
}

// GIDFromAddr returns the GID that RoCE uses for an IP address: the IPv6 address itself, or the
// IPv4-mapped form of an IPv4 address.
func GIDFromAddr(a netip.Addr) GID { return GID(a.As16()) }

// ParseGID decodes ports/<n>/gids/<i>, printed with %pI6: eight groups of four hex digits.
func ParseGID(s string) (GID, error) {
	parts := strings.Split(s, ":")
	if len(parts) != 8 {
		return GID{}, malformed("GID", s)
	}
	var g GID
	for i, p := range parts {
		if len(p) != 4 {
			return GID{}, malformed("GID", s)
		}
		v, err := strconv.ParseUint(p, 16, 16)
		if err != nil {
			return GID{}, malformed("GID", s)
		}
		binary.BigEndian.PutUint16(g[2*i:], uint16(v))
	}
	return g, nil
}

// GIDType is the kind of a GID table entry. The values are those of enum ibv_gid_type_sysfs
// (IBV_GID_TYPE_IB, _ROCE_V1, _ROCE_V2).
type GIDType uint8

// GID types.
const (
	GIDTypeIB     GIDType = 0
	GIDTypeRoCEv1 GIDType = 1
	GIDTypeRoCEv2 GIDType = 2
)

// String returns "IB", "RoCE v1" or "RoCE v2".
func (t GIDType) String() string {
	switch t {
	case GIDTypeIB:
		return "IB"
	case GIDTypeRoCEv1:
		return "RoCE v1"
	case GIDTypeRoCEv2:
		return "RoCE v2"
	}
	return fmt.Sprintf("GIDType(%d)", uint8(t))
}

// ParseGIDType decodes ports/<n>/gid_attrs/types/<i>. The kernel prints "IB/RoCE v1" for both an
// InfiniBand GID and a RoCE v1 GID (they share one value), and "RoCE v2"; the port's link layer
// tells the first two apart.
func ParseGIDType(s string, link LinkLayer) (GIDType, error) {
	switch s {
	case "IB/RoCE v1":
		if link == LinkLayerEthernet {
			return GIDTypeRoCEv1, nil
		}
		return GIDTypeIB, nil
	case "RoCE v2":
		return GIDTypeRoCEv2, nil
	}
	return 0, malformed("GID type", s)
}

// PKey is a partition key. Bit 15 is the membership bit (1 = full member); the low 15 bits name the
// partition. 0xffff is full membership of the default partition, 0x7fff partial membership of it.
type PKey uint16

// Membership is the kind of membership a P_Key grants.
type Membership uint8

// Memberships.
const (
	// MembershipNone: an empty table entry (partition 0 is invalid).
	MembershipNone Membership = iota
	// MembershipPartial: limited member (IBA "limited"); it may talk to full members only. UCX's
	// UCX_IB_PKEY=auto needs full membership, so a partial member must set UCX_IB_PKEY explicitly.
	MembershipPartial
	// MembershipFull: full member; it may talk to every member of the partition.
	MembershipFull
)

// String returns "none", "partial" or "full".
func (m Membership) String() string {
	switch m {
	case MembershipPartial:
		return "partial"
	case MembershipFull:
		return "full"
	}
	return "none"
}

// DefaultPartition is the partition every InfiniBand port is in unless the SM says otherwise.
const DefaultPartition = 0x7fff

// Partition returns the partition number (the low 15 bits).
func (p PKey) Partition() uint16 { return uint16(p) & 0x7fff }

// Membership decodes the membership bit; an entry with partition 0 is empty.
func (p PKey) Membership() Membership {
	switch {
	case p.Partition() == 0:
		return MembershipNone
	case p&0x8000 != 0:
		return MembershipFull
	}
	return MembershipPartial
}

// String prints the P_Key as sysfs does, "0x7fff".
func (p PKey) String() string { return fmt.Sprintf("0x%04x", uint16(p)) }

// ParsePKey decodes ports/<n>/pkeys/<i>, printed as "0x%04x".
func ParsePKey(s string) (PKey, error) {
	if len(s) != 6 || !strings.HasPrefix(s, "0x") {
		return 0, malformed("P_Key", s)
	}
	v, err := strconv.ParseUint(s[2:], 16, 16)
	if err != nil {
		return 0, malformed("P_Key", s)
	}
	return PKey(v), nil
}

// NodeType is the kind of RDMA node (values of the kernel's enum rdma_node_type).
type NodeType uint8

// Node types.
const (
	NodeCA          NodeType = 1
	NodeSwitch      NodeType = 2
	NodeRouter      NodeType = 3
	NodeRNIC        NodeType = 4
	NodeUSNIC       NodeType = 5
	NodeUSNICUDP    NodeType = 6
	NodeUnspecified NodeType = 7
)

var nodeTypeNames = [...]string{"", "CA", "switch", "router", "RNIC", "usNIC", "usNIC UDP", "unspecified"}

// String returns the kernel's name, e.g. "CA".
func (t NodeType) String() string {
	return numberedString("NodeType", uint8(t), nodeTypeNames[:], 1)
}

// ParseNodeType decodes node_type, printed as "%u: %s", e.g. "1: CA".
func ParseNodeType(s string) (NodeType, error) {
	n, err := parseNumbered("node type", s, nodeTypeNames[:])
	return NodeType(n), err
}

// parseHex16 decodes the "0x%x" values of lid and sm_lid.
func parseHex16(what, s string) (uint16, error) {
	if !strings.HasPrefix(s, "0x") {
		return 0, malformed(what, s)
	}
	v, err := strconv.ParseUint(s[2:], 16, 16)
	if err != nil {
		return 0, malformed(what, s)
	}
	return uint16(v), nil
}

// parseHex32 decodes cap_mask, printed as "0x%08x".
func parseHex32(what, s string) (uint32, error) {
	if !strings.HasPrefix(s, "0x") {
		return 0, malformed(what, s)
	}
	v, err := strconv.ParseUint(s[2:], 16, 32)
	if err != nil {
		return 0, malformed(what, s)
	}
	return uint32(v), nil
}

// parseSmallUint decodes lid_mask_count and sm_sl, printed as "%d".
func parseSmallUint(what, s string) (uint8, error) {
	v, err := strconv.ParseUint(s, 10, 8)
	if err != nil {
		return 0, malformed(what, s)
	}
	return uint8(v), nil
}

// ParsePortSpec splits a "<device>:<port>" name such as "mlx5_0:1", the form UCX_NET_DEVICES and
// VELO_TEST_RDMA_DEVICE use.
func ParsePortSpec(s string) (device string, port int, err error) {
	dev, num, ok := strings.Cut(s, ":")
	if ok && dev != "" && !strings.ContainsAny(dev, "/ \t") {
		if n, perr := strconv.Atoi(num); perr == nil && n >= 1 && n <= 255 {
			return dev, n, nil
		}
	}
	return "", 0, fmt.Errorf("%w: RDMA port %q: want <device>:<port>, e.g. mlx5_0:1 (see ibv_devinfo)", ErrInvalid, s)
}
