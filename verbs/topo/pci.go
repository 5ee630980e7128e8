package topo

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/velo-go/velo/verbs"
)

// Relation is how near two PCI functions are, in nvidia-smi topo -m's words. Smaller is nearer.
type Relation uint8

// Relations, nearest first. The zero value is no relation (String "?"): a Relation from this
// package is always one of these.
const (
	PIX  Relation = iota + 1 // at most one bridge each below a shared bridge: one PCIe switch
	PXB                      // several bridges (switches) below a shared one, no host bridge
	PHB                      // meet at the host bridge (same root bus, different root ports)
	NODE                     // different host bridges of one NUMA node
	SYS                      // across NUMA nodes (the socket interconnect), or unknown
)

var relationNames = [...]string{"?", "PIX", "PXB", "PHB", "NODE", "SYS"}

func (r Relation) String() string {
	if int(r) < len(relationNames) {
		return relationNames[r]
	}
	return "Relation(" + strconv.Itoa(int(r)) + ")"
}

// Describe is the legend line for the relation, in the spirit of nvidia-smi's.
func (r Relation) Describe() string {
	switch r {
	case PIX:
		return "at most one PCIe bridge each below a shared bridge (one PCIe switch)"
	case PXB:
		return "several PCIe bridges (switches), without the PCIe host bridge"
	case PHB:
		return "through a PCIe host bridge (the CPU's root complex), one root bus"
	case NODE:
		return "between the PCIe host bridges of one NUMA node"
	case SYS:
		return "across NUMA nodes (the interconnect between sockets), or unknown"
	}
	return "no relation"
}

// MarshalText writes the name ("PIX").
func (r Relation) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText reads a name written by MarshalText.
func (r *Relation) UnmarshalText(b []byte) error {
	for i, n := range relationNames[1:] {
		if string(b) == n {
			*r = Relation(i + 1)
			return nil
		}
	}
	return fmt.Errorf("%w: relation %q (want PIX, PXB, PHB, NODE or SYS)", verbs.ErrInvalid, b)
}

// Link is the relation of two functions and the PCI distance between them (links on the path
// through the PCI tree; see the package doc).
type Link struct {
	Relation Relation
	Distance int
}

// Less orders links nearest first: by relation, then distance.
func (l Link) Less(o Link) bool {
	if l.Relation != o.Relation {
		return l.Relation < o.Relation
	}
	return l.Distance < o.Distance
}

// PCIFunction is one PCI function as sysfs shows it, with its place in the tree.
type PCIFunction struct {
	Address string // "0000:17:00.0"; empty for a device with no PCI function
	// Chain is the path below devices/ after resolving the symlinks: the root bus first
	// ("pci0000:16"), then each bridge, then Address.
	Chain    []string
	VendorID uint16
	DeviceID uint16
	Class    uint32 // 24 bits: base class, subclass, programming interface (0x030200)

	// NUMANode is the function's NUMA node, -1 when unknown; NUMAFrom says how it was found:
	// "numa_node", "local_cpulist", "single node" or "" (unknown). See the package doc.
	NUMANode int
	NUMAFrom string
	// LocalCPUs is local_cpulist as the kernel prints it ("0-55,112-167"); empty when missing.
	LocalCPUs string
}

// RootBus is the first element of the chain, "" without one.
func (f PCIFunction) RootBus() string {
	if len(f.Chain) == 0 {
		return ""
	}
	return f.Chain[0]
}

// Bridges are the chain's elements between the root bus and the function.
func (f PCIFunction) Bridges() []string {
	if len(f.Chain) < 2 {
		return nil
	}
	return f.Chain[1 : len(f.Chain)-1]
}

// Depth is the number of links from the root bus down to the function.
func (f PCIFunction) Depth() int { return max(len(f.Chain)-1, 0) }

// farDistance stands for the distance of a pair that has no PCI path to compare.
const farDistance = 1 << 10

// Relate computes the relation and the PCI distance of two functions (rules in the package doc).
func Relate(a, b PCIFunction) Link {
	if len(a.Chain) < 2 || len(b.Chain) < 2 {
		return Link{Relation: SYS, Distance: farDistance}
	}
	if a.RootBus() != b.RootBus() {
		l := Link{Relation: SYS, Distance: a.Depth() + b.Depth() + 2}
		if a.NUMANode >= 0 && a.NUMANode == b.NUMANode {
			l.Relation = NODE
		}
		return l
	}
	// k: the length of the common prefix of the two chains without the functions themselves;
	// the last shared element (a root bus or a bridge) is where their paths meet.
	ca, cb := a.Chain[:len(a.Chain)-1], b.Chain[:len(b.Chain)-1]
	k := 0
	for k < len(ca) && k < len(cb) && ca[k] == cb[k] {
		k++
	}
	distance := a.Depth() + b.Depth() - 2*(k-1)
	if rootBusRE.MatchString(ca[k-1]) {
		return Link{Relation: PHB, Distance: distance}
	}
	da, db := len(ca)-k, len(cb)-k
	l := Link{Relation: PIX, Distance: distance}
	if da > 1 || db > 1 {
		l.Relation = PXB
	}
	return l
}

