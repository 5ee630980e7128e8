package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/velo-go/velo/tools/ibcheck/internal/check"
	"github.com/velo-go/velo/verbs"
	"github.com/velo-go/velo/verbs/topo"
)

const topoUsage = `usage: ibcheck topo [flags]

Prints how near each GPU is to each RDMA NIC, from the PCI tree in sysfs, as nvidia-smi topo -m
names it (PIX, PXB, PHB, NODE, SYS), each GPU's recommended UCX_NET_DEVICES (the active ports of
the best relation it has), and a WARN for a GPU whose nearest active port is across NUMA nodes,
whose nearest port is down, or when GPUs crowd onto one NIC while another serves none.

Exit codes: 0 (warnings included), 1 the tree could not be read (with --strict also a warning),
2 usage error.

Flags:
`

// topoSchema names the JSON document's version (docs/ibcheck.md, "ibcheck topo").
const topoSchema = "ibcheck-topo/v1"

// topoReport is the JSON form; the table prints the same.
type topoReport struct {
	Schema          string           `json:"schema"`
	Verdict         string           `json:"verdict"`
	ExitCode        int              `json:"exit_code"`
	Strict          bool             `json:"strict"`
	Sysfs           string           `json:"sysfs"`
	Live            bool             `json:"live"`
	NUMANodes       []topoNUMA       `json:"numa_nodes"`
	GPUs            []topoGPU        `json:"gpus"`
	NICs            []topoNIC        `json:"nics"`
	Matrix          []topoRow        `json:"matrix"`
	Recommendations []topoRecommend  `json:"recommendations"`
	Warnings        []topoWarning    `json:"warnings"`
	Notes           []string         `json:"notes"`
	topo            *topo.Topology   // for the table
	shares          map[string][]int // port spec -> GPUs that recommend it
}

type topoNUMA struct {
	ID   int    `json:"id"`
	CPUs string `json:"cpus"`
}

type topoGPU struct {
	Name      string   `json:"name"`
	Index     int      `json:"index"`
	PCI       string   `json:"pci"`
	Vendor    string   `json:"vendor"`
	VendorID  string   `json:"vendor_id"`
	DeviceID  string   `json:"device_id"`
	Class     string   `json:"class"`
	NUMANode  int      `json:"numa_node"`
	NUMAFrom  string   `json:"numa_from"`
	CPUs      string   `json:"cpu_affinity"`
	LocalCPUs string   `json:"local_cpulist,omitempty"`
	PCIChain  []string `json:"pci_chain"`
}

type topoNIC struct {
	Name     string        `json:"name"`
	Device   string        `json:"device"`
	PCI      string        `json:"pci"`
	PCIFrom  string        `json:"pci_from"`
	NUMANode int           `json:"numa_node"`
	NUMAFrom string        `json:"numa_from"`
	PCIChain []string      `json:"pci_chain"`
	Ports    []topoNICPort `json:"ports"`
	HCAType  string        `json:"hca_type,omitempty"`
	Firmware string        `json:"firmware,omitempty"`
}

type topoNICPort struct {
	Port      string     `json:"port"`
	State     string     `json:"state"`
	PhysState string     `json:"phys_state"`
	LinkLayer string     `json:"link_layer"`
	Rate      string     `json:"rate"`
	Netdevs   []string   `json:"netdevs"`
	Bonds     []topoBond `json:"bonds,omitempty"`
}

type topoBond struct {
	Name   string   `json:"name"`
	Slaves []string `json:"slaves"`
}

type topoRow struct {
	GPU  string     `json:"gpu"`
	NICs []topoCell `json:"nics"`
}

type topoCell struct {
	NIC      string `json:"nic"`
	Relation string `json:"relation"`
	Distance int    `json:"distance"`
}

type topoRecommend struct {
	GPU           string       `json:"gpu"`
	UCXNetDevices string       `json:"ucx_net_devices"`
	Relation      string       `json:"relation"`
	Ranking       []topoRanked `json:"ranking"`
}

type topoRanked struct {
	Port     string `json:"port"`
	Relation string `json:"relation"`
	Distance int    `json:"distance"`
	Active   bool   `json:"active"`
}

