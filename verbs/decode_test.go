package verbs

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestParsePortState(t *testing.T) {
	good := map[string]PortState{"0: NOP": PortNOP, "1: DOWN": PortDown, "2: INIT": PortInit, "3: ARMED": PortArmed, "4: ACTIVE": PortActive, "5: ACTIVE_DEFER": PortActiveDefer, "9: UNKNOWN": 9}
	for in, want := range good {
		got, err := ParsePortState(in)
		if err != nil || got != want {
			t.Errorf("ParsePortState(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"ACTIVE", "4:ACTIVE", "4: DOWN", "x: ACTIVE", "256: X", "", "4: ACTIVE\n"} {
		if _, err := ParsePortState(in); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParsePortState(%q) accepted", in)
		}
	}
	if PortActive.String() != "PORT_ACTIVE" || PortDown.String() != "PORT_DOWN" || PortState(9).String() != "PORT_STATE(9)" {
		t.Errorf("names: %v %v %v", PortActive, PortDown, PortState(9))
	}
}

func TestParsePhysState(t *testing.T) {
	good := map[string]PhysState{"1: Sleep": PhysSleep, "2: Polling": PhysPolling, "3: Disabled": PhysDisabled, "4: PortConfigurationTraining": PhysPortConfigurationTraining, "5: LinkUp": PhysLinkUp, "6: LinkErrorRecovery": PhysLinkErrorRecovery, "7: Phy Test": PhysPhyTest, "0: <unknown>": 0, "8: <unknown>": 8}
	for in, want := range good {
		got, err := ParsePhysState(in)
		if err != nil || got != want {
			t.Errorf("ParsePhysState(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"LinkUp", "5: Polling", "5 LinkUp", "-1: x"} {
		if _, err := ParsePhysState(in); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParsePhysState(%q) accepted", in)
		}
	}
	if PhysLinkUp.String() != "LinkUp" || PhysPhyTest.String() != "Phy Test" || PhysState(0).String() != "PhysState(0)" {
		t.Error("phys state names")
	}
}

func TestParseLinkLayer(t *testing.T) {
	for in, want := range map[string]LinkLayer{"InfiniBand": LinkLayerInfiniBand, "Ethernet": LinkLayerEthernet, "Unknown": LinkLayerUnspecified} {
		got, err := ParseLinkLayer(in)
		if err != nil || got != want || got.String() != in {
			t.Errorf("ParseLinkLayer(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParseLinkLayer("infiniband"); !errors.Is(err, ErrMalformed) {
		t.Error("lower-case link layer accepted")
	}
}

func TestParseRate(t *testing.T) {
	good := map[string]Rate{
		"400 Gb/sec (4X NDR)":  {4000, 4, "NDR"},
		"200 Gb/sec (2X NDR)":  {2000, 2, "NDR"},
		"2.5 Gb/sec (1X SDR)":  {25, 1, "SDR"},
		"10 Gb/sec (4X SDR)":   {100, 4, "SDR"},
		"56 Gb/sec (4X FDR)":   {560, 4, "FDR"},
		"40 Gb/sec (4X FDR10)": {400, 4, "FDR10"},
		"168 Gb/sec (12X FDR)": {1680, 12, "FDR"},
		"800 Gb/sec (4X XDR)":  {8000, 4, "XDR"},
		"100 Gb/sec (4X EDR)":  {1000, 4, "EDR"},
		"10 Gb/sec (4X)":       {100, 4, ""}, // kernels before 4.17 printed no name for SDR
	}
	for in, want := range good {
		got, err := ParseRate(in)
		if err != nil || got != want {
			t.Errorf("ParseRate(%q) = %+v, %v; want %+v", in, got, err, want)
			continue
		}
		if got.String() != in {
			t.Errorf("Rate(%q).String() = %q", in, got.String())
		}
	}
	if r := (Rate{DeciGbps: 25}); r.Gbps() != 2.5 {
		t.Errorf("Gbps = %v", r.Gbps())
	}
	for _, in := range []string{"400 Gb/sec (4X HDR)", "400 Gb/sec", "400Gb/sec (4X NDR)", "2.7 Gb/sec (1X SDR)", "400 Gb/sec (X NDR)", "400 Gb/sec (4X ZDR)", "-10 Gb/sec (4X)", "400 Gb/sec (0X NDR)", "400 Gb/sec (4 NDR)"} {
		if _, err := ParseRate(in); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseRate(%q) accepted", in)
		}
	}
}

func TestParseGUID(t *testing.T) {
	g, err := ParseGUID("b83f:d203:00a1:b2c4")
	if err != nil || g != 0xb83fd20300a1b2c4 || g.String() != "b83f:d203:00a1:b2c4" {
		t.Errorf("ParseGUID = %v, %v", g, err)
	}
	for _, in := range []string{"b83fd20300a1b2c4", "b83f:d203:00a1", "b83f:d203:00a1:b2c", "b83f:d203:00a1:b2c4:0000", "b83f:d203:00a1:zzzz", "+83f:d203:00a1:b2c4"} {
		if _, err := ParseGUID(in); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseGUID(%q) accepted", in)
		}
	}
}

func TestParseGID(t *testing.T) {
	g, err := ParseGID("fe80:0000:0000:0000:b83f:d203:00a1:b2c4")
	if err != nil {
		t.Fatal(err)
	}
	if g.String() != "fe80::b83f:d203:a1:b2c4" || g.SysfsString() != "fe80:0000:0000:0000:b83f:d203:00a1:b2c4" {
		t.Errorf("GID prints %q / %q", g.String(), g.SysfsString())
	}
	if g.SubnetPrefix() != 0xfe80000000000000 || g.InterfaceID() != 0xb83fd20300a1b2c4 || g.IsZero() {
		t.Errorf("GID parts: %x %v", g.SubnetPrefix(), g.InterfaceID())
	}
	v4, _ := ParseGID("0000:0000:0000:0000:0000:ffff:c0a8:3c0b")
	if v4.Addr() != netip.MustParseAddr("192.168.60.11") || v4 != GIDFromAddr(netip.MustParseAddr("192.168.60.11")) {
		t.Errorf("IPv4-mapped GID: %v", v4.Addr())
	}
	if z, _ := ParseGID("0000:0000:0000:0000:0000:0000:0000:0000"); !z.IsZero() {
		t.Error("zero GID not zero")
	}
	for _, in := range []string{"fe80::b83f:d203:a1:b2c4", "fe80:0000:0000:0000:b83f:d203:00a1", "fe80:0000:0000:0000:b83f:d203:00a1:b2c4:0000", "fe80:0000:0000:0000:b83f:d203:00a1:xxxx", "fe80:0000:0000:0000:b83f:d203:00a1:2c4"} {
		if _, err := ParseGID(in); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseGID(%q) accepted", in)
		}
	}
}

func TestParseGIDType(t *testing.T) {
	cases := []struct {
		in   string
		link LinkLayer
		want GIDType
	}{
		{"IB/RoCE v1", LinkLayerInfiniBand, GIDTypeIB},
		{"IB/RoCE v1", LinkLayerEthernet, GIDTypeRoCEv1},
		{"RoCE v2", LinkLayerEthernet, GIDTypeRoCEv2},
	}
	for _, c := range cases {
		got, err := ParseGIDType(c.in, c.link)
		if err != nil || got != c.want {
			t.Errorf("ParseGIDType(%q, %v) = %v, %v", c.in, c.link, got, err)
		}
	}
	if _, err := ParseGIDType("RoCE v3", LinkLayerEthernet); !errors.Is(err, ErrMalformed) {
		t.Error("RoCE v3 accepted")
	}
	if GIDTypeIB.String() != "IB" || GIDTypeRoCEv1.String() != "RoCE v1" || GIDTypeRoCEv2.String() != "RoCE v2" || GIDType(7).String() != "GIDType(7)" {
		t.Error("GID type names")
	}
}

func TestPKeyMembership(t *testing.T) {
	cases := []struct {
		in        string
		key       PKey
		partition uint16
		m         Membership
	}{
		{"0xffff", 0xffff, 0x7fff, MembershipFull},
		{"0x7fff", 0x7fff, 0x7fff, MembershipPartial},
		{"0x8001", 0x8001, 0x0001, MembershipFull},
		{"0x0001", 0x0001, 0x0001, MembershipPartial},
		{"0x0000", 0x0000, 0, MembershipNone},
		{"0x8000", 0x8000, 0, MembershipNone},
	}
	for _, c := range cases {
		k, err := ParsePKey(c.in)
		if err != nil || k != c.key || k.Partition() != c.partition || k.Membership() != c.m || k.String() != c.in {
			t.Errorf("ParsePKey(%q) = %v (partition %#x, %v), %v", c.in, k, k.Partition(), k.Membership(), err)
		}
	}
	for _, in := range []string{"ffff", "0xfffff", "0xfff", "65535", "0xgggg", "0X7FFF"} {
		if _, err := ParsePKey(in); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParsePKey(%q) accepted", in)
		}
	}
	if MembershipFull.String() != "full" || MembershipPartial.String() != "partial" || MembershipNone.String() != "none" {
		t.Error("membership names")
	}
}

