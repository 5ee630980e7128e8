package velo

// Rail choice: which NICs the UCX transport reads and writes through.
//
// A GPU node carries several RDMA NICs, each a rail, on PCIe switches of two sockets. A process
// that moves its GPU's bytes through a NIC across the socket pays for the crossing on every byte,
// and one that uses one NIC of eight leaves the rest idle; neither shows anywhere but in the
// throughput. ChooseRails picks the rails a process should use from the node's PCI topology
// (package verbs/topo): the active ports nearest to its GPU, or, without a GPU, those on the NUMA
// node its CPUs are on. The operator's UCX_NET_DEVICES still wins, so a deployed binary can be
// pointed at other NICs without a rebuild; the choice records that it did.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/velo-go/velo/velo/transport"
	"github.com/velo-go/velo/velo/transport/rails"
	"github.com/velo-go/velo/verbs"
	"github.com/velo-go/velo/verbs/topo"
)

// NetDevicesEnv is UCX's variable naming the devices it may use; set, it wins over every rail
// choice.
const NetDevicesEnv = "UCX_NET_DEVICES"

// CUDAVisibleDevicesEnv is the variable whose first entry is the process's GPU when RailPolicy.GPU
// is empty.
const CUDAVisibleDevicesEnv = "CUDA_VISIBLE_DEVICES"

// ErrRails: a rail policy that cannot be met (a device that does not exist or is down, a GPU the
// node lacks, a MaxRails below zero). The error's text names the fix.
var ErrRails = errors.New("rail choice")

// RailPolicy says how to choose the rails (NICs) of the UCX transport. The zero value chooses
// nothing: UCX picks its devices itself, as before rails existed.
type RailPolicy struct {
	// Devices names the rails, one UCX_NET_DEVICES entry each: an RDMA port ("mlx5_0:1"), an RDMA
	// device ("mlx5_0", every port), or a network interface ("eth2", "veth0") for UCX's tcp
	// transport. Each must exist and be up. Set, it wins over Auto.
	Devices []string
	// Auto chooses the rails from the node's PCI topology: the active ports nearest to the
	// process's GPU (same PCIe switch first, then several switches, the host bridge, the same
	// NUMA node; never across the socket while a nearer port is up), or with no GPU those whose
	// NIC is on the process's NUMA node.
	Auto bool
	// GPU is the process's GPU for Auto: its PCI address ("0000:18:00.0"), or its index as
	// nvidia-smi numbers it (PCI address order; CUDA's numbering under CUDA_DEVICE_ORDER=PCI_BUS_ID).
	// Empty: the first entry of CUDA_VISIBLE_DEVICES when that is an index, else no GPU. "none":
	// no GPU (the NUMA node decides).
	GPU string
	// NUMANode is the NUMA node for Auto when there is no GPU; nil takes the node that holds most
	// of the CPUs the process may run on (sched_getaffinity).
	NUMANode *int
	// MaxRails caps the rails Auto takes. Zero takes every active port of the nearest relation
	// the GPU has (both NICs of its switch on a DGX-H100-class box); a positive number takes up to
	// that many active ports, nearest first, without crossing the socket while a port on the
	// process's own NUMA node is up. It also caps Devices.
	MaxRails int
	// Sysfs is the sysfs root to read (default /sys); tests point it at a fixture tree.
	Sysfs verbs.Paths
	// Slice, with two or more rails chosen, makes one UCX transport per rail (each its own UCX
	// context, restricted to its device) and reads every large transfer in slices over all of
	// them, pausing a rail that fails and reading its slices again over the others (package
	// velo/transport/rails; docs/rails.md). Without it, every chosen device goes to one UCX
	// context as one UCX_NET_DEVICES value, and UCX spreads what it can itself.
	Slice bool
	// Slicing tunes Slice: slice size, split threshold, window, cool-downs (zero: the defaults
	// of package velo/transport/rails).
	Slicing rails.Config
}

// NUMA returns a pointer to n, for RailPolicy.NUMANode.
func NUMA(n int) *int { return &n }

// RailSource says where a RailChoice came from.
type RailSource string

// The sources of a rail choice.
const (
	// RailsNone: no policy; UCX chooses its devices itself.
	RailsNone RailSource = "none"
	// RailsEnvironment: UCX_NET_DEVICES was set, and it won.
	RailsEnvironment RailSource = "environment"
	// RailsExplicit: RailPolicy.Devices.
	RailsExplicit RailSource = "explicit"
	// RailsGPU: Auto, by the process's GPU.
	RailsGPU RailSource = "auto-gpu"
	// RailsNUMA: Auto, by the process's NUMA node.
	RailsNUMA RailSource = "auto-numa"
)

