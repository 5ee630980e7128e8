// Command pushbench prints what push (a writer's Put and PutBatch into a receiver's write grant,
// package velo/push) costs, as ratios against baselines measured in the same run on the same
// machine (`make bench-push`):
//
//   - RDMA-path Put of 1, 8 and 64 MiB beside `ucx_perftest -t ucp_put_bw` of the same size
//     (target ≥ 0.9× at ≥ 8 MiB), beside `ucx_perftest -t ucp_am_bw` (the lane velo's guarded
//     PUT rides over tcp), and, where the linked UCX allows it, a writer forced to ucp_put_nbx and a
//     flush (ucx.RMADirect), the very operation ucp_put_bw measures;
//   - a PutBatch of 1,024 puts of 64 KiB (64 MiB) beside one Put of 64 MiB: without
//     notifications, with a wider window, and with one notification per entry and one for the
//     batch (target ≥ 0.8×);
//   - a Put of 64 B with a notification, the round trip until the receiver's handler ran and
//     answered, beside the round trip of `ucx_perftest -t ucp_am_lat` of 64 B (target ≤ 3×), with
//     the same put without a notification and both on the chunked path for reference;
//   - the chunked path (a receiver without the UCX transport: its region is plain memory, the
//     bytes go over the TCP control plane) at 1, 8 and 64 MiB beside a raw Go TCP stream of the
//     same bytes into the same memory, answered once they are in (target ≥ 0.8× at ≥ 8 MiB).
//
// Writer and receiver are separate processes: the bench runs itself again as the receiver and
// measures from the parent, the writer. Each round runs the baselines, then velo, so machine noise
// falls on all of them; each table shows the median of the rounds and their range. It asserts
// nothing about speed, but it stops when a put does not take the path it measures (the writer's
// velo_push_path_total) or when the receiver's bytes are not the writer's.
//
// The perftest baselines run as in rdmabench: ucx_perftest of the linked UCX, on loopback, with
// this process's UCX_TLS and the UCX defaults velo's engine applies on its own exported to its
// environment, and its default warm-up. A bandwidth measurement moves about 256 MiB (4 to 4000
// iterations); velo moves the same bytes in as many puts, and its figure is the bytes over the
// summed time of those puts, as perftest's "overall" is. A velo Put here is what a caller pays: it
// returns once the bytes are in the receiver's memory.
//
// Over tcp, ucx_perftest -t ucp_put_bw is UCX's software emulation of a PUT, which velo's static
// UCX (its guard patch set) refuses: linked with it (make bench-push-static), the bench leaves
// that baseline and the forced ucp_put_nbx out and says so; the system's UCX (make bench-push,
// trusting the network) gives both.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"os"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/ucx/benchkit"
	"github.com/velo-go/velo/velo"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/push"
	"github.com/velo-go/velo/velo/transport/tcp"
	"github.com/velo-go/velo/velo/transport/ucxtransport"
)

const (
	regionSize = 64 << 20 // each receiver region, and the largest put
	batchEntry = 64 << 10 // an entry of the batch table
	notifySize = 64       // the put of the latency table
	// pause separates a baseline from the velo run after it, longer than the engines' SpinFor, so
	// neither measures while the other's progress thread still spins.
	pause = 3 * time.Millisecond
	// wideWindow is the batch table's PutBatchOptions.Window beside the default.
	wideWindow = 64
)

var (
	putSizes     = []int{1 << 20, 8 << 20, 64 << 20}
	chunkedSizes = []int{1 << 20, 8 << 20, 64 << 20}
	quiet        = slog.New(slog.NewTextHandler(io.Discard, nil))
)

