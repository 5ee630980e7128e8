package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// topoFixturesDir holds the topology fixture trees of package verbs/topo.
var topoFixturesDir = filepath.Join("..", "..", "verbs", "topo", "testdata", "sysfs")

// topoExpectations pin, per fixture, the warnings ibcheck topo must give (by ID, in order) and
// each GPU's UCX_NET_DEVICES, so that a golden file cannot be rewritten into a wrong answer.
var topoExpectations = map[string]struct {
	warnings []string
	ucx      []string
}{
	"dgx-h100-like": {nil, []string{"mlx5_0:1,mlx5_1:1", "mlx5_0:1,mlx5_1:1", "mlx5_2:1,mlx5_3:1", "mlx5_2:1,mlx5_3:1",
		"mlx5_4:1,mlx5_5:1", "mlx5_4:1,mlx5_5:1", "mlx5_6:1,mlx5_7:1", "mlx5_6:1,mlx5_7:1"}},
	"nic-across-socket":      {[]string{"sys_only"}, []string{"mlx5_0:1", "mlx5_0:1"}},
	"workstation-single-nic": {nil, []string{"mlx5_0:1"}},
	"roce-bond":              {nil, []string{"mlx5_bond_0:1", "mlx5_bond_1:1"}},
	"port-down":              {[]string{"nearest_down"}, []string{"mlx5_1:1", "mlx5_1:1"}},
	"shared-nic":             {[]string{"uneven"}, []string{"mlx5_0:1", "mlx5_0:1"}},
}

// runTopoBoth runs ibcheck topo with args as a table and as JSON, and returns both and the
// parsed report.
func runTopoBoth(t *testing.T, args []string, exit int) (table, js []byte, rep topoReport) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), append([]string{"topo"}, args...), envOf(nil), &out, &errOut, testSystem(t))
	require.Equal(t, exit, code, "stderr: %s", errOut.String())
	table = append([]byte(nil), out.Bytes()...)
	out.Reset()
	code = run(context.Background(), append([]string{"topo", "--json"}, args...), envOf(nil), &out, &errOut, testSystem(t))
	require.Equal(t, exit, code, "--json; stderr: %s", errOut.String())
	js = append([]byte(nil), out.Bytes()...)
	require.NoError(t, json.Unmarshal(js, &rep), "%s", js)
	assert.Equal(t, "ibcheck-topo/v1", rep.Schema)
	assert.Equal(t, exit, rep.ExitCode)
	return table, js, rep
}

// TestTopoSchemaV1 pins the fields of schema ibcheck-topo/v1 over every golden topo report (in
// testdata/golden/topo, apart from ibcheck/v1's): a field removed or renamed breaks this test,
// and must come with a new schema version and docs.
func TestTopoSchemaV1(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("testdata", "golden", "topo", "*.json"))
	require.NotEmpty(t, files)
	fields := map[string][]string{
		"":                {"exit_code", "gpus", "live", "matrix", "nics", "notes", "numa_nodes", "recommendations", "schema", "strict", "sysfs", "verdict", "warnings"},
		"gpus":            {"class", "cpu_affinity", "device_id", "index", "local_cpulist", "name", "numa_from", "numa_node", "pci", "pci_chain", "vendor", "vendor_id"},
		"nics":            {"device", "firmware", "hca_type", "name", "numa_from", "numa_node", "pci", "pci_chain", "pci_from", "ports"},
		"matrix":          {"gpu", "nics"},
		"recommendations": {"gpu", "ranking", "relation", "ucx_net_devices"},
		"warnings":        {"finding", "fix", "gpus", "id"},
	}
	within := func(t *testing.T, f, what string, obj map[string]any) {
		for k := range obj {
			assert.Contains(t, fields[what], k, "%s: field %q of %s is not in the schema", f, k, what)
		}
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		var doc map[string]any
		require.NoError(t, json.Unmarshal(b, &doc), f)
		for _, k := range fields[""] {
			assert.Contains(t, doc, k, "%s lacks %q", f, k)
		}
		within(t, f, "", doc)
		assert.Equal(t, topoSchema, doc["schema"])
		for _, list := range []string{"gpus", "nics", "matrix", "recommendations", "warnings"} {
			items, ok := doc[list].([]any)
			require.True(t, ok, "%s: %s is not a list", f, list)
			for _, it := range items {
				within(t, f, list, it.(map[string]any))
			}
		}
	}
}

// TestGoldenTopo runs ibcheck topo over every topology fixture (a tree added there fails here
// until it has an expectation), as a table and as JSON.
func TestGoldenTopo(t *testing.T) {
	entries, err := os.ReadDir(topoFixturesDir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	require.NotEmpty(t, names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			exp, ok := topoExpectations[name]
			require.True(t, ok, "fixture %s has no entry in topoExpectations: add one (and its golden files)", name)
			table, js, rep := runTopoBoth(t, []string{"--sysfs", filepath.Join(topoFixturesDir, name)}, 0)
			var ids []string
			for _, w := range rep.Warnings {
				ids = append(ids, w.ID)
				assert.NotEmpty(t, w.Fix, "warning %s has no fix", w.ID)
				assert.Contains(t, string(table), "WARN  "+w.ID)
			}
			assert.Equal(t, exp.warnings, ids)
			var ucx []string
			for _, r := range rep.Recommendations {
				ucx = append(ucx, r.UCXNetDevices)
			}
			assert.Equal(t, exp.ucx, ucx)
			assert.Equal(t, map[bool]string{true: "pass", false: "warn"}[len(exp.warnings) == 0], rep.Verdict)
			require.Len(t, rep.Matrix, len(rep.GPUs))
			for _, row := range rep.Matrix {
				require.Len(t, row.NICs, len(rep.NICs))
			}
			checkGolden(t, "topo/"+name+".txt", table)
			checkGolden(t, "topo/"+name+".json", js)
		})
	}
}

