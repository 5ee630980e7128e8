package topo

import (
	"bytes"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// This file writes the sysfs trees of testdata/sysfs. TestFixtureTrees checks that the committed
// trees are what it writes, and rewrites them with -update; testdata/README.md says where each
// format comes from. The bad-input tests build their trees with the same builder in a temporary
// folder.

var update = flag.Bool("update", false, "rewrite testdata/sysfs and testdata/golden from the current code")

// builder writes one sysfs tree under root. The first error sticks and is reported by done.
type builder struct {
	root string
	err  error
}

// file writes one attribute; the kernel ends every value with a newline.
func (b *builder) file(rel, value string) { b.raw(rel, value+"\n") }

func (b *builder) raw(rel, content string) {
	if b.err != nil {
		return
	}
	p := filepath.Join(b.root, rel)
	if b.err = os.MkdirAll(filepath.Dir(p), 0o755); b.err == nil {
		b.err = os.WriteFile(p, []byte(content), 0o644)
	}
}

// link makes rel a relative symlink to target (both relative to the root), as sysfs has them.
func (b *builder) link(rel, target string) {
	if b.err != nil {
		return
	}
	p := filepath.Join(b.root, rel)
	var to string
	if to, b.err = filepath.Rel(filepath.Dir(p), filepath.Join(b.root, target)); b.err != nil {
		return
	}
	if b.err = os.MkdirAll(filepath.Dir(p), 0o755); b.err == nil {
		_ = os.Remove(p)
		b.err = os.Symlink(to, p)
	}
}

func (b *builder) done(t testing.TB) string {
	t.Helper()
	require.NoError(t, b.err)
	return b.root
}

// node writes devices/system/node/node<id>/cpulist.
func (b *builder) node(id int, cpus string) {
	b.file(fmt.Sprintf("devices/system/node/node%d/cpulist", id), cpus)
}

// fn is one PCI function: its path below devices/ and its attributes.
type fn struct {
	path           string // "pci0000:16/0000:16:01.0/0000:17:00.0"
	vendor, device string // "0x10de", "0x2330"
	class          string // "0x030200"
	numa           string // numa_node; "" leaves the file out
	cpus           string // local_cpulist; "" leaves the file out
	driver         string // "" for none
}

func (f fn) bdf() string { return filepath.Base(f.path) }

// pci writes the function's attributes and its bus/pci/devices link.
func (b *builder) pci(f fn) {
	d := "devices/" + f.path
	b.file(d+"/vendor", f.vendor)
	b.file(d+"/device", f.device)
	b.file(d+"/class", f.class)
	if f.numa != "" {
		b.file(d+"/numa_node", f.numa)
	}
	if f.cpus != "" {
		b.file(d+"/local_cpulist", f.cpus)
	}
	if f.driver != "" {
		b.raw("bus/pci/drivers/"+f.driver+"/bind", "")
		b.link(d+"/driver", "bus/pci/drivers/"+f.driver)
	}
	b.link("bus/pci/devices/"+f.bdf(), d)
}

// socket is what the functions below one CPU share.
type socket struct {
	numa string // numa_node of its functions
	cpus string // local_cpulist of its functions
}

func bdf(bus, dev, function int) string { return fmt.Sprintf("0000:%02x:%02x.%d", bus, dev, function) }

// PCI IDs the trees use (the PCI ID repository's names).
const (
	intel, broadcom, nvidia, amd, mellanox = "0x8086", "0x1000", "0x10de", "0x1002", "0x15b3"
	rootPortID                             = "0x352a" // Intel Sapphire Rapids PCIe root port
	pex89000                               = "0xc030" // Broadcom PEX890xx PCIe switch
	h100SXM                                = "0x2330" // H100 SXM5 80GB
	l40s                                   = "0x26b9" // L40S
	rtx6000Ada                             = "0x26b1" // RTX 6000 Ada Generation
	raptorLakeGPU                          = "0xa780" // Intel UHD Graphics 770 (integrated)
	connectX7, connectX6Dx                 = "0x1021", "0x101d"
	classBridge                            = "0x060400"
	class3D, classVGA                      = "0x030200", "0x030000"
	classIB, classEthernet                 = "0x020700", "0x020000"
)

// bridge writes a PCI bridge (root port or switch port) at path.
func (b *builder) bridge(path, vendor, device string, s socket) {
	b.pci(fn{path: path, vendor: vendor, device: device, class: classBridge, numa: s.numa, cpus: s.cpus, driver: "pcieport"})
}

// pcieSwitch writes an upstream port at parent/usp and one downstream port per entry of dsps
// below it, and returns the downstream ports' paths.
func (b *builder) pcieSwitch(parent, usp string, s socket, dsps ...string) []string {
	up := parent + "/" + usp
	b.bridge(up, broadcom, pex89000, s)
	var out []string
	for _, d := range dsps {
		b.bridge(up+"/"+d, broadcom, pex89000, s)
		out = append(out, up+"/"+d)
	}
	return out
}

// gpu writes a GPU function.
func (b *builder) gpu(path, vendor, device, class string, s socket) {
	b.pci(fn{path: path, vendor: vendor, device: device, class: class, numa: s.numa, cpus: s.cpus, driver: "nvidia"})
}

// rdmaPort is one port of an RDMA device.
type rdmaPort struct {
	state, phys string // "4: ACTIVE", "5: LinkUp"
	link        string // "InfiniBand", "Ethernet"
	rate        string
	lid         string // "0x0" on Ethernet
	gids        []gid
}

type gid struct{ value, typ, ndev string }

// ibPort is an InfiniBand port with its link-local GID.
func ibPort(state, phys, lid, guid string) rdmaPort {
	return rdmaPort{state: state, phys: phys, link: "InfiniBand", rate: "400 Gb/sec (4X NDR)", lid: lid,
		gids: []gid{{"fe80:0000:0000:0000:" + guid, "IB/RoCE v1", ""}}}
}

// rocePort is an active Ethernet port whose GIDs come from ndev.
func rocePort(ndev, linkLocal, v4 string) rdmaPort {
	return rdmaPort{state: "4: ACTIVE", phys: "5: LinkUp", link: "Ethernet", rate: "200 Gb/sec (4X HDR)", lid: "0x0",
		gids: []gid{
			{"fe80:0000:0000:0000:" + linkLocal, "IB/RoCE v1", ndev}, {"fe80:0000:0000:0000:" + linkLocal, "RoCE v2", ndev},
			{"0000:0000:0000:0000:0000:ffff:" + v4, "IB/RoCE v1", ndev}, {"0000:0000:0000:0000:0000:ffff:" + v4, "RoCE v2", ndev},
		}}
}

// rdma writes an RDMA device on the PCI function at fnPath ("" for a device without a parent,
// such as soft-RoCE). The tables are cut to their populated entries (see the README).
func (b *builder) rdma(fnPath, name, guid, hca string, ports ...rdmaPort) {
	dir := "devices/virtual/infiniband/" + name
	if fnPath != "" {
		dir = "devices/" + fnPath + "/infiniband/" + name
		b.link(dir+"/device", "devices/"+fnPath)
	}
	b.file(dir+"/node_type", "1: CA")
	b.file(dir+"/node_guid", guid)
	b.file(dir+"/sys_image_guid", guid)
	b.file(dir+"/fw_ver", "28.39.1002")
	b.file(dir+"/hca_type", hca)
	b.file(dir+"/hw_rev", "0x0")
	b.file(dir+"/board_id", "MT_0000000838")
	b.file(dir+"/node_desc", "node "+name)
	b.link("class/infiniband/"+name, dir)
	for i, p := range ports {
		pd := fmt.Sprintf("%s/ports/%d", dir, i+1)
		b.file(pd+"/state", p.state)
		b.file(pd+"/phys_state", p.phys)
		b.file(pd+"/link_layer", p.link)
		b.file(pd+"/rate", p.rate)
		b.file(pd+"/lid", p.lid)
		b.file(pd+"/sm_lid", map[bool]string{true: "0x1", false: "0x0"}[p.link == "InfiniBand"])
		b.file(pd+"/lid_mask_count", "0")
		b.file(pd+"/sm_sl", "0")
		b.file(pd+"/cap_mask", map[bool]string{true: "0xa751e848", false: "0x04010000"}[p.link == "InfiniBand"])
		for j, g := range p.gids {
			b.file(fmt.Sprintf("%s/gids/%d", pd, j), g.value)
			b.file(fmt.Sprintf("%s/gid_attrs/types/%d", pd, j), g.typ)
			if g.ndev != "" {
				b.file(fmt.Sprintf("%s/gid_attrs/ndevs/%d", pd, j), g.ndev)
			}
		}
		b.file(pd+"/pkeys/0", "0xffff")
	}
}

// netdev writes an interface of the PCI function at fnPath: typ 32 IPoIB, 1 Ethernet; devPort
// is the 0-based port of the function it belongs to.
func (b *builder) netdev(fnPath, name, typ, address string, devPort int) {
	d := "devices/" + fnPath + "/net/" + name
	b.file(d+"/type", typ)
	b.file(d+"/address", address)
	b.file(d+"/dev_port", fmt.Sprint(devPort))
	b.file(d+"/operstate", "up")
	b.link(d+"/device", "devices/"+fnPath)
	b.link("class/net/"+name, d)
}

// bond writes a bonding interface (a virtual netdev) over slaves, in 802.3ad mode as RoCE LAG
// wants it.
func (b *builder) bond(name, address string, slaves ...string) {
	d := "devices/virtual/net/" + name
	b.file(d+"/type", "1")
	b.file(d+"/address", address)
	b.file(d+"/operstate", "up")
	b.file(d+"/bonding/mode", "802.3ad 4")
	b.file(d+"/bonding/slaves", strings.Join(slaves, " "))
	b.link("class/net/"+name, d)
}

// fixture is one committed tree.
type fixture struct {
	name  string
	build func(b *builder)
}

// ibNIC writes a ConnectX-7 InfiniBand function at path with device name, port state and, when
// ipoib is set, its IPoIB netdev.
func (b *builder) ibNIC(path, name string, s socket, state, phys, lid, guid, ipoib string) {
	b.pci(fn{path: path, vendor: mellanox, device: connectX7, class: classIB, numa: s.numa, cpus: s.cpus, driver: "mlx5_core"})
	b.rdma(path, name, guidGroups(guid), "MT4129", ibPort(state, phys, lid, guidGroups(guid)))
	if ipoib != "" {
		b.netdev(path, ipoib, "32", "00:00:10:87:fe:80:00:00:00:00:00:00:"+ipoibTail(guid), 0)
	}
}

// guidGroups writes 16 hex digits as the kernel prints a GUID: four groups of four.
func guidGroups(h string) string { return h[0:4] + ":" + h[4:8] + ":" + h[8:12] + ":" + h[12:16] }

// ipoibTail is the port GID's interface ID as an IPoIB hardware address ends: eight bytes.
func ipoibTail(h string) string {
	var parts []string
	for i := 0; i < 16; i += 2 {
		parts = append(parts, h[i:i+2])
	}
	return strings.Join(parts, ":")
}

var fixtures = []fixture{
	{"dgx-h100-like", func(b *builder) {
		// Two sockets, two PCIe stacks each; behind each stack's root port one PCIe switch with
		// two H100s and two ConnectX-7 InfiniBand NICs on its downstream ports.
		sockets := []socket{{"0", "0-55,112-167"}, {"1", "56-111,168-223"}}
		b.node(0, sockets[0].cpus)
		b.node(1, sockets[1].cpus)
		for k, bus := range []int{0x15, 0x37, 0x9a, 0xbc} {
			s := sockets[k/2]
			rp := fmt.Sprintf("pci0000:%02x/%s", bus, bdf(bus, 1, 0))
			b.bridge(rp, intel, rootPortID, s)
			dsps := b.pcieSwitch(rp, bdf(bus+1, 0, 0), s, bdf(bus+2, 0, 0), bdf(bus+2, 1, 0), bdf(bus+2, 2, 0), bdf(bus+2, 3, 0))
			b.gpu(dsps[0]+"/"+bdf(bus+3, 0, 0), nvidia, h100SXM, class3D, s)
			b.gpu(dsps[1]+"/"+bdf(bus+4, 0, 0), nvidia, h100SXM, class3D, s)
			for j, nb := range []int{bus + 5, bus + 6} {
				i := 2*k + j
				guid := fmt.Sprintf("a088c20300%02x%04x", 0x5a, i)
				b.ibNIC(dsps[2+j]+"/"+bdf(nb, 0, 0), fmt.Sprintf("mlx5_%d", i), s, "4: ACTIVE", "5: LinkUp", fmt.Sprintf("0x%x", 0x10+i), guid, fmt.Sprintf("ibp%ds0", nb))
			}
		}
	}},
	{"nic-across-socket", func(b *builder) {
		// GPU0 and the only NIC share a switch on socket 0; GPU1 sits alone under a root port of
		// socket 1 (no switch), so its nearest NIC is across the socket interconnect.
		s0, s1 := socket{"0", "0-31"}, socket{"1", "32-63"}
		b.node(0, s0.cpus)
		b.node(1, s1.cpus)
		rp := "pci0000:16/" + bdf(0x16, 1, 0)
		b.bridge(rp, intel, rootPortID, s0)
		dsps := b.pcieSwitch(rp, bdf(0x17, 0, 0), s0, bdf(0x18, 0, 0), bdf(0x18, 1, 0))
		b.gpu(dsps[0]+"/"+bdf(0x19, 0, 0), nvidia, h100SXM, class3D, s0)
		b.ibNIC(dsps[1]+"/"+bdf(0x1a, 0, 0), "mlx5_0", s0, "4: ACTIVE", "5: LinkUp", "0x21", "a088c203005b0000", "ibp26s0")
		rp1 := "pci0000:ae/" + bdf(0xae, 1, 0)
		b.bridge(rp1, intel, rootPortID, s1)
		b.gpu(rp1+"/"+bdf(0xaf, 0, 0), nvidia, h100SXM, class3D, s1)
	}},
	{"workstation-single-nic", func(b *builder) {
		// One socket and a kernel that reports numa_node -1: an RTX card under one root port, a
		// ConnectX-6 Dx in RoCE mode under another, and the CPU's integrated graphics on the
		// root bus (Intel: not a GPU here).
		s := socket{"-1", "0-23"}
		b.node(0, s.cpus)
		rp := "pci0000:00/" + bdf(0, 1, 0)
		b.bridge(rp, intel, "0xa70d", s)
		b.gpu(rp+"/"+bdf(1, 0, 0), nvidia, rtx6000Ada, classVGA, s)
		b.pci(fn{path: "pci0000:00/" + bdf(0, 2, 0), vendor: intel, device: raptorLakeGPU, class: classVGA, numa: s.numa, cpus: s.cpus, driver: "i915"})
		rp2 := "pci0000:00/" + bdf(0, 0x1c, 0)
		b.bridge(rp2, intel, "0x7a38", s)
		nic := rp2 + "/" + bdf(5, 0, 0)
		b.pci(fn{path: nic, vendor: mellanox, device: connectX6Dx, class: classEthernet, numa: s.numa, cpus: s.cpus, driver: "mlx5_core"})
		b.rdma(nic, "mlx5_0", "b83f:d203:00c4:5e10", "MT4125", rocePort("enp5s0f0np0", "ba3f:d2ff:fec4:5e10", "c0a8:4614"))
		b.netdev(nic, "enp5s0f0np0", "1", "b8:3f:d2:c4:5e:10", 0)
	}},
	{"roce-bond", func(b *builder) {
		// RoCE with LAG: each dual-port ConnectX-7 has its two functions bonded (802.3ad), so mlx5
		// shows one RDMA device per card, mlx5_bond_<n>, on function 0, whose GIDs name the bond.
		// One L40S and one card behind the switch of each of two PCIe stacks of one socket.
		s := socket{"0", "0-63"}
		b.node(0, s.cpus)
		for k, bus := range []int{0x17, 0xca} {
			rp := fmt.Sprintf("pci0000:%02x/%s", bus, bdf(bus, 1, 0))
			b.bridge(rp, intel, rootPortID, s)
			dsps := b.pcieSwitch(rp, bdf(bus+1, 0, 0), s, bdf(bus+2, 0, 0), bdf(bus+2, 1, 0))
			b.gpu(dsps[0]+"/"+bdf(bus+3, 0, 0), nvidia, l40s, class3D, s)
			bond := fmt.Sprintf("bond%d", k)
			var slaves []string
			for f := 0; f < 2; f++ {
				path := dsps[1] + "/" + bdf(bus+4, 0, f)
				b.pci(fn{path: path, vendor: mellanox, device: connectX7, class: classEthernet, numa: s.numa, cpus: s.cpus, driver: "mlx5_core"})
				nd := fmt.Sprintf("ens%df%dnp%d", k+1, f, f)
				b.netdev(path, nd, "1", fmt.Sprintf("a0:88:c2:1c:%02x:%02x", k, f), 0)
				slaves = append(slaves, nd)
			}
			b.bond(bond, fmt.Sprintf("a0:88:c2:1c:%02x:00", k), slaves...)
			b.rdma(dsps[1]+"/"+bdf(bus+4, 0, 0), fmt.Sprintf("mlx5_bond_%d", k), fmt.Sprintf("a088:c203:001c:%02x00", k), "MT4129",
				rocePort(bond, fmt.Sprintf("a288:c2ff:fe1c:%02x00", k), fmt.Sprintf("c0a8:3c%02x", 0x10+k)))
		}
	}},
	{"port-down", func(b *builder) {
		// Two PCIe stacks of one socket, a switch on each with one H100 and one ConnectX-7. GPU0's
		// NIC has no link (DOWN, Polling), so GPU0 has to use GPU1's NIC across the stacks. That
		// NIC has no IPoIB netdev (ib_ipoib not loaded), which is fine for RDMA.
		s := socket{"0", "0-31"}
		b.node(0, s.cpus)
		for k, bus := range []int{0x16, 0x38} {
			rp := fmt.Sprintf("pci0000:%02x/%s", bus, bdf(bus, 1, 0))
			b.bridge(rp, intel, rootPortID, s)
			dsps := b.pcieSwitch(rp, bdf(bus+1, 0, 0), s, bdf(bus+2, 0, 0), bdf(bus+2, 1, 0))
			b.gpu(dsps[0]+"/"+bdf(bus+3, 0, 0), nvidia, h100SXM, class3D, s)
			guid := fmt.Sprintf("a088c203005c%04x", k)
			if k == 0 {
				b.ibNIC(dsps[1]+"/"+bdf(bus+4, 0, 0), "mlx5_0", s, "1: DOWN", "2: Polling", "0xffff", guid, fmt.Sprintf("ibp%ds0", bus+4))
			} else {
				b.ibNIC(dsps[1]+"/"+bdf(bus+4, 0, 0), "mlx5_1", s, "4: ACTIVE", "5: LinkUp", "0x31", guid, "")
			}
		}
	}},
	{"shared-nic", func(b *builder) {
		// Both GPUs nearest to one NIC while the other idles: GPU0 and mlx5_0 on one switch, GPU1
		// behind a second switch below it (PXB to mlx5_0), and mlx5_1 alone under a root port
		// of another PCIe stack (NODE to both GPUs), as when a NIC went into the wrong slot.
		s := socket{"0", "0-31"}
		b.node(0, s.cpus)
		rp := "pci0000:16/" + bdf(0x16, 1, 0)
		b.bridge(rp, intel, rootPortID, s)
		dsps := b.pcieSwitch(rp, bdf(0x17, 0, 0), s, bdf(0x18, 0, 0), bdf(0x18, 1, 0), bdf(0x18, 2, 0))
		b.gpu(dsps[0]+"/"+bdf(0x19, 0, 0), nvidia, h100SXM, class3D, s)
		b.ibNIC(dsps[1]+"/"+bdf(0x1a, 0, 0), "mlx5_0", s, "4: ACTIVE", "5: LinkUp", "0x41", "a088c203005d0000", "ibp26s0")
		inner := b.pcieSwitch(dsps[2], bdf(0x1b, 0, 0), s, bdf(0x1c, 0, 0))
		b.gpu(inner[0]+"/"+bdf(0x1d, 0, 0), nvidia, h100SXM, class3D, s)
		rp2 := "pci0000:38/" + bdf(0x38, 1, 0)
		b.bridge(rp2, intel, rootPortID, s)
		b.ibNIC(rp2+"/"+bdf(0x39, 0, 0), "mlx5_1", s, "4: ACTIVE", "5: LinkUp", "0x42", "a088c203005d0001", "ibp57s0")
	}},
}

func fixtureRoot(name string) string { return filepath.Join("testdata", "sysfs", name) }

// TestFixtureTrees: every committed tree is what its builder writes (-update rewrites them).
func TestFixtureTrees(t *testing.T) {
	for _, f := range fixtures {
		t.Run(f.name, func(t *testing.T) {
			want := (&builder{root: t.TempDir()}).with(f.build).done(t)
			if *update {
				require.NoError(t, os.RemoveAll(fixtureRoot(f.name)))
				(&builder{root: fixtureRoot(f.name)}).with(f.build).done(t)
			}
			got, err := snapshot(fixtureRoot(f.name))
			require.NoError(t, err, "run go test -run TestFixtureTrees -update to write it")
			exp, err := snapshot(want)
			require.NoError(t, err)
			if !slices.Equal(got, exp) {
				t.Errorf("%s differs from what its builder writes (go test -run TestFixtureTrees -update rewrites it; review the diff):\n%s",
					fixtureRoot(f.name), diffLines(exp, got))
			}
		})
	}
	// No stray trees: each one has a builder.
	entries, err := os.ReadDir(filepath.Join("testdata", "sysfs"))
	require.NoError(t, err)
	for _, e := range entries {
		require.True(t, slices.ContainsFunc(fixtures, func(f fixture) bool { return f.name == e.Name() }),
			"testdata/sysfs/%s has no builder in fixtures_test.go", e.Name())
	}
}

func (b *builder) with(build func(*builder)) *builder {
	build(b)
	return b
}

// snapshot lists a tree as lines: "path -> target" for links, "path: content" for files.
func snapshot(root string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			to, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out = append(out, rel+" -> "+to)
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out = append(out, rel+": "+string(bytes.TrimSuffix(b, []byte("\n"))))
		}
		return nil
	})
	slices.Sort(out)
	return out, err
}

// diffLines lists the lines only one side has.
func diffLines(want, got []string) string {
	var s strings.Builder
	for _, w := range want {
		if !slices.Contains(got, w) {
			fmt.Fprintf(&s, "- %s\n", w)
		}
	}
	for _, g := range got {
		if !slices.Contains(want, g) {
			fmt.Fprintf(&s, "+ %s\n", g)
		}
	}
	return s.String()
}