type topoWarning struct {
	ID      string   `json:"id"`
	GPUs    []string `json:"gpus,omitempty"`
	Finding string   `json:"finding"`
	Fix     string   `json:"fix"`
}

// runTopo is `ibcheck topo`.
func runTopo(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ibcheck topo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	sysfs := fs.String("sysfs", "", "read this sysfs `tree` instead of /sys (a verbs/topo/testdata/sysfs fixture, or a copy of another node's)")
	asJSON := fs.Bool("json", false, "print the report as JSON (schema "+topoSchema+", docs/ibcheck.md)")
	strict := fs.Bool("strict", false, "exit 1 on warnings")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), topoUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fs.Usage()
			return check.ExitOK
		}
		fmt.Fprintf(stderr, "Run 'ibcheck topo -h' for usage.\n")
		return check.ExitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "ibcheck topo: unexpected argument %q (flags start with -)\nRun 'ibcheck topo -h' for usage.\n", fs.Arg(0))
		return check.ExitUsage
	}
	paths := verbs.Paths{}
	if *sysfs != "" {
		if st, err := os.Stat(*sysfs); err != nil || !st.IsDir() {
			fmt.Fprintf(stderr, "ibcheck topo: --sysfs %s: not a directory\n", *sysfs)
			return check.ExitUsage
		}
		// The topology opens no device node. The device root only matters to the uverbs probe
		// of package verbs; the tree itself, which holds none, keeps it from opening this
		// machine's /dev/infiniband for another node's devices.
		paths = verbs.Paths{Sysfs: *sysfs, Dev: *sysfs}
		if filepath.Clean(*sysfs) == "/sys" {
			paths.Dev = "/dev"
		}
	}
	t, err := topo.Load(paths)
	if err != nil {
		fmt.Fprintf(stderr, "ibcheck topo: %v\n", err)
		return check.ExitFail
	}
	rep := buildTopoReport(t, paths, *strict)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintf(stderr, "ibcheck topo: %v\n", err)
			return check.ExitFail
		}
	} else {
		writeTopoTable(stdout, rep)
	}
	return rep.ExitCode
}

