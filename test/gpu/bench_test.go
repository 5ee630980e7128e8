//go:build cuda && ucx_static && cgo && linux

package gpu

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/ucx/benchkit"
	"github.com/velo-go/velo/velo"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/transport/tcp"
	"github.com/velo-go/velo/velo/transport/ucxtransport"
)

// The GPU benchmark: velo's two-process Get on the RDMA path (GetIntoMemory of a staged region,
// then Detach) of 8, 64 and 256 MiB host→host, GPU→GPU, host→GPU and GPU→host, in one run that
// takes turns between the four so machine noise falls on all of them, beside ucx_perftest of the
// UCX this binary links (the bundle's copy, built with the perftest's CUDA allocator) at the same
// sizes between the same two kinds of memory. It prints GB/s (10^9 bytes/s) and ratios against
// the baselines of the same run; nothing is asserted on time (DESIGN §10). Every get is checked
// once per case against the SHA-256 of what the owner uploaded.
//
// It runs when asked: VELO_GPU_BENCH=1 (make bench-gpu; the bundle's run.sh after the suite).
// Knobs: VELO_GPU_BENCH_SIZES (MiB, comma-separated; 8,64,256), VELO_GPU_BENCH_ROUNDS (3),
// VELO_GPU_BENCH_BUDGET (seconds; no round starts after it, 240), VELO_GPU_BENCH_OUT (a file
// the table is written to as well), VELO_GPU_BENCH_MEM=host (host memory in place of GPU memory:
// the harness on a machine without a GPU; the figures then say nothing about GPUs).

const benchOwnerRole = "bench-owner"

// benchConfig is one run of the benchmark.
type benchConfig struct {
	sizes     []int
	rounds    int
	budget    time.Duration
	bytesPer  int           // bytes per measurement: gets = bytesPer/size, at least minGets
	minGets   int           // gets per measurement at the least
	hostOnly  bool          // host memory in place of GPU memory
	probeWait time.Duration // how long the GET probe of ucx_perftest may take
	out       io.Writer     // the table
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// TestGPUBench is the benchmark on a GPU machine (VELO_GPU_BENCH=1).
func TestGPUBench(t *testing.T) {
	if os.Getenv("VELO_GPU_BENCH") != "1" {
		t.Skip("the GPU benchmark runs when asked: VELO_GPU_BENCH=1 (make bench-gpu, or the bundle's run.sh after the suite)")
	}
	cfg := benchConfig{
		rounds:    envInt("VELO_GPU_BENCH_ROUNDS", 3),
		budget:    time.Duration(envInt("VELO_GPU_BENCH_BUDGET", 240)) * time.Second,
		bytesPer:  512 << 20,
		minGets:   2,
		hostOnly:  os.Getenv("VELO_GPU_BENCH_MEM") == "host",
		probeWait: 10 * time.Second,
		out:       os.Stdout,
	}
	for _, s := range strings.Split(os.Getenv("VELO_GPU_BENCH_SIZES"), ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(s)); err == nil && n > 0 {
			cfg.sizes = append(cfg.sizes, n<<20)
		}
	}
	if len(cfg.sizes) == 0 {
		cfg.sizes = []int{8 << 20, 64 << 20, 256 << 20}
	}
	if !cfg.hostOnly {
		devicesOrSkip(t)
	}
	var file *os.File
	if p := os.Getenv("VELO_GPU_BENCH_OUT"); p != "" {
		var err error
		file, err = os.Create(p)
		require.NoError(t, err)
		defer file.Close()
		cfg.out = io.MultiWriter(os.Stdout, file)
	}
	rows := runBench(t, cfg)
	require.NotEmpty(t, rows, "the benchmark measured nothing within its budget")
}