// Rail is one chosen rail.
type Rail struct {
	// Device is the UCX_NET_DEVICES entry of this rail ("mlx5_0:1", "veth0").
	Device string `json:"device"`
	// Relation is how near the NIC is to the GPU or NUMA node it was chosen for (PIX, PXB, PHB,
	// NODE, SYS); empty when it was not chosen from the topology.
	Relation string `json:"relation,omitempty"`
	// Distance is the PCI distance (links on the path) behind Relation; 0 when Relation is empty.
	Distance int `json:"distance,omitempty"`
	// NUMANode is the NIC's NUMA node, -1 when unknown or not from the topology.
	NUMANode int `json:"numa_node"`
}

// RailChoice is what ChooseRails decided, and why.
type RailChoice struct {
	Source RailSource `json:"source"`
	// Rails are the rails in use, nearest first. With Source RailsEnvironment it is one rail whose
	// Device is the variable's whole value (every UCX context reads it).
	Rails []Rail `json:"rails"`
	// GPU is the GPU the choice was made for ("GPU3 0000:3b:00.0"); empty without one.
	GPU string `json:"gpu,omitempty"`
	// NUMANode is the NUMA node it was made for (Source RailsNUMA), -1 otherwise.
	NUMANode int `json:"numa_node"`
	// Notes say which fallbacks were taken (no GPU found, MaxRails above the ports there are, a
	// port across the socket because none nearer is up).
	Notes []string `json:"notes,omitempty"`
}

// Devices are the rails' UCX_NET_DEVICES entries, in order.
func (c RailChoice) Devices() []string {
	out := make([]string, len(c.Rails))
	for i, r := range c.Rails {
		out[i] = r.Device
	}
	return out
}

// NetDevices is the rails in UCX_NET_DEVICES form, all of them in one value ("mlx5_0:1,mlx5_1:1").
func (c RailChoice) NetDevices() string { return strings.Join(c.Devices(), ",") }

// String is one line for logs: "auto-gpu GPU0 0000:18:00.0: mlx5_0:1 (PIX), mlx5_1:1 (PIX)".
func (c RailChoice) String() string {
	var b strings.Builder
	b.WriteString(string(c.Source))
	if c.GPU != "" {
		b.WriteString(" " + c.GPU)
	}
	if c.Source == RailsNUMA {
		b.WriteString(" node" + strconv.Itoa(c.NUMANode))
	}
	if len(c.Rails) == 0 {
		b.WriteString(": UCX's own choice")
		return b.String()
	}
	b.WriteString(": ")
	for i, r := range c.Rails {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(r.Device)
		if r.Relation != "" {
			b.WriteString(" (" + r.Relation + ")")
		}
	}
	return b.String()
}

// railEnv is what ChooseRails reads from the process besides sysfs; tests replace it.
type railEnv struct {
	getenv   func(string) string
	affinity func() ([]int, error)
}

func processRailEnv() railEnv {
	return railEnv{getenv: os.Getenv, affinity: schedAffinity}
}

// schedAffinity lists the CPUs this process may run on.
func schedAffinity() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("sched_getaffinity: %w", err)
	}
	var cpus []int
	for i := 0; i < len(set)*64; i++ {
		if set.IsSet(i) {
			cpus = append(cpus, i)
		}
	}
	return cpus, nil
}

// ChooseRails applies p on this node: UCX_NET_DEVICES when set (the operator wins), else
// p.Devices checked against the node, else with p.Auto the nearest active ports from the PCI
// topology, else nothing (UCX's own choice).
func ChooseRails(p RailPolicy) (RailChoice, error) { return chooseRails(p, processRailEnv()) }