func buildTopoReport(t *topo.Topology, paths verbs.Paths, strict bool) *topoReport {
	rep := &topoReport{
		Schema: topoSchema, Strict: strict, Sysfs: paths.SysfsRoot(), Live: paths.SysfsRoot() == "/sys",
		NUMANodes: []topoNUMA{}, GPUs: []topoGPU{}, NICs: []topoNIC{}, Matrix: []topoRow{},
		Recommendations: []topoRecommend{}, Warnings: []topoWarning{}, Notes: append([]string{}, t.Notes...),
		topo: t, shares: map[string][]int{},
	}
	for _, n := range t.NUMANodes {
		rep.NUMANodes = append(rep.NUMANodes, topoNUMA{ID: n.ID, CPUs: n.CPUs})
	}
	for _, g := range t.GPUs {
		rep.GPUs = append(rep.GPUs, topoGPU{
			Name: g.Name(), Index: g.Index, PCI: g.PCI.Address, Vendor: g.Vendor(),
			VendorID: fmt.Sprintf("0x%04x", g.PCI.VendorID), DeviceID: fmt.Sprintf("0x%04x", g.PCI.DeviceID),
			Class: fmt.Sprintf("0x%06x", g.PCI.Class), NUMANode: g.PCI.NUMANode, NUMAFrom: g.PCI.NUMAFrom,
			CPUs: cpuAffinity(t, g.PCI), LocalCPUs: g.PCI.LocalCPUs, PCIChain: g.PCI.Chain,
		})
	}
	for _, n := range t.NICs {
		j := topoNIC{
			Name: n.Name(), Device: n.Device.Name, PCI: n.PCI.Address, PCIFrom: n.PCIFrom,
			NUMANode: n.PCI.NUMANode, NUMAFrom: n.PCI.NUMAFrom, PCIChain: n.PCI.Chain,
			HCAType: n.Device.HCAType, Firmware: n.Device.FirmwareVersion, Ports: []topoNICPort{},
		}
		if j.PCIChain == nil {
			j.PCIChain = []string{}
		}
		for _, p := range n.Ports {
			jp := topoNICPort{Port: p.Spec(), State: p.State.String(), PhysState: p.PhysState.String(),
				LinkLayer: p.LinkLayer.String(), Rate: p.Rate.String(), Netdevs: append([]string{}, p.Netdevs...)}
			for _, b := range p.Bonds {
				jp.Bonds = append(jp.Bonds, topoBond{Name: b.Name, Slaves: b.Slaves})
			}
			j.Ports = append(j.Ports, jp)
		}
		rep.NICs = append(rep.NICs, j)
	}
	for i, row := range t.Matrix() {
		r := topoRow{GPU: t.GPUs[i].Name(), NICs: []topoCell{}}
		for j, l := range row {
			r.NICs = append(r.NICs, topoCell{NIC: t.NICs[j].Name(), Relation: l.Relation.String(), Distance: l.Distance})
		}
		rep.Matrix = append(rep.Matrix, r)
	}
	recs := t.Recommendations()
	for _, rec := range recs {
		r := topoRecommend{GPU: t.GPUs[rec.GPU].Name(), UCXNetDevices: rec.UCXNetDevices(), Ranking: []topoRanked{}}
		if len(rec.Ports) > 0 {
			r.Relation = rec.Relation.String()
		}
		ranked, _ := t.NearestPorts(rec.GPU, 0) // rec.GPU is in range
		for _, p := range ranked {
			r.Ranking = append(r.Ranking, topoRanked{Port: p.Spec(), Relation: p.Relation.String(), Distance: p.Distance, Active: p.Active()})
		}
		for _, p := range rec.Ports {
			rep.shares[p.Spec()] = append(rep.shares[p.Spec()], rec.GPU)
		}
		rep.Recommendations = append(rep.Recommendations, r)
	}
	rep.Warnings = topoWarnings(t, recs, rep.shares)
	rep.Verdict, rep.ExitCode = "pass", check.ExitOK
	if len(rep.Warnings) > 0 {
		rep.Verdict = "warn"
		if strict {
			rep.ExitCode = check.ExitFail
		}
	}
	return rep
}

// cpuAffinity is the CPU list nvidia-smi's "CPU Affinity" column shows: the CPUs of the
// function's NUMA node, else its local_cpulist, else "N/A".
func cpuAffinity(t *topo.Topology, f topo.PCIFunction) string {
	for _, n := range t.NUMANodes {
		if n.ID == f.NUMANode && n.CPUs != "" {
			return n.CPUs
		}
	}
	if f.LocalCPUs != "" {
		return f.LocalCPUs
	}
	return "N/A"
}

