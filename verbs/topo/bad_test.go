package topo

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/verbs"
)

// twoSockets writes a two-node box: a GPU on root bus 0x16 with the given numa_node and
// local_cpulist, and an active NIC on node 1's root bus 0xae.
func twoSockets(b *builder, gpuNUMA, gpuCPUs string) {
	b.node(0, "0-31")
	b.node(1, "32-63")
	s0, s1 := socket{"0", "0-31"}, socket{"1", "32-63"}
	b.bridge("pci0000:16/0000:16:01.0", intel, rootPortID, s0)
	b.pci(fn{path: "pci0000:16/0000:16:01.0/0000:17:00.0", vendor: nvidia, device: h100SXM, class: class3D, numa: gpuNUMA, cpus: gpuCPUs})
	b.bridge("pci0000:ae/0000:ae:01.0", intel, rootPortID, s1)
	b.ibNIC("pci0000:ae/0000:ae:01.0/0000:af:00.0", "mlx5_0", s1, "4: ACTIVE", "5: LinkUp", "0x5", "a088c203005e0000", "ibp175s0")
}

func build(t *testing.T, f func(*builder)) string {
	t.Helper()
	return (&builder{root: t.TempDir()}).with(f).done(t)
}

// TestNUMAFallbacks: a GPU whose numa_node is missing or -1 gets its node from local_cpulist
// when that fits one node, and stays unknown (SYS across root buses) when it does not; each
// fallback is noted.
func TestNUMAFallbacks(t *testing.T) {
	for _, c := range []struct {
		name, numa, cpus string
		node             int
		from             string
		rel              Relation
		note             string
	}{
		{"numa_node missing, local_cpulist on node 1", "", "32-63", 1, "local_cpulist", NODE, "node 1 holds its local CPUs (32-63)"},
		{"numa_node -1, local_cpulist on node 0", "-1", "0-31", 0, "local_cpulist", SYS, "node 0 holds its local CPUs"},
		{"numa_node -1, local_cpulist spans both", "-1", "0-63", -1, "", SYS, "NUMA node unknown"},
		{"numa_node missing, no local_cpulist", "", "", -1, "", SYS, "NUMA node unknown"},
	} {
		t.Run(c.name, func(t *testing.T) {
			topo := load(t, build(t, func(b *builder) { twoSockets(b, c.numa, c.cpus) }))
			require.Len(t, topo.GPUs, 1)
			g := topo.GPUs[0]
			assert.Equal(t, c.node, g.PCI.NUMANode)
			assert.Equal(t, c.from, g.PCI.NUMAFrom)
			assert.Equal(t, c.rel, topo.Relation(g, topo.Ports[0]))
			require.Len(t, topo.Notes, 1)
			assert.Contains(t, topo.Notes[0], c.note)
			assert.Contains(t, topo.Notes[0], "GPU0 (0000:17:00.0)")
			rec, err := topo.Recommend(0)
			require.NoError(t, err)
			assert.Equal(t, "mlx5_0:1", rec.UCXNetDevices(), "the only active port, however far")
		})
	}
}

// TestSingleNodeNoNUMA: a machine without devices/system/node (a kernel without NUMA) has every
// function on node 0, silently.
func TestSingleNodeNoNUMA(t *testing.T) {
	root := build(t, func(b *builder) {
		s := socket{"-1", "0-7"}
		b.bridge("pci0000:00/0000:00:01.0", intel, rootPortID, s)
		b.gpu("pci0000:00/0000:00:01.0/0000:01:00.0", amd, "0x744c", classVGA, s) // Radeon RX 7900 XTX
		b.bridge("pci0000:40/0000:40:01.0", intel, rootPortID, s)
		b.ibNIC("pci0000:40/0000:40:01.0/0000:41:00.0", "mlx5_0", s, "4: ACTIVE", "5: LinkUp", "0x5", "a088c203005e0001", "")
	})
	topo := load(t, root)
	require.Len(t, topo.GPUs, 1)
	assert.Equal(t, "AMD", topo.GPUs[0].Vendor())
	assert.Empty(t, topo.NUMANodes)
	assert.Equal(t, 0, topo.GPUs[0].PCI.NUMANode)
	assert.Equal(t, NODE, topo.Relation(topo.GPUs[0], topo.Ports[0]), "two root buses of the one node")
	assert.Empty(t, topo.Notes)
	ranked, err := topo.NearestPortsForNUMA(0, 1)
	require.NoError(t, err)
	require.Len(t, ranked, 1)
	_, err = topo.NearestPortsForNUMA(1, 0)
	assert.ErrorIs(t, err, verbs.ErrInvalid)
	assert.ErrorContains(t, err, "none listed, so only node 0")
}