// TestBenchHarnessWithHostMemory runs the benchmark's whole harness (owner process, the four
// memory pairs, the SHA-256 checks, ucx_perftest's runs and its GET probe, the table) with host
// memory in place of GPU memory, small: what the GPU figures rest on works on any machine.
func TestBenchHarnessWithHostMemory(t *testing.T) {
	var table strings.Builder
	rows := runBench(t, benchConfig{
		sizes: []int{1 << 20}, rounds: 1, budget: time.Minute, bytesPer: 4 << 20, minGets: 2,
		hostOnly: true, probeWait: 5 * time.Second, out: &table,
	})
	t.Log("\n" + table.String())
	require.Len(t, rows, 1)
	r := rows[0]
	for _, c := range benchCases {
		require.Len(t, r.velo[c.name], 1, "velo %s", c.name)
		require.Positive(t, r.velo[c.name][0], "velo %s", c.name)
	}
	// Each baseline is a figure or says why it is missing.
	for _, b := range benchBaselines {
		if len(r.perf[b.name]) == 0 {
			require.NotEmpty(t, r.perfWhy[b.name], "baseline %s: neither a figure nor a reason", b.name)
		}
	}
	require.Contains(t, table.String(), "GPU→GPU/host→host")
	require.Contains(t, table.String(), "host memory in place of GPU memory")
}

// benchCases are the four pairs, owner's memory → destination.
var benchCases = []struct{ name, src, dst string }{
	{"host→host", "host", "host"},
	{"GPU→GPU", "cuda", "cuda"},
	{"host→GPU", "host", "cuda"},
	{"GPU→host", "cuda", "host"},
}

// benchBaselines are ucx_perftest's runs: test and memory types (-m send,recv).
var benchBaselines = []struct{ name, test, mem string }{
	{"get cuda", "ucp_get", "cuda"},
	{"am_bw cuda", "ucp_am_bw", "cuda"},
	{"am_bw host", "ucp_am_bw", "host"},
}

// benchRow is one size's measurements: GB/s per round.
type benchRow struct {
	size    int
	gets    int
	velo    map[string][]float64
	perf    map[string][]float64
	perfWhy map[string]string
}

// benchMem is one buffer of the benchmark: GPU memory, or host memory (also in place of GPU
// memory when the run is host-only).
type benchMem struct {
	gpu  *Buffer
	host []byte
}

func allocBench(kind string, n int, hostOnly bool) (benchMem, error) {
	if kind == "cuda" && !hostOnly {
		b, err := Alloc(0, n)
		return benchMem{gpu: b}, err
	}
	return benchMem{host: make([]byte, n)}, nil
}

func (m benchMem) memory() velo.Memory {
	if m.gpu != nil {
		return velo.CUDAMemory(m.gpu.Ptr, m.gpu.Len, m.gpu.Device)
	}
	return velo.HostMemory(m.host)
}

func (m benchMem) upload(b []byte) error {
	if m.gpu != nil {
		return m.gpu.Upload(b)
	}
	copy(m.host, b)
	return nil
}

func (m benchMem) sum() (string, error) {
	if m.gpu == nil {
		return hexsum(m.host), nil
	}
	b := make([]byte, m.gpu.Len)
	if err := m.gpu.Download(b); err != nil {
		return "", err
	}
	return hexsum(b), nil
}

func (m benchMem) free() {
	if m.gpu != nil {
		_ = m.gpu.Free()
	}
}

// benchNode is a velo instance with the UCX transport over the suite's transports and room in the
// RDMA registration budget for the largest regions.
func benchNode() (*velo.Velo, *ucxtransport.Transport, error) {
	ctl, err := tcp.New(tcp.Config{})
	if err != nil {
		return nil, nil, err
	}
	u, err := ucxtransport.New(ucxtransport.Config{TLS: suiteTLS(), EagerEndpoints: true, RMAOverSoftwareLanes: true, Logger: quiet()})
	if err != nil {
		ctl.Close()
		return nil, nil, err
	}
	v, err := velo.New(context.Background(), velo.WithLogger(quiet()), velo.WithTransport(ctl), velo.WithUCXTransport(u),
		velo.WithRDMA(velo.RDMAConfig{Pool: velo.RDMAPoolConfig{RegisteredBytesBudget: 4 << 30}}))
	return v, u, err
}

