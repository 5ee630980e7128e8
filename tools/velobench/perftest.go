package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/ucx/benchkit"
)

// baseline is ucx_perftest of the release this binary links, run for the same point as velo's
// measurement: on one host through benchkit.Run (a server and a client on loopback, as the
// project's benches run it), across two nodes as a server the target starts and a client here.
// Both inherit the engine's own UCX settings (exportDefaults), so the two programs run one
// configuration.
type baseline struct {
	in      *initiator
	off     bool
	tool    ucx.Tool
	findErr error
	// rmaNote (per test: ucp_get, ucp_put_bw) and amNote say why RMA or active-message figures
	// are missing; set once a first try showed it, so a refused baseline costs one timeout, not
	// one per point.
	rmaNote map[string]string
	amNote  string
	probed  map[string]bool
	notes   []string
}

// perftestRunTimeout bounds one perftest run: a big block at a low rate is slow, a refused GET
// never ends on its own.
const perftestRunTimeout = 2 * time.Minute

func newBaseline(in *initiator, off bool) *baseline {
	b := &baseline{in: in, off: off, rmaNote: map[string]string{}, probed: map[string]bool{}}
	if off {
		return b
	}
	b.tool, b.findErr = benchkit.Find()
	return b
}

// describe says which ucx_perftest the run uses, for the environment.
func (b *baseline) describe() string {
	switch {
	case b.off:
		return "off (--perftest off)"
	case b.findErr != nil:
		return "none: " + b.findErr.Error()
	}
	return fmt.Sprintf("%s (UCX %s)", b.tool.Path, b.tool.Version)
}

// note is the run's sentence on missing baselines.
func (b *baseline) note() string {
	switch {
	case b.off:
		return "ucx_perftest was not run (--perftest off)"
	case b.findErr != nil:
		return fmt.Sprintf("no ucx_perftest baseline: %v (Debian: apt-get install ucx-utils of the linked release; velo's static UCX: make ucx-static-tools)", b.findErr)
	}
	return strings.Join(b.notes, "; ")
}

func (b *baseline) remote() bool { return b.in.cfg.mode != "local" }

// perftestArgs maps a point onto ucx_perftest: the test and its arguments, or why it has no
// counterpart.
func perftestArgs(s spec, ops int, floorBytes int64) (test string, args []string, none string) {
	// As many operations as velo made, but no fewer than about floorBytes' worth (--perftest-bytes,
	// 64 MiB), up to a thousand: perftest's figures of a few dozen iterations are mostly its
	// warm-up.
	floor := int(min(1000, max(8, floorBytes/s.block)))
	n := func(k int) string { return strconv.Itoa(min(max(k, floor), 100000)) }
	size := strconv.FormatInt(s.block, 10)
	switch s.op {
	case opGet:
		args = []string{"-t", "ucp_get", "-s", size, "-n", n(ops)}
		if s.callers > 1 {
			args = append(args, "-O", strconv.Itoa(s.callers))
		}
		return "ucp_get", args, ""
	case opBatch, opRanged:
		return "ucp_get", []string{"-t", "ucp_get", "-s", size, "-n", n(ops * s.batch), "-O", strconv.Itoa(s.batch * s.callers)}, ""
	case opPut:
		// perftest's PUT has no notification: beside a notified put it is the write alone.
		args = []string{"-t", "ucp_put_bw", "-s", size, "-n", n(ops)}
		if s.callers > 1 {
			args = append(args, "-O", strconv.Itoa(s.callers))
		}
		return "ucp_put_bw", args, ""
	case opPutB:
		return "ucp_put_bw", []string{"-t", "ucp_put_bw", "-s", size, "-n", n(ops * s.batch), "-O", strconv.Itoa(s.batch * s.callers)}, ""
	case opRequest:
		if s.callers > 1 {
			return "", nil, "ucp_am_lat has one message in flight: compare the 1-caller point"
		}
		return "ucp_am_lat", []string{"-t", "ucp_am_lat", "-s", size, "-n", n(ops)}, ""
	}
	return "", nil, "no ucx_perftest counterpart: the chunked path moves the bytes over velo's TCP control plane, not UCX"
}

