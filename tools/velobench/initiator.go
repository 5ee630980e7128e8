package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/velo-go/velo/velo"
)

// errInterrupted ends a sweep stopped by SIGINT or SIGTERM: the points so far are written and the
// exit code is 130.
var errInterrupted = errors.New("interrupted")

// initConfig is everything an initiator run needs; local builds one too.
type initConfig struct {
	sweep  sweep
	meet   meeting
	out    outputs
	mode   string // "two-node" or "local"
	osEnv  []string
	stdout io.Writer
	stderr io.Writer
	isTTY  bool
	lanes  string // --lanes: auto, on or off
	// targetDied, in local mode, reports the target process's exit, so that a target that fails
	// to start ends the wait at once.
	targetDied <-chan error
}

func runInitiator(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("initiator", stderr)
	cfg := initConfig{mode: "two-node", stdout: stdout, stderr: stderr, osEnv: os.Environ(), isTTY: isTerminal(stdout)}
	cfg.sweep.register(fs)
	cfg.meet.register(fs, false)
	cfg.out.register(fs)
	registerLanes(fs, &cfg.lanes)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: velobench initiator (--dir DIR | --etcd URL) [flags]\n\nThe measuring side of a two-node run: it finds the target, reads what the target stages, and\nwrites the results.\n\n")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	for _, c := range []func() error{cfg.sweep.check, func() error { return cfg.meet.check(false) }, cfg.out.check, func() error { return checkLaneMode(cfg.lanes) }} {
		if err := c(); err != nil {
			return err
		}
	}
	return initiate(ctx, cfg)
}

// spec is one point of the sweep before it is measured.
type spec struct {
	op      string
	block   int64
	batch   int
	callers int
}

func (s spec) point() Point {
	return Point{Op: s.op, Block: s.block, Batch: s.batch, Callers: s.callers}
}

// bytesPerOp is what one operation moves: the block, the batch's blocks, or a request's payload
// there and back.
func (s spec) bytesPerOp() int64 {
	switch s.op {
	case opRequest:
		return 2 * s.block
	default:
		return s.block * int64(s.batch)
	}
}

// plan lists the points of a sweep in the order they run (operation, then callers, batch, block),
// and those that do not fit --memory.
func plan(sw sweep) (run []spec, skipped []Skipped) {
	for _, op := range sw.Ops {
		batches := sw.Batches
		if !batched(op) {
			batches = []int{1}
		}
		for _, c := range sw.Callers {
			for _, b := range batches {
				for _, blk := range sw.Blocks {
					s := spec{op, blk, b, c}
					if need := s.block * int64(s.batch) * int64(s.callers); op != opRequest && need > sw.Memory {
						skipped = append(skipped, Skipped{Op: op, Block: blk, Batch: b, Callers: c,
							Why: fmt.Sprintf("stages %s (block x batch x callers), more than --memory %s", human(need), human(sw.Memory))})
						continue
					}
					run = append(run, s)
				}
			}
		}
	}
	return run, skipped
}

type initiator struct {
	cfg    initConfig
	n      *node
	log    *slog.Logger
	target velo.InstanceID
	hello  helloResp
	base   *baseline
	lanes  *laneCounter
	nextID uint64
}

