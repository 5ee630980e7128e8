package main

import (
	"bytes"
	"encoding/csv"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/velo-go/velo/velo"
)

// A short local sweep of every operation writes a JSON report of schema velobench/v2 with the
// environment and every point, a CSV with one row per point, and an SVG that is well formed and
// draws every series; without a terminal the progress is plain lines. compare reads the report.
// Each point carries the bytes the kernel saw on each side's sockets (lanes), where this user may
// count them: the RDMA path's payload on UCX's sockets, the chunked path's on the control plane.
func TestLocalSweepWritesEveryOutput(t *testing.T) {
	dir := t.TempDir()
	js, cs, svg := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.csv"), filepath.Join(dir, "r.svg")
	p := start(t, "local", childEnv(), nil, append([]string{"local", "--ops", "get,batch,ranged,chunked,request,put,putbatch,chunkedput", "--blocks", "4K,64K",
		"--batch", "4", "--json", js, "--csv", cs, "--plot", svg}, quickSweep()...)...)
	require.Equal(t, 0, p.wait(90*time.Second), p.errOut())

	doc, r := readJSONReport(t, js)
	for _, k := range []string{"schema", "velobench", "started", "finished", "complete", "mode", "discovery", "sweep", "initiator", "target", "target_address", "points"} {
		assert.Contains(t, doc, k)
	}
	assert.Equal(t, schemaVersion, r.Schema)
	assert.True(t, r.Complete)
	assert.Equal(t, "local", r.Mode)
	assert.Equal(t, velobenchVersion(), r.Velobench)
	for _, e := range []Environment{r.Initiator, r.Target} {
		assert.NotEmpty(t, e.UCX)
		assert.NotEmpty(t, e.Kernel)
		assert.NotEmpty(t, e.CPU)
		assert.NotEmpty(t, e.Go)
		assert.Equal(t, "tcp", e.UCXEnv["UCX_TLS"])
		assert.NotNil(t, e.Devices)
	}
	require.Len(t, r.Points, 16) // eight operations, two blocks
	point := doc["points"].([]any)[0].(map[string]any)
	for _, k := range []string{"op", "block", "batch", "callers", "operations", "bytes", "seconds", "gb_per_s", "ops_per_s", "latency_us",
		"cpu_s_per_gb_initiator", "cpu_s_per_gb_target", "paths_initiator", "paths_target"} {
		assert.Contains(t, point, k)
	}
	for _, pt := range r.Points {
		assert.Positive(t, pt.GBps, pt.label())
		assert.Positive(t, pt.Operations, pt.label())
		assert.Positive(t, pt.Latency.P50, pt.label())
		assert.LessOrEqual(t, pt.Latency.P50, pt.Latency.P99, pt.label())
		assert.LessOrEqual(t, pt.Latency.P99, pt.Latency.P999, pt.label())
		assert.Positive(t, pt.CPUInitiator+pt.CPUTarget, pt.label())
		ops := float64(pt.Operations * pt.Batch)
		switch {
		case inlineBatch(pt):
			// Blocks within velo's inline limit come inside the acquires' answers, on both sides.
			assert.GreaterOrEqual(t, pt.PathsInitiator["inline/ok"], ops, pt.label())
			assert.GreaterOrEqual(t, pt.PathsTarget["inline/ok"], ops, pt.label())
			assert.Equal(t, pt.inlineOps(), pt.PathsInitiator["inline/ok"], pt.label())
			assert.Zero(t, pt.rdmaOps(), pt.label())
		case pt.Op == opGet || pt.Op == opBatch:
			// Every block on the RDMA path, on both sides (the warm-up's too).
			assert.GreaterOrEqual(t, pt.PathsInitiator["rdma/ok"], ops, pt.label())
			assert.GreaterOrEqual(t, pt.PathsTarget["rdma/ok"], ops, pt.label())
		case pt.Op == opRanged:
			assert.GreaterOrEqual(t, pt.PathsInitiator["rdma/ok"], float64(pt.Operations), pt.label())
		case pt.Op == opChunked:
			assert.Zero(t, pt.rdmaOps(), pt.label())
			assert.GreaterOrEqual(t, pt.chunkedOps(), ops, pt.label())
			require.NotNil(t, pt.Perftest)
			assert.Contains(t, pt.Perftest.Note, "no ucx_perftest counterpart")
		case pt.Op == opPut || pt.Op == opPutB:
			// Every entry written on the RDMA path (the writer counts each), the grant's path
			// decided once on the receiver.
			assert.GreaterOrEqual(t, pt.PathsInitiator["put:rdma/ok"], ops, pt.label())
			assert.Zero(t, pt.chunkedOps(), pt.label())
			require.NotNil(t, pt.Perftest)
			assert.Equal(t, "ucp_put_bw", pt.Perftest.Test, pt.label())
		case pt.Op == opPutC:
			// Every put by chunks into the target's plain memory, none by RDMA.
			assert.GreaterOrEqual(t, pt.PathsInitiator["put:chunked/not_pinned"], ops, pt.label())
			assert.Zero(t, pt.PathsInitiator["put:rdma/ok"], pt.label())
			require.NotNil(t, pt.Perftest)
			assert.Contains(t, pt.Perftest.Note, "no ucx_perftest counterpart")
		}
		checkLanes(t, r, pt)
		if pt.Op != opChunked && pt.Op != opPutC && pt.Perftest != nil && pt.Perftest.GBps == 0 {
			assert.NotEmpty(t, pt.Perftest.Note+r.PerftestNote, "%s: no perftest figure and no reason", pt.label())
		}
	}

	rows, err := csv.NewReader(bytes.NewReader(mustRead(t, cs))).ReadAll()
	require.NoError(t, err)
	require.Len(t, rows, 1+len(r.Points))
	assert.Equal(t, csvHeader, rows[0])
	for i, row := range rows[1:] {
		assert.Equal(t, schemaVersion, row[0])
		assert.Equal(t, r.Points[i].Op, row[1])
		assert.Equal(t, r.Initiator.UCX, row[indexOf(csvHeader, "ucx")])
	}

	names := checkSVG(t, mustRead(t, svg))
	for _, s := range plotSeries(r) {
		assert.Contains(t, names, s.name)
	}
	for _, op := range []string{"get", "batch x4", "ranged x4", "chunked", "request", "put", "putbatch x4", "chunkedput", "perftest ucp_get (get)", "perftest ucp_am_lat (request)", "perftest ucp_put_bw (put)"} {
		assert.Contains(t, names, op)
	}

	out := p.out()
	assert.Contains(t, out, "[ 1/16] get 4 KiB")
	assert.Contains(t, out, "[16/16] chunkedput 64 KiB")
	assert.Contains(t, out, "lanes (socket bytes per point, initiator / target): ")
	assert.Contains(t, out, "ETA")
	assert.NotContains(t, out, "\r", "a progress line redrawn without a terminal")

	code, cmp, _ := mustMain(t, "compare", js, js)
	require.Equal(t, 0, code)
	assert.Contains(t, cmp, "get 4 KiB")
	assert.Equal(t, 32, strings.Count(cmp, "1.00x"), cmp) // GB/s and p50 of sixteen points
}