func TestParseNodeType(t *testing.T) {
	for in, want := range map[string]NodeType{"1: CA": NodeCA, "2: switch": NodeSwitch, "3: router": NodeRouter, "4: RNIC": NodeRNIC, "5: usNIC": NodeUSNIC, "6: usNIC UDP": NodeUSNICUDP, "7: unspecified": NodeUnspecified, "9: <unknown>": 9} {
		got, err := ParseNodeType(in)
		if err != nil || got != want {
			t.Errorf("ParseNodeType(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParseNodeType("1: RNIC"); !errors.Is(err, ErrMalformed) {
		t.Error("mismatched node type accepted")
	}
	if NodeCA.String() != "CA" || NodeType(0).String() != "NodeType(0)" {
		t.Error("node type names")
	}
}

func TestParsePortSpec(t *testing.T) {
	for in, want := range map[string]struct {
		dev  string
		port int
	}{"mlx5_0:1": {"mlx5_0", 1}, "mlx5_bond_0:1": {"mlx5_bond_0", 1}, "mlx4_0:2": {"mlx4_0", 2}} {
		d, p, err := ParsePortSpec(in)
		if err != nil || d != want.dev || p != want.port {
			t.Errorf("ParsePortSpec(%q) = %q %d %v", in, d, p, err)
		}
	}
	for _, in := range []string{"mlx5_0", "mlx5_0:", ":1", "mlx5_0:0", "mlx5_0:x", "mlx5_0:256", "a/b:1", "mlx5_0:1:2"} {
		if _, _, err := ParsePortSpec(in); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "mlx5_0:1") {
			t.Errorf("ParsePortSpec(%q) error %v", in, err)
		}
	}
}

func TestNaturalCompare(t *testing.T) {
	names := []string{"mlx5_10", "mlx5_2", "mlx5_bond_0", "ib1", "mlx4_0", "mlx5_1"}
	slices.SortFunc(names, naturalCompare)
	want := []string{"ib1", "mlx4_0", "mlx5_1", "mlx5_2", "mlx5_10", "mlx5_bond_0"}
	if !slices.Equal(names, want) {
		t.Errorf("sorted %v, want %v", names, want)
	}
}

// Fuzz targets: every decoder must reject or accept without panicking, and what it accepts must
// print back to the same value. The f.Add seeds run as ordinary tests.

func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"400 Gb/sec (4X NDR)", "2.5 Gb/sec (1X SDR)", "10 Gb/sec (4X)", "56 Gb/sec (4X FDR)", "x Gb/sec (", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRate(s)
		if err != nil {
			return
		}
		back, err := ParseRate(r.String())
		if err != nil || back != r {
			t.Fatalf("%q parsed to %+v, which prints as %q and reparses to %+v, %v", s, r, r.String(), back, err)
		}
	})
}