// TestGPUWithoutSwitch: GPUs and NICs with no switch, on root ports or directly on the root bus
// (a virtual machine's passthrough), relate as PHB when they share the root bus.
func TestGPUWithoutSwitch(t *testing.T) {
	root := build(t, func(b *builder) {
		s := socket{"0", "0-15"}
		b.node(0, s.cpus)
		b.gpu("pci0000:00/0000:00:05.0", nvidia, h100SXM, class3D, s)
		b.ibNIC("pci0000:00/0000:00:06.0", "mlx5_0", s, "4: ACTIVE", "5: LinkUp", "0x5", "a088c203005e0002", "ib0")
		b.bridge("pci0000:00/0000:00:02.0", intel, rootPortID, s)
		b.gpu("pci0000:00/0000:00:02.0/0000:03:00.0", nvidia, h100SXM, class3D, s)
	})
	topo := load(t, root)
	require.Len(t, topo.GPUs, 2)
	assert.Equal(t, Link{PHB, 2}, topo.Matrix()[0][0], "both on the root bus")
	assert.Equal(t, Link{PHB, 3}, topo.Matrix()[1][0], "a root port and the root bus")
}

// TestNICWithoutNetdev: an InfiniBand port without an IPoIB interface has no netdevs, and its
// relations are those of its PCI function.
func TestNICWithoutNetdev(t *testing.T) {
	topo := load(t, fixtureRoot("port-down"))
	p := topo.Ports[1]
	require.Equal(t, "mlx5_1:1", p.Spec())
	assert.Empty(t, p.Netdevs)
	assert.Equal(t, PIX, topo.Relation(topo.GPUs[1], p))
}