// checkLanes checks a point's lane bytes on both sides against its path. Where a side cannot count
// (no root, no cgroup v2), its lanes are absent and the report says why, never a zero.
func checkLanes(t *testing.T, r *Report, pt Point) {
	t.Helper()
	sides := []struct {
		env   Environment
		lanes *LaneBytes
		why   string
		reads bool // this side receives the payload
	}{{r.Initiator, pt.LanesInitiator, pt.LanesInitiatorWhy, !isPut(pt.Op)}, {r.Target, pt.LanesTarget, pt.LanesTargetWhy, isPut(pt.Op)}}
	for i, s := range sides {
		what := fmt.Sprintf("%s, side %d", pt.label(), i)
		if !strings.HasPrefix(s.env.Lanes, "counted") {
			assert.Nil(t, s.lanes, what)
			assert.NotEmpty(t, s.why, what)
			assert.Equal(t, s.env.Lanes, s.why, what)
			continue
		}
		require.NotNil(t, s.lanes, "%s: %s", what, s.why)
		assert.Empty(t, s.why, what)
		payload := uint64(pt.Bytes)
		ucxIn, ctlIn := s.lanes.UCXOut, s.lanes.ControlOut
		if s.reads {
			ucxIn, ctlIn = s.lanes.UCXIn, s.lanes.ControlIn
		}
		switch {
		case inlineBatch(pt):
			// Inside the acquires' answers: the payload on the control plane, as a chunked one.
			assert.GreaterOrEqual(t, ctlIn, payload, what)
			assert.Less(t, ctlIn, payload*3/2+(64<<10), what)
			assert.Less(t, s.lanes.UCX(), payload/20+(16<<10), what)
		case pt.Op == opGet || pt.Op == opBatch || pt.Op == opRanged || pt.Op == opPut || pt.Op == opPutB:
			// The RDMA path over UCX_TLS=tcp: the payload on UCX's sockets (with their headers),
			// the control plane carrying the leases or grants and no payload.
			assert.GreaterOrEqual(t, ucxIn, payload, what)
			assert.Less(t, ucxIn, payload*3/2+(64<<10), what)
			if pt.Block >= 64<<10 {
				assert.Less(t, s.lanes.Control(), payload/20, what)
			}
		case pt.Op == opChunked || pt.Op == opPutC:
			// The chunked path: the payload on the control plane, nothing of it on UCX's sockets.
			assert.GreaterOrEqual(t, ctlIn, payload, what)
			assert.Less(t, ctlIn, payload*3/2+(64<<10), what)
			assert.Less(t, s.lanes.UCX(), payload/20+(16<<10), what)
		}
	}
}