func chooseRails(p RailPolicy, env railEnv) (RailChoice, error) {
	none := RailChoice{Source: RailsNone, NUMANode: -1}
	if p.MaxRails < 0 {
		return none, fmt.Errorf("velo: %w: MaxRails %d is negative (0 takes every port of the nearest relation)", ErrRails, p.MaxRails)
	}
	if v := strings.TrimSpace(env.getenv(NetDevicesEnv)); v != "" {
		c := RailChoice{Source: RailsEnvironment, NUMANode: -1, Rails: []Rail{{Device: v, NUMANode: -1}}}
		if len(p.Devices) > 0 || p.Auto {
			c.Notes = append(c.Notes, NetDevicesEnv+" is set, so it wins over the rail policy; unset it to let velo choose")
		}
		return c, nil
	}
	if len(p.Devices) > 0 {
		return explicitRails(p)
	}
	if !p.Auto {
		return none, nil
	}
	t, err := topo.Load(p.Sysfs)
	if err != nil {
		return none, fmt.Errorf("velo: %w: reading the node's topology for Auto: %w (name the rails in RailPolicy.Devices, or set %s)", ErrRails, err, NetDevicesEnv)
	}
	if len(t.Ports) == 0 {
		return none, fmt.Errorf("velo: %w: Auto found no RDMA port under %s: name the rails (network interfaces for UCX's tcp transport) in RailPolicy.Devices, or set %s", ErrRails, p.Sysfs.SysfsRoot(), NetDevicesEnv)
	}
	gpu, notes, err := pickGPU(t, p.GPU, env)
	if err != nil {
		return none, err
	}
	if gpu != nil {
		c, err := railsForGPU(t, *gpu, p.MaxRails)
		c.Notes = append(notes, c.Notes...)
		return c, err
	}
	node, nnotes, err := pickNUMA(t, p.NUMANode, env)
	notes = append(notes, nnotes...)
	if err != nil {
		return none, err
	}
	c, err := railsForNUMA(t, node, p.MaxRails)
	c.Notes = append(notes, c.Notes...)
	return c, err
}

// pickGPU finds the process's GPU: by PCI address, by index, from CUDA_VISIBLE_DEVICES, or none.
func pickGPU(t *topo.Topology, want string, env railEnv) (*topo.GPU, []string, error) {
	var notes []string
	from := "RailPolicy.GPU"
	if want == "" {
		want = env.getenv(CUDAVisibleDevicesEnv)
		if want == "" {
			return nil, nil, nil
		}
		from = CUDAVisibleDevicesEnv
		first, _, _ := strings.Cut(want, ",")
		want = strings.TrimSpace(first)
		if _, err := strconv.Atoi(want); err != nil {
			// A UUID (GPU-…) or MIG name needs NVML to map to a PCI address.
			notes = append(notes, fmt.Sprintf("%s names %q, not an index; rails chosen by NUMA node (set RailPolicy.GPU to the GPU's PCI address)", CUDAVisibleDevicesEnv, want))
			return nil, notes, nil
		}
	}
	if strings.EqualFold(want, "none") {
		return nil, nil, nil
	}
	if len(t.GPUs) == 0 {
		if from == CUDAVisibleDevicesEnv {
			return nil, append(notes, fmt.Sprintf("%s is set but this node shows no GPU in sysfs; rails chosen by NUMA node", CUDAVisibleDevicesEnv)), nil
		}
		return nil, nil, fmt.Errorf("velo: %w: %s %q, but this node shows no GPU (NVIDIA or AMD display or 3D controller) in sysfs: leave GPU empty or \"none\"", ErrRails, from, want)
	}
	if i, err := strconv.Atoi(want); err == nil {
		if i < 0 || i >= len(t.GPUs) {
			return nil, nil, fmt.Errorf("velo: %w: %s %d, but this node has GPU0 to GPU%d (in PCI address order)", ErrRails, from, i, len(t.GPUs)-1)
		}
		g := t.GPUs[i]
		return &g, notes, nil
	}
	addr := strings.ToLower(want)
	if strings.Count(addr, ":") == 1 { // nvidia-smi's bus id without a domain: 18:00.0
		addr = "0000:" + addr
	}
	if len(addr) == len("00000000:18:00.0") && strings.HasPrefix(addr, "0000") { // nvidia-smi prints an 8-digit domain
		addr = addr[4:]
	}
	for _, g := range t.GPUs {
		if g.PCI.Address == addr {
			return &g, notes, nil
		}
	}
	have := make([]string, len(t.GPUs))
	for i, g := range t.GPUs {
		have[i] = g.PCI.Address
	}
	return nil, nil, fmt.Errorf("velo: %w: no GPU at PCI address %q (this node's: %s)", ErrRails, want, strings.Join(have, ", "))
}