func main() {
	role := flag.String("role", "", "internal: receiver")
	quick := flag.Bool("quick", false, "one round, few puts (a smoke run)")
	only := flag.String("only", "", `run one table: "put" (beside ucp_put_bw), "batch", "notify" (beside ucp_am_lat) or "chunked" (beside raw TCP)`)
	rounds := flag.Int("rounds", 3, "alternating rounds of baseline and velo per figure")
	flag.IntVar(&stagingThreshold, "staging", 0, "the TCP-only pair's staging threshold in bytes (velo.WithStagingThreshold; 0: the default), which caps a chunked put's chunk")
	flag.StringVar(&profilePrefix, "profile", "", "write CPU profiles of the writer and the receiver process to PREFIX.{writer,receiver}.cpu.pprof")
	flag.Parse()
	log.SetFlags(0)
	if os.Getenv("UCX_TLS") == "" {
		os.Setenv("UCX_TLS", "tcp") // the same for velo and ucx_perftest
	}
	var err error
	switch *role {
	case "receiver":
		stop := startProfile("receiver")
		err = runReceiver()
		stop()
	case "":
		switch *only {
		case "", "put", "batch", "notify", "chunked":
			stop := startProfile("writer")
			err = run(*quick, *only, *rounds)
			stop()
		default:
			err = fmt.Errorf("-only %q: want put, batch, notify or chunked", *only)
		}
	default:
		err = fmt.Errorf("-role %q", *role)
	}
	if err != nil {
		log.Fatalf("pushbench: %v", err)
	}
}

// startRDMA brings up an instance with a TCP control plane and the UCX transport beside it (so
// the RDMA registry, and push's RDMA path), with extra options.
func startRDMA(ctx context.Context, mode ucx.RMAMode, extra ...velo.Option) (*velo.Velo, *ucxtransport.Transport, error) {
	ctl, err := tcp.New(tcp.Config{})
	if err != nil {
		return nil, nil, err
	}
	u, err := ucxtransport.New(ucxtransport.Config{EagerEndpoints: true, Logger: quiet, RMA: mode, RMAOverSoftwareLanes: true})
	if err != nil {
		ctl.Close()
		return nil, nil, err
	}
	opts := []velo.Option{velo.WithTransport(ctl), velo.WithUCXTransport(u)}
	opts = append(opts, velo.WithLogger(quiet), velo.WithRDMA(velo.RDMAConfig{Pool: velo.RDMAPoolConfig{RegisteredBytesBudget: 1 << 30}}))
	opts = append(opts, extra...)
	v, err := velo.New(ctx, opts...)
	return v, u, err
}

// startPlain brings up an instance with the TCP control plane only: every put to or from it
// takes the chunked path.
func startPlain(ctx context.Context) (*velo.Velo, error) {
	ctl, err := tcp.New(tcp.Config{})
	if err != nil {
		return nil, err
	}
	opts := []velo.Option{velo.WithTransport(ctl), velo.WithLogger(quiet)}
	if stagingThreshold > 0 {
		opts = append(opts, velo.WithStagingThreshold(stagingThreshold))
	}
	return velo.New(ctx, opts...)
}

// stagingThreshold is -staging.
var stagingThreshold int

// bench is the writer's side of a run.
type bench struct {
	ctx           context.Context
	quick         bool
	rounds        int
	rdma, plain   *velo.Velo
	twoTrips      *velo.Velo // writes a small notified put, then notifies (velo.WithPushInlineMax(0))
	direct        *velo.Velo // writes with ucp_put_nbx and a flush (nil: directErr says why)
	directErr     error
	recv          *benchkit.Child
	dec           *json.Decoder
	grants        grantsHello
	raw           net.Conn
	src           []byte // the writer's bytes, regionSize of them
	tool          ucx.Tool
	putErr, amErr error // why a perftest baseline is missing (nil: it runs)
}