// inlineBatch reports whether pt's blocks come inside the acquires' answers (velo's default limit
// on both sides).
func inlineBatch(pt Point) bool { return pt.Op == opBatch && pt.Block <= velo.DefaultBatchInlineMax }

func mustRead(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	require.NoError(t, err)
	return b
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// checkSVG parses the document as XML to its end and returns the series it draws (data-series)
// and names in its legend, failing unless each drawn series is in the legend.
func checkSVG(t *testing.T, b []byte) []string {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	var drawn, legend []string
	inLegend, root := false, ""
	var width, textX float64 // the drawing's width; the x of the legend text being read
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "the SVG is not well formed")
		switch el := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = el.Name.Local
			}
			for _, a := range el.Attr {
				if root == el.Name.Local && a.Name.Local == "width" && width == 0 {
					width, _ = strconv.ParseFloat(a.Value, 64)
				}
				if el.Name.Local == "text" && a.Name.Local == "x" {
					textX, _ = strconv.ParseFloat(a.Value, 64)
				}
				if a.Name.Local == "data-series" {
					drawn = append(drawn, a.Value)
				}
				if a.Name.Local == "class" && a.Value == "legend" {
					inLegend = true
				}
			}
		case xml.EndElement:
			if el.Name.Local == "g" {
				inLegend = false
			}
		case xml.CharData:
			if inLegend && strings.TrimSpace(string(el)) != "" {
				legend = append(legend, string(el))
				// About 7 px a character at the drawing's 12 px: the entry must not run off the edge.
				assert.LessOrEqual(t, textX+7*float64(len([]rune(string(el)))), width, "legend entry %q runs past the drawing's width", string(el))
			}
		}
	}
	require.Equal(t, "svg", root)
	require.NotEmpty(t, drawn)
	require.ElementsMatch(t, drawn, legend, "every series drawn is named in the legend")
	return drawn
}

// On a terminal the progress is a live line: redrawn in place (a carriage return and an erase)
// with the points done and the time left.
func TestProgressOnPseudoTerminal(t *testing.T) {
	master, slave := openPTY(t)
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, append([]string{"local", "--ops", "get", "--blocks", "4K,64K,1M", "--perftest", "off", "--lanes", "off"}, quickSweep()...)...)
	cmd.Env = childEnv()
	cmd.Stdout = slave
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	slave.Close() // the child holds its own copy
	var screen bytes.Buffer
	copied := make(chan struct{})
	go func() { _, _ = io.Copy(&screen, master); close(copied) }() // ends with EIO once the child is gone
	require.NoError(t, waitTimeout(cmd, 60*time.Second), stderr.String())
	<-copied
	out := screen.String()
	assert.Contains(t, out, "\r\x1b[K", "no line redrawn in place")
	assert.Regexp(t, `\[1/3 done\] now get 64 KiB … \d+:\d\d elapsed, ETA \d+:\d\d`, out)
	assert.Contains(t, out, "[3/3] get 1 MiB")
	assert.Contains(t, out, "lanes n/a / n/a", "--lanes off: no lane figures, not zeros")
	assert.Contains(t, out, "not counted (--lanes off) / not counted (--lanes off)")
	assert.Contains(t, out, "velobench: 3 points in")
}

// openPTY opens a pseudo-terminal pair through /dev/ptmx.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	require.NoError(t, unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0))
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	require.NoError(t, err)
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return m, s
}