// pickNUMA returns the NUMA node of the choice: the policy's, or the one holding most of the
// process's CPUs; -1 when none can be told.
func pickNUMA(t *topo.Topology, want *int, env railEnv) (int, []string, error) {
	if want != nil {
		return *want, nil, nil
	}
	if len(t.NUMANodes) <= 1 {
		if len(t.NUMANodes) == 1 {
			return t.NUMANodes[0].ID, nil, nil
		}
		return 0, nil, nil
	}
	cpus, err := env.affinity()
	if err != nil {
		return -1, []string{fmt.Sprintf("the process's CPU affinity could not be read (%v); rails chosen without a NUMA node", err)}, nil
	}
	best, bestN, total := -1, 0, 0
	for _, n := range t.NUMANodes {
		k := 0
		for _, c := range n.CPUList() {
			if slices.Contains(cpus, c) {
				k++
			}
		}
		total += k
		if k > bestN {
			best, bestN = n.ID, k
		}
	}
	if best < 0 {
		return -1, []string{"none of the process's CPUs is on a NUMA node sysfs lists; rails chosen without a NUMA node"}, nil
	}
	var notes []string
	if bestN < total {
		notes = append(notes, fmt.Sprintf("the process may run on CPUs of several NUMA nodes; node %d holds most of them (%d of %d): pin the process (numactl, taskset) or set RailPolicy.NUMANode", best, bestN, total))
	}
	return best, notes, nil
}

// railsForGPU takes the GPU's nearest active ports.
func railsForGPU(t *topo.Topology, g topo.GPU, maxRails int) (RailChoice, error) {
	c := RailChoice{Source: RailsGPU, NUMANode: -1, GPU: g.Name() + " " + g.PCI.Address}
	ranked, err := t.NearestPorts(g.Index, 0)
	if err != nil {
		return c, fmt.Errorf("velo: %w: %w", ErrRails, err)
	}
	c.Rails, c.Notes = takeRails(t, ranked, maxRails)
	if len(c.Rails) == 0 {
		return c, fmt.Errorf("velo: %w: no RDMA port of this node is active (%s): bring a port up (ibstat, ip link) or name the rails in RailPolicy.Devices", ErrRails, portStates(ranked))
	}
	if rec, err := t.Recommend(g.Index); err == nil && rec.Nearest != nil && !rec.Nearest.Active() {
		c.Notes = append(c.Notes, fmt.Sprintf("the port nearest %s, %s (%s), is %s; using farther ones until it is up", g.Name(), rec.Nearest.Spec(), rec.Nearest.Relation, rec.Nearest.State))
	}
	return c, nil
}

// railsForNUMA takes the active ports on the NUMA node (or every active port, node -1).
func railsForNUMA(t *topo.Topology, node, maxRails int) (RailChoice, error) {
	c := RailChoice{Source: RailsNUMA, NUMANode: node}
	var ranked []topo.Ranked
	if node < 0 {
		for _, p := range t.Ports {
			n, _ := t.NICOf(p)
			ranked = append(ranked, topo.Ranked{Port: p, Link: topo.Link{Relation: topo.SYS, Distance: n.PCI.Depth()}})
		}
		slices.SortStableFunc(ranked, func(a, b topo.Ranked) int {
			if a.Active() == b.Active() {
				return 0
			}
			if a.Active() {
				return -1
			}
			return 1
		})
	} else {
		var err error
		if ranked, err = t.NearestPortsForNUMA(node, 0); err != nil {
			return c, fmt.Errorf("velo: %w: %w (set RailPolicy.NUMANode to one of them)", ErrRails, err)
		}
	}
	c.Rails, c.Notes = takeRails(t, ranked, maxRails)
	if len(c.Rails) == 0 {
		return c, fmt.Errorf("velo: %w: no RDMA port of this node is active (%s): bring a port up or name the rails in RailPolicy.Devices", ErrRails, portStates(ranked))
	}
	return c, nil
}

