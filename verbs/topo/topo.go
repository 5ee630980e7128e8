package topo

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/velo-go/velo/verbs"
)

// PCI vendors whose display functions count as GPUs.
const (
	VendorNVIDIA uint16 = 0x10de
	VendorAMD    uint16 = 0x1002
)

// GPU classes: the base class and subclass (the class attribute's upper 16 bits).
const (
	ClassVGA uint16 = 0x0300 // VGA-compatible controller (GeForce, RTX, Radeon)
	Class3D  uint16 = 0x0302 // 3D controller (data-center GPUs: A100, H100, L40S, Instinct MI100)
)

// IsGPU reports whether a PCI function with this vendor and class is a GPU for this package.
func IsGPU(vendor uint16, class uint32) bool {
	sub := uint16(class >> 8)
	return (vendor == VendorNVIDIA || vendor == VendorAMD) && (sub == ClassVGA || sub == Class3D)
}

// GPU is one GPU.
type GPU struct {
	Index int // position in PCI address order: nvidia-smi's GPU<n>
	PCI   PCIFunction
}

// Name is "GPU<index>", as nvidia-smi names it.
func (g GPU) Name() string { return "GPU" + strconv.Itoa(g.Index) }

// Vendor is "NVIDIA" or "AMD".
func (g GPU) Vendor() string {
	if g.PCI.VendorID == VendorAMD {
		return "AMD"
	}
	return "NVIDIA"
}

// NIC is one RDMA device with its PCI function.
type NIC struct {
	Index  int // position in verbs.Devices order: NIC<n>
	Device verbs.Device
	// PCI is the device's PCI function. Its Address is empty when neither the device nor any of
	// its netdevs has one (soft-RoCE on a virtual interface); every relation is SYS then.
	PCI PCIFunction
	// PCIFrom says where PCI came from: "device" (class/infiniband/<dev>/device), "netdev <if>"
	// (a device without a parent, through its netdev), or "" (none).
	PCIFrom string
	Ports   []Port
}

// Name is "NIC<index>", as nvidia-smi names it.
func (n NIC) Name() string { return "NIC" + strconv.Itoa(n.Index) }

// Port is one RDMA port as package verbs reads it, with its NIC and its bonds.
type Port struct {
	verbs.Port
	NIC int // index into Topology.NICs
	// Bonds are the bonding netdevs among Netdevs (RoCE LAG: mlx5_bond_0's GIDs name bond0),
	// with the interfaces enslaved to each.
	Bonds []Bond
}

// Bond is a bonding netdev and its members, from class/net/<bond>/bonding/slaves.
type Bond struct {
	Name   string
	Slaves []string
}

// Topology is a node's GPUs, RDMA NICs and NUMA nodes, and how they sit in the PCI tree.
type Topology struct {
	Sysfs     string // the sysfs root read
	GPUs      []GPU
	NICs      []NIC
	Ports     []Port // every port of every NIC, NIC order then port number
	NUMANodes []NUMANode
	// Notes say which fallbacks were taken (a NUMA node found from local_cpulist, a device
	// without a PCI function) and what was missing; they are not errors.
	Notes []string
}

// Load reads the topology under p's sysfs root. p.Dev matters only as it does to verbs.Devices.
// A node without GPUs or without RDMA devices is a topology with empty lists (and a note); an
// unreadable tree, a symlink that leads out of it, or a malformed attribute is an error.
func Load(p verbs.Paths) (*Topology, error) {
	root := p.SysfsRoot()
	st, err := os.Stat(root)
	if err != nil || !st.IsDir() {
		return nil, fmt.Errorf("topo: %s is not a directory: point the sysfs root at /sys or at a copy of one (%w)", root, errOr(err, fs.ErrInvalid))
	}
	devices, err := filepath.EvalSymlinks(filepath.Join(root, "devices"))
	if err != nil {
		return nil, fmt.Errorf("%w: %s has no devices/ folder (not a sysfs tree?): %v", verbs.ErrMalformed, root, err)
	}
	t := &Topology{Sysfs: root}
	if t.NUMANodes, err = readNUMANodes(root); err != nil {
		return nil, err
	}
	if err := t.readGPUs(root, devices); err != nil {
		return nil, err
	}
	if err := t.readNICs(p, devices); err != nil {
		return nil, err
	}
	return t, nil
}

func errOr(err, alt error) error {
	if err != nil {
		return err
	}
	return alt
}

func (t *Topology) readGPUs(root, devices string) error {
	dir := filepath.Join(root, "bus", "pci", "devices")
	entries, err := readDirIfAny(dir)
	if err != nil {
		return err
	}
	if entries == nil {
		t.Notes = append(t.Notes, fmt.Sprintf("%s does not exist: no PCI functions, so no GPUs", dir))
	}
	for _, e := range entries {
		link := filepath.Join(dir, e.Name())
		class, okC, err := readHexAttr(filepath.Join(link, "class"), 24)
		if err != nil {
			return err
		}
		vendor, okV, err := readHexAttr(filepath.Join(link, "vendor"), 16)
		if err != nil {
			return err
		}
		if !okC || !okV || !IsGPU(uint16(vendor), uint32(class)) {
			continue
		}
		chain, fdir, err := resolveChain(devices, link)
		if err != nil {
			return err
		}
		f, err := readFunction(fdir, chain)
		if err != nil {
			return err
		}
		t.GPUs = append(t.GPUs, GPU{PCI: f})
	}
	slices.SortFunc(t.GPUs, func(a, b GPU) int { return strings.Compare(a.PCI.Address, b.PCI.Address) })
	for i := range t.GPUs {
		g := &t.GPUs[i]
		g.Index = i
		note, err := settleNUMA(&g.PCI, t.NUMANodes, fmt.Sprintf("%s (%s)", g.Name(), g.PCI.Address))
		if err != nil {
			return err
		}
		if note != "" {
			t.Notes = append(t.Notes, note)
		}
	}
	return nil
}

