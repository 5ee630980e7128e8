package verbs_test

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/velo-go/velo/verbs"
)

// fixture returns the Paths of one fixture tree under testdata.
func fixture(name string) verbs.Paths {
	return verbs.Paths{Sysfs: filepath.Join("testdata", "sysfs", name), Dev: filepath.Join("testdata", "dev", name)}
}

func gid(t *testing.T, s string) verbs.GID {
	t.Helper()
	g, err := verbs.ParseGID(s)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func uverbs(fx string, n string, dev string) *verbs.UverbsDevice {
	return &verbs.UverbsDevice{Name: "uverbs" + n, Path: filepath.Join("testdata", "dev", fx, "infiniband", "uverbs"+n), DevNumber: dev, ABIVersion: 1}
}

func cx7(name string, guid, sysGUID verbs.GUID, bus string, numa int, desc string) verbs.Device {
	return verbs.Device{
		Name: name, NodeType: verbs.NodeCA, NodeGUID: guid, SysImageGUID: sysGUID,
		FirmwareVersion: "28.39.1002", HCAType: "MT4129", HWRev: "0x0", BoardID: "MT_0000000838", NodeDesc: desc,
		BusAddress: bus, Driver: "mlx5_core", VendorID: 0x15b3, DeviceID: 0x1021, NUMANode: numa,
	}
}

var (
	ndr4   = verbs.Rate{DeciGbps: 4000, Width: 4, Speed: "NDR"}
	ndr2   = verbs.Rate{DeciGbps: 2000, Width: 2, Speed: "NDR"}
	sdr4   = verbs.Rate{DeciGbps: 100, Width: 4, Speed: "SDR"}
	fdr4   = verbs.Rate{DeciGbps: 560, Width: 4, Speed: "FDR"}
	qdr4   = verbs.Rate{DeciGbps: 400, Width: 4, Speed: "QDR"}
	full   = []verbs.PKeyEntry{{Index: 0, PKey: 0xffff}}
	ibCaps = uint32(0xa751e848)
)

// expected lists, for every fixture tree, every field the probe decodes.
func expected(t *testing.T) map[string][]verbs.Device {
	ibActive := func(fx string, lid uint16, pkey verbs.PKey) []verbs.Device {
		d := cx7("mlx5_0", 0xb83fd20300a1b2c4, 0xb83fd20300a1b2c4, "0000:17:00.0", 0, "node01 mlx5_0")
		d.Uverbs = uverbs(fx, "0", "231:192")
		d.Ports = []verbs.Port{{
			Device: "mlx5_0", Number: 1, State: verbs.PortActive, PhysState: verbs.PhysLinkUp, LinkLayer: verbs.LinkLayerInfiniBand,
			Rate: ndr4, LID: lid, SMLID: 1, CapMask: ibCaps,
			GIDTableLen: 8, GIDs: []verbs.GIDEntry{{Index: 0, GID: gid(t, "fe80:0000:0000:0000:b83f:d203:00a1:b2c4"), Type: verbs.GIDTypeIB}},
			PKeyTableLen: 128, PKeys: []verbs.PKeyEntry{{Index: 0, PKey: pkey}},
			Netdevs: []string{"ibp23s0"},
		}}
		return []verbs.Device{d}
	}

	down := ibActive("cx7-ib-port-down", 0xffff, 0xffff)
	down[0].Ports[0].State, down[0].Ports[0].PhysState, down[0].Ports[0].Rate, down[0].Ports[0].SMLID = verbs.PortDown, verbs.PhysPolling, sdr4, 0

	roce := cx7("mlx5_0", 0x98039b03001a2b3c, 0x98039b03001a2b3c, "0000:17:00.0", 0, "node01 mlx5_0")
	roce.Uverbs = uverbs("cx7-roce-active", "0", "231:192")
	ll, v4, v6 := gid(t, "fe80:0000:0000:0000:9a03:9bff:fe1a:2b3c"), gid(t, "0000:0000:0000:0000:0000:ffff:c0a8:3c0b"), gid(t, "fd00:0060:0000:0000:0000:0000:0000:0011")
	roce.Ports = []verbs.Port{{
		Device: "mlx5_0", Number: 1, State: verbs.PortActive, PhysState: verbs.PhysLinkUp, LinkLayer: verbs.LinkLayerEthernet,
		Rate: ndr4, CapMask: 0x04010000, GIDTableLen: 255,
		GIDs: []verbs.GIDEntry{
			{Index: 0, GID: ll, Type: verbs.GIDTypeRoCEv1, Netdev: "ens1f0np0"},
			{Index: 1, GID: ll, Type: verbs.GIDTypeRoCEv2, Netdev: "ens1f0np0"},
			{Index: 2, GID: v4, Type: verbs.GIDTypeRoCEv1, Netdev: "ens1f0np0"},
			{Index: 3, GID: v4, Type: verbs.GIDTypeRoCEv2, Netdev: "ens1f0np0"},
			{Index: 4, GID: v6, Type: verbs.GIDTypeRoCEv1, Netdev: "ens1f0np0"},
			{Index: 5, GID: v6, Type: verbs.GIDTypeRoCEv2, Netdev: "ens1f0np0"},
		},
		PKeyTableLen: 1, PKeys: full, Netdevs: []string{"ens1f0np0"},
	}}

	dual0 := cx7("mlx5_0", 0xb83fd20300a1c0d0, 0xb83fd20300a1c0d0, "0000:17:00.0", 1, "node02 mlx5_0")
	dual0.Uverbs = uverbs("cx7-dual-port-one-active", "0", "231:192")
	dual0.Ports = []verbs.Port{{
		Device: "mlx5_0", Number: 1, State: verbs.PortActive, PhysState: verbs.PhysLinkUp, LinkLayer: verbs.LinkLayerInfiniBand,
		Rate: ndr2, LID: 0x2a, SMLID: 1, CapMask: ibCaps,
		GIDTableLen: 8, GIDs: []verbs.GIDEntry{{Index: 0, GID: gid(t, "fe80:0000:0000:0000:b83f:d203:00a1:c0d0"), Type: verbs.GIDTypeIB}},
		PKeyTableLen: 128, PKeys: full, Netdevs: []string{"ibp23s0f0"},
	}}
	dual1 := cx7("mlx5_1", 0xb83fd20300a1c0d1, 0xb83fd20300a1c0d0, "0000:17:00.1", 1, "node02 mlx5_1")
	dual1.Uverbs = uverbs("cx7-dual-port-one-active", "1", "231:193")
	dual1.Ports = []verbs.Port{{
		Device: "mlx5_1", Number: 1, State: verbs.PortDown, PhysState: verbs.PhysDisabled, LinkLayer: verbs.LinkLayerInfiniBand,
		Rate: sdr4, LID: 0xffff, CapMask: ibCaps,
		GIDTableLen: 8, GIDs: []verbs.GIDEntry{{Index: 0, GID: gid(t, "fe80:0000:0000:0000:b83f:d203:00a1:c0d1"), Type: verbs.GIDTypeIB}},
		PKeyTableLen: 128, PKeys: full, Netdevs: []string{"ibp23s0f1"},
	}}

	mlx4 := verbs.Device{
		Name: "mlx4_0", NodeType: verbs.NodeCA, NodeGUID: 0x0002c9030010a1b0, SysImageGUID: 0x0002c9030010a1b3,
		FirmwareVersion: "2.42.5000", HCAType: "MT4099", HWRev: "0x0", BoardID: "MT_1090120019", NodeDesc: "node03 mlx4_0",
		BusAddress: "0000:03:00.0", Driver: "mlx4_core", VendorID: 0x15b3, DeviceID: 0x1003, NUMANode: -1,
		Uverbs: uverbs("cx3-vpi-two-port", "0", "231:192"),
	}
	eth := gid(t, "fe80:0000:0000:0000:0202:c9ff:fe10:a1b2")
	mlx4.Ports = []verbs.Port{{
		Device: "mlx4_0", Number: 1, State: verbs.PortActive, PhysState: verbs.PhysLinkUp, LinkLayer: verbs.LinkLayerInfiniBand,
		Rate: fdr4, LID: 7, SMLID: 1, CapMask: 0x02514868,
		GIDTableLen: 128, GIDs: []verbs.GIDEntry{{Index: 0, GID: gid(t, "fe80:0000:0000:0000:0002:c903:0010:a1b1"), Type: verbs.GIDTypeIB}},
		PKeyTableLen: 128, PKeys: full, Netdevs: []string{"ib0"},
	}, {
		Device: "mlx4_0", Number: 2, State: verbs.PortDown, PhysState: verbs.PhysDisabled, LinkLayer: verbs.LinkLayerEthernet,
		Rate: qdr4, CapMask: 0x04010000, GIDTableLen: 128,
		GIDs: []verbs.GIDEntry{
			{Index: 0, GID: eth, Type: verbs.GIDTypeRoCEv1, Netdev: "enp3s0d1"},
			{Index: 1, GID: eth, Type: verbs.GIDTypeRoCEv2, Netdev: "enp3s0d1"},
		},
		PKeyTableLen: 1, PKeys: full, Netdevs: []string{"enp3s0d1"},
	}}

	return map[string][]verbs.Device{
		"cx7-ib-active":            ibActive("cx7-ib-active", 0x1b, 0xffff),
		"cx7-ib-partial-pkey":      ibActive("cx7-ib-partial-pkey", 0x1c, 0x7fff),
		"cx7-ib-port-down":         down,
		"cx7-roce-active":          {roce},
		"cx7-dual-port-one-active": {dual0, dual1},
		"cx3-vpi-two-port":         {mlx4},
	}
}

// TestFixtureDevices reads every fixture tree and compares every decoded field.
func TestFixtureDevices(t *testing.T) {
	want := expected(t)
	entries, err := os.ReadDir(filepath.Join("testdata", "sysfs"))
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, e := range entries {
		name := e.Name()
		t.Run(name, func(t *testing.T) {
			got, err := verbs.Devices(fixture(name))
			if name == "no-devices" {
				if !errors.Is(err, verbs.ErrNoDevice) || !errors.Is(err, verbs.ErrNotSupported) || len(got) != 0 {
					t.Fatalf("Devices = %v, %v; want none and ErrNoDevice", got, err)
				}
				if !strings.Contains(err.Error(), "class/infiniband") {
					t.Errorf("error does not say where it looked: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			w, ok := want[name]
			if !ok {
				t.Fatalf("fixture %s has no expectation in this test; add one", name)
			}
			if !reflect.DeepEqual(got, w) {
				for i := range max(len(got), len(w)) {
					if i >= len(got) || i >= len(w) || !reflect.DeepEqual(got[i], w[i]) {
						t.Errorf("device %d:\n got  %+v\n want %+v", i, at(got, i), at(w, i))
					}
				}
			}
		})
		seen++
	}
	if seen != len(want)+1 {
		t.Errorf("tested %d fixture trees, expected %d", seen, len(want)+1)
	}
}

func at(d []verbs.Device, i int) any {
	if i < len(d) {
		return d[i]
	}
	return "(none)"
}

func TestLookupDeviceAndPort(t *testing.T) {
	p := fixture("cx7-dual-port-one-active")
	d, err := verbs.LookupDevice(p, "mlx5_1")
	if err != nil || d.Name != "mlx5_1" || d.Ports[0].State != verbs.PortDown {
		t.Fatalf("LookupDevice(mlx5_1) = %+v, %v", d, err)
	}
	_, err = verbs.LookupDevice(p, "mlx5_7")
	if !errors.Is(err, verbs.ErrNoDevice) || !strings.Contains(err.Error(), "mlx5_0, mlx5_1") {
		t.Errorf("LookupDevice(mlx5_7) error %v: want ErrNoDevice listing mlx5_0, mlx5_1", err)
	}
	_, err = verbs.LookupDevice(fixture("no-devices"), "mlx5_0")
	if !errors.Is(err, verbs.ErrNoDevice) || !strings.Contains(err.Error(), "no RDMA driver") {
		t.Errorf("LookupDevice on a node without devices: %v", err)
	}
	pt, err := verbs.LookupPort(fixture("cx3-vpi-two-port"), "mlx4_0", 2)
	if err != nil || pt.LinkLayer != verbs.LinkLayerEthernet || pt.Spec() != "mlx4_0:2" {
		t.Errorf("LookupPort(mlx4_0, 2) = %+v, %v", pt, err)
	}
	_, err = verbs.LookupPort(fixture("cx3-vpi-two-port"), "mlx4_0", 3)
	if !errors.Is(err, verbs.ErrNoDevice) || !strings.Contains(err.Error(), "its ports: 1, 2") {
		t.Errorf("LookupPort(mlx4_0, 3) error %v", err)
	}
}

func TestCheckPort(t *testing.T) {
	cases := []struct {
		fixture, spec string
		want          error // nil: the port is usable
		mention       []string
	}{
		{"cx7-ib-active", "mlx5_0:1", nil, nil},
		{"cx7-roce-active", "mlx5_0:1", nil, nil}, // active; that it is RoCE is for the caller to judge
		{"cx7-ib-partial-pkey", "mlx5_0:1", nil, nil},
		{"cx7-ib-port-down", "mlx5_0:1", verbs.ErrPortNotActive, []string{"PORT_DOWN", "Polling", "subnet manager"}},
		{"cx7-dual-port-one-active", "mlx5_0:1", nil, nil},
		{"cx7-dual-port-one-active", "mlx5_1:1", verbs.ErrPortNotActive, []string{"PORT_DOWN", "Disabled"}},
		{"cx3-vpi-two-port", "mlx4_0:2", verbs.ErrPortNotActive, nil},
		{"cx7-ib-active", "mlx5_0:2", verbs.ErrNoDevice, []string{"no port 2"}},
		{"no-devices", "mlx5_0:1", verbs.ErrNoDevice, nil},
		{"cx7-ib-active", "mlx5_0", verbs.ErrInvalid, []string{"<device>:<port>"}},
	}
	for _, c := range cases {
		_, err := verbs.CheckPort(fixture(c.fixture), c.spec)
		if c.want == nil {
			if err != nil {
				t.Errorf("%s %s: %v", c.fixture, c.spec, err)
			}
			continue
		}
		if !errors.Is(err, c.want) {
			t.Errorf("%s %s: error %v, want %v", c.fixture, c.spec, err, c.want)
			continue
		}
		if c.want != verbs.ErrInvalid && !errors.Is(err, verbs.ErrNotSupported) {
			t.Errorf("%s %s: %v is not a definite 'not supported' answer", c.fixture, c.spec, err)
		}
		for _, m := range c.mention {
			if !strings.Contains(err.Error(), m) {
				t.Errorf("%s %s: error %q does not mention %q", c.fixture, c.spec, err, m)
			}
		}
	}
}

func TestDefaultPartition(t *testing.T) {
	cases := map[string]verbs.Membership{
		"cx7-ib-active":       verbs.MembershipFull,
		"cx7-ib-partial-pkey": verbs.MembershipPartial,
		"cx7-roce-active":     verbs.MembershipFull,
	}
	for fx, want := range cases {
		pt, err := verbs.LookupPort(fixture(fx), "mlx5_0", 1)
		if err != nil {
			t.Fatal(err)
		}
		if got, key := pt.DefaultPartition(); got != want || key.Partition() != verbs.DefaultPartition {
			t.Errorf("%s: default partition membership %v (%v), want %v", fx, got, key, want)
		}
	}
	if got, _ := (verbs.Port{}).DefaultPartition(); got != verbs.MembershipNone {
		t.Errorf("a port without P_Keys has membership %v", got)
	}
}

func TestNetdevPort(t *testing.T) {
	cases := []struct {
		fixture, netdev, want string
	}{
		{"cx7-ib-active", "ibp23s0", "mlx5_0:1"},     // IPoIB: parent device and dev_port
		{"cx7-roce-active", "ens1f0np0", "mlx5_0:1"}, // RoCE: GID entries name it
		{"cx3-vpi-two-port", "ib0", "mlx4_0:1"},      // dev_port 0 is port 1
		{"cx3-vpi-two-port", "enp3s0d1", "mlx4_0:2"}, // dev_port 1 is port 2
		{"cx7-dual-port-one-active", "ibp23s0f1", "mlx5_1:1"},
		{"cx7-ib-active", "eth0", ""}, // a virtio NIC carries no RDMA port
	}
	for _, c := range cases {
		devs, err := verbs.Devices(fixture(c.fixture))
		if err != nil {
			t.Fatal(err)
		}
		pt, ok := verbs.NetdevPort(devs, c.netdev)
		got := ""
		if ok {
			got = pt.Spec()
		}
		if got != c.want {
			t.Errorf("%s: NetdevPort(%s) = %q, want %q", c.fixture, c.netdev, got, c.want)
		}
	}
}

func TestRoCEGIDForIP(t *testing.T) {
	pt, err := verbs.LookupPort(fixture("cx7-roce-active"), "mlx5_0", 1)
	if err != nil {
		t.Fatal(err)
	}
	want := verbs.GIDFromAddr(netip.MustParseAddr("192.168.60.11"))
	var types []verbs.GIDType
	for _, e := range pt.GIDs {
		if e.GID == want {
			types = append(types, e.Type)
		}
	}
	if !reflect.DeepEqual(types, []verbs.GIDType{verbs.GIDTypeRoCEv1, verbs.GIDTypeRoCEv2}) {
		t.Errorf("GID entries for 192.168.60.11: %v", types)
	}
}

// copyTree copies a fixture so a test can damage it.
func copyTree(t *testing.T, fx string) verbs.Paths {
	t.Helper()
	dst := t.TempDir()
	src := filepath.Join("testdata", "sysfs", fx)
	err := filepath.Walk(src, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		switch {
		case info.Mode()&os.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			return os.Symlink(link, target)
		case info.IsDir():
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return verbs.Paths{Sysfs: dst, Dev: filepath.Join(t.TempDir(), "dev")}
}

func TestMalformedAttributeIsInconclusive(t *testing.T) {
	for file, value := range map[string]string{
		"ports/1/state":      "ACTIVE\n",
		"ports/1/rate":       "fast\n",
		"ports/1/gids/0":     "fe80::1\n",
		"ports/1/pkeys/0":    "65535\n",
		"node_guid":          "b83fd20300a1b2c4\n",
		"ports/1/lid":        "27\n",
		"ports/1/cap_mask":   "0xzz\n",
		"ports/1/sm_sl":      "-1\n",
		"node_type":          "CA\n",
		"ports/1/phys_state": "5: LinkDown\n",
	} {
		p := copyTree(t, "cx7-ib-active")
		path := filepath.Join(p.Sysfs, "class", "infiniband", "mlx5_0", file)
		if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := verbs.Devices(p)
		if !errors.Is(err, verbs.ErrMalformed) || errors.Is(err, verbs.ErrNotSupported) {
			t.Errorf("%s = %q: error %v, want ErrMalformed and not a 'not supported' answer", file, value, err)
			continue
		}
		if !strings.Contains(err.Error(), file) {
			t.Errorf("%s: error %q does not name the file", file, err)
		}
	}
}

func TestMissingRequiredAttribute(t *testing.T) {
	p := copyTree(t, "cx7-ib-active")
	if err := os.Remove(filepath.Join(p.Sysfs, "class", "infiniband", "mlx5_0", "ports", "1", "state")); err != nil {
		t.Fatal(err)
	}
	_, err := verbs.Devices(p)
	if !errors.Is(err, verbs.ErrMalformed) || !strings.Contains(err.Error(), "state is missing") {
		t.Errorf("Devices without ports/1/state: %v", err)
	}
}

func TestOptionalAttributesMayBeAbsent(t *testing.T) {
	// A device without a parent (soft-RoCE) and without the driver-specific attributes.
	p := copyTree(t, "cx7-roce-active")
	dir := filepath.Join(p.Sysfs, "class", "infiniband", "mlx5_0")
	for _, f := range []string{"device", "hca_type", "board_id", "hw_rev", "fw_ver", "sys_image_guid", "ports/1/rate"} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	d, err := verbs.LookupDevice(p, "mlx5_0")
	if err != nil {
		t.Fatal(err)
	}
	if d.BusAddress != "" || d.Driver != "" || d.NUMANode != -1 || d.HCAType != "" || d.Ports[0].Rate != (verbs.Rate{}) {
		t.Errorf("absent attributes did not read as unknown: %+v", d)
	}
	if got := d.Ports[0].Netdevs; !reflect.DeepEqual(got, []string{"ens1f0np0"}) {
		t.Errorf("netdevs from GID entries: %v", got)
	}
}

func TestUverbsAccess(t *testing.T) {
	// The fixture's sysfs with an empty device root: the node is missing, as in a container
	// started without --device=/dev/infiniband.
	p := fixture("cx7-ib-active")
	p.Dev = t.TempDir()
	d, err := verbs.LookupDevice(p, "mlx5_0")
	if err != nil {
		t.Fatal(err)
	}
	if d.Uverbs == nil || d.Uverbs.Openable() || !errors.Is(d.Uverbs.Err, verbs.ErrNoDevice) || !strings.Contains(d.Uverbs.Err.Error(), "--device=/dev/infiniband") {
		t.Errorf("missing uverbs node: %+v", d.Uverbs)
	}
	ok, err := verbs.LookupDevice(fixture("cx7-ib-active"), "mlx5_0")
	if err != nil || !ok.Uverbs.Openable() {
		t.Errorf("fixture uverbs node not openable: %+v %v", ok.Uverbs, err)
	}
}

func TestPathsDefaults(t *testing.T) {
	var p verbs.Paths
	if p.SysfsRoot() != "/sys" || p.DevRoot() != "/dev" || !p.Live() {
		t.Errorf("zero Paths = %q %q live=%v", p.SysfsRoot(), p.DevRoot(), p.Live())
	}
	if fixture("cx7-ib-active").Live() {
		t.Error("a fixture reports itself live")
	}
}

// TestLiveSystem runs the probe on this machine. Without RDMA devices it must say so cleanly.
func TestLiveSystem(t *testing.T) {
	devs, err := verbs.Devices(verbs.Paths{})
	if errors.Is(err, verbs.ErrNoDevice) {
		t.Logf("this machine has no RDMA devices: %v", err)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		if len(d.Ports) == 0 {
			t.Errorf("%s has no ports", d.Name)
		}
	}
}
