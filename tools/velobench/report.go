package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// schemaVersion names the layout of the JSON document and of the CSV columns. A change that a
// reader of the old layout would misread gets a new version.
const schemaVersion = "velobench/v2"

// schemaV1 is the layout before lanes and put points: v2 only adds fields, so compare reads both.
const schemaV1 = "velobench/v1"

// Report is one run: what was asked, where, what each point measured, and how the run ended.
type Report struct {
	Schema    string    `json:"schema"`
	Velobench string    `json:"velobench"`
	Started   time.Time `json:"started"`
	Finished  time.Time `json:"finished"`
	// Complete is true when every point of the sweep was measured; otherwise Ended says why not
	// (interrupted, the target went away, an error) and Points holds those measured so far.
	Complete  bool        `json:"complete"`
	Ended     string      `json:"ended,omitempty"`
	Mode      string      `json:"mode"` // local or two-node
	Discovery string      `json:"discovery"`
	Sweep     sweep       `json:"sweep"`
	Initiator Environment `json:"initiator"`
	Target    Environment `json:"target"`
	// TargetAddress is the host the target advertised (where the initiator reached it).
	TargetAddress string `json:"target_address"`
	// PerftestNote says why some or all points have no ucx_perftest figure.
	PerftestNote string    `json:"perftest_note,omitempty"`
	Skipped      []Skipped `json:"skipped,omitempty"`
	Points       []Point   `json:"points"`
}

// Skipped is a point of the sweep that was not run, and why.
type Skipped struct {
	Op      string `json:"op"`
	Block   int64  `json:"block"`
	Batch   int    `json:"batch"`
	Callers int    `json:"callers"`
	Why     string `json:"why"`
}

// Point is one measurement. An operation is one velo call: one get, one GetBatch of Batch blocks,
// one ReadRanges of Batch ranges, one request. GB/s is decimal (1e9 bytes per second, as NICs
// are rated), over the busiest caller's summed operation time: ending each lease is not timed,
// as ucx_perftest has none.
type Point struct {
	Op         string  `json:"op"`
	Block      int64   `json:"block"`
	Batch      int     `json:"batch"`
	Callers    int     `json:"callers"`
	Operations int     `json:"operations"`
	Bytes      int64   `json:"bytes"`
	Seconds    float64 `json:"seconds"`
	GBps       float64 `json:"gb_per_s"`
	// OpsPerSec counts velo calls per second; BlocksPerSec the blocks they moved.
	OpsPerSec    float64 `json:"ops_per_s"`
	BlocksPerSec float64 `json:"blocks_per_s"`
	// Latency of one operation in microseconds.
	Latency Latency `json:"latency_us"`
	// CPU seconds each process spent per GB moved (getrusage: user + system, all threads).
	CPUInitiator float64 `json:"cpu_s_per_gb_initiator"`
	CPUTarget    float64 `json:"cpu_s_per_gb_target"`
	// Paths are the changes of velo_rendezvous_rdma_path_total ("rdma/ok", "chunked/not_pinned")
	// during the point, on each side.
	PathsInitiator map[string]float64 `json:"paths_initiator"`
	PathsTarget    map[string]float64 `json:"paths_target"`
	// LineRate is GB/s over the port's rate (its Gb/s over 8), where the port is known.
	// LanesInitiator and LanesTarget are the bytes each side's sockets moved during the point, by
	// lane (the lanes module's kernel counters): velo's control plane, UCX's sockets, the rest.
	// Absent where that side could not count; then LanesInitiatorWhy or LanesTargetWhy says why.
	LanesInitiator    *LaneBytes `json:"lanes_initiator,omitempty"`
	LanesTarget       *LaneBytes `json:"lanes_target,omitempty"`
	LanesInitiatorWhy string     `json:"lanes_initiator_why,omitempty"`
	LanesTargetWhy    string     `json:"lanes_target_why,omitempty"`
	// RailsInitiator and RailsTarget are the bytes read over each of velo's rails during the
	// point ("0:mlx5_0:1" -> bytes, velo_rails_bytes_total), with --rails.
	RailsInitiator map[string]float64 `json:"rail_bytes_initiator,omitempty"`
	RailsTarget    map[string]float64 `json:"rail_bytes_target,omitempty"`
	LineRate       float64            `json:"line_rate_fraction,omitempty"`
	Perftest       *Perftest          `json:"perftest,omitempty"`
}

// Latency percentiles in microseconds (nearest rank over every operation of the point).
type Latency struct {
	P50  float64 `json:"p50"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p99_9"`
	Min  float64 `json:"min"`
	Max  float64 `json:"max"`
}

// Perftest is ucx_perftest's figure for the same point, or why there is none.
type Perftest struct {
	Test string   `json:"test,omitempty"`
	Args []string `json:"args,omitempty"`
	GBps float64  `json:"gb_per_s,omitempty"`
	// LatencyP50 in µs for one operation (a GET, or an active message's round trip).
	LatencyP50 float64 `json:"latency_p50_us,omitempty"`
	Note       string  `json:"note,omitempty"`
}

func (p Point) key() string {
	return fmt.Sprintf("%s/%d/%d/%d", p.Op, p.Block, p.Batch, p.Callers)
}

// label names the point for people: "batch 64 KiB x16, 2 callers".
func (p Point) label() string {
	s := p.Op + " " + human(p.Block)
	if batched(p.Op) {
		s += fmt.Sprintf(" x%d", p.Batch)
	}
	if p.Callers > 1 {
		s += fmt.Sprintf(", %d callers", p.Callers)
	}
	return s
}