// TestTopoWarningsSay: the warnings name the GPUs, ports and relations they are about.
func TestTopoWarningsSay(t *testing.T) {
	for name, says := range map[string][]string{
		"nic-across-socket": {"GPU1 (0000:af:00.0): its nearest active port mlx5_0:1 is SYS: it is on NUMA node 1"},
		"port-down":         {"GPU0: its nearest port mlx5_0:1 (PIX) is PORT_DOWN (Polling), so it uses mlx5_1:1 (NODE)", "ibcheck --device mlx5_0:1"},
		"shared-nic":        {"mlx5_0:1 serves GPU0, GPU1, while mlx5_1:1 is nearest to no GPU", "point one of those GPUs' processes at mlx5_1:1"},
	} {
		_, _, rep := runTopoBoth(t, []string{"--sysfs", filepath.Join(topoFixturesDir, name)}, 0)
		require.Len(t, rep.Warnings, 1, name)
		all := rep.Warnings[0].Finding + " fix: " + rep.Warnings[0].Fix
		for _, s := range says {
			assert.Contains(t, all, s, name)
		}
	}
}

// TestTopoStrictAndOthers: --strict fails on a warning; a tree of package verbs (no GPUs) and an
// empty one report what is missing; usage errors exit 2; an unreadable tree exits 1.
func TestTopoStrictAndOthers(t *testing.T) {
	table, _, rep := runTopoBoth(t, []string{"--strict", "--sysfs", filepath.Join(topoFixturesDir, "shared-nic")}, 1)
	assert.True(t, rep.Strict)
	assert.Contains(t, string(table), "WARN (exit 1, --strict)")
	runTopoBoth(t, []string{"--strict", "--sysfs", filepath.Join(topoFixturesDir, "dgx-h100-like")}, 0)

	table, js, rep := runTopoBoth(t, []string{"--sysfs", fixtureSysfs("cx7-ib-active")}, 0)
	assert.Empty(t, rep.GPUs)
	assert.Len(t, rep.NICs, 1)
	assert.Contains(t, string(table), "no GPUs")
	checkGolden(t, "topo/verbs-cx7-ib-active.txt", table)
	checkGolden(t, "topo/verbs-cx7-ib-active.json", js)

	// GPUs but no RDMA device: a warning.
	root := t.TempDir()
	for rel, content := range map[string]string{
		"devices/pci0000:16/0000:16:01.0/0000:17:00.0/class":     "0x030200\n",
		"devices/pci0000:16/0000:16:01.0/0000:17:00.0/vendor":    "0x10de\n",
		"devices/pci0000:16/0000:16:01.0/0000:17:00.0/numa_node": "0\n",
	} {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(root, rel)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, rel), []byte(content), 0o644))
	}
	require.NoError(t, os.MkdirAll(filepath.Join(root, "bus/pci/devices"), 0o755))
	require.NoError(t, os.Symlink("../../../devices/pci0000:16/0000:16:01.0/0000:17:00.0", filepath.Join(root, "bus/pci/devices/0000:17:00.0")))
	table, _, rep = runTopoBoth(t, []string{"--sysfs", root}, 0)
	require.Len(t, rep.Warnings, 1)
	assert.Equal(t, "no_active_port", rep.Warnings[0].ID)
	assert.Contains(t, string(table), "no RDMA NICs")
	assert.Contains(t, string(table), "(no active port)")

	for _, c := range []struct {
		args []string
		exit int
		says string
	}{
		{[]string{"topo", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"topo", "--sysfs", filepath.Join(t.TempDir(), "none")}, 2, "not a directory"},
		{[]string{"topo", "--bogus"}, 2, "flag provided but not defined"},
		{[]string{"topo", "--sysfs", t.TempDir()}, 1, "has no devices/ folder"},
		{[]string{"topo", "-h"}, 0, "usage: ibcheck topo"},
		{[]string{"lost"}, 2, "the commands are env, lanes and topo"},
	} {
		var out, errOut bytes.Buffer
		code := run(context.Background(), c.args, envOf(nil), &out, &errOut, testSystem(t))
		assert.Equal(t, c.exit, code, "%v: %s", c.args, errOut.String())
		assert.Contains(t, out.String()+errOut.String(), c.says, "%v", c.args)
		if c.exit != 0 {
			assert.Empty(t, out.String(), "%v printed on stdout", c.args)
		}
	}
	assert.True(t, strings.HasPrefix(topoSchema, "ibcheck-topo/"))
}