func (t *Topology) readNICs(p verbs.Paths, devices string) error {
	devs, err := verbs.Devices(p)
	if errors.Is(err, verbs.ErrNoDevice) {
		t.Notes = append(t.Notes, err.Error())
		return nil
	}
	if err != nil {
		return err
	}
	root := p.SysfsRoot()
	for i, d := range devs {
		n := NIC{Index: i, Device: d}
		what := fmt.Sprintf("%s (%s)", n.Name(), d.Name)
		link := filepath.Join(root, "class", "infiniband", d.Name, "device")
		if _, err := os.Lstat(link); err == nil {
			chain, fdir, err := resolveChain(devices, link)
			switch {
			case errors.Is(err, errNotPCI):
				t.Notes = append(t.Notes, fmt.Sprintf("%s: its parent is not a PCI function (%v)", what, err))
			case err != nil:
				return err
			default:
				if n.PCI, err = readFunction(fdir, chain); err != nil {
					return err
				}
				n.PCIFrom = "device"
			}
		}
		for _, vp := range d.Ports {
			pt := Port{Port: vp, NIC: i}
			for _, nd := range vp.Netdevs {
				slaves, ok, err := readAttr(filepath.Join(root, "class", "net", nd, "bonding", "slaves"))
				if err != nil {
					return err
				}
				if ok {
					pt.Bonds = append(pt.Bonds, Bond{Name: nd, Slaves: strings.Fields(slaves)})
				}
			}
			n.Ports = append(n.Ports, pt)
		}
		if n.PCIFrom == "" {
			if err := n.pciFromNetdevs(root, devices); err != nil {
				return err
			}
			if n.PCIFrom == "" {
				t.Notes = append(t.Notes, fmt.Sprintf("%s has no PCI function, nor a netdev with one (soft-RoCE on a virtual interface?): its relations are SYS", what))
			} else {
				t.Notes = append(t.Notes, fmt.Sprintf("%s has no parent device; its PCI function %s comes from %s", what, n.PCI.Address, n.PCIFrom))
			}
		}
		note, err := settleNUMA(&n.PCI, t.NUMANodes, what)
		if err != nil {
			return err
		}
		if note != "" {
			t.Notes = append(t.Notes, note)
		}
		t.NICs = append(t.NICs, n)
		t.Ports = append(t.Ports, n.Ports...)
	}
	return nil
}

// pciFromNetdevs gives a NIC without a parent device the PCI function of the first of its
// netdevs (or of a bond's members) that has one.
func (n *NIC) pciFromNetdevs(root, devices string) error {
	var names []string
	for _, p := range n.Ports {
		names = append(names, p.Netdevs...)
		for _, b := range p.Bonds {
			names = append(names, b.Slaves...)
		}
	}
	for _, nd := range names {
		link := filepath.Join(root, "class", "net", nd, "device")
		if _, err := os.Lstat(link); err != nil {
			continue
		}
		chain, fdir, err := resolveChain(devices, link)
		if errors.Is(err, errNotPCI) {
			continue
		}
		if err != nil {
			return err
		}
		if n.PCI, err = readFunction(fdir, chain); err != nil {
			return err
		}
		n.PCIFrom = "netdev " + nd
		return nil
	}
	return nil
}

// readHexAttr reads a "0x..." attribute of at most bits bits; ok is false when it is missing.
func readHexAttr(path string, bits int) (uint64, bool, error) {
	v, ok, err := readAttr(path)
	if err != nil || !ok {
		return 0, ok, err
	}
	n, err := strconv.ParseUint(strings.TrimPrefix(v, "0x"), 16, bits)
	if err != nil || !strings.HasPrefix(v, "0x") {
		return 0, false, fmt.Errorf("%w: %s is %q, not a %d-bit hex number (0x...)", verbs.ErrMalformed, path, v, bits)
	}
	return n, true, nil
}

// readDirIfAny lists a directory; one that does not exist lists as nil.
func readDirIfAny(dir string) ([]os.DirEntry, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("topo: reading %s: %w", dir, err)
	}
	if entries == nil {
		entries = []os.DirEntry{}
	}
	return entries, nil
}

// NICOf returns the NIC a port belongs to.
func (t *Topology) NICOf(p Port) (NIC, bool) {
	if p.NIC < 0 || p.NIC >= len(t.NICs) {
		return NIC{}, false
	}
	return t.NICs[p.NIC], true
}

// Link is the relation and PCI distance between a GPU and a NIC.
func (t *Topology) Link(g GPU, n NIC) Link { return Relate(g.PCI, n.PCI) }

// Relation is the relation between a GPU and a port's NIC; SYS for a port of no NIC of t.
func (t *Topology) Relation(g GPU, p Port) Relation {
	n, ok := t.NICOf(p)
	if !ok {
		return SYS
	}
	return Relate(g.PCI, n.PCI).Relation
}

// Matrix is every GPU's link to every NIC: Matrix()[gpu][nic].
func (t *Topology) Matrix() [][]Link {
	m := make([][]Link, len(t.GPUs))
	for i, g := range t.GPUs {
		m[i] = make([]Link, len(t.NICs))
		for j, n := range t.NICs {
			m[i][j] = t.Link(g, n)
		}
	}
	return m
}
