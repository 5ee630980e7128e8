package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSizesAndLists(t *testing.T) {
	for in, want := range map[string]int64{"4096": 4096, "4K": 4 << 10, "4KiB": 4 << 10, "64k": 64 << 10, "1M": 1 << 20, "1MiB": 1 << 20, "1G": 1 << 30, "512B": 512} {
		n, err := parseSize(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, n, in)
	}
	for _, bad := range []string{"", "K", "1T", "-4K", "1.5M", "99999999999G"} {
		_, err := parseSize(bad)
		assert.ErrorIs(t, err, errUsage, bad)
	}
	b, err := parseBlocks("4K-64K, 1M")
	require.NoError(t, err)
	assert.Equal(t, []int64{4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10, 1 << 20}, b)
	ops, err := parseOps("get, batch,get")
	require.NoError(t, err)
	assert.Equal(t, []string{"get", "batch"}, ops)
	assert.Equal(t, "64 KiB", human(64<<10))
	assert.Equal(t, "1000 B", human(1000))
	assert.Equal(t, "3 GiB", human(3<<30))
}

// Nearest-rank percentiles: p50 of 1..100 µs is 50, p99 is 99, p99.9 is the largest.
func TestPercentiles(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- {
		d = append(d, time.Duration(i)*time.Microsecond)
	}
	l := percentiles(d)
	assert.Equal(t, Latency{P50: 50, P99: 99, P999: 100, Min: 1, Max: 100}, l)
	assert.Equal(t, Latency{}, percentiles(nil))
	one := percentiles([]time.Duration{7 * time.Microsecond})
	assert.Equal(t, Latency{P50: 7, P99: 7, P999: 7, Min: 7, Max: 7}, one)
}

// The plan runs batch sizes only for the batched operations, and skips the points that would
// stage more than --memory, saying why.
func TestPlan(t *testing.T) {
	sw := sweep{Ops: []string{opGet, opBatch, opRequest}, Blocks: []int64{1 << 20, 8 << 20}, Batches: []int{1, 4}, Callers: []int{1, 2}, Memory: 16 << 20}
	run, skipped := plan(sw)
	var got []string
	for _, s := range run {
		got = append(got, s.point().label())
	}
	assert.Equal(t, []string{
		"get 1 MiB", "get 8 MiB", "get 1 MiB, 2 callers", "get 8 MiB, 2 callers",
		"batch 1 MiB x1", "batch 8 MiB x1", "batch 1 MiB x4", "batch 1 MiB x1, 2 callers", "batch 8 MiB x1, 2 callers", "batch 1 MiB x4, 2 callers",
		"request 1 MiB", "request 8 MiB", "request 1 MiB, 2 callers", "request 8 MiB, 2 callers",
	}, got)
	require.Len(t, skipped, 2)
	assert.Equal(t, "stages 32 MiB (block x batch x callers), more than --memory 16 MiB", skipped[0].Why)
	assert.Equal(t, int64(16<<20), spec{opRequest, 8 << 20, 1, 1}.bytesPerOp())
}

func TestPattern(t *testing.T) {
	b := make([]byte, 10000)
	fill(b, 3, 4096)
	for i := range b {
		require.Equal(t, pattern(3, 4096+int64(i)), b[i], "byte %d", i)
	}
	require.NoError(t, checkBytes(b, 3, 4096))
	b[len(b)/2]++
	require.ErrorContains(t, checkBytes(b, 3, 4096), "the data arrived wrong")
}

// syntheticReport is a report of two operations at three blocks, with perftest beside one.
func syntheticReport() *Report {
	r := &Report{Schema: schemaVersion, Velobench: "v-test", Mode: "two-node", Complete: true, Points: []Point{},
		Initiator: Environment{UCX: "1.22.0", UCXEnv: map[string]string{"UCX_TLS": "rc"}, LineRateGbps: 400, LineRatePort: "mlx5_0:1", Devices: []DevicePort{}},
		Target:    Environment{UCX: "1.22.0", Devices: []DevicePort{}}}
	for i, b := range []int64{64 << 10, 1 << 20, 16 << 20} {
		f := float64(i + 1)
		r.Points = append(r.Points,
			Point{Op: opGet, Block: b, Batch: 1, Callers: 1, GBps: 10 * f, Latency: Latency{P50: 5 * f}, PathsInitiator: map[string]float64{"rdma/ok": 10},
				Perftest:       &Perftest{Test: "ucp_get", GBps: 11 * f, LatencyP50: 4 * f},
				LanesInitiator: &LaneBytes{ControlOut: 100, ControlIn: 200, UCXOut: 3000, UCXIn: 4000000, OtherIn: 5}, LanesTargetWhy: "not counted: lanes: no cgroup v2",
				RailsInitiator: map[string]float64{"1:eth2": 1000, "0:eth1": 3000}},
			Point{Op: opBatch, Block: b, Batch: 16, Callers: 1, GBps: 8 * f, Latency: Latency{P50: 50 * f}, Perftest: &Perftest{Note: "refused"}})
	}
	return r
}