func run(quick bool, only string, rounds int) error {
	ctx := context.Background()
	b := &bench{ctx: ctx, quick: quick, rounds: max(rounds, 1)}
	if quick {
		b.rounds = 1
	}
	var hello receiverHello
	recv, err := benchkit.StartChild(nil, &hello, "-role", "receiver", "-profile", profilePrefix, "-staging", strconv.Itoa(stagingThreshold))
	if err != nil {
		return fmt.Errorf("the receiver: %w", err)
	}
	defer recv.Stop()
	b.recv, b.dec = recv, json.NewDecoder(recv.Out)
	var u *ucxtransport.Transport
	if b.rdma, u, err = startRDMA(ctx, ucx.RMAAuto); err != nil {
		return err
	}
	defer b.rdma.Close()
	if b.twoTrips, _, err = startRDMA(ctx, ucx.RMAAuto, velo.WithPushInlineMax(0)); err != nil {
		return err
	}
	defer b.twoTrips.Close()
	if err := b.twoTrips.RegisterPeer(ctx, hello.RDMA); err != nil {
		return err
	}
	if b.plain, err = startPlain(ctx); err != nil {
		return err
	}
	defer b.plain.Close()
	if err := b.rdma.RegisterPeer(ctx, hello.RDMA); err != nil {
		return err
	}
	if err := b.plain.RegisterPeer(ctx, hello.Plain); err != nil {
		return err
	}
	wh := writerHello{RDMA: b.rdma.PeerInfo(), Plain: b.plain.PeerInfo(), TwoTrips: b.twoTrips.PeerInfo()}
	// The direct writer: ucp_put_nbx and a flush, the operation ucp_put_bw measures, which over
	// tcp is UCX's software RMA. A guarded UCX refuses it there.
	if g, gerr := ucx.SoftwareRMAGuard(); gerr == nil && g.Enforced {
		b.directErr = fmt.Errorf("the linked UCX's guard (%s) refuses a direct PUT over UCX_TLS=%s (software RMA); make bench-push measures it on the system's UCX", g.Version, os.Getenv("UCX_TLS"))
	} else {
		if b.direct, _, err = startRDMA(ctx, ucx.RMADirect); err != nil {
			return err
		}
		defer b.direct.Close()
		if err := b.direct.RegisterPeer(ctx, hello.RDMA); err != nil {
			return err
		}
		pi := b.direct.PeerInfo()
		wh.Direct = &pi
	}
	if err := json.NewEncoder(recv.In).Encode(wh); err != nil {
		return err
	}
	if err := b.dec.Decode(&b.grants); err != nil {
		return fmt.Errorf("the receiver's grants: %w", err)
	}
	if b.raw, err = net.Dial("tcp", hello.Raw); err != nil {
		return err
	}
	defer b.raw.Close()
	b.src = make([]byte, regionSize)
	for i := range b.src {
		b.src[i] = byte(i*7) + 3
	}

	// ucx_perftest runs with the UCX configuration velo's engine runs with: the defaults the
	// engine applies itself go to its environment; whatever the user set is there already.
	var same []string
	for _, st := range u.Settings() {
		if st.Source == ucx.SourceProgram {
			os.Setenv("UCX_"+st.Name, st.Value)
			same = append(same, "UCX_"+st.Name+"="+st.Value)
		}
	}
	fmt.Printf("push: writer and receiver in two processes, UCX %s (linked), UCX_TLS=%s, %d CPUs, %s, %d alternating rounds\n",
		ucx.Version().String, os.Getenv("UCX_TLS"), runtime.NumCPU(), runtime.Version(), b.rounds)
	if la, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Printf("load average at the start: %s", la)
	}
	fmt.Printf("receiver regions: RDMA instance %s (grant %d), TCP-only instance %s (grant %d)\n",
		regionKind(b.grants.PinnedReason), b.grants.Pinned.ID, regionKind(b.grants.PlainReason), b.grants.Plain.ID)
	b.tool, b.putErr = benchkit.Find()
	b.amErr = b.putErr
	if b.putErr == nil {
		fmt.Printf("baseline: %s (UCX %s, the linked release)\n", b.tool.Path, b.tool.Version)
		b.putErr = putRefused(b.tool)
	}
	if len(same) > 0 {
		fmt.Printf("engine defaults, exported to ucx_perftest too: %s\n", strings.Join(same, " "))
	}
	tables := []struct {
		name string
		f    func() error
	}{{"put", b.putTable}, {"batch", b.batchTable}, {"notify", b.notifyTable}, {"chunked", b.chunkedTable}}
	for _, t := range tables {
		if only != "" && only != t.name {
			continue
		}
		fmt.Println()
		if err := t.f(); err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
	}
	if only == "" {
		fmt.Println()
		fmt.Println("Targets: put >= 0.90x ucp_put_bw at >= 8 MiB; batch >= 0.80x one put; put+notify <= 3x ucp_am_lat; chunked >= 0.80x raw TCP at >= 8 MiB.")
	}
	return nil
}