// takeRails applies MaxRails to a ranking (active first, nearest first): 0 takes the active ports
// of the best relation; n takes up to n active ports without crossing to SYS while a nearer one
// was taken.
func takeRails(t *topo.Topology, ranked []topo.Ranked, maxRails int) ([]Rail, []string) {
	var out []Rail
	var notes []string
	best := topo.Relation(0)
	for _, r := range ranked {
		if !r.Active() {
			break
		}
		if len(out) == 0 {
			best = r.Relation
		}
		if maxRails == 0 && r.Relation != best {
			break
		}
		if maxRails > 0 && len(out) >= maxRails {
			break
		}
		if len(out) > 0 && r.Relation == topo.SYS && best != topo.SYS {
			notes = append(notes, fmt.Sprintf("MaxRails %d is more than the active ports on this side of the socket; the rest are across it and left out", maxRails))
			break
		}
		n, _ := t.NICOf(r.Port)
		node := n.PCI.NUMANode
		if n.PCI.Address == "" {
			node = -1
		}
		out = append(out, Rail{Device: r.Spec(), Relation: r.Relation.String(), Distance: r.Distance, NUMANode: node})
	}
	if maxRails > 0 && len(out) < maxRails && len(notes) == 0 && len(out) > 0 {
		notes = append(notes, fmt.Sprintf("MaxRails %d, but only %d active ports qualify; using those", maxRails, len(out)))
	}
	if len(out) > 0 && best == topo.SYS {
		notes = append(notes, "the nearest active port is across the socket (SYS): every byte crosses the interconnect between sockets; check ibcheck topo")
	}
	return out, notes
}

func portStates(ranked []topo.Ranked) string {
	s := make([]string, len(ranked))
	for i, r := range ranked {
		s[i] = r.Spec() + " " + r.State.String()
	}
	if len(s) == 0 {
		return "no ports"
	}
	return strings.Join(s, ", ")
}

// explicitRails checks each named device: an RDMA port or device that exists with an active
// port, or a network interface that exists and is not down.
func explicitRails(p RailPolicy) (RailChoice, error) {
	c := RailChoice{Source: RailsExplicit, NUMANode: -1}
	devs := p.Devices
	if p.MaxRails > 0 && len(devs) > p.MaxRails {
		c.Notes = append(c.Notes, fmt.Sprintf("RailPolicy.Devices names %d rails, MaxRails %d: the first %d used", len(devs), p.MaxRails, p.MaxRails))
		devs = devs[:p.MaxRails]
	}
	seen := map[string]bool{}
	root := p.Sysfs.SysfsRoot()
	var t *topo.Topology // read on the first RDMA name
	for _, d := range devs {
		d = strings.TrimSpace(d)
		if d == "" || strings.ContainsAny(d, ", \t/") {
			return c, fmt.Errorf("velo: %w: rail %q: name one device per entry (\"mlx5_0:1\", \"mlx5_0\" or a network interface such as \"eth2\")", ErrRails, d)
		}
		if seen[d] {
			return c, fmt.Errorf("velo: %w: rail %q is named twice in RailPolicy.Devices", ErrRails, d)
		}
		seen[d] = true
		name, portStr, hasPort := strings.Cut(d, ":")
		if _, err := os.Stat(filepath.Join(root, "class", "infiniband", name)); err == nil {
			if t == nil {
				var err error
				if t, err = topo.Load(p.Sysfs); err != nil {
					return c, fmt.Errorf("velo: %w: rail %q: reading the node's RDMA devices: %w", ErrRails, d, err)
				}
			}
			r, err := rdmaRail(t, d, name, portStr, hasPort)
			if err != nil {
				return c, err
			}
			c.Rails = append(c.Rails, r)
			continue
		}
		if hasPort {
			return c, fmt.Errorf("velo: %w: rail %q: no RDMA device %q under %s/class/infiniband (ibv_devices lists them)", ErrRails, d, name, root)
		}
		state, err := os.ReadFile(filepath.Join(root, "class", "net", name, "operstate"))
		if err != nil {
			return c, fmt.Errorf("velo: %w: rail %q is neither an RDMA device nor a network interface of this node (rdma link and ip link list them)", ErrRails, d)
		}
		if s := strings.TrimSpace(string(state)); s == "down" || s == "lowerlayerdown" || s == "notpresent" {
			return c, fmt.Errorf("velo: %w: rail %q: the interface is %s: bring it up (ip link set %s up) or leave it out", ErrRails, d, s, name)
		}
		c.Rails = append(c.Rails, Rail{Device: d, NUMANode: -1})
	}
	return c, nil
}