func initiate(ctx context.Context, cfg initConfig) (err error) {
	specs, skipped := plan(cfg.sweep)
	rep := &Report{Schema: schemaVersion, Velobench: velobenchVersion(), Started: time.Now().UTC(), Mode: cfg.mode,
		Discovery: cfg.meet.where(), Sweep: cfg.sweep, Skipped: skipped, Points: []Point{}}
	in := &initiator{cfg: cfg, log: quietLogger(cfg.stderr)}
	// The lane counter first: only sockets made after this process entered its cgroup count.
	if in.lanes, err = startLanes(cfg.lanes); err != nil {
		return err
	}
	defer func() {
		if cerr := in.lanes.close(); cerr != nil {
			in.log.Warn("velobench: " + cerr.Error())
		}
	}()
	n, err := startNode(ctx, cfg.meet, fmt.Sprintf("initiator-%d", os.Getpid()), cfg.sweep.Memory, in.log)
	if err != nil {
		return err
	}
	in.n = n
	defer n.v.Close()
	rep.Initiator = captureEnv(cfg.osEnv)
	rep.Initiator.UCXDefaults, rep.Initiator.Auth = engineDefaults(n.u.Settings()), n.auth
	exportDefaults(rep.Initiator.UCXDefaults)
	in.lanes.setPorts(n.port, 0, cfg.meet.etcdPort())
	rep.Initiator.Lanes = in.lanes.describe()
	if len(cfg.meet.Rails) > 0 {
		rep.Initiator.Rails = n.v.Rails().String()
	}

	if err := in.findTarget(ctx); err != nil {
		return err
	}
	rep.Target, rep.TargetAddress = in.hello.Env, in.hello.Host
	in.base = newBaseline(in, cfg.sweep.Perftest == "off")
	rep.Initiator.Perftest = in.base.describe()

	prog := newProgress(cfg.stdout, cfg.out.Progress, cfg.isTTY, len(specs))
	prog.header(rep, in.hello)
	defer prog.close()

	var runErr error
	for i, s := range specs {
		prog.starting(s)
		pt, err := in.measure(ctx, s)
		if err != nil {
			runErr = in.explain(ctx, err, i, len(specs), s)
			break
		}
		pt.LineRate = lineRate(pt.GBps, rep.Initiator, rep.Target)
		rep.Points = append(rep.Points, pt)
		prog.finished(pt)
	}
	rep.Finished = time.Now().UTC()
	rep.Complete = runErr == nil
	if runErr != nil {
		rep.Ended = runErr.Error()
	}
	rep.PerftestNote = in.base.note()
	prog.close()
	if runErr == nil || errors.Is(runErr, errInterrupted) {
		// Tell the target the run is over (it frees what is left; with --once it exits).
		bctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = call(bctx, n.v, in.target, hBye, struct{}{}, nil)
		cancel()
	}
	if werr := writeOutputs(cfg.out, rep); werr != nil {
		if runErr == nil {
			return werr
		}
		return fmt.Errorf("%w; and writing the results failed: %v", runErr, werr)
	}
	if runErr != nil {
		if saved := savedWhere(cfg.out); saved != "" {
			return fmt.Errorf("%w; %s measured before that %s in %s", runErr, plural(len(rep.Points), "point"), isAre(len(rep.Points)), saved)
		}
		return fmt.Errorf("%w (give --json FILE to keep the points measured before that)", runErr)
	}
	if rep.PerftestNote != "" && cfg.out.Progress != "off" {
		fmt.Fprintf(cfg.stdout, "perftest: %s\n", rep.PerftestNote)
	}
	fmt.Fprintf(cfg.stdout, "velobench: %s in %s%s\n", plural(len(rep.Points), "point"), rep.Finished.Sub(rep.Started).Round(time.Second), savedNote(cfg.out))
	return nil
}

func savedWhere(o outputs) string {
	var files []string
	for _, f := range []string{o.JSON, o.CSV, o.Plot} {
		if f != "" {
			files = append(files, f)
		}
	}
	if len(files) == 0 {
		return ""
	}
	return fmt.Sprint(files)
}

func savedNote(o outputs) string {
	if s := savedWhere(o); s != "" {
		return "; written to " + s
	}
	return ""
}

func writeOutputs(o outputs, r *Report) error {
	if o.JSON != "" {
		if err := writeFileAtomic(o.JSON, func(w io.Writer) error { return writeJSON(w, r) }); err != nil {
			return fmt.Errorf("--json %s: %w", o.JSON, err)
		}
	}
	if o.CSV != "" {
		if err := writeFileAtomic(o.CSV, func(w io.Writer) error { return writeCSV(w, r) }); err != nil {
			return fmt.Errorf("--csv %s: %w", o.CSV, err)
		}
	}
	if o.Plot != "" {
		if err := writeFileAtomic(o.Plot, func(w io.Writer) error { return writeSVG(w, r) }); err != nil {
			return fmt.Errorf("--plot %s: %w", o.Plot, err)
		}
	}
	return nil
}