// figure measures ucx_perftest for point s, whose velo side made ops operations.
func (b *baseline) figure(ctx context.Context, s spec, ops int) *Perftest {
	if b.off {
		return nil
	}
	test, args, none := perftestArgs(s, ops, b.in.cfg.sweep.PerftestBytes)
	if none != "" {
		return &Perftest{Note: none}
	}
	p := &Perftest{Test: test, Args: args}
	if b.findErr != nil {
		p.Note = "no ucx_perftest of the linked UCX"
		return p
	}
	if test == "ucp_get" || test == "ucp_put_bw" {
		if !b.probed[test] {
			b.probed[test] = true
			b.probeRMA(ctx, test)
		}
		if note := b.rmaNote[test]; note != "" {
			p.Note = note
			return p
		}
	}
	if test == "ucp_am_lat" && b.amNote != "" {
		p.Note = b.amNote
		return p
	}
	r, err := b.run(ctx, args)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		p.Note = "ucx_perftest failed: " + firstLine(err.Error())
		if test == "ucp_am_lat" {
			b.amNote = p.Note
			b.notes = append(b.notes, "ucp_am_lat: "+p.Note)
		}
		return p
	}
	switch test {
	case "ucp_am_lat":
		// perftest prints half the round trip; the request point is a whole one, both ways.
		rtt := 2 * r.LatencyP50
		p.LatencyP50 = rtt
		if rtt > 0 {
			p.GBps = float64(2*s.block) / 1e3 / rtt
		}
	default:
		p.GBps = r.BandwidthOverall * (1 << 20) / 1e9
		p.LatencyP50 = r.LatencyP50
		if test == "ucp_put_bw" && r.RateOverall > 0 {
			// perftest's PUT returns as soon as it is posted and its latency column is that
			// posting time (0.1 µs for a megabyte over tcp); the writes complete at its final
			// flush. One PUT's time at its measured rate is the figure beside a velo put,
			// which returns once its bytes are in the target's memory.
			p.LatencyP50 = 1e6 / r.RateOverall
		}
		if inFlight := s.batch * s.callers; inFlight > 1 && r.RateOverall > 0 {
			// With GETs in flight perftest's latency is per GET; velo's is per call (a batch,
			// or one caller's get among several). With that many in flight, a GET takes
			// in-flight over rate (Little's law), and so does a call whose GETs are in flight
			// together: that is the figure beside velo's.
			p.LatencyP50 = float64(inFlight) / r.RateOverall * 1e6
		}
	}
	return p
}

// probeRMA finds out whether ucx_perftest's GET (or PUT) can run here. On a UCX with velo's guard
// (either side), a GET or PUT over tcp is software RMA: the guard refuses it and perftest's client
// then waits forever, so a short one is tried under a deadline first.
func (b *baseline) probeRMA(ctx context.Context, test string) {
	guarded := b.in.hello.Env.UCXGuard
	if g, err := ucx.SoftwareRMAGuard(); err == nil && g.Enforced {
		guarded = true
	}
	if !guarded {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := b.runFor(pctx, 10*time.Second, []string{"-t", test, "-s", "4096", "-n", "16"}); err != nil {
		if ctx.Err() != nil {
			return
		}
		b.rmaNote[test] = fmt.Sprintf("refused: velo's guard in the linked UCX refuses ucx_perftest -t %s over UCX_TLS=%s (software RMA; a 4 KiB operation did not finish in 10 s); "+
			"hardware RMA (rc, dc) or a build on the system's UCX gives this baseline", test, os.Getenv("UCX_TLS"))
		b.notes = append(b.notes, test+" "+b.rmaNote[test])
	}
}

func (b *baseline) run(ctx context.Context, args []string) (benchkit.Result, error) {
	return b.runFor(ctx, perftestRunTimeout, args)
}

func (b *baseline) runFor(ctx context.Context, timeout time.Duration, args []string) (benchkit.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if !b.remote() {
		return benchkit.Run(ctx, b.tool, args...)
	}
	// Two nodes: the target serves, this side is the client, so the bytes cross the same link.
	var pr perftestResp
	if err := call(ctx, b.in.n.v, b.in.target, hPerftest, perftestReq{TimeoutSec: int(timeout / time.Second)}, &pr); err != nil {
		return benchkit.Result{}, fmt.Errorf("asking the target to start ucx_perftest: %w", err)
	}
	if pr.Err != "" {
		return benchkit.Result{}, fmt.Errorf("the target has no ucx_perftest: %s", pr.Err)
	}
	if pr.Version != b.tool.Version {
		return benchkit.Result{}, fmt.Errorf("the target's ucx_perftest is UCX %s and this one UCX %s: install the same UCX on both nodes", pr.Version, b.tool.Version)
	}
	var out []byte
	var err error
	for attempt := 0; ; attempt++ {
		cli := exec.CommandContext(ctx, b.tool.Path, append([]string{b.in.hello.Host, "-p", strconv.Itoa(pr.Port)}, args...)...)
		cli.Env = os.Environ()
		out, err = cli.CombinedOutput()
		if err == nil || attempt == 50 || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond) // the server may not listen yet
	}
	if err != nil {
		return benchkit.Result{}, fmt.Errorf("ucx_perftest client %v: %w: %s", args, err, out)
	}
	return benchkit.ParseFinal(out)
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}