func (p Point) rdmaOps() float64 {
	return sumPrefix(p.PathsInitiator, "rdma/")
}

func (p Point) chunkedOps() float64 {
	return sumPrefix(p.PathsInitiator, "chunked/")
}

// shmOps are the transfers that took velo's same-host path (--same-host on both sides).
func (p Point) shmOps() float64 {
	return sumPrefix(p.PathsInitiator, "shm/")
}

// inlineOps are the batch entries that came inside the acquire's answers.
func (p Point) inlineOps() float64 {
	return sumPrefix(p.PathsInitiator, "inline/")
}

// sumPrefix adds the path counts whose path starts with prefix, rendezvous (get) and push (put,
// "put:rdma/ok") alike: in one point only one of the two moves.
func sumPrefix(m map[string]float64, prefix string) float64 {
	var n float64
	for k, v := range m {
		if strings.HasPrefix(strings.TrimPrefix(k, putPathPrefix), prefix) {
			n += v
		}
	}
	return n
}

// writeFileAtomic writes through a temporary file beside name, so that a reader never sees half a
// file and an interrupted write leaves the old one.
func writeFileAtomic(name string, write func(io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".*")
	if err != nil {
		return err
	}
	if err := write(tmp); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), name)
}

func writeJSON(w io.Writer, r *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// csvHeader are the CSV columns of schema velobench/v2: the point, then the environment that
// makes two rows comparable (repeated on every row, so each row stands alone), then (added in v2)
// each side's socket bytes by lane, where a side that could not count says why in each of its
// cells instead of a number, and each side's bytes per rail (empty without --rails).
var csvHeader = []string{
	"schema", "op", "block", "batch", "callers", "operations", "bytes", "seconds",
	"gb_per_s", "ops_per_s", "blocks_per_s", "latency_p50_us", "latency_p99_us", "latency_p99_9_us",
	"cpu_s_per_gb_initiator", "cpu_s_per_gb_target", "rdma_ops", "chunked_ops", "line_rate_fraction",
	"perftest_test", "perftest_gb_per_s", "perftest_latency_p50_us", "perftest_note",
	"velobench", "ucx", "ucx_tls", "ucx_net_devices", "cpu", "kernel", "go", "initiator_host", "target_host",
	"lanes_initiator_control_out", "lanes_initiator_control_in", "lanes_initiator_ucx_out", "lanes_initiator_ucx_in",
	"lanes_initiator_other_out", "lanes_initiator_other_in",
	"lanes_target_control_out", "lanes_target_control_in", "lanes_target_ucx_out", "lanes_target_ucx_in",
	"lanes_target_other_out", "lanes_target_other_in",
	"rail_bytes_initiator", "rail_bytes_target",
	// Added at the end, so that a reader of the columns above reads them where they were.
	"inline_ops",
}

// railCell is one side's bytes per rail, "0:eth1=1048576;1:eth2=1048576" (empty without rails).
func railCell(m map[string]float64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, k+"="+strconv.FormatFloat(m[k], 'f', -1, 64))
	}
	return strings.Join(parts, ";")
}

// laneCells are one side's six lane columns: the bytes, or the reason there are none in each.
func laneCells(l *LaneBytes, why string) []string {
	if l == nil {
		if why == "" {
			why = "not counted"
		}
		return []string{why, why, why, why, why, why}
	}
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	return []string{u(l.ControlOut), u(l.ControlIn), u(l.UCXOut), u(l.UCXIn), u(l.OtherOut), u(l.OtherIn)}
}

func writeCSV(w io.Writer, r *Report) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(csvHeader); err != nil {
		return err
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }
	opt := func(v float64) string { // empty where there is no figure
		if v == 0 {
			return ""
		}
		return f(v)
	}
	e := r.Initiator
	for _, p := range r.Points {
		var pt Perftest
		if p.Perftest != nil {
			pt = *p.Perftest
		}
		row := []string{
			r.Schema, p.Op, strconv.FormatInt(p.Block, 10), strconv.Itoa(p.Batch), strconv.Itoa(p.Callers),
			strconv.Itoa(p.Operations), strconv.FormatInt(p.Bytes, 10), f(p.Seconds),
			f(p.GBps), f(p.OpsPerSec), f(p.BlocksPerSec), f(p.Latency.P50), f(p.Latency.P99), f(p.Latency.P999),
			f(p.CPUInitiator), f(p.CPUTarget), f(p.rdmaOps()), f(p.chunkedOps()), opt(p.LineRate),
			pt.Test, opt(pt.GBps), opt(pt.LatencyP50), pt.Note,
			r.Velobench, e.UCX, e.UCXEnv["UCX_TLS"], e.UCXEnv["UCX_NET_DEVICES"], e.CPU, e.Kernel, e.Go, e.Host, r.Target.Host,
		}
		row = append(row, laneCells(p.LanesInitiator, p.LanesInitiatorWhy)...)
		row = append(row, laneCells(p.LanesTarget, p.LanesTargetWhy)...)
		row = append(row, railCell(p.RailsInitiator), railCell(p.RailsTarget), f(p.inlineOps()))
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// readReport reads a JSON report and refuses one of another schema.
func readReport(name string) (*Report, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s is not a velobench JSON report: %w", name, err)
	}
	if r.Schema != schemaVersion && r.Schema != schemaV1 {
		return nil, fmt.Errorf("%s has schema %q; this velobench reads %q (compare it with the velobench that wrote it)", name, r.Schema, schemaVersion)
	}
	return &r, nil
}