// lineRate is GB/s over the port's rate, on the side whose port is known (the slower of two).
func lineRate(gbps float64, a, b Environment) float64 {
	rate := a.LineRateGbps
	if b.LineRateGbps > 0 && (rate == 0 || b.LineRateGbps < rate) {
		rate = b.LineRateGbps
	}
	if rate <= 0 {
		return 0
	}
	return gbps / (rate / 8)
}

// findTarget waits for the member that answers hello as the target of that name, and refuses one
// of another version.
func (in *initiator) findTarget(ctx context.Context) error {
	m := in.cfg.meet
	deadline := time.Now().Add(m.Wait)
	var last error
	for {
		for _, p := range in.n.v.Peers() {
			if p.State == velo.StateDown {
				continue
			}
			hctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			var h helloResp
			err := call(hctx, in.n.v, p.ID, hHello, helloReq{Version: velobenchVersion(), Protocol: protocol, Name: "initiator", ControlPort: in.n.port}, &h)
			cancel()
			if err != nil {
				last = err
				continue
			}
			if h.Role != "target" || h.Name != m.Name {
				continue
			}
			if h.Version != velobenchVersion() || h.Protocol != protocol {
				return fmt.Errorf("the target %q (pid %d on %s) runs velobench %s (protocol %d) and this initiator velobench %s (protocol %d): "+
					"the two exchange their own messages, so both must be the same build; install one velobench on both nodes",
					h.Name, h.PID, h.Host, h.Version, h.Protocol, velobenchVersion(), protocol)
			}
			if h.Memory > 0 && in.cfg.sweep.Memory > h.Memory {
				return usageErr("--memory %s is more than the target %q stages (its --memory %s): give the initiator --memory %s or less, or start the target with --memory %s",
					human(in.cfg.sweep.Memory), h.Name, human(h.Memory), human(h.Memory), human(in.cfg.sweep.Memory))
			}
			in.target, in.hello = p.ID, h
			in.lanes.setPorts(0, h.ControlPort, 0)
			return nil
		}
		if ctx.Err() != nil {
			return errInterrupted
		}
		if time.Now().After(deadline) {
			hint := ""
			if last != nil {
				hint = fmt.Sprintf(" (the last member asked answered: %v)", last)
			}
			start := "--dir " + m.Dir
			if m.Etcd != "" {
				start = "--etcd " + m.Etcd
			}
			return fmt.Errorf("no velobench target named %q appeared within %s in %s%s: start `velobench target %s --cluster %s --name %s` on the other node, check that both sides give the same location and --cluster, or raise --wait",
				m.Name, m.Wait, in.n.where, hint, start, m.Cluster, m.Name)
		}
		select {
		case <-ctx.Done():
		case err := <-in.cfg.targetDied:
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// explain turns a failed point into the error the run ends with.
func (in *initiator) explain(ctx context.Context, err error, i, total int, s spec) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%w at point %d of %d (%s)", errInterrupted, i+1, total, s.point().label())
	}
	gone, why := in.targetGone()
	if !gone && !errors.Is(err, velo.ErrPeerUnreachable) {
		// The failure may have come from UCX before velo marked the peer down: ask the target.
		sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, serr := in.stats(sctx)
		cancel()
		if serr != nil {
			gone, why = true, fmt.Sprintf("%v (and it does not answer: %v)", err, serr)
		}
	}
	if gone || errors.Is(err, velo.ErrPeerUnreachable) {
		if why == "" {
			why = err.Error()
		}
		return fmt.Errorf("the target %q (pid %d on %s) went away during point %d of %d (%s): %s; restart it and run the sweep again",
			in.hello.Name, in.hello.PID, in.hello.Host, i+1, total, s.point().label(), why)
	}
	return fmt.Errorf("point %d of %d (%s): %w", i+1, total, s.point().label(), err)
}

// targetGone says whether the target is down, and why, as velo saw it.
func (in *initiator) targetGone() (bool, string) {
	for _, p := range in.n.v.Peers() {
		if p.ID == in.target {
			return p.State == velo.StateDown, p.Err
		}
	}
	return true, "it is no longer a known peer"
}

// stats reads the target's CPU time and path counts.
func (in *initiator) stats(ctx context.Context) (statsResp, error) {
	var s statsResp
	c, cancel := context.WithTimeout(ctx, in.cfg.sweep.OpTimeout)
	defer cancel()
	err := call(c, in.n.v, in.target, hStats, struct{}{}, &s)
	return s, err
}

// caller is one concurrent caller's operation: it returns how long the velo call took.
type caller func(ctx context.Context) (time.Duration, error)

func (in *initiator) measure(ctx context.Context, s spec) (Point, error) {
	sw := in.cfg.sweep
	v := in.n.v
	in.nextID++
	id := in.nextID
	var count int
	size, plain := s.block, false
	switch s.op {
	case opGet:
		count = s.callers
	case opChunked:
		count, plain = s.callers, true
	case opBatch:
		count = s.callers * s.batch
	case opRanged, opPut, opPutB:
		count, size = s.callers, s.block*int64(s.batch)
	case opPutC:
		count, size, plain = s.callers, s.block, true
	}
	var hs []velo.Handle
	var gs []velo.GrantHandle
	if count > 0 {
		sctx, cancel := context.WithTimeout(ctx, sw.OpTimeout)
		var resp stageResp
		err := call(sctx, v, in.target, hStage, stageReq{ID: id, Count: count, Size: size, Plain: plain, Grant: isPut(s.op)}, &resp)
		cancel()
		if err != nil {
			if isPut(s.op) {
				return Point{}, fmt.Errorf("asking the target for %d regions of %s to write: %w", count, human(size), err)
			}
			return Point{}, fmt.Errorf("staging %d payloads of %s on the target: %w", count, human(size), err)
		}
		if got := max(len(resp.Handles), len(resp.Grants)); got != count {
			return Point{}, fmt.Errorf("the target staged %d payloads, asked for %d", got, count)
		}
		hs, gs = resp.Handles, resp.Grants
		defer func() {
			fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = call(fctx, v, in.target, hFree, freeReq{ID: id}, nil)
			cancel()
		}()
	}
	callers := make([]caller, s.callers)
	for c := range callers {
		callers[c] = in.operation(s, c, hs, gs)
	}
	// Warm up: each caller once (endpoint wireup, first registrations, page faults in dst).
	for _, f := range callers {
		if _, err := in.timed(ctx, f); err != nil {
			return Point{}, err
		}
	}
	iters := int(min(max(sw.Bytes/s.bytesPerOp(), int64(sw.MinIters)), int64(sw.MaxIters)))
	perCaller := (iters + s.callers - 1) / s.callers
	minPerCaller := (sw.MinIters + s.callers - 1) / s.callers

	before, err := in.stats(ctx)
	if err != nil {
		return Point{}, fmt.Errorf("asking the target for its CPU time: %w", err)
	}
	lanes0, lanesWhy0 := in.lanes.read()
	paths0, rails0 := counters(v.Metrics())
	cpu0 := cpuNanos()
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	lat := make([][]time.Duration, s.callers)
	errs := make([]error, s.callers)
	deadline := time.Now().Add(sw.PointTime)
	var wg sync.WaitGroup
	for c, f := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := make([]time.Duration, 0, perCaller)
			for i := 0; i < perCaller; i++ {
				if i >= minPerCaller && time.Now().After(deadline) {
					break
				}
				took, err := in.timed(pctx, f)
				if err != nil {
					errs[c] = err
					cancel()
					break
				}
				d = append(d, took)
			}
			lat[c] = d
		}()
	}
	wg.Wait()
	cpu1 := cpuNanos()
	paths1, rails1 := counters(v.Metrics())
	lanes1, lanesWhy1 := in.lanes.read()
	if err := errors.Join(errs...); err != nil {
		return Point{}, firstCause(errs)
	}
	after, err := in.stats(ctx)
	if err != nil {
		return Point{}, fmt.Errorf("asking the target for its CPU time: %w", err)
	}

	pt := s.point()
	var all []time.Duration
	var busiest time.Duration
	for _, d := range lat {
		var sum time.Duration
		for _, x := range d {
			sum += x
		}
		busiest = max(busiest, sum)
		all = append(all, d...)
	}
	pt.Operations = len(all)
	pt.Bytes = int64(len(all)) * s.bytesPerOp()
	pt.Seconds = busiest.Seconds()
	if pt.Seconds > 0 {
		pt.GBps = float64(pt.Bytes) / 1e9 / pt.Seconds
		pt.OpsPerSec = float64(pt.Operations) / pt.Seconds
		pt.BlocksPerSec = pt.OpsPerSec * float64(s.batch)
	}
	pt.Latency = percentiles(all)
	gb := float64(pt.Bytes) / 1e9
	pt.CPUInitiator = float64(cpu1-cpu0) / 1e9 / gb
	pt.CPUTarget = float64(after.CPUNanos-before.CPUNanos) / 1e9 / gb
	pt.PathsInitiator = pathDelta(paths0, paths1)
	pt.PathsTarget = pathDelta(before.Paths, after.Paths)
	pt.RailsInitiator, pt.RailsTarget = railDelta(rails0, rails1), railDelta(before.Rails, after.Rails)
	pt.LanesInitiator, pt.LanesInitiatorWhy = laneDelta(lanes0, lanes1, lanesWhy0, lanesWhy1)
	pt.LanesTarget, pt.LanesTargetWhy = laneDelta(before.Lanes, after.Lanes, before.LanesWhy, after.LanesWhy)
	if isPut(s.op) {
		// The target checks that every notification came and the bytes are what was written.
		fctx, cancel := context.WithTimeout(ctx, sw.OpTimeout)
		var fr freeResp
		err := call(fctx, v, in.target, hFree, freeReq{ID: id, Notified: s.callers + pt.Operations, Block: s.block, Blocks: s.batch}, &fr)
		cancel()
		if err != nil {
			return Point{}, fmt.Errorf("asking the target to check what was written: %w", err)
		}
		if fr.Err != "" {
			return Point{}, fmt.Errorf("the target found the writes wrong: %s", fr.Err)
		}
	}
	pt.Perftest = in.base.figure(ctx, s, pt.Operations)
	if ctx.Err() != nil {
		return Point{}, ctx.Err()
	}
	return pt, nil
}