// TestSoftRoCE: a device without a parent gets its netdev's PCI function; one on a virtual
// interface has none, is SYS to everything, and is noted.
func TestSoftRoCE(t *testing.T) {
	root := build(t, func(b *builder) {
		s := socket{"0", "0-15"}
		b.node(0, s.cpus)
		b.node(1, "16-31")
		b.bridge("pci0000:00/0000:00:01.0", intel, rootPortID, s)
		b.gpu("pci0000:00/0000:00:01.0/0000:01:00.0", nvidia, h100SXM, class3D, s)
		nic := "pci0000:00/0000:00:02.0/0000:02:00.0"
		b.bridge("pci0000:00/0000:00:02.0", intel, rootPortID, s)
		b.pci(fn{path: nic, vendor: intel, device: "0x1593", class: classEthernet, numa: "0", cpus: s.cpus, driver: "ice"})
		b.netdev(nic, "eth1", "1", "52:54:00:00:00:01", 0)
		b.rdma("", "rxe0", "5054:00ff:fe00:0001", "", rocePort("eth1", "5054:00ff:fe00:0001", "c0a8:0001"))
		b.file("devices/virtual/net/veth0/type", "1")
		b.link("class/net/veth0", "devices/virtual/net/veth0")
		b.rdma("", "rxe1", "5054:00ff:fe00:0002", "", rocePort("veth0", "5054:00ff:fe00:0002", "c0a8:0002"))
	})
	topo := load(t, root)
	require.Len(t, topo.NICs, 2)
	assert.Equal(t, "netdev eth1", topo.NICs[0].PCIFrom)
	assert.Equal(t, "0000:02:00.0", topo.NICs[0].PCI.Address)
	assert.Equal(t, PHB, topo.Relation(topo.GPUs[0], topo.NICs[0].Ports[0]))
	assert.Equal(t, "", topo.NICs[1].PCIFrom)
	assert.Equal(t, SYS, topo.Relation(topo.GPUs[0], topo.NICs[1].Ports[0]))
	assert.Equal(t, SYS, topo.Relation(topo.GPUs[0], Port{NIC: 7}), "a port of no NIC")
	ranked, err := topo.NearestPortsForNUMA(0, 0)
	require.NoError(t, err)
	assert.Equal(t, "rxe0:1", ranked[0].Spec())

	// A device whose parent is a platform device, not a PCI function.
	root = build(t, func(b *builder) {
		b.node(0, "0-15")
		b.file("devices/platform/rdma0/modalias", "platform:rdma")
		b.rdma("platform/rdma0", "plat0", "5054:00ff:fe00:0003", "", rocePort("", "5054:00ff:fe00:0003", "c0a8:0003"))
	})
	plat := load(t, root)
	require.Len(t, plat.NICs, 1)
	assert.Equal(t, "", plat.NICs[0].PCIFrom)
	require.Len(t, plat.Notes, 3)
	assert.Contains(t, plat.Notes[1], "plat0): its parent is not a PCI function")
	assert.Contains(t, plat.Notes[2], "plat0) has no PCI function")
	require.Len(t, topo.Notes, 2)
	assert.Contains(t, topo.Notes[0], "rxe0) has no parent device; its PCI function 0000:02:00.0 comes from netdev eth1")
	assert.Contains(t, topo.Notes[1], "rxe1) has no PCI function, nor a netdev with one")
}

// TestNoDevices: a node with neither GPUs nor RDMA devices is an empty topology with notes; GPU
// indexes out of range are errors.
func TestNoDevices(t *testing.T) {
	topo := load(t, build(t, func(b *builder) { b.node(0, "0-3"); b.file("devices/system/node/online", "0") }))
	assert.Empty(t, topo.GPUs)
	assert.Empty(t, topo.NICs)
	require.Len(t, topo.Notes, 2)
	assert.Contains(t, topo.Notes[0], "no PCI functions, so no GPUs")
	assert.Contains(t, topo.Notes[1], "class/infiniband has no entries")
	_, err := topo.NearestPorts(0, 0)
	assert.ErrorIs(t, err, verbs.ErrInvalid)
	assert.ErrorContains(t, err, "this node has no GPUs")
	assert.Empty(t, topo.Recommendations())

	topo = load(t, fixtureRoot("nic-across-socket"))
	_, err = topo.Recommend(2)
	assert.ErrorContains(t, err, "no GPU 2: this node has GPU0 to GPU1")
	_, err = topo.NearestPorts(-1, 0)
	assert.ErrorIs(t, err, verbs.ErrInvalid)
}

// TestVerbsFixtures: the trees of package verbs have no bus/pci/devices, so no GPUs, but their
// NICs load with their PCI chains.
func TestVerbsFixtures(t *testing.T) {
	topo := load(t, filepath.Join("..", "testdata", "sysfs", "cx7-dual-port-one-active"))
	assert.Empty(t, topo.GPUs)
	require.Len(t, topo.NICs, 2)
	assert.Equal(t, []string{"pci0000:16", "0000:16:02.0", "0000:17:00.1"}, topo.NICs[1].PCI.Chain)
	assert.Equal(t, 1, topo.NICs[1].PCI.NUMANode)
	assert.Equal(t, Link{PIX, 2}, Relate(topo.NICs[0].PCI, topo.NICs[1].PCI), "two functions of one card")
}