// The SVG is well formed and names every series, perftest's among them, and draws the line rate.
func TestSVG(t *testing.T) {
	r := syntheticReport()
	var b bytes.Buffer
	require.NoError(t, writeSVG(&b, r))
	names := checkSVG(t, b.Bytes())
	assert.Equal(t, []string{"get", "perftest ucp_get (get)", "batch x16"}, names) // batch has no perftest figure
	assert.Contains(t, b.String(), "line rate mlx5_0:1 400 Gb/s")

	// An incomplete run says so; one with no point is still a document.
	// A long legend entry (a putbatch's baseline) widens the drawing instead of running off it.
	long := syntheticReport()
	for _, blk := range []int64{64 << 10, 1 << 20} {
		long.Points = append(long.Points, Point{Op: opPutB, Block: blk, Batch: 16, Callers: 4, GBps: 3, Latency: Latency{P50: 70},
			Perftest: &Perftest{Test: "ucp_put_bw", GBps: 2, LatencyP50: 90}})
	}
	b.Reset()
	require.NoError(t, writeSVG(&b, long))
	assert.Contains(t, checkSVG(t, b.Bytes()), "perftest ucp_put_bw (putbatch x16 4c)")

	r.Complete, r.Ended = false, "interrupted <at> point 4"
	b.Reset()
	require.NoError(t, writeSVG(&b, r))
	checkSVG(t, b.Bytes())
	assert.Contains(t, b.String(), "incomplete: interrupted &lt;at&gt; point 4")
	r.Points = nil
	b.Reset()
	require.NoError(t, writeSVG(&b, r))
	assert.Contains(t, b.String(), "no points were measured")
}

func TestCompare(t *testing.T) {
	dir := t.TempDir()
	a, bb := syntheticReport(), syntheticReport()
	bb.Initiator.UCX = "1.13.1"
	for i := range bb.Points {
		bb.Points[i].GBps *= 2
	}
	bb.Points = bb.Points[:4]
	write := func(name string, r *Report) string {
		p := filepath.Join(dir, name)
		var buf bytes.Buffer
		require.NoError(t, writeJSON(&buf, r))
		require.NoError(t, os.WriteFile(p, buf.Bytes(), 0o644))
		return p
	}
	pa, pb := write("a.json", a), write("b.json", bb)
	code, out, errOut := mustMain(t, "compare", pa, pb)
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, `differs: UCX: "1.22.0" in A, "1.13.1" in B`)
	assert.Equal(t, 4, bytes.Count([]byte(out), []byte("2.00x")), out)

	none := syntheticReport()
	for i := range none.Points {
		none.Points[i].Callers = 8
	}
	code, _, errOut = mustMain(t, "compare", pa, write("none.json", none))
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "no point in common")

	var doc map[string]any
	require.NoError(t, json.Unmarshal(mustRead(t, pa), &doc))
	doc["schema"] = "velobench/v0"
	old, _ := json.Marshal(doc)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "old.json"), old, 0o644))
	code, _, errOut = mustMain(t, "compare", pa, filepath.Join(dir, "old.json"))
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, `has schema "velobench/v0"; this velobench reads "velobench/v2"`)

	// v2 only added fields: a v1 report is still read.
	doc["schema"] = "velobench/v1"
	v1, _ := json.Marshal(doc)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "v1.json"), v1, 0o644))
	code, _, errOut = mustMain(t, "compare", filepath.Join(dir, "v1.json"), pa)
	assert.Equal(t, 0, code, errOut)
}

func TestCSV(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, writeCSV(&b, syntheticReport()))
	lines := bytes.Split(bytes.TrimSpace(b.Bytes()), []byte("\n"))
	require.Len(t, lines, 7)
	assert.Contains(t, string(lines[1]), schemaVersion+",get,65536,1,1,")
	// The lane columns: bytes where a side counted, the reason in each cell where it did not.
	assert.True(t, bytes.HasSuffix(lines[1], []byte(",100,200,3000,4000000,0,5,not counted: lanes: no cgroup v2,not counted: lanes: no cgroup v2,not counted: lanes: no cgroup v2,not counted: lanes: no cgroup v2,not counted: lanes: no cgroup v2,not counted: lanes: no cgroup v2,0:eth1=3000;1:eth2=1000,,0")), string(lines[1]))
	assert.Contains(t, string(lines[1]), ",ucp_get,11,4,,v-test,1.22.0,rc,")
	assert.Contains(t, string(lines[2]), ",refused,v-test,")

	// The batch entries that came inside the acquires' answers: the last column, after the
	// columns v2 had.
	r := syntheticReport()
	r.Points = r.Points[:1]
	r.Points[0].Op, r.Points[0].PathsInitiator = opBatch, map[string]float64{"inline/ok": 16, "rdma/ok": 2}
	b.Reset()
	require.NoError(t, writeCSV(&b, r))
	rows, err := csv.NewReader(&b).ReadAll()
	require.NoError(t, err)
	require.Len(t, rows, 2)
	assert.Equal(t, "inline_ops", rows[0][len(rows[0])-1])
	assert.Equal(t, "16", rows[1][len(rows[1])-1])
	assert.Equal(t, "2", rows[1][slices.Index(rows[0], "rdma_ops")])
}