// timed runs one operation under --op-timeout.
func (in *initiator) timed(ctx context.Context, f caller) (time.Duration, error) {
	octx, cancel := context.WithTimeout(ctx, in.cfg.sweep.OpTimeout)
	defer cancel()
	return f(octx)
}

// firstCause is the first error that is not merely another caller's cancellation.
func firstCause(errs []error) error {
	var first error
	for _, err := range errs {
		if err == nil {
			continue
		}
		if !errors.Is(err, context.Canceled) {
			return err
		}
		if first == nil {
			first = err
		}
	}
	return first
}

// operation builds caller c's operation over the handles staged for the point.
func (in *initiator) operation(s spec, c int, hs []velo.Handle, gs []velo.GrantHandle) caller {
	v := in.n.v
	switch s.op {
	case opPut, opPutC:
		// One notified put: it returns once the bytes and then the notification are there (into
		// a pinned region by RDMA, or, for chunkedput, into plain memory by chunks).
		src := make([]byte, s.block)
		fill(src, c, 0)
		h := gs[c]
		opts := &velo.PutOptions{Notify: true, Payload: []byte("velobench")}
		return func(ctx context.Context) (time.Duration, error) {
			t0 := time.Now()
			err := v.Put(ctx, h, 0, src, opts)
			return time.Since(t0), err
		}
	case opPutB:
		// A batch of blocks side by side in the region, one notification once all are there.
		src := make([]byte, s.block*int64(s.batch))
		fill(src, c, 0)
		reqs := make([]velo.PutRequest, s.batch)
		for i := range reqs {
			off := int64(i) * s.block
			reqs[i] = velo.PutRequest{Offset: uint64(off), Src: src[off : off+s.block]}
		}
		h := gs[c]
		opts := &velo.PutBatchOptions{Notify: true, Payload: []byte("velobench")}
		return func(ctx context.Context) (time.Duration, error) {
			t0 := time.Now()
			errs, nerr := v.PutBatch(ctx, h, reqs, opts)
			took := time.Since(t0)
			var first error
			for i, err := range errs {
				if err != nil {
					first = cmpErr(first, fmt.Errorf("block %d of the batch: %w", i, err))
				}
			}
			if nerr != nil {
				first = cmpErr(first, fmt.Errorf("the batch's notification: %w", nerr))
			}
			return took, first
		}
	case opGet, opChunked:
		dst := make([]byte, s.block)
		h := hs[c]
		return func(ctx context.Context) (time.Duration, error) {
			t0 := time.Now()
			l, err := v.GetInto(ctx, h, dst)
			took := time.Since(t0)
			if err != nil {
				return 0, err
			}
			if err := checkBytes(dst, c, 0); err != nil {
				l.Detach(ctx)
				return 0, err
			}
			return took, l.Detach(ctx)
		}
	case opBatch:
		dst := make([]byte, s.block*int64(s.batch))
		reqs := make([]velo.GetRequest, s.batch)
		for i := range reqs {
			reqs[i] = velo.GetRequest{Handle: hs[c*s.batch+i], Into: dst[int64(i)*s.block : int64(i+1)*s.block]}
		}
		leases := make([]*velo.Lease, 0, s.batch)
		return func(ctx context.Context) (time.Duration, error) {
			t0 := time.Now()
			res := v.GetBatch(ctx, reqs, nil)
			took := time.Since(t0)
			leases = leases[:0]
			var first error
			for i, r := range res {
				if r.Err != nil {
					first = cmpErr(first, fmt.Errorf("block %d of the batch: %w", i, r.Err))
					continue
				}
				leases = append(leases, r.Lease)
				first = cmpErr(first, checkBytes(reqs[i].Into, c*s.batch+i, 0))
			}
			for _, err := range v.DetachLeases(ctx, leases) {
				first = cmpErr(first, err)
			}
			return took, first
		}
	case opRanged:
		dst := make([]byte, s.block*int64(s.batch))
		rs := make([]velo.Range, s.batch)
		h := hs[c]
		return func(ctx context.Context) (time.Duration, error) {
			for i := range rs {
				off := int64(i) * s.block
				rs[i] = velo.Range{Offset: uint64(off), Length: uint64(s.block), Dst: dst[off : off+s.block]}
			}
			t0 := time.Now()
			err := v.ReadRanges(ctx, h, rs)
			took := time.Since(t0)
			for i, r := range rs {
				err = cmpErr(err, r.Err)
				if r.Err == nil {
					err = cmpErr(err, checkBytes(r.Dst, c, int64(i)*s.block))
				}
			}
			return took, err
		}
	case opRequest:
		payload := make([]byte, s.block)
		fill(payload, c, 0)
		return func(ctx context.Context) (time.Duration, error) {
			t0 := time.Now()
			ans, err := v.Request(ctx, in.target, hEcho, payload)
			took := time.Since(t0)
			if err == nil && len(ans) != len(payload) {
				err = fmt.Errorf("the echo of a %d-byte request came back with %d bytes", len(payload), len(ans))
			}
			return took, err
		}
	}
	return func(context.Context) (time.Duration, error) {
		return 0, fmt.Errorf("velobench: no operation %q", s.op) // plan lists known operations only
	}
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// percentiles are nearest-rank percentiles of d, in microseconds.
func percentiles(d []time.Duration) Latency {
	if len(d) == 0 {
		return Latency{}
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(a, b int) bool { return s[a] < s[b] })
	at := func(q float64) float64 {
		i := int(q*float64(len(s))+0.999999) - 1 // nearest rank: ceil(q*n), 1-based
		i = min(max(i, 0), len(s)-1)
		return us(s[i])
	}
	return Latency{P50: at(0.50), P99: at(0.99), P999: at(0.999), Min: us(s[0]), Max: us(s[len(s)-1])}
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// plural prints "1 point", "2 points".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

func isAre(n int) string {
	if n == 1 {
		return "is"
	}
	return "are"
}