func FuzzParseGID(f *testing.F) {
	for _, s := range []string{"fe80:0000:0000:0000:b83f:d203:00a1:b2c4", "0000:0000:0000:0000:0000:ffff:c0a8:3c0b", "::1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		g, err := ParseGID(s)
		if err != nil {
			return
		}
		back, err := ParseGID(g.SysfsString())
		if err != nil || back != g || GIDFromAddr(netip.AddrFrom16(g)) != g {
			t.Fatalf("%q round trip: %v %v", s, back, err)
		}
	})
}

func FuzzParsePKey(f *testing.F) {
	for _, s := range []string{"0xffff", "0x7fff", "0x0000", "0x", "0x-001"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParsePKey(s)
		if err != nil {
			return
		}
		if back, err := ParsePKey(k.String()); err != nil || back != k {
			t.Fatalf("%q round trip: %v %v", s, back, err)
		}
		if k.Membership() == MembershipFull && k&0x8000 == 0 {
			t.Fatalf("%v full without the membership bit", k)
		}
	})
}

func FuzzParseGUID(f *testing.F) {
	for _, s := range []string{"b83f:d203:00a1:b2c4", "0000:0000:0000:0000", "::::"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		g, err := ParseGUID(s)
		if err != nil {
			return
		}
		if back, err := ParseGUID(g.String()); err != nil || back != g {
			t.Fatalf("%q round trip: %v %v", s, back, err)
		}
	})
}

func FuzzParseNumberedStates(f *testing.F) {
	for _, s := range []string{"4: ACTIVE", "5: LinkUp", "1: CA", "255: x", ": ", "4: "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if st, err := ParsePortState(s); err == nil && int(st) < len(portStateNames) {
			if _, err := ParsePortState(strings.Replace(s, ": ", ":  ", 1)); err == nil && !strings.HasPrefix(portStateNames[st], " ") {
				t.Fatalf("%q accepted with a doubled separator", s)
			}
		}
		ParsePhysState(s)
		ParseNodeType(s)
		ParseLinkLayer(s)
		ParseGIDType(s, LinkLayerEthernet)
	})
}

func FuzzParsePortSpec(f *testing.F) {
	for _, s := range []string{"mlx5_0:1", "mlx5_0", ":", "a:99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, p, err := ParsePortSpec(s)
		if err != nil {
			return
		}
		if d == "" || p < 1 || p > 255 {
			t.Fatalf("%q accepted as %q %d", s, d, p)
		}
	})
}