// rdmaRail checks one RDMA rail: "dev:port" must be an active port, "dev" must have one.
func rdmaRail(t *topo.Topology, d, name, portStr string, hasPort bool) (Rail, error) {
	var states []string
	for _, port := range t.Ports {
		if port.Device != name {
			continue
		}
		if hasPort && strconv.Itoa(port.Number) != portStr {
			continue
		}
		if port.Active() {
			n, _ := t.NICOf(port)
			return Rail{Device: d, NUMANode: n.PCI.NUMANode}, nil
		}
		states = append(states, port.Spec()+" "+port.State.String())
	}
	if len(states) == 0 {
		return Rail{}, fmt.Errorf("velo: %w: rail %q: device %s has no such port (ibstat %s lists them)", ErrRails, d, name, name)
	}
	return Rail{}, fmt.Errorf("velo: %w: rail %q is down (%s): bring the port up or leave it out", ErrRails, d, strings.Join(states, ", "))
}

// NewRailTransport makes the UCX transport of a rail choice. netDevices is the UCX_NET_DEVICES
// value for its UCX context ("mlx5_0:1,mlx5_1:1"; "" leaves the choice to UCX). With package
// velo/transport/ucxtransport:
//
//	func(dev string) (transport.Transport, error) {
//		return ucxtransport.New(ucxtransport.Config{NetDevices: dev})
//	}
type NewRailTransport func(netDevices string) (transport.Transport, error)

// WithRails chooses the rails by p (ChooseRails) and adds the UCX transport newTransport makes
// for them, as WithUCXTransport does (so it replaces that option: give one or the other). The
// choice is logged once when the instance starts, shown by Rails and on the introspection page;
// when UCX_NET_DEVICES is set it wins, and the log says so. A policy that cannot be met (a
// device that does not exist or is down, a GPU the node lacks) fails New with ErrRails.
func WithRails(p RailPolicy, newTransport NewRailTransport) Option {
	return func(o *options) error {
		if newTransport == nil {
			return errors.New("velo: WithRails: no NewRailTransport to make the UCX transport with")
		}
		c, err := ChooseRails(p)
		if err != nil {
			return err
		}
		var t transport.Transport
		if p.Slice && len(c.Rails) >= 2 {
			if len(c.Rails) > rails.MaxRails {
				c.Rails = c.Rails[:rails.MaxRails]
				c.Notes = append(c.Notes, fmt.Sprintf("Slice: only the first %d rails are used; a rail set has at most %d", rails.MaxRails, rails.MaxRails))
			}
			t, err = newRailSet(c, p.Slicing, newTransport)
		} else {
			if t, err = newTransport(c.NetDevices()); err != nil {
				err = fmt.Errorf("velo: WithRails: the UCX transport for %s: %w", c, err)
			}
		}
		if err != nil {
			return err
		}
		if err := WithUCXTransport(t)(o); err != nil {
			t.Close()
			return err
		}
		o.rails = &c
		return nil
	}
}

// Rails is the rail choice of WithRails (Source RailsNone without it).
func (v *Velo) Rails() RailChoice {
	if v.rails == nil {
		return RailChoice{Source: RailsNone, NUMANode: -1}
	}
	return *v.rails
}

// logRails says once, at start, which rails the instance uses and why.
func (v *Velo) logRails() {
	c := v.rails
	if c == nil {
		return
	}
	args := []any{"source", string(c.Source), "net_devices", c.NetDevices()}
	if c.GPU != "" {
		args = append(args, "gpu", c.GPU)
	}
	if c.Source == RailsNUMA {
		args = append(args, "numa_node", c.NUMANode)
	}
	for _, n := range c.Notes {
		v.log.Warn("velo: rails: "+n, args...)
	}
	switch c.Source {
	case RailsEnvironment:
		v.log.Info("velo: rails: "+NetDevicesEnv+" is set by the operator and wins; velo leaves UCX's devices as the variable names them", args...)
	default:
		v.log.Info("velo: rails chosen: "+c.String(), args...)
	}
}

// newRailSet makes one transport per rail of c (at most rails.MaxRails) and joins them
// (velo/transport/rails).
func newRailSet(c RailChoice, cfg rails.Config, newTransport NewRailTransport) (transport.Transport, error) {
	var members []transport.Transport
	closeAll := func() {
		for _, m := range members {
			m.Close()
		}
	}
	for _, r := range c.Rails {
		m, err := newTransport(r.Device)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("velo: WithRails: the UCX transport of rail %s: %w", r.Device, err)
		}
		members = append(members, m)
	}
	cfg.Devices = c.Devices()
	t, err := rails.New(cfg, members...)
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("velo: WithRails: %w", err)
	}
	return t, nil
}
