package topo

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/verbs"
)

func load(t *testing.T, root string) *Topology {
	t.Helper()
	topo, err := Load(verbs.Paths{Sysfs: root, Dev: filepath.Join(root, "no-dev")})
	require.NoError(t, err)
	return topo
}

// describe prints everything a golden file pins: the functions, the matrix with distances,
// every GPU's ranking and recommendation, each NUMA node's ranking, and the notes.
func describe(topo *Topology) string {
	var s strings.Builder
	fmt.Fprintf(&s, "NUMA nodes:\n")
	for _, n := range topo.NUMANodes {
		fmt.Fprintf(&s, "  node%d cpus %s\n", n.ID, n.CPUs)
	}
	fmt.Fprintf(&s, "GPUs:\n")
	for _, g := range topo.GPUs {
		fmt.Fprintf(&s, "  %s %s %s %04x:%04x class 0x%06x NUMA %d (%s) %s\n", g.Name(), g.PCI.Address, g.Vendor(),
			g.PCI.VendorID, g.PCI.DeviceID, g.PCI.Class, g.PCI.NUMANode, g.PCI.NUMAFrom, strings.Join(g.PCI.Chain, "/"))
	}
	fmt.Fprintf(&s, "NICs:\n")
	for _, n := range topo.NICs {
		fmt.Fprintf(&s, "  %s %s %s (from %q) NUMA %d (%s) %s\n", n.Name(), n.Device.Name, n.PCI.Address, n.PCIFrom,
			n.PCI.NUMANode, n.PCI.NUMAFrom, strings.Join(n.PCI.Chain, "/"))
		for _, p := range n.Ports {
			fmt.Fprintf(&s, "    %s %s %s netdevs %v bonds %v\n", p.Spec(), p.State, p.LinkLayer, p.Netdevs, p.Bonds)
		}
	}
	fmt.Fprintf(&s, "matrix (relation/distance):\n       ")
	for _, n := range topo.NICs {
		fmt.Fprintf(&s, " %-8s", n.Name())
	}
	fmt.Fprintln(&s)
	for i, row := range topo.Matrix() {
		fmt.Fprintf(&s, "  %-5s", topo.GPUs[i].Name())
		for _, l := range row {
			fmt.Fprintf(&s, " %-8s", fmt.Sprintf("%s/%d", l.Relation, l.Distance))
		}
		fmt.Fprintln(&s)
	}
	fmt.Fprintf(&s, "nearest ports per GPU:\n")
	for i, g := range topo.GPUs {
		ranked, err := topo.NearestPorts(i, 0)
		if err != nil {
			fmt.Fprintf(&s, "  %s: %v\n", g.Name(), err)
			continue
		}
		var parts []string
		for _, r := range ranked {
			parts = append(parts, fmt.Sprintf("%s %s/%d %s", r.Spec(), r.Relation, r.Distance, map[bool]string{true: "active", false: "inactive"}[r.Active()]))
		}
		fmt.Fprintf(&s, "  %s: %s\n", g.Name(), strings.Join(parts, ", "))
	}
	fmt.Fprintf(&s, "recommendations:\n")
	for _, r := range topo.Recommendations() {
		nearest := "none"
		if r.Nearest != nil {
			nearest = fmt.Sprintf("%s %s", r.Nearest.Spec(), r.Nearest.Relation)
		}
		fmt.Fprintf(&s, "  GPU%d: UCX_NET_DEVICES=%s (%s); nearest of all %s\n", r.GPU, r.UCXNetDevices(), r.Relation, nearest)
	}
	fmt.Fprintf(&s, "nearest ports per NUMA node:\n")
	for _, n := range topo.NUMANodes {
		ranked, err := topo.NearestPortsForNUMA(n.ID, 0)
		if err != nil {
			fmt.Fprintf(&s, "  node%d: %v\n", n.ID, err)
			continue
		}
		var parts []string
		for _, r := range ranked {
			parts = append(parts, fmt.Sprintf("%s %s/%d", r.Spec(), r.Relation, r.Distance))
		}
		fmt.Fprintf(&s, "  node%d: %s\n", n.ID, strings.Join(parts, ", "))
	}
	fmt.Fprintf(&s, "notes:\n")
	for _, n := range topo.Notes {
		fmt.Fprintf(&s, "  %s\n", n)
	}
	return s.String()
}