// topoWarnings judges the recommendations: a GPU whose nearest active port is SYS, a GPU whose
// nearest port is down, ports shared unevenly, and GPUs without any active port.
func topoWarnings(t *topo.Topology, recs []topo.Recommendation, shares map[string][]int) []topoWarning {
	out := []topoWarning{}
	if len(t.GPUs) == 0 {
		return out
	}
	active := 0
	for _, p := range t.Ports {
		if p.Active() {
			active++
		}
	}
	if active == 0 {
		what := "this node has no RDMA ports"
		fix := "load the RDMA drivers (mlx5_ib) or fit a NIC; ibcheck (without topo) says what is missing"
		if len(t.Ports) > 0 {
			what = fmt.Sprintf("none of this node's %d RDMA ports is PORT_ACTIVE", len(t.Ports))
			fix = "bring a port up (cable, switch, subnet manager); ibcheck --device <port> says what is wrong with one"
		}
		return append(out, topoWarning{ID: "no_active_port", Finding: what + ": the GPUs have no port to move data over RDMA", Fix: fix})
	}
	for _, rec := range recs {
		g := t.GPUs[rec.GPU]
		if rec.Relation == topo.SYS {
			numa := "its NUMA node is unknown"
			if g.PCI.NUMANode >= 0 {
				numa = fmt.Sprintf("it is on NUMA node %d", g.PCI.NUMANode)
			}
			out = append(out, topoWarning{ID: "sys_only", GPUs: []string{g.Name()},
				Finding: fmt.Sprintf("%s (%s): its nearest active port %s is SYS: %s, and every byte between it and the NIC crosses the interconnect between NUMA nodes", g.Name(), g.PCI.Address, rec.UCXNetDevices(), numa),
				Fix:     fmt.Sprintf("expect lower bandwidth for %s's transfers, or give its work to a GPU nearer a NIC; the lasting fix is a NIC on %s's PCIe side of the machine", g.Name(), g.Name())})
		}
		if n := rec.Nearest; n != nil && !n.Active() && len(rec.Ports) > 0 && n.Link.Less(rec.Ports[0].Link) {
			out = append(out, topoWarning{ID: "nearest_down", GPUs: []string{g.Name()},
				Finding: fmt.Sprintf("%s: its nearest port %s (%s) is %s (%s), so it uses %s (%s)", g.Name(), n.Spec(), n.Relation, n.State, n.PhysState, rec.UCXNetDevices(), rec.Relation),
				Fix:     fmt.Sprintf("bring %s up (cable, switch port, subnet manager); ibcheck --device %s says what is wrong", n.Spec(), n.Spec())})
		}
	}
	// Uneven: an active port nearest to several GPUs while another serves none.
	var idle, crowded []string
	for _, p := range t.Ports {
		if !p.Active() {
			continue
		}
		switch n := len(shares[p.Spec()]); {
		case n == 0:
			idle = append(idle, p.Spec())
		case n >= 2:
			crowded = append(crowded, p.Spec())
		}
	}
	if len(idle) > 0 && len(crowded) > 0 {
		var parts, gpus []string
		for _, c := range crowded {
			var names []string
			for _, i := range shares[c] {
				names = append(names, t.GPUs[i].Name())
				if !slices.Contains(gpus, t.GPUs[i].Name()) {
					gpus = append(gpus, t.GPUs[i].Name())
				}
			}
			parts = append(parts, fmt.Sprintf("%s serves %s", c, strings.Join(names, ", ")))
		}
		out = append(out, topoWarning{ID: "uneven", GPUs: gpus,
			Finding: fmt.Sprintf("the NICs are shared unevenly: %s, while %s %s nearest to no GPU", strings.Join(parts, "; "), strings.Join(idle, ", "), map[bool]string{true: "is", false: "are"}[len(idle) == 1]),
			Fix:     fmt.Sprintf("to spread the traffic, point one of those GPUs' processes at %s with UCX_NET_DEVICES (at the cost of a farther relation), or move a NIC so that each GPU has its own", idle[0])})
	}
	return out
}