// The owner process's protocol: its hello, then one request and one reply a line.
type benchHello struct {
	Peer velo.PeerInfo `json:"peer"`
	Err  string        `json:"err,omitempty"`
}

type benchReq struct {
	Op   string `json:"op"` // "stage", "free"
	Mem  string `json:"mem,omitempty"`
	Size int    `json:"size,omitempty"`
	Seed uint64 `json:"seed,omitempty"`
	ID   int    `json:"id,omitempty"`
}

type benchRep struct {
	ID     int    `json:"id,omitempty"`
	Handle string `json:"handle,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
	Err    string `json:"err,omitempty"`
}

// runBenchOwner stages regions on request (GPU or host memory, filled with a pattern) and frees
// them again, until stdin closes.
func runBenchOwner(hostOnly bool) error {
	v, _, err := benchNode()
	if err != nil {
		_ = json.NewEncoder(os.Stdout).Encode(benchHello{Err: err.Error()})
		return err
	}
	defer v.Close()
	enc := json.NewEncoder(os.Stdout)
	if err := enc.Encode(benchHello{Peer: v.PeerInfo()}); err != nil {
		return err
	}
	type staged struct {
		g   *velo.Region
		mem benchMem
	}
	regions := map[int]staged{}
	defer func() {
		for _, s := range regions {
			s.g.Free()
		}
		v.Close()
		for _, s := range regions {
			select {
			case <-s.g.Done():
				s.mem.free()
			case <-time.After(10 * time.Second): // leave the memory to the process's exit
			}
		}
	}()
	next := 0
	ctx := context.Background()
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		var req benchReq
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			return err
		}
		var rep benchRep
		switch req.Op {
		case "stage":
			err := func() error {
				m, err := allocBench(req.Mem, req.Size, hostOnly)
				if err != nil {
					return err
				}
				data := pattern(req.Size, req.Seed)
				if err := m.upload(data); err != nil {
					m.free()
					return err
				}
				g, err := v.WrapRegionMemory(m.memory())
				if err != nil {
					m.free()
					return err
				}
				h, err := v.StageRegion(ctx, g)
				if err != nil {
					g.Free()
					<-g.Done()
					m.free()
					return err
				}
				ht, err := h.MarshalText()
				if err != nil {
					return err
				}
				next++
				regions[next] = staged{g, m}
				rep.ID, rep.Handle, rep.SHA256 = next, string(ht), hexsum(data)
				return nil
			}()
			if err != nil {
				rep.Err = err.Error()
			}
		case "free":
			s, ok := regions[req.ID]
			if !ok {
				rep.Err = fmt.Sprintf("no region %d", req.ID)
				break
			}
			delete(regions, req.ID)
			s.g.Free()
			select {
			case <-s.g.Done():
				s.mem.free()
			case <-time.After(30 * time.Second):
				rep.Err = fmt.Sprintf("region %d was not over 30 s after Free (a staging or lease still holds it)", req.ID)
			}
		default:
			rep.Err = "unknown op " + req.Op
		}
		if err := enc.Encode(rep); err != nil {
			return err
		}
	}
	return sc.Err()
}

// benchOwner is the benchmark's handle on its owner process.
type benchOwner struct {
	t   *testing.T
	in  io.WriteCloser
	dec *json.Decoder
}

func (o *benchOwner) call(req benchReq) benchRep {
	o.t.Helper()
	require.NoError(o.t, json.NewEncoder(o.in).Encode(req))
	var rep benchRep
	require.NoError(o.t, o.dec.Decode(&rep), "the bench owner's answer to %s", req.Op)
	require.Empty(o.t, rep.Err, "the bench owner's answer to %+v", req)
	return rep
}

func startBenchOwner(t *testing.T, hostOnly bool) (*benchOwner, velo.PeerInfo) {
	t.Helper()
	var hello benchHello
	c := startRole(t, benchOwnerRole, &hello, fmt.Sprintf("VELO_GPU_BENCH_HOSTONLY=%t", hostOnly))
	t.Cleanup(func() {
		if err := endRole(c, 60*time.Second); err != nil {
			t.Errorf("bench owner process: %v", err)
		}
	})
	require.Empty(t, hello.Err, "the bench owner")
	return &benchOwner{t: t, in: c.In, dec: json.NewDecoder(c.Out)}, hello.Peer
}

// runBench measures cfg and prints the table; it returns the rows it measured.
func runBench(t *testing.T, cfg benchConfig) []benchRow {
	start := time.Now()
	o, peer := startBenchOwner(t, cfg.hostOnly)
	v, u, err := benchNode()
	require.NoError(t, err)
	defer v.Close()
	ctx := context.Background()
	require.NoError(t, v.RegisterPeer(ctx, peer))

	// ucx_perftest runs with what velo's engine runs with: the transports, and the defaults the
	// engine applies itself. On a machine with several GPUs perftest would put its two processes
	// on different ones (its rank modulo the GPUs); velo's case is device 0 to device 0, so
	// perftest sees device 0 only, unless the caller chose devices.
	env := os.Environ()
	var same []string
	for _, st := range u.Settings() {
		if st.Source == ucx.SourceProgram && os.Getenv("UCX_"+st.Name) == "" {
			env = append(env, "UCX_"+st.Name+"="+st.Value)
			same = append(same, "UCX_"+st.Name+"="+st.Value)
		}
	}
	if !strings.Contains(strings.Join(same, " "), "UCX_TLS=") && os.Getenv("UCX_TLS") == "" {
		env = append(env, "UCX_TLS="+suiteTLS())
		same = append(same, "UCX_TLS="+suiteTLS())
	}
	if os.Getenv("CUDA_VISIBLE_DEVICES") == "" && !cfg.hostOnly {
		env = append(env, "CUDA_VISIBLE_DEVICES=0")
		same = append(same, "CUDA_VISIBLE_DEVICES=0")
	}
	pf := newPerftest(env, cfg)

	w := cfg.out
	fmt.Fprintf(w, "velo GPU benchmark: UCX %s (linked), UCX_TLS=%s, %d alternating rounds, GB/s = 10^9 bytes/s\n", ucx.Version().String, benchTLS(), cfg.rounds)
	if cfg.hostOnly {
		fmt.Fprintf(w, "host memory in place of GPU memory (VELO_GPU_BENCH_MEM=host): the harness only; these figures say nothing about GPUs\n")
	}
	if pf.err != nil {
		fmt.Fprintf(w, "ucx_perftest: none: %v\n", pf.err)
	} else {
		fmt.Fprintf(w, "ucx_perftest: %s (UCX %s)\n", pf.tool.Path, pf.tool.Version)
		if len(same) > 0 {
			fmt.Fprintf(w, "  with velo's engine settings: %s\n", strings.Join(same, " "))
		}
	}

	var rows []benchRow
	cut := false
	for _, n := range cfg.sizes {
		if time.Since(start) > cfg.budget {
			cut = true
			break
		}
		row := benchRow{size: n, gets: max(cfg.minGets, cfg.bytesPer/n), velo: map[string][]float64{}, perf: map[string][]float64{}, perfWhy: map[string]string{}}
		src := map[string]benchRep{}
		for i, kind := range []string{"host", "cuda"} {
			src[kind] = o.call(benchReq{Op: "stage", Mem: kind, Size: n, Seed: uint64(n) + uint64(i)})
		}
		handles := map[string]velo.Handle{}
		for kind, rep := range src {
			var h velo.Handle
			require.NoError(t, h.UnmarshalText([]byte(rep.Handle)))
			handles[kind] = h
		}
		dst := map[string]benchMem{}
		for _, kind := range []string{"host", "cuda"} {
			m, err := allocBench(kind, n, cfg.hostOnly)
			require.NoError(t, err)
			dst[kind] = m
		}
		// One get of each pair first: wire-up, first registrations, page faults; and the check
		// that it moves the right bytes on the path measured.
		for _, c := range benchCases {
			d := dst[c.dst]
			_, err := benchGet(ctx, v, handles[c.src], d.memory())
			require.NoError(t, err, "%s %s", c.name, sizeName(n))
			sum, err := d.sum()
			require.NoError(t, err)
			require.Equal(t, src[c.src].SHA256, sum, "%s %s: the bytes read differ from the owner's", c.name, sizeName(n))
		}
		for r := 0; r < cfg.rounds; r++ {
			if r > 0 && time.Since(start) > cfg.budget {
				cut = true
				break
			}
			for _, b := range benchBaselines {
				mem := b.mem
				if cfg.hostOnly {
					mem = "host"
				}
				x, why := pf.run(b.test, mem, n, row.gets)
				if why != "" {
					row.perfWhy[b.name] = why
				} else {
					row.perf[b.name] = append(row.perf[b.name], x)
				}
			}
			for _, c := range benchCases {
				x, err := veloRate(ctx, v, handles[c.src], dst[c.dst].memory(), row.gets)
				require.NoError(t, err, "%s %s", c.name, sizeName(n))
				row.velo[c.name] = append(row.velo[c.name], x)
			}
		}
		for kind, rep := range src {
			require.NoError(t, v.Unref(ctx, handles[kind]))
			o.call(benchReq{Op: "free", ID: rep.ID})
		}
		for _, m := range dst { // every get into it has returned
			m.free()
		}
		rows = append(rows, row)
		// As it goes, so that a run stopped later still leaves this size's figures in its log.
		var line []string
		for _, c := range benchCases {
			line = append(line, c.name+" "+cell(row.velo[c.name]))
		}
		for _, b := range benchBaselines {
			line = append(line, "perftest "+b.name+" "+cell(row.perf[b.name]))
		}
		t.Logf("%s, %d gets, GB/s: %s", sizeName(n), row.gets, strings.Join(line, ", "))
	}
	printBench(w, rows, pf, cfg)
	if cut {
		fmt.Fprintf(w, "cut short: the budget of %v (VELO_GPU_BENCH_BUDGET) was spent; the rows above are what was measured\n", cfg.budget)
	}
	fmt.Fprintf(w, "took %v\n", time.Since(start).Round(time.Second))
	return rows
}

// benchGet is one get of h into m on the RDMA path, then Detach (the payload stays staged).
// It returns the time of the get alone.
func benchGet(ctx context.Context, v *velo.Velo, h velo.Handle, m velo.Memory) (time.Duration, error) {
	t0 := time.Now()
	l, err := v.GetIntoMemory(ctx, h, m)
	took := time.Since(t0)
	if err != nil {
		return 0, err
	}
	if l.Path != metrics.PathRDMA {
		_ = l.Detach(ctx)
		return 0, fmt.Errorf("a get measured as the RDMA path took %s/%s", l.Path, l.Reason)
	}
	return took, l.Detach(ctx)
}

// veloRate is n gets' bytes over their summed time, in GB/s (the detaches between them not
// counted), as ucx_perftest's overall bandwidth is its bytes over its time.
func veloRate(ctx context.Context, v *velo.Velo, h velo.Handle, m velo.Memory, n int) (float64, error) {
	var total time.Duration
	for i := 0; i < n; i++ {
		d, err := benchGet(ctx, v, h, m)
		if err != nil {
			return 0, err
		}
		total += d
	}
	return float64(m.Len) * float64(n) / 1e9 / total.Seconds(), nil
}

func benchMedian(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// cell prints a median and the range of the rounds.
func cell(v []float64) string {
	if len(v) == 0 {
		return "-"
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s) == 1 {
		return fmt.Sprintf("%.2f", s[0])
	}
	return fmt.Sprintf("%.2f [%.2f–%.2f]", benchMedian(s), s[0], s[len(s)-1])
}

func ratio(a, b []float64) string {
	if len(a) == 0 || len(b) == 0 || benchMedian(b) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f×", benchMedian(a)/benchMedian(b))
}

func printBench(w io.Writer, rows []benchRow, pf *perftest, cfg benchConfig) {
	fmt.Fprintf(w, "\nvelo Get, RDMA path (GetIntoMemory of a staged region, then Detach), two processes; GB/s, median of the rounds [min–max]\n")
	fmt.Fprintf(w, "%-8s %5s", "size", "gets")
	for _, c := range benchCases {
		fmt.Fprintf(w, " %22s", c.name)
	}
	fmt.Fprintf(w, " %18s\n", "GPU→GPU/host→host")
	for _, r := range rows {
		fmt.Fprintf(w, "%-8s %5d", sizeName(r.size), r.gets)
		for _, c := range benchCases {
			fmt.Fprintf(w, " %22s", cell(r.velo[c.name]))
		}
		fmt.Fprintf(w, " %18s\n", ratio(r.velo["GPU→GPU"], r.velo["host→host"]))
	}
	mem := func(m string) string {
		if cfg.hostOnly {
			return "host"
		}
		return m
	}
	fmt.Fprintf(w, "\nucx_perftest of the same UCX, same sizes, iterations = gets; GB/s, and velo / perftest (target: velo GPU→GPU ≥ 0.8× perftest -m cuda at ≥ 8 MiB)\n")
	fmt.Fprintf(w, "%-8s %22s %22s %22s %14s %14s %14s\n", "size",
		"-t ucp_get -m "+mem("cuda"), "-t ucp_am_bw -m "+mem("cuda"), "-t ucp_am_bw -m host",
		"GPU→GPU/get", "GPU→GPU/am_bw", "host→host/am")
	why := map[string]string{}
	for _, r := range rows {
		fmt.Fprintf(w, "%-8s", sizeName(r.size))
		for _, b := range benchBaselines {
			fmt.Fprintf(w, " %22s", cell(r.perf[b.name]))
			if r.perfWhy[b.name] != "" {
				why[b.name] = r.perfWhy[b.name]
			}
		}
		fmt.Fprintf(w, " %14s %14s %14s\n", ratio(r.velo["GPU→GPU"], r.perf["get cuda"]),
			ratio(r.velo["GPU→GPU"], r.perf["am_bw cuda"]), ratio(r.velo["host→host"], r.perf["am_bw host"]))
	}
	for _, b := range benchBaselines {
		if why[b.name] != "" {
			fmt.Fprintf(w, "no ucx_perftest -t %s -m %s: %s\n", b.test, mem(b.mem), why[b.name])
		}
	}
	fmt.Fprintf(w, "ucp_am_bw moves the same bytes between the same memory types with UCX's active messages, the mechanism velo's GET rides on over tcp (a guarded reply received with ucp_am_recv_data_nbx); ucp_get is the issue's baseline where the transports give a hardware GET (cuda_ipc, rc, dc)\n")
}

// perftest runs the linked UCX's ucx_perftest as a server and a client on loopback.
type perftest struct {
	tool ucx.Tool
	err  error // no perftest at all
	env  []string
	cfg  benchConfig
	// getWhy: why ucp_get cannot be measured (the guard refuses software RMA; decided by one
	// short GET before any measurement waits on one); "" once a probe passed.
	getWhy    string
	getProbed bool
	// cudaWhy: why -m cuda cannot be measured (no CUDA allocator in this perftest, no GPU).
	cudaWhy string
}

func newPerftest(env []string, cfg benchConfig) *perftest {
	p := &perftest{env: env, cfg: cfg}
	p.tool, p.err = ucx.FindTool("ucx_perftest")
	return p
}

// run measures test between memory of type mem at size n for iters iterations and returns GB/s,
// or why it cannot.
func (p *perftest) run(test, mem string, n, iters int) (float64, string) {
	if p.err != nil {
		return 0, p.err.Error()
	}
	if mem == "cuda" && p.cudaWhy != "" {
		return 0, p.cudaWhy
	}
	if test == "ucp_get" {
		if !p.getProbed {
			p.getProbed = true
			p.getWhy = p.probeGet(mem)
		}
		if p.getWhy != "" {
			return 0, p.getWhy
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := p.exec(ctx, "-t", test, "-m", mem, "-s", strconv.Itoa(n), "-n", strconv.Itoa(iters))
	if why := p.memWhy(mem, out); why != "" {
		return 0, why
	}
	if err != nil {
		return 0, err.Error()
	}
	res, err := benchkit.ParseFinal([]byte(out))
	if err != nil {
		return 0, err.Error()
	}
	// perftest's MB/s are MiB/s.
	return res.BandwidthOverall * (1 << 20) / 1e9, ""
}

// memWhy recognises perftest's answer to memory it cannot allocate, and remembers it.
func (p *perftest) memWhy(mem, out string) string {
	if mem != "cuda" {
		return ""
	}
	switch {
	case strings.Contains(out, "Unsupported memory types"):
		p.cudaWhy = "this ucx_perftest has no CUDA memory allocator (UCX builds it as the loadable module libucx_perftest_cuda, which a static link leaves out; the bundle's perftest is linked with it, the recipe's build-cuda/bin one is not)"
	case strings.Contains(out, "cudaGetDeviceCount"), strings.Contains(out, "no cuda devices"), strings.Contains(out, "cudaSetDevice"):
		p.cudaWhy = "ucx_perftest's CUDA allocator found no usable GPU: " + firstLine(out, "cuda")
	}
	return p.cudaWhy
}

// firstLine is the first line of out that contains sub, without UCX's log prefix.
func firstLine(out, sub string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, sub) {
			if _, msg, ok := strings.Cut(l, "ERROR "); ok {
				l = msg
			}
			return strings.TrimSpace(l)
		}
	}
	return ""
}

// probeGet says why ucx_perftest -t ucp_get cannot be measured over these transports, or "".
// Over tcp a GET is software RMA, which velo's guard refuses, and a refused perftest GET does not
// end (its client waits until killed), so one direct GET between two engines of this process,
// between the same memory types, decides it before any perftest GET runs.
func (p *perftest) probeGet(mem string) string {
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.probeWait)
	defer cancel()
	err := probeDirectGet(ctx, mem == "cuda" && !p.cfg.hostOnly)
	if err == nil {
		return ""
	}
	if g, gerr := ucx.SoftwareRMAGuard(); gerr == nil && g.Enforced && errors.Is(err, ucx.StatusRejected) {
		return fmt.Sprintf("the linked UCX's guard (%s) refuses a GET over UCX_TLS=%s as software RMA (no transport there reads remote memory itself; cuda_ipc, rc or dc would), and a refused perftest GET never ends", g.Version, benchTLS())
	}
	return fmt.Sprintf("a direct GET between two engines failed, so perftest's would too: %v", err)
}

// probeDirectGet reads 4 KiB with ucp_get_nbx (RMADirect) from one engine of this process into
// another, over the suite's transports, GPU memory on both sides when gpu.
func probeDirectGet(ctx context.Context, gpu bool) error {
	cc := ucx.ContextConfig{TLS: suiteTLS()}
	owner, err := ucx.NewEngine(ctx, ucx.EngineConfig{Name: "bench-probe-owner", Context: cc})
	if err != nil {
		return err
	}
	defer owner.Close(context.Background())
	reader, err := ucx.NewEngine(ctx, ucx.EngineConfig{Name: "bench-probe-reader", Context: cc, RMA: ucx.RMADirect})
	if err != nil {
		return err
	}
	defer reader.Close(context.Background())
	const n = 4096
	var src, dst []byte
	mt := ucx.MemoryHost
	if gpu {
		s, err := Alloc(0, n)
		if err != nil {
			return err
		}
		defer s.Free()
		d, err := Alloc(0, n)
		if err != nil {
			return err
		}
		defer d.Free()
		src, dst, mt = s.Bytes(), d.Bytes(), ucx.MemoryCUDA
	} else {
		src, dst = make([]byte, n), make([]byte, n)
	}
	reg, err := owner.RegisterWith(ctx, src, ucx.RegisterOptions{MemoryType: mt})
	if err != nil {
		return err
	}
	defer func() { _ = reg.Unregister(context.Background()); <-reg.Done() }()
	c, err := reader.Connect(ctx, owner.Address(), ucx.ConnectOptions{})
	if err != nil {
		return err
	}
	return c.GetWith(ctx, dst, reg.Addr(), reg.RemoteKey(), ucx.GetOptions{DstMemory: mt})
}

// benchTLS is the transports both velo and perftest run over.
func benchTLS() string {
	if v := os.Getenv("UCX_TLS"); v != "" {
		return v
	}
	return suiteTLS()
}

// exec runs a server and a client (args) on a free loopback port and returns their output.
func (p *perftest) exec(ctx context.Context, args ...string) (string, error) {
	port, err := freePort()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var srvOut lockedLog
	srv := exec.CommandContext(ctx, p.tool.Path, "-p", port)
	srv.Env, srv.Stdout, srv.Stderr = p.env, &srvOut, &srvOut
	if err := srv.Start(); err != nil {
		return "", err
	}
	srvDone := make(chan struct{})
	go func() { _ = srv.Wait(); close(srvDone) }()
	defer func() { cancel(); <-srvDone }()
	for attempt := 0; ; attempt++ {
		cli := exec.CommandContext(ctx, p.tool.Path, append([]string{"127.0.0.1", "-p", port}, args...)...)
		cli.Env = p.env
		out, err := cli.CombinedOutput()
		all := string(out)
		if err == nil {
			return all, nil
		}
		// Connection refused: the server does not listen yet.
		if attempt < 50 && ctx.Err() == nil && strings.Contains(all, "onnection refused") {
			select {
			case <-srvDone:
				return all, fmt.Errorf("ucx_perftest's server exited before a client got through:\n%s", tail(srvOut.String(), 1500))
			case <-time.After(100 * time.Millisecond):
				continue
			}
		}
		return all, fmt.Errorf("ucx_perftest %s: %w\n%s\nserver:\n%s", strings.Join(args, " "), err, tail(all, 1500), tail(srvOut.String(), 1500))
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port), nil
}

// lockedLog collects a process's output while another goroutine may read it.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestBenchHarnessPerftestCUDAAllocator runs ucx_perftest -m cuda of this checkout's CUDA build as
// the benchmark does and checks what the benchmark makes of the answer: the recipe's perftest
// (third_party/ucx/build-cuda/bin) has no CUDA memory allocator; the bundle's (bin/gpu-bundle,
// when make test-gpu-bundle built it) has one, which reaches the driver (on a machine without a
// GPU, the stub's error). Each one absent is skipped.
func TestBenchHarnessPerftestCUDAAllocator(t *testing.T) {
	for _, c := range []struct{ name, path, want string }{
		{"recipe", "../../third_party/ucx/build-cuda/bin/ucx_perftest", "no CUDA memory allocator"},
		{"bundle", "../../bin/gpu-bundle/ucx_perftest", "found no usable GPU"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := os.Stat(c.path); err != nil {
				t.Skipf("no %s here", c.path)
			}
			p := &perftest{tool: ucx.Tool{Path: c.path}, env: append(os.Environ(), "UCX_TLS="+benchTLS()), cfg: benchConfig{probeWait: 5 * time.Second}}
			x, why := p.run("ucp_am_bw", "cuda", 4096, 4)
			if c.name == "bundle" && why == "" {
				require.Positive(t, x, "a GPU answered: then a figure")
				return
			}
			require.Contains(t, why, c.want)
			t.Log(why)
		})
	}
}