// A target killed mid-sweep ends the initiator with an error that says so and names the point,
// and the points measured before it are in the JSON and the CSV.
func TestTargetKilledMidSweep(t *testing.T) {
	dir := t.TempDir()
	js, cs := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.csv")
	disc := filepath.Join(dir, "disc")
	target := start(t, "target", childEnv(), nil, "target", "--dir", disc, "--listen", "127.0.0.1:0")
	target.waitLine("ready", 30*time.Second)
	init := start(t, "initiator", childEnv(), nil, append([]string{"initiator", "--dir", disc, "--listen", "127.0.0.1:0", "--wait", "30s",
		"--ops", "get", "--blocks", "4K-32M", "--perftest", "off", "--json", js, "--csv", cs, "--op-timeout", "20s"}, quickSweep()...)...)
	init.waitLine("[ 2/14] get 8 KiB", 60*time.Second)
	require.NoError(t, target.cmd.Process.Signal(syscall.SIGKILL))
	require.Equal(t, 1, init.wait(40*time.Second))
	assert.Regexp(t, `the target "target" \(pid \d+ on 127\.0\.0\.1\) went away during point \d+ of 14`, init.errOut())
	assert.Contains(t, init.errOut(), "measured before that are in")

	_, r := readJSONReport(t, js)
	assert.False(t, r.Complete)
	assert.Contains(t, r.Ended, "went away")
	require.GreaterOrEqual(t, len(r.Points), 2)
	assert.Less(t, len(r.Points), 14)
	assert.Len(t, fileLines(t, cs), 1+len(r.Points))
}

// SIGINT mid-sweep writes the points so far and exits 130.
func TestInterruptWritesPartialResults(t *testing.T) {
	dir := t.TempDir()
	js, svg := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.svg")
	// With a cluster secret, as a job would run: it is used, and never written into a report.
	secret := "velobench-test-secret-" + strings.Repeat("x", 40)
	p := start(t, "local", childEnv("VELO_CLUSTER_SECRET="+secret), nil, append([]string{"local", "--ops", "get", "--blocks", "4K-32M", "--perftest", "off",
		"--json", js, "--plot", svg}, quickSweep()...)...)
	p.waitLine("[ 1/14]", 60*time.Second)
	require.NoError(t, p.cmd.Process.Signal(os.Interrupt))
	require.Equal(t, 130, p.wait(30*time.Second), p.errOut())
	assert.Contains(t, p.errOut(), "interrupted at point")
	_, r := readJSONReport(t, js)
	assert.False(t, r.Complete)
	assert.Contains(t, r.Ended, "interrupted")
	assert.NotEmpty(t, r.Points)
	checkSVG(t, mustRead(t, svg))
	assert.Contains(t, r.Initiator.Auth, "cluster secret")
	assert.Contains(t, r.Target.Auth, "cluster secret")
	assert.NotContains(t, string(mustRead(t, js)), secret)
	assert.Equal(t, "(set; not recorded)", r.Initiator.VeloEnv["VELO_CLUSTER_SECRET"])
	assert.Positive(t, r.Points[0].PathsInitiator["rdma/ok"], "an authenticated peer reads on the RDMA path")
}

// Flags that contradict each other are refused before anything starts, with exit code 2 and a
// message that names the fix.
func TestContradictingFlagsAreRefused(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"local", "--blocks", "8M", "--memory", "4M"}, "--blocks 8 MiB is larger than --memory 4 MiB: the target stages whole blocks in registered memory; raise --memory to at least 8 MiB"},
		{[]string{"local", "--batch", "0"}, "--batch 0: a batch holds at least one block; give 1 or more"},
		{[]string{"local", "--batch", "4,-1"}, "--batch -1"},
		{[]string{"local", "--callers", "0"}, "--callers 0"},
		{[]string{"local", "--ops", "get,poke"}, `unknown operation "poke" in --ops: want get, batch, ranged, chunked, request, put, putbatch`},
		{[]string{"local", "--lanes", "maybe"}, `--lanes "maybe": want auto`},
		{[]string{"target", "--dir", "d", "--lanes", "yes"}, `--lanes "yes": want auto`},
		{[]string{"local", "--blocks", "4Q"}, `size "4Q": want bytes`},
		{[]string{"local", "--blocks", "3K-1M"}, "a range runs from a power of two"},
		{[]string{"local", "--plot", "out.png"}, "name it FILE.svg"},
		{[]string{"local", "--perftest", "maybe"}, "--perftest \"maybe\": want auto or off"},
		{[]string{"local", "--perftest-bytes", "0"}, "--perftest-bytes 0"},
		{[]string{"local", "--min-iters", "10", "--max-iters", "5"}, "want 1 <= min <= max"},
		{[]string{"local", "extra"}, "unexpected arguments"},
		{[]string{"local", "--blocks", "1M", "--batch", "64", "--memory", "16M", "--ops", "batch"}, "no point of the sweep fits --memory 16 MiB"},
		{[]string{"initiator"}, "give --dir DIR"},
		{[]string{"initiator", "--dir", "d", "--etcd", "http://x:2379"}, "--dir and --etcd both given"},
		{[]string{"initiator", "--dir", "d", "--wait", "0s"}, "--wait 0s"},
		{[]string{"target"}, "give --dir DIR"},
		{[]string{"target", "--dir", "d", "--memory", "0"}, "--memory 0"},
		{[]string{"compare", "a.json"}, "compare takes two JSON reports"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{nil, "usage: velobench COMMAND"},
	} {
		code, _, errOut := mustMain(t, c.args...)
		assert.Equal(t, 2, code, "%v: %s", c.args, errOut)
		assert.Contains(t, errOut, c.want, "%v", c.args)
	}
	code, _, errOut := mustMain(t, "local", "-h")
	assert.Equal(t, 0, code)
	assert.Contains(t, errOut, "usage: velobench local")

	// UCX_NET_DEVICES would win over the rails inside velo: refused rather than silently one rail.
	t.Setenv("UCX_NET_DEVICES", "eth9")
	for _, args := range [][]string{{"local", "--rails", "eth1,eth2"}, {"target", "--dir", "d", "--rails", "eth1,eth2"}} {
		code, _, errOut = mustMain(t, args...)
		assert.Equal(t, 2, code, "%v: %s", args, errOut)
		assert.Contains(t, errOut, "--rails eth1,eth2 and UCX_NET_DEVICES=eth9 both given", "%v", args)
	}
}

