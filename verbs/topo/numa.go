package topo

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/velo-go/velo/verbs"
)

// NUMANode is one node of devices/system/node.
type NUMANode struct {
	ID int
	// CPUs is its cpulist as the kernel prints it ("0-55,112-167"); empty for a node without
	// CPUs (memory only, such as CXL or HBM).
	CPUs string
	cpus []int
}

// CPUList is the node's CPUs, ascending.
func (n NUMANode) CPUList() []int { return slices.Clone(n.cpus) }

// maxCPU bounds the CPU numbers a cpulist may name, so that a corrupt file cannot make the
// parser allocate without end.
const maxCPU = 1 << 16

// ParseCPUList decodes the kernel's cpulist format ("0-3,8,10-11": ranges and single CPUs,
// separated by commas; an empty string is no CPUs) into ascending CPU numbers. Anything else is an
// error wrapping verbs.ErrMalformed.
func ParseCPUList(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var out []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := cpuNumber(lo)
		if err != nil {
			return nil, fmt.Errorf("%w: cpulist %q: %v", verbs.ErrMalformed, s, err)
		}
		b := a
		if isRange {
			if b, err = cpuNumber(hi); err != nil {
				return nil, fmt.Errorf("%w: cpulist %q: %v", verbs.ErrMalformed, s, err)
			}
			if b < a {
				return nil, fmt.Errorf("%w: cpulist %q: range %s runs backwards", verbs.ErrMalformed, s, part)
			}
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
		if len(out) > maxCPU {
			return nil, fmt.Errorf("%w: cpulist %q names more than %d CPUs", verbs.ErrMalformed, s, maxCPU)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func cpuNumber(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n >= maxCPU || (len(s) > 1 && s[0] == '0') || s[0] == '+' {
		return 0, fmt.Errorf("%q is not a CPU number", s)
	}
	return n, nil
}

// readNUMANodes lists devices/system/node/node<N>, ordered by N.
func readNUMANodes(sysfs string) ([]NUMANode, error) {
	dir := filepath.Join(sysfs, "devices", "system", "node")
	entries, err := readDirIfAny(dir)
	if err != nil {
		return nil, err
	}
	var nodes []NUMANode
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), "node")
		id, err := strconv.Atoi(rest)
		if !ok || err != nil || id < 0 {
			continue // has_cpu, online, possible, power, ...
		}
		path := filepath.Join(dir, e.Name(), "cpulist")
		v, ok, err := readAttr(path)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("%w: %s is missing (every NUMA node has one, empty when the node has no CPUs)", verbs.ErrMalformed, path)
		}
		cpus, err := ParseCPUList(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		nodes = append(nodes, NUMANode{ID: id, CPUs: v, cpus: cpus})
	}
	slices.SortFunc(nodes, func(a, b NUMANode) int { return a.ID - b.ID })
	return nodes, nil
}

// settleNUMA fills in the NUMA node of a function whose numa_node did not give one, by the rules
// of the package doc, and returns a note when it took a fallback (or could not settle it). what
// names the function for the note.
func settleNUMA(f *PCIFunction, nodes []NUMANode, what string) (string, error) {
	if f.NUMAFrom != "" || f.Address == "" {
		return "", nil
	}
	withCPUs, only := 0, 0
	for _, n := range nodes {
		if len(n.cpus) > 0 {
			withCPUs++
			only = n.ID
		}
	}
	if withCPUs <= 1 {
		// One node (or a kernel without NUMA): -1 is what such a machine reports, nothing to say.
		f.NUMANode, f.NUMAFrom = only, "single node"
		return "", nil
	}
	if f.LocalCPUs != "" {
		cpus, err := ParseCPUList(f.LocalCPUs)
		if err != nil {
			return "", fmt.Errorf("%s local_cpulist: %w", what, err)
		}
		var holding []int
		for _, n := range nodes {
			if len(cpus) > 0 && len(n.cpus) > 0 && subset(cpus, n.cpus) {
				holding = append(holding, n.ID)
			}
		}
		if len(holding) == 1 {
			f.NUMANode, f.NUMAFrom = holding[0], "local_cpulist"
			return fmt.Sprintf("%s: numa_node does not name a node; node %d holds its local CPUs (%s)", what, f.NUMANode, f.LocalCPUs), nil
		}
	}
	return fmt.Sprintf("%s: NUMA node unknown (numa_node is -1 or missing, and local_cpulist %q does not fit one node): its relations across root buses are SYS", what, f.LocalCPUs), nil
}

// subset reports whether every element of a (ascending) is in b (ascending).
func subset(a, b []int) bool {
	j := 0
	for _, x := range a {
		for j < len(b) && b[j] < x {
			j++
		}
		if j == len(b) || b[j] != x {
			return false
		}
	}
	return true
}