func regionKind(reason string) string {
	if reason == string(metrics.ReasonOK) || reason == "" {
		return "pinned"
	}
	return "plain memory (" + reason + ")"
}

// putRefused says why ucx_perftest -t ucp_put_bw cannot be the baseline, or nil: over tcp (and ud)
// its PUT is software RMA, which velo's guard refuses, and a refused PUT does not fail perftest but
// hangs it; so on a guarded UCX a short one is tried under a deadline first.
func putRefused(tool ucx.Tool) error {
	g, err := ucx.SoftwareRMAGuard()
	if err != nil || !g.Enforced {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := benchkit.Run(ctx, tool, "-t", "ucp_put_bw", "-s", "4096", "-n", "16"); err != nil {
		return fmt.Errorf("the linked UCX's guard (%s) refuses ucx_perftest -t ucp_put_bw over UCX_TLS=%s (software RMA; a PUT of 4 KiB did not finish in 10 s); make bench-push gives that baseline on the system's UCX",
			g.Version, os.Getenv("UCX_TLS"))
	}
	return nil
}

// ---------------------------------------------------------------- checks

// ask sends the receiver one request and reads its reply.
func (b *bench) ask(q request) (reply, error) {
	var r reply
	if err := json.NewEncoder(b.recv.In).Encode(q); err != nil {
		return r, err
	}
	if err := b.dec.Decode(&r); err != nil {
		return r, fmt.Errorf("the receiver's reply: %w", err)
	}
	if r.Err != "" {
		return r, errors.New(r.Err)
	}
	return r, nil
}

// checkBytes compares n bytes at off of the receiver's region with want.
func (b *bench) checkBytes(region string, off uint64, want []byte) error {
	r, err := b.ask(request{Op: "sum", Region: region, Offset: off, Length: uint64(len(want))})
	if err != nil {
		return err
	}
	if r.Sum != sha256.Sum256(want) {
		return fmt.Errorf("the receiver's %s region holds other bytes than the writer put at [%d, +%d)", region, off, len(want))
	}
	return nil
}

// pathCount is how many puts the writer v counted on path p.
func pathCount(v *velo.Velo, p metrics.Path, r metrics.Reason) float64 {
	x, _ := metrics.Value(v.Metrics(), push.PathTotal, map[string]string{"side": "writer", "path": string(p), "reason": string(r)})
	return x
}

// onPath fails unless the writer v counted want more puts on path p since before.
func onPath(v *velo.Velo, p metrics.Path, r metrics.Reason, before float64, want int) error {
	if got := pathCount(v, p, r) - before; got != float64(want) {
		return fmt.Errorf("%d of %d puts measured as %s/%s took that path (velo_push_path_total)", int(got), want, p, r)
	}
	return nil
}

// ---------------------------------------------------------------- the tables

func (b *bench) putTable() error {
	fmt.Printf("RDMA-path Put beside ucx_perftest -t ucp_put_bw and -t ucp_am_bw (MiB/s over about %d MiB per measurement, puts = perftest iterations; median of the rounds [min-max])\n", putBytes>>20)
	fmt.Println("  Put: velo's choice of write (over tcp: its guarded PUT, 256 KiB AM pieces answered by the receiver's engine; on rc/dc: ucp_put_nbx and a flush)")
	fmt.Println("  direct Put: a writer configured with ucx.RMADirect, ucp_put_nbx and a flush whatever the lanes: over tcp UCX's software RMA, the operation ucp_put_bw measures")
	if b.putErr != nil {
		fmt.Printf("  ucp_put_bw: none: %v\n", b.putErr)
	}
	if b.directErr != nil {
		fmt.Printf("  direct Put: none: %v\n", b.directErr)
	}
	fmt.Printf("%-7s %5s %18s %18s %18s %18s %9s %9s %9s\n", "size", "puts", "perftest put_bw", "perftest am_bw", "velo Put", "velo direct Put", "Put/put", "dir/put", "Put/am")
	for _, n := range putSizes {
		iters := putIterations(n, b.quick)
		src := b.src[:n]
		// Warm-up (the first put of a grant acquires it).
		if err := b.rdma.Put(b.ctx, b.grants.Pinned, 0, src, nil); err != nil {
			return err
		}
		if b.direct != nil {
			if err := b.direct.Put(b.ctx, b.grants.Direct, 0, src, nil); err != nil {
				return fmt.Errorf("direct: %w", err)
			}
		}
		var perf, am, vel, dir []float64
		for r := 0; r < b.rounds; r++ {
			if b.putErr == nil {
				res, err := benchkit.Run(b.ctx, b.tool, "-t", "ucp_put_bw", "-s", strconv.Itoa(n), "-n", strconv.Itoa(iters))
				if err != nil {
					return err
				}
				perf = append(perf, res.BandwidthOverall)
				time.Sleep(pause)
			}
			if b.amErr == nil {
				res, err := benchkit.Run(b.ctx, b.tool, "-t", "ucp_am_bw", "-s", strconv.Itoa(n), "-n", strconv.Itoa(iters))
				if err != nil {
					return err
				}
				am = append(am, res.BandwidthOverall)
				time.Sleep(pause)
			}
			x, err := putRate(b.ctx, b.rdma, b.grants.Pinned, src, iters)
			if err != nil {
				return err
			}
			vel = append(vel, x)
			time.Sleep(pause)
			if b.direct != nil {
				if x, err = putRate(b.ctx, b.direct, b.grants.Direct, src, iters); err != nil {
					return fmt.Errorf("direct: %w", err)
				}
				dir = append(dir, x)
				time.Sleep(pause)
			}
		}
		if err := b.checkBytes("pinned", 0, src); err != nil {
			return err
		}
		if b.direct != nil {
			if err := b.checkBytes("direct", 0, src); err != nil {
				return err
			}
		}
		fmt.Printf("%-7s %5d %18s %18s %18s %18s %9s %9s %9s\n", sizeLabel(n), iters, spreadOr(perf), spreadOr(am), spread(vel, "%.0f"), spreadOr(dir),
			ratio(vel, perf), ratio(dir, perf), ratio(vel, am))
	}
	return nil
}

// putBytes is about what one bandwidth measurement moves. Less than rdmabench's 512 MiB: UCX
// 1.13's software PUT over tcp moves tens of MiB/s at 8 MiB and above here, and the table has
// two of them per round.
const putBytes = 256 << 20

// putIterations is how many puts one measurement of n bytes makes, on every side.
func putIterations(n int, quick bool) int {
	if quick {
		return 3
	}
	return max(4, min(4000, putBytes/n))
}

// putRate is the rate of iters puts of src at offset 0 through h, in MiB/s: their bytes over their
// summed time, as perftest's overall bandwidth is. Every put must take the RDMA path.
func putRate(ctx context.Context, v *velo.Velo, h velo.GrantHandle, src []byte, iters int) (float64, error) {
	before := pathCount(v, metrics.PathRDMA, metrics.ReasonOK)
	var total time.Duration
	for i := 0; i < iters; i++ {
		t0 := time.Now()
		if err := v.Put(ctx, h, 0, src, nil); err != nil {
			return 0, err
		}
		total += time.Since(t0)
	}
	if err := onPath(v, metrics.PathRDMA, metrics.ReasonOK, before, iters); err != nil {
		return 0, err
	}
	return mibps(len(src)*iters, total), nil
}

func (b *bench) batchTable() error {
	const entries = regionSize / batchEntry
	iters := 8
	if b.quick {
		iters = 2
	}
	fmt.Printf("RDMA-path PutBatch of %d puts of %s (%s) beside one Put of %s (MiB/s over %d of each per round; median of the rounds [min-max]; window %d unless named)\n",
		entries, sizeLabel(batchEntry), sizeLabel(regionSize), sizeLabel(regionSize), iters, push.DefaultWindow)
	h := b.grants.Pinned
	plainReqs := make([]velo.PutRequest, entries)
	noteReqs := make([]velo.PutRequest, entries)
	for i := range plainReqs {
		// Neighbours in the batch are not neighbours in memory, as for KV-cache blocks.
		slot := i * 7 % entries
		src := b.src[i*batchEntry : (i+1)*batchEntry]
		plainReqs[i] = velo.PutRequest{Offset: uint64(slot * batchEntry), Src: src}
		noteReqs[i] = velo.PutRequest{Offset: uint64(slot * batchEntry), Src: src, Notify: true, Payload: binary.BigEndian.AppendUint32(nil, uint32(i))}
	}
	batch := func(reqs []velo.PutRequest, notify bool, window int) error {
		opts := &velo.PutBatchOptions{Window: window}
		if notify {
			opts.Notify, opts.Payload = true, []byte("batch done")
		}
		errs, nerr := b.rdma.PutBatch(b.ctx, h, reqs, opts)
		for i, err := range errs {
			if err != nil {
				return fmt.Errorf("entry %d: %w", i, err)
			}
		}
		return nerr
	}
	kinds := []struct {
		name string
		puts int
		f    func() error
	}{
		{"one Put of " + sizeLabel(regionSize), 1, func() error { return b.rdma.Put(b.ctx, h, 0, b.src, nil) }},
		{"PutBatch, no notifications", entries, func() error { return batch(plainReqs, false, 0) }},
		{fmt.Sprintf("PutBatch, no notif., window %d", wideWindow), entries, func() error { return batch(plainReqs, false, wideWindow) }},
		{"PutBatch, one per entry + batch", entries, func() error { return batch(noteReqs, true, 0) }},
	}
	rates := make([][]float64, len(kinds))
	for _, k := range kinds { // warm-up
		if err := k.f(); err != nil {
			return err
		}
	}
	notesBefore, err := b.ask(request{Op: "notes"})
	if err != nil {
		return err
	}
	for r := 0; r < b.rounds; r++ {
		for j, k := range kinds {
			before := pathCount(b.rdma, metrics.PathRDMA, metrics.ReasonOK)
			var total time.Duration
			for i := 0; i < iters; i++ {
				t0 := time.Now()
				if err := k.f(); err != nil {
					return fmt.Errorf("%s: %w", k.name, err)
				}
				total += time.Since(t0)
			}
			if err := onPath(b.rdma, metrics.PathRDMA, metrics.ReasonOK, before, k.puts*iters); err != nil {
				return fmt.Errorf("%s: %w", k.name, err)
			}
			rates[j] = append(rates[j], mibps(regionSize*iters, total))
			time.Sleep(pause)
		}
	}
	notes, err := b.ask(request{Op: "notes"})
	if err != nil {
		return err
	}
	if want := int64(b.rounds * iters * (entries + 1)); notes.Notes-notesBefore.Notes != want {
		return fmt.Errorf("the receiver's handler ran %d times for %d notifications", notes.Notes-notesBefore.Notes, want)
	}
	// The last batch wrote every slot: entry i's bytes at slot i*7 mod entries.
	want := make([]byte, regionSize)
	for _, q := range noteReqs {
		copy(want[q.Offset:], q.Src)
	}
	if err := b.checkBytes("pinned", 0, want); err != nil {
		return err
	}
	fmt.Printf("%-34s %22s %12s\n", "", "MiB/s", "vs one Put")
	one := median(rates[0])
	for j, k := range kinds {
		ratio := "-"
		if j > 0 {
			ratio = fmt.Sprintf("%.2fx", median(rates[j])/one)
		}
		fmt.Printf("%-34s %22s %12s\n", k.name, spread(rates[j], "%.0f"), ratio)
	}
	return nil
}

func (b *bench) notifyTable() error {
	n, perfIters := 2000, 20000
	if b.quick {
		n, perfIters = 200, 2000
	}
	fmt.Printf("RDMA-path Put of %d B with a notification: round trip until the receiver's handler ran and answered, beside ucx_perftest -t ucp_am_lat of %d B (its round trip, twice the half it prints); µs, median of %d puts or of perftest's %d iterations per round, median of the rounds [min-max]. \"Put + notify\": the bytes inside the notification's message (velo's default up to 4 KiB); \"Put, then notify\": a writer with velo.WithPushInlineMax(0), a write and then the notification\n",
		notifySize, notifySize, n, perfIters)
	if b.amErr != nil {
		fmt.Printf("baseline: none: %v\n", b.amErr)
	}
	src := b.src[:notifySize]
	notify := &velo.PutOptions{Notify: true, Payload: []byte("block ready")}
	plainReason := metrics.Reason(b.grants.PlainReason)
	// The chunked rows (the TCP-only pair: the bytes and the notification both over the TCP
	// control plane) are there to tell the RDMA path's cost from the control plane's.
	kinds := []struct {
		name   string
		v      *velo.Velo
		h      velo.GrantHandle
		opts   *velo.PutOptions
		path   metrics.Path
		reason metrics.Reason
	}{
		{"Put + notify", b.rdma, b.grants.Pinned, notify, metrics.PathRDMA, metrics.ReasonOK},
		{"Put (no notification)", b.rdma, b.grants.Pinned, nil, metrics.PathRDMA, metrics.ReasonOK},
		{"Put, then notify", b.twoTrips, b.grants.TwoTrips, notify, metrics.PathRDMA, metrics.ReasonOK},
		{"chunked Put + notify", b.plain, b.grants.Plain, notify, metrics.PathChunked, plainReason},
		{"chunked Put", b.plain, b.grants.Plain, nil, metrics.PathChunked, plainReason},
	}
	for _, k := range kinds { // warm-up
		for i := 0; i < 100; i++ {
			if err := k.v.Put(b.ctx, k.h, 0, src, k.opts); err != nil {
				return err
			}
		}
	}
	var perf []float64
	vel := make([][]float64, len(kinds))
	tails := make([][]float64, len(kinds))
	for r := 0; r < b.rounds; r++ {
		if b.amErr == nil {
			rtt, err := benchkit.PerftestAMLatency(b.ctx, b.tool, notifySize, perfIters)
			if err != nil {
				return err
			}
			perf = append(perf, us(rtt))
			time.Sleep(pause)
		}
		for j, k := range kinds {
			before := pathCount(k.v, k.path, k.reason)
			d := make([]time.Duration, n)
			for i := range d {
				t0 := time.Now()
				if err := k.v.Put(b.ctx, k.h, 0, src, k.opts); err != nil {
					return fmt.Errorf("%s: %w", k.name, err)
				}
				d[i] = time.Since(t0)
			}
			if err := onPath(k.v, k.path, k.reason, before, n); err != nil {
				return fmt.Errorf("%s: %w", k.name, err)
			}
			sort.Slice(d, func(a, c int) bool { return d[a] < d[c] })
			vel[j] = append(vel[j], us(d[len(d)/2]))
			tails[j] = append(tails[j], us(d[len(d)*9/10]))
			time.Sleep(pause)
		}
	}
	fmt.Printf("%-24s %22s %22s %12s\n", "", "µs (median)", "µs (p90)", "vs am_lat")
	if len(perf) > 0 {
		fmt.Printf("%-24s %22s %22s %12s\n", "ucx_perftest ucp_am_lat", spread(perf, "%.1f"), "-", "1.00x")
	}
	for j, k := range kinds {
		ratio := "-"
		if len(perf) > 0 {
			ratio = fmt.Sprintf("%.2fx", median(vel[j])/median(perf))
		}
		fmt.Printf("%-24s %22s %22s %12s\n", k.name, spread(vel[j], "%.1f"), spread(tails[j], "%.1f"), ratio)
	}
	return nil
}

func (b *bench) chunkedTable() error {
	fmt.Printf("Chunked-path Put (receiver without the UCX transport; region in plain memory, reason %s) beside a raw TCP stream of the same bytes into the same memory, answered once they are in (MiB/s, bytes over the summed time of alternating transfers; median of the rounds [min-max])\n",
		b.grants.PlainReason)
	fmt.Printf("%-7s %5s %22s %22s %10s\n", "size", "puts", "raw TCP", "velo chunked Put", "velo/raw")
	h := b.grants.Plain
	reason := metrics.Reason(b.grants.PlainReason)
	for _, n := range chunkedSizes {
		iters := max(4, (256<<20)/n)
		if b.quick {
			iters = 2
		}
		src := b.src[:n]
		if _, err := b.rawOnce(src); err != nil { // warm-up
			return err
		}
		if err := b.plain.Put(b.ctx, h, 0, src, nil); err != nil {
			return err
		}
		var raw, vel []float64
		for r := 0; r < b.rounds; r++ {
			before := pathCount(b.plain, metrics.PathChunked, reason)
			var rt, vt time.Duration
			for i := 0; i < iters; i++ {
				d, err := b.rawOnce(src)
				if err != nil {
					return err
				}
				rt += d
				t0 := time.Now()
				if err := b.plain.Put(b.ctx, h, 0, src, nil); err != nil {
					return err
				}
				vt += time.Since(t0)
			}
			if err := onPath(b.plain, metrics.PathChunked, reason, before, iters); err != nil {
				return err
			}
			raw, vel = append(raw, mibps(n*iters, rt)), append(vel, mibps(n*iters, vt))
		}
		if err := b.checkBytes("plain", 0, src); err != nil {
			return err
		}
		fmt.Printf("%-7s %5d %22s %22s %9.2fx\n", sizeLabel(n), iters, spread(raw, "%.0f"), spread(vel, "%.0f"), median(vel)/median(raw))
	}
	return nil
}

// rawOnce sends src over the raw connection, in 1 MiB writes, and waits for the receiver's answer
// that all of it is in its memory.
func (b *bench) rawOnce(src []byte) (time.Duration, error) {
	t0 := time.Now()
	var hdr [8]byte
	binary.BigEndian.PutUint64(hdr[:], uint64(len(src)))
	if _, err := b.raw.Write(hdr[:]); err != nil {
		return 0, err
	}
	for off := 0; off < len(src); off += 1 << 20 {
		if _, err := b.raw.Write(src[off:min(off+1<<20, len(src))]); err != nil {
			return 0, err
		}
	}
	if _, err := io.ReadFull(b.raw, hdr[:1]); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

// profilePrefix names the CPU profiles (-profile; empty: none).
var profilePrefix string

// startProfile starts this process's CPU profile, when asked for, and returns what stops it.
func startProfile(side string) func() {
	if profilePrefix == "" {
		return func() {}
	}
	f, err := os.Create(profilePrefix + "." + side + ".cpu.pprof")
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		log.Printf("pushbench: no %s profile: %v", side, err)
		return func() {}
	}
	return func() { pprof.StopCPUProfile(); f.Close() }
}

// ---------------------------------------------------------------- figures

func sizeLabel(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

// spreadOr is spread of MiB/s figures, or "-" when there are none.
func spreadOr(v []float64) string {
	if len(v) == 0 {
		return "-"
	}
	return spread(v, "%.0f")
}

// ratio is the medians' ratio, or "-" when either side has no figure.
func ratio(a, b []float64) string {
	if len(a) == 0 || len(b) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", median(a)/median(b))
}

// spread prints a median and the range of the rounds.
func spread(v []float64, format string) string {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return fmt.Sprintf(format+" ["+format+"-"+format+"]", median(s), s[0], s[len(s)-1])
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func mibps(n int, d time.Duration) float64 { return float64(n) / (1 << 20) / d.Seconds() }

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