// An initiator whose target never appears gives up after --wait with an error that names the
// discovery location and how to start the target.
func TestTargetThatNeverAppears(t *testing.T) {
	inProcessEnv(t)
	dir := t.TempDir()
	t0 := time.Now()
	code, _, errOut := mustMain(t, "initiator", "--dir", dir, "--listen", "127.0.0.1:0", "--wait", "1s", "--lanes", "off")
	assert.Equal(t, 1, code)
	assert.Less(t, time.Since(t0), 20*time.Second)
	assert.Contains(t, errOut, fmt.Sprintf(`no velobench target named "target" appeared within 1s in directory %s (cluster "velobench", files in %s)`, dir, filepath.Join(dir, "velobench")))
	assert.Contains(t, errOut, "start `velobench target --dir "+dir)
}

// A target of another velobench version is refused, with both versions in the message.
func TestTargetOfAnotherVersionIsRefused(t *testing.T) {
	disc := t.TempDir()
	target := start(t, "target", childEnv(testVersionEnv+"=v9.9.9-other"), nil, "target", "--dir", disc, "--listen", "127.0.0.1:0", "--lanes", "off")
	target.waitLine("ready", 30*time.Second)
	init := start(t, "initiator", childEnv(), nil, "initiator", "--dir", disc, "--listen", "127.0.0.1:0", "--wait", "20s", "--ops", "get", "--blocks", "4K", "--lanes", "off")
	require.Equal(t, 1, init.wait(40*time.Second))
	assert.Regexp(t, `the target "target" \(pid \d+ on 127\.0\.0\.1\) runs velobench v9\.9\.9-other \(protocol `+fmt.Sprint(protocol)+`\) and this initiator velobench `+velobenchVersion(), init.errOut())
	assert.Contains(t, init.errOut(), "install one velobench on both nodes")
}

// waitTimeout waits for cmd, killing it after d.
func waitTimeout(cmd *exec.Cmd, d time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("%s did not exit within %s", cmd.Path, d)
	}
}

// An initiator that would stage more than the target allows is refused before any point, naming
// both --memory values.
func TestMemoryBeyondTheTargetsIsRefused(t *testing.T) {
	disc := t.TempDir()
	target := start(t, "target", childEnv(), nil, "target", "--dir", disc, "--listen", "127.0.0.1:0", "--memory", "16M", "--lanes", "off")
	target.waitLine("ready", 30*time.Second)
	init := start(t, "initiator", childEnv(), nil, "initiator", "--dir", disc, "--listen", "127.0.0.1:0", "--wait", "20s", "--memory", "64M", "--ops", "get", "--blocks", "4K", "--lanes", "off")
	require.Equal(t, 2, init.wait(40*time.Second))
	assert.Contains(t, init.errOut(), `--memory 64 MiB is more than the target "target" stages (its --memory 16 MiB): give the initiator --memory 16 MiB or less, or start the target with --memory 64 MiB`)
}