func writeTopoTable(w io.Writer, rep *topoReport) {
	t := rep.topo
	where := rep.Sysfs
	if rep.Live {
		where += " (this machine)"
	}
	fmt.Fprintf(w, "ibcheck topo: GPUs and RDMA NICs of %s\n\n", where)
	switch {
	case len(t.GPUs) == 0:
		fmt.Fprintln(w, "no GPUs (NVIDIA or AMD VGA or 3D controllers in bus/pci/devices): nothing to place")
	case len(t.NICs) == 0:
		fmt.Fprintln(w, "no RDMA NICs: no matrix")
	default:
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprint(tw, "\t")
		for _, n := range t.NICs {
			fmt.Fprintf(tw, "%s\t", n.Name())
		}
		fmt.Fprintln(tw, "CPU Affinity\tNUMA Affinity")
		for i, row := range rep.Matrix {
			fmt.Fprintf(tw, "%s\t", row.GPU)
			for _, c := range row.NICs {
				fmt.Fprintf(tw, "%s\t", c.Relation)
			}
			numa := "N/A"
			if g := rep.GPUs[i]; g.NUMANode >= 0 {
				numa = strconv.Itoa(g.NUMANode)
			}
			fmt.Fprintf(tw, "%s\t%s\n", rep.GPUs[i].CPUs, numa)
		}
		tw.Flush()
		fmt.Fprintln(w, "\nLegend:")
		for _, r := range []topo.Relation{topo.PIX, topo.PXB, topo.PHB, topo.NODE, topo.SYS} {
			fmt.Fprintf(w, "  %-4s = %s\n", r, r.Describe())
		}
	}
	if len(t.GPUs) > 0 {
		fmt.Fprintln(w, "\nGPUs:")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, g := range rep.GPUs {
			fmt.Fprintf(tw, "  %s\t%s\t%s %s:%s\tNUMA %s\n", g.Name, g.PCI, g.Vendor, strings.TrimPrefix(g.VendorID, "0x"), strings.TrimPrefix(g.DeviceID, "0x"), numaText(g.NUMANode, g.NUMAFrom))
		}
		tw.Flush()
	}
	if len(t.NICs) > 0 {
		fmt.Fprintln(w, "\nNICs:")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, n := range rep.NICs {
			pci := n.PCI
			if pci == "" {
				pci = "no PCI function"
			} else if n.PCIFrom != "device" {
				pci += " (from " + n.PCIFrom + ")"
			}
			for i, p := range n.Ports {
				name, dev, at, numa := n.Name, n.Device, pci, "NUMA "+numaText(n.NUMANode, n.NUMAFrom)
				if i > 0 {
					name, dev, at, numa = "", "", "", ""
				}
				netdevs := "no netdev"
				if len(p.Netdevs) > 0 {
					netdevs = strings.Join(p.Netdevs, ", ")
				}
				for _, b := range p.Bonds {
					netdevs += fmt.Sprintf(" (%s bonds %s)", b.Name, strings.Join(b.Slaves, ", "))
				}
				fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s %s %s, %s\t%s\n", name, dev, at, numa, p.Port, p.State, p.LinkLayer, p.Rate, netdevs)
			}
		}
		tw.Flush()
	}
	if len(rep.Recommendations) > 0 {
		fmt.Fprintln(w, "\nRecommended UCX_NET_DEVICES per GPU (its active ports of the best relation it has):")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, r := range rep.Recommendations {
			if r.UCXNetDevices == "" {
				fmt.Fprintf(tw, "  %s\t(no active port)\t\n", r.GPU)
				continue
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", r.GPU, r.UCXNetDevices, r.Relation)
		}
		tw.Flush()
	}
	if len(rep.Warnings) > 0 {
		fmt.Fprintln(w)
	}
	for _, wn := range rep.Warnings {
		lines := wrap(wn.Finding, tableWidth-20)
		fmt.Fprintf(w, "WARN  %-14s%s\n", wn.ID, lines[0])
		for _, l := range lines[1:] {
			fmt.Fprintf(w, "%20s%s\n", "", l)
		}
		for i, l := range wrap("fix: "+wn.Fix, tableWidth-22) {
			pad := 20
			if i > 0 {
				pad += 5
			}
			fmt.Fprintf(w, "%*s%s\n", pad, "", l)
		}
	}
	if len(rep.Notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range rep.Notes {
			for i, l := range wrap(n, tableWidth-6) {
				prefix := "note: "
				if i > 0 {
					prefix = "      "
				}
				fmt.Fprintf(w, "%s%s\n", prefix, l)
			}
		}
	}
	ports, active := 0, 0
	for _, n := range rep.NICs {
		for _, p := range n.Ports {
			ports++
			if p.State == verbs.PortActive.String() {
				active++
			}
		}
	}
	mode := ""
	if rep.Strict {
		mode = ", --strict"
	}
	fmt.Fprintf(w, "\nsummary: %s, %s (%d of %s active), %s; %s: %s (exit %d%s)\n",
		count(len(rep.GPUs), "GPU"), count(len(rep.NICs), "NIC"), active, count(ports, "port"), count(len(rep.NUMANodes), "NUMA node"),
		count(len(rep.Warnings), "warning"), strings.ToUpper(rep.Verdict), rep.ExitCode, mode)
}

// count is "1 GPU", "2 GPUs".
func count(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

func numaText(node int, from string) string {
	if node < 0 {
		return "unknown"
	}
	if from == "numa_node" || from == "single node" {
		return strconv.Itoa(node)
	}
	return fmt.Sprintf("%d (from %s)", node, from)
}
