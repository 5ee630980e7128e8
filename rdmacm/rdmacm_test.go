package rdmacm

import (
	"errors"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/velo-go/velo/verbs"
)

func fixture(name string, ifcs ...Interface) Options {
	return Options{
		Paths:      verbs.Paths{Sysfs: filepath.Join("..", "verbs", "testdata", "sysfs", name), Dev: filepath.Join("..", "verbs", "testdata", "dev", name)},
		Interfaces: func() ([]Interface, error) { return ifcs, nil },
	}
}

func iface(name string, prefixes ...string) Interface {
	i := Interface{Name: name}
	for _, p := range prefixes {
		i.Addrs = append(i.Addrs, netip.MustParsePrefix(p))
	}
	return i
}

func TestResolveOnFixtures(t *testing.T) {
	eth0 := iface("eth0", "10.0.0.5/24")
	cases := []struct {
		name    string
		opts    Options
		ip      string
		want    Location
		wantErr error
		mention string
	}{
		{"RoCE IPv4 by GID, v2 preferred", fixture("cx7-roce-active"), "192.168.60.11",
			Location{Device: "mlx5_0", Port: 1, Netdev: "ens1f0np0", GIDIndex: 3}, nil, ""},
		{"RoCE IPv6 by GID", fixture("cx7-roce-active"), "fd00:60::11",
			Location{Device: "mlx5_0", Port: 1, Netdev: "ens1f0np0", GIDIndex: 5}, nil, ""},
		{"RoCE IPv4 given as IPv4-mapped IPv6", fixture("cx7-roce-active"), "::ffff:192.168.60.11",
			Location{Device: "mlx5_0", Port: 1, Netdev: "ens1f0np0", GIDIndex: 3}, nil, ""},
		{"IPoIB by netdev", fixture("cx7-ib-active", eth0, iface("ibp23s0", "192.168.50.11/24")), "192.168.50.11",
			Location{Device: "mlx5_0", Port: 1, Netdev: "ibp23s0", GIDIndex: -1}, nil, ""},
		{"second port of a two-port device", fixture("cx3-vpi-two-port", eth0, iface("enp3s0d1", "10.3.0.2/24")), "10.3.0.2",
			Location{Device: "mlx4_0", Port: 2, Netdev: "enp3s0d1", GIDIndex: -1}, nil, ""},
		{"second device of a dual-port card", fixture("cx7-dual-port-one-active", iface("ibp23s0f1", "192.168.51.12/24")), "192.168.51.12",
			Location{Device: "mlx5_1", Port: 1, Netdev: "ibp23s0f1", GIDIndex: -1}, nil, ""},
		{"address on a plain NIC", fixture("cx7-ib-active", eth0), "10.0.0.5", Location{}, verbs.ErrNoDevice, "10.0.0.5 is on eth0, which no RDMA port carries"},
		{"address nowhere", fixture("cx7-ib-active", eth0), "10.9.9.9", Location{}, verbs.ErrNoDevice, "not assigned to any interface"},
		{"node without RDMA", fixture("no-devices", eth0), "10.0.0.5", Location{}, verbs.ErrNoDevice, "class/infiniband"},
		{"unspecified address", fixture("cx7-ib-active"), "0.0.0.0", Location{}, verbs.ErrInvalid, "usable address"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ip := netip.MustParseAddr(c.ip)
			got, err := Resolve(ip, c.opts)
			if c.wantErr != nil {
				if !errors.Is(err, c.wantErr) || !strings.Contains(err.Error(), c.mention) {
					t.Fatalf("Resolve(%s) = %+v, %v; want %v mentioning %q", ip, got, err, c.wantErr, c.mention)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c.want.IP, c.want.Source = ip.Unmap(), SourceSysfs
			if got != c.want {
				t.Fatalf("Resolve(%s) = %+v, want %+v", ip, got, c.want)
			}
			if got.Spec() != c.want.Device+":"+strconv.Itoa(c.want.Port) {
				t.Errorf("Spec = %q", got.Spec())
			}
		})
	}
}

func TestResolveCannotListInterfaces(t *testing.T) {
	opts := fixture("cx7-ib-active")
	opts.Interfaces = func() ([]Interface, error) { return nil, errors.New("netlink refused") }
	_, err := Resolve(netip.MustParseAddr("192.168.50.11"), opts)
	if err == nil || errors.Is(err, verbs.ErrNotSupported) || !strings.Contains(err.Error(), "netlink refused") {
		t.Errorf("an unlistable interface table must be inconclusive: %v", err)
	}
	// The GID path needs no interfaces.
	opts = fixture("cx7-roce-active")
	opts.Interfaces = func() ([]Interface, error) { return nil, errors.New("netlink refused") }
	if loc, err := Resolve(netip.MustParseAddr("192.168.60.11"), opts); err != nil || loc.Spec() != "mlx5_0:1" {
		t.Errorf("RoCE by GID without interfaces: %+v %v", loc, err)
	}
}

func TestGIDOfPrefersRoCEv2(t *testing.T) {
	g := verbs.GIDFromAddr(netip.MustParseAddr("10.1.1.1"))
	pt := verbs.Port{GIDs: []verbs.GIDEntry{
		{Index: 7, GID: g, Type: verbs.GIDTypeRoCEv1, Netdev: "a"},
		{Index: 9, GID: g, Type: verbs.GIDTypeRoCEv2, Netdev: "b"},
		{Index: 11, GID: g, Type: verbs.GIDTypeRoCEv1, Netdev: "c"},
	}}
	if idx, nd, ok := gidOf(pt, netip.MustParseAddr("10.1.1.1")); !ok || idx != 9 || nd != "b" {
		t.Errorf("gidOf = %d %q %v", idx, nd, ok)
	}
	pt.GIDs = pt.GIDs[:1]
	if idx, _, ok := gidOf(pt, netip.MustParseAddr("10.1.1.1")); !ok || idx != 7 {
		t.Errorf("gidOf with only v1 = %d %v", idx, ok)
	}
	ib := verbs.Port{GIDs: []verbs.GIDEntry{{Index: 0, GID: g, Type: verbs.GIDTypeIB}}}
	if _, _, ok := gidOf(ib, netip.MustParseAddr("10.1.1.1")); ok {
		t.Error("an InfiniBand GID matched an IP address")
	}
}

// TestSystemInterfacesLoopback reads this machine's interfaces for real.
func TestSystemInterfacesLoopback(t *testing.T) {
	ifcs, err := SystemInterfaces()
	if err != nil {
		t.Fatal(err)
	}
	ifc, ok := holder(ifcs, netip.MustParseAddr("127.0.0.1"))
	if !ok || ifc.Name != "lo" {
		t.Errorf("127.0.0.1 held by %+v (%v)", ifc, ok)
	}
}

// TestResolveLiveLoopback runs the whole chain on this machine: the loopback address is on no
// RDMA device, and the answer must say so as a definite "no device".
func TestResolveLiveLoopback(t *testing.T) {
	_, err := Resolve(netip.MustParseAddr("127.0.0.1"), Options{})
	if !errors.Is(err, verbs.ErrNoDevice) {
		t.Fatalf("Resolve(127.0.0.1) = %v, want ErrNoDevice", err)
	}
	t.Logf("Resolve(127.0.0.1): %v", err)
}

func TestBothFailedIsInconclusive(t *testing.T) {
	cm, sys := errors.New("rdmacm: librdmacm: not compiled in"), errors.New("rdmacm: cannot read /sys")
	err := error(&bothFailed{ip: netip.MustParseAddr("10.0.0.1"), cm: cm, sys: sys})
	if errors.Is(err, verbs.ErrNotSupported) || !errors.Is(err, cm) || !errors.Is(err, sys) {
		t.Errorf("bothFailed wraps wrongly: %v", err)
	}
	if want := "rdmacm: cannot tell which RDMA device carries 10.0.0.1: librdmacm: librdmacm: not compiled in; sysfs: cannot read /sys"; err.Error() != want {
		t.Errorf("text %q", err)
	}
}