// checkGolden compares got with testdata/golden/name, or rewrites it with -update.
func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test -run %s -update to write it", t.Name())
	assert.Equal(t, string(want), got, "differs from %s (go test -run '%s' -update rewrites it; review the diff)", path, t.Name())
}

// expectations pin, per fixture, what its golden file must say, so that a golden file cannot be
// rewritten into a wrong answer unnoticed: matrix cells ("GPU0/NIC1" -> relation) and each GPU's
// UCX_NET_DEVICES.
var expectations = map[string]struct {
	gpus, nics int
	cells      map[string]Relation
	ucx        []string
}{
	"dgx-h100-like": {8, 8, map[string]Relation{"GPU0/NIC0": PIX, "GPU0/NIC1": PIX, "GPU0/NIC2": NODE, "GPU0/NIC4": SYS, "GPU5/NIC4": PIX, "GPU5/NIC6": NODE, "GPU7/NIC0": SYS},
		[]string{"mlx5_0:1,mlx5_1:1", "mlx5_0:1,mlx5_1:1", "mlx5_2:1,mlx5_3:1", "mlx5_2:1,mlx5_3:1", "mlx5_4:1,mlx5_5:1", "mlx5_4:1,mlx5_5:1", "mlx5_6:1,mlx5_7:1", "mlx5_6:1,mlx5_7:1"}},
	"nic-across-socket":      {2, 1, map[string]Relation{"GPU0/NIC0": PIX, "GPU1/NIC0": SYS}, []string{"mlx5_0:1", "mlx5_0:1"}},
	"workstation-single-nic": {1, 1, map[string]Relation{"GPU0/NIC0": PHB}, []string{"mlx5_0:1"}},
	"roce-bond":              {2, 2, map[string]Relation{"GPU0/NIC0": PIX, "GPU0/NIC1": NODE, "GPU1/NIC1": PIX}, []string{"mlx5_bond_0:1", "mlx5_bond_1:1"}},
	"port-down":              {2, 2, map[string]Relation{"GPU0/NIC0": PIX, "GPU0/NIC1": NODE}, []string{"mlx5_1:1", "mlx5_1:1"}},
	"shared-nic":             {2, 2, map[string]Relation{"GPU0/NIC0": PIX, "GPU1/NIC0": PXB, "GPU1/NIC1": NODE}, []string{"mlx5_0:1", "mlx5_0:1"}},
}

// TestGoldenFixtures: each fixture's matrix, rankings and recommendations, against its golden
// file and the pinned expectations.
func TestGoldenFixtures(t *testing.T) {
	for _, f := range fixtures {
		t.Run(f.name, func(t *testing.T) {
			exp, ok := expectations[f.name]
			require.True(t, ok, "fixture %s has no entry in expectations", f.name)
			topo := load(t, fixtureRoot(f.name))
			require.Len(t, topo.GPUs, exp.gpus)
			require.Len(t, topo.NICs, exp.nics)
			m := topo.Matrix()
			for cell, rel := range exp.cells {
				var g, n int
				_, err := fmt.Sscanf(cell, "GPU%d/NIC%d", &g, &n)
				require.NoError(t, err)
				assert.Equal(t, rel, m[g][n].Relation, cell)
				assert.Equal(t, rel, topo.Relation(topo.GPUs[g], topo.NICs[n].Ports[0]), cell)
			}
			var ucx []string
			for _, r := range topo.Recommendations() {
				ucx = append(ucx, r.UCXNetDevices())
			}
			assert.Equal(t, exp.ucx, ucx)
			checkGolden(t, f.name+".txt", describe(topo))
		})
	}
}
