package topo

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/velo-go/velo/verbs"
)

// Ranked is a port with its link to the GPU or NUMA node it was ranked for.
type Ranked struct {
	Port
	Link
}

// rank orders ports by the package doc's rule: active first, then link (relation, distance),
// then the order of t.Ports (verbs' device order, then port number).
func rank(ports []Port, link func(Port) Link, limit int) []Ranked {
	out := make([]Ranked, len(ports))
	for i, p := range ports {
		out[i] = Ranked{Port: p, Link: link(p)}
	}
	slices.SortStableFunc(out, func(a, b Ranked) int {
		if a.Active() != b.Active() {
			if a.Active() {
				return -1
			}
			return 1
		}
		switch {
		case a.Link.Less(b.Link):
			return -1
		case b.Link.Less(a.Link):
			return 1
		}
		return 0
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out
}

// NearestPorts ranks every port for GPU gpu (its Index), nearest usable first; at most limit of
// them when limit > 0.
func (t *Topology) NearestPorts(gpu, limit int) ([]Ranked, error) {
	g, err := t.gpu(gpu)
	if err != nil {
		return nil, err
	}
	return rank(t.Ports, func(p Port) Link {
		n, _ := t.NICOf(p)
		return Relate(g.PCI, n.PCI)
	}, limit), nil
}

// NearestPortsForNUMA ranks every port for a process on NUMA node node: ports whose NIC is on
// the node are NODE, the others SYS, each at the NIC's depth below its root bus. At most limit
// when limit > 0.
func (t *Topology) NearestPortsForNUMA(node, limit int) ([]Ranked, error) {
	known := len(t.NUMANodes) == 0 && node == 0
	ids := make([]string, len(t.NUMANodes))
	for i, n := range t.NUMANodes {
		ids[i] = strconv.Itoa(n.ID)
		known = known || n.ID == node
	}
	if !known {
		have := "none listed, so only node 0"
		if len(ids) > 0 {
			have = strings.Join(ids, ", ")
		}
		return nil, fmt.Errorf("%w: no NUMA node %d (this node's: %s)", verbs.ErrInvalid, node, have)
	}
	return rank(t.Ports, func(p Port) Link {
		n, _ := t.NICOf(p)
		if n.PCI.Address == "" {
			return Link{Relation: SYS, Distance: farDistance}
		}
		l := Link{Relation: SYS, Distance: n.PCI.Depth()}
		if n.PCI.NUMANode == node {
			l.Relation = NODE
		}
		return l
	}, limit), nil
}

func (t *Topology) gpu(i int) (GPU, error) {
	if i < 0 || i >= len(t.GPUs) {
		if len(t.GPUs) == 0 {
			return GPU{}, fmt.Errorf("%w: no GPU %d: this node has no GPUs (NVIDIA or AMD display or 3D controllers)", verbs.ErrInvalid, i)
		}
		return GPU{}, fmt.Errorf("%w: no GPU %d: this node has GPU0 to GPU%d", verbs.ErrInvalid, i, len(t.GPUs)-1)
	}
	return t.GPUs[i], nil
}

// Recommendation is the ports a GPU should use: every active port of the best relation it has.
type Recommendation struct {
	GPU      int
	Relation Relation // of the recommended ports; 0 when no port is active
	Ports    []Ranked // nearest first; empty when no port is active
	// Nearest is the first port of the whole ranking, active or not: when it is not active, a
	// nearer NIC is there but down.
	Nearest *Ranked
}

// UCXNetDevices is the recommendation in UCX_NET_DEVICES form ("mlx5_0:1,mlx5_1:1"); empty when
// no port is active.
func (r Recommendation) UCXNetDevices() string { return UCXNetDevices(r.Ports) }

// Recommend returns GPU gpu's recommendation (see the package doc).
func (t *Topology) Recommend(gpu int) (Recommendation, error) {
	ranked, err := t.NearestPorts(gpu, 0)
	if err != nil {
		return Recommendation{}, err
	}
	rec := Recommendation{GPU: gpu}
	if len(ranked) == 0 {
		return rec, nil
	}
	// The nearest of all, by link alone: an inactive port nearer than the best active one.
	nearest := ranked[0]
	for _, r := range ranked[1:] {
		if r.Link.Less(nearest.Link) {
			nearest = r
		}
	}
	rec.Nearest = &nearest
	for _, r := range ranked {
		if !r.Active() || (len(rec.Ports) > 0 && r.Relation != rec.Relation) {
			break
		}
		rec.Relation = r.Relation
		rec.Ports = append(rec.Ports, r)
	}
	return rec, nil
}

// Recommendations returns every GPU's recommendation, in GPU order.
func (t *Topology) Recommendations() []Recommendation {
	out := make([]Recommendation, len(t.GPUs))
	for i := range t.GPUs {
		out[i], _ = t.Recommend(i) // i is in range
	}
	return out
}

// UCXNetDevices joins ports' specs the way UCX_NET_DEVICES takes them: "mlx5_0:1,mlx5_1:1".
func UCXNetDevices[P interface{ Spec() string }](ports []P) string {
	specs := make([]string, len(ports))
	for i, p := range ports {
		specs[i] = p.Spec()
	}
	return strings.Join(specs, ",")
}