// TestBadTrees: malformed or misleading trees are errors that name the file, never a panic.
func TestBadTrees(t *testing.T) {
	for _, c := range []struct {
		name  string
		build func(*builder)
		is    error
		says  string
	}{
		{"numa_node not a number", func(b *builder) { twoSockets(b, "zero", "0-31") }, verbs.ErrMalformed, `numa_node is "zero"`},
		{"numa_node below -1", func(b *builder) { twoSockets(b, "-2", "0-31") }, verbs.ErrMalformed, "a node number or -1"},
		{"class not hex", func(b *builder) {
			twoSockets(b, "0", "0-31")
			b.file("devices/pci0000:16/0000:16:01.0/0000:17:00.0/class", "3D controller")
		}, verbs.ErrMalformed, `class is "3D controller"`},
		{"a GPU link that leaves devices/", func(b *builder) {
			b.file("elsewhere/0000:17:00.0/class", class3D)
			b.file("elsewhere/0000:17:00.0/vendor", nvidia)
			b.file("devices/system/node/node0/cpulist", "0-3")
			b.link("bus/pci/devices/0000:17:00.0", "elsewhere/0000:17:00.0")
		}, verbs.ErrMalformed, "which is not under"},
		{"a GPU outside the PCI tree", func(b *builder) {
			b.file("devices/platform/gpu0/class", class3D)
			b.file("devices/platform/gpu0/vendor", nvidia)
			b.link("bus/pci/devices/0000:17:00.0", "devices/platform/gpu0")
		}, verbs.ErrMalformed, "not below a PCI root bus"},
		{"a chain with a stray part", func(b *builder) {
			b.pci(fn{path: "pci0000:16/usb1/0000:17:00.0", vendor: nvidia, device: h100SXM, class: class3D})
		}, verbs.ErrMalformed, `part "usb1"`},
		{"a NUMA node without cpulist", func(b *builder) {
			twoSockets(b, "0", "0-31")
			b.file("devices/system/node/node2/meminfo", "")
		}, verbs.ErrMalformed, "node2/cpulist is missing"},
		{"a NUMA node's cpulist malformed", func(b *builder) {
			twoSockets(b, "0", "0-31")
			b.file("devices/system/node/node1/cpulist", "32-")
		}, verbs.ErrMalformed, "node1/cpulist"},
		{"a GPU's local_cpulist malformed", func(b *builder) { twoSockets(b, "-1", "0,x") }, verbs.ErrMalformed, "GPU0 (0000:17:00.0) local_cpulist"},
		{"an RDMA device's port state malformed", func(b *builder) {
			twoSockets(b, "0", "0-31")
			b.file("devices/pci0000:ae/0000:ae:01.0/0000:af:00.0/infiniband/mlx5_0/ports/1/state", "ACTIVE")
		}, verbs.ErrMalformed, "port state"},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := build(t, c.build)
			_, err := Load(verbs.Paths{Sysfs: root, Dev: filepath.Join(root, "no-dev")})
			require.Error(t, err)
			assert.ErrorIs(t, err, c.is)
			assert.Contains(t, err.Error(), c.says)
		})
	}

	_, err := Load(verbs.Paths{Sysfs: filepath.Join(t.TempDir(), "nothing")})
	assert.ErrorContains(t, err, "is not a directory")
	empty := t.TempDir()
	_, err = Load(verbs.Paths{Sysfs: empty})
	assert.ErrorIs(t, err, verbs.ErrMalformed)
	assert.ErrorContains(t, err, "has no devices/ folder")

	// An unreadable attribute (not root: root reads anything).
	if os.Geteuid() != 0 {
		root := build(t, func(b *builder) { twoSockets(b, "0", "0-31") })
		p := filepath.Join(root, "devices/pci0000:16/0000:16:01.0/0000:17:00.0/numa_node")
		require.NoError(t, os.Chmod(p, 0))
		_, err := Load(verbs.Paths{Sysfs: root})
		assert.ErrorContains(t, err, "permission denied")
	}
}