// errNotPCI: a device's directory is not a PCI function's (a platform device). For a GPU listed
// in bus/pci/devices that is a malformed tree; for an RDMA device's parent it only means that
// the device has no PCI function.
var errNotPCI = fmt.Errorf("%w: not a PCI device", verbs.ErrMalformed)

var (
	rootBusRE = regexp.MustCompile(`^pci[0-9a-f]{4,8}:[0-9a-f]{2}$`)
	bdfRE     = regexp.MustCompile(`^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-1][0-9a-f]\.[0-7]$`)
)

// resolveChain follows link (a symlink somewhere in the tree) to a PCI function's directory and
// returns its chain and that directory. devices is the resolved devices/ directory of the tree.
func resolveChain(devices, link string) ([]string, string, error) {
	dir, err := filepath.EvalSymlinks(link)
	if err != nil {
		return nil, "", fmt.Errorf("topo: resolving %s: %w", link, err)
	}
	rel, err := filepath.Rel(devices, dir)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return nil, "", fmt.Errorf("%w: %s resolves to %s, which is not under %s (not a sysfs tree, or a link that leaves it)", verbs.ErrMalformed, link, dir, devices)
	}
	chain := strings.Split(filepath.ToSlash(rel), "/")
	if !rootBusRE.MatchString(chain[0]) {
		return nil, "", fmt.Errorf("%w: %s resolves to devices/%s, which is not below a PCI root bus (devices/pci<domain>:<bus>/...)", errNotPCI, link, rel)
	}
	// Below a PCI function may sit devices of other buses (an mlx5 sub-function,
	// .../0000:17:00.0/mlx5_core.sf.2): the PCI function above them is the one that counts.
	last := -1
	for i, c := range chain {
		if bdfRE.MatchString(c) {
			last = i
		}
	}
	if last < 1 {
		return nil, "", fmt.Errorf("%w: %s resolves to devices/%s, which holds no PCI function", errNotPCI, link, rel)
	}
	chain = chain[:last+1]
	for _, c := range chain[1:] {
		if !bdfRE.MatchString(c) && !rootBusRE.MatchString(c) {
			return nil, "", fmt.Errorf("%w: %s resolves to devices/%s, whose part %q is neither a PCI address nor a root bus", verbs.ErrMalformed, link, rel, c)
		}
	}
	return chain, filepath.Join(append([]string{devices}, chain...)...), nil
}

// readFunction reads the attributes of the PCI function in dir.
func readFunction(dir string, chain []string) (PCIFunction, error) {
	f := PCIFunction{Address: chain[len(chain)-1], Chain: chain, NUMANode: -1}
	for _, a := range []struct {
		name string
		bits int
		set  func(uint64)
	}{
		{"vendor", 16, func(v uint64) { f.VendorID = uint16(v) }},
		{"device", 16, func(v uint64) { f.DeviceID = uint16(v) }},
		{"class", 24, func(v uint64) { f.Class = uint32(v) }},
	} {
		v, _, err := readHexAttr(filepath.Join(dir, a.name), a.bits)
		if err != nil {
			return f, err
		}
		a.set(v)
	}
	v, ok, err := readAttr(filepath.Join(dir, "numa_node"))
	if err != nil {
		return f, err
	}
	if ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < -1 {
			return f, fmt.Errorf("%w: %s is %q; the kernel writes a node number or -1", verbs.ErrMalformed, filepath.Join(dir, "numa_node"), v)
		}
		if n >= 0 {
			f.NUMANode, f.NUMAFrom = n, "numa_node"
		}
	}
	if v, ok, err := readAttr(filepath.Join(dir, "local_cpulist")); err != nil {
		return f, err
	} else if ok {
		f.LocalCPUs = v
	}
	return f, nil
}

// readAttr reads one sysfs attribute without its trailing newline; ok is false when it does not
// exist.
func readAttr(path string) (string, bool, error) {
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		return strings.TrimSuffix(string(b), "\n"), true, nil
	case errors.Is(err, fs.ErrNotExist):
		return "", false, nil
	}
	return "", false, fmt.Errorf("topo: %w", err)
}
