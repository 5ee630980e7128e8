// Command rdmabench prints what the rendezvous RDMA path costs, as ratios against baselines
// measured in the same run on the same machine (`make bench-rendezvous-rdma`):
//
//   - RDMA-path GetInto of 1, 8 and 64 MiB beside `ucx_perftest -t ucp_get` of the same size, and
//     beside the chunked path (the same bytes staged with StageData);
//   - RDMA-path gets of 8 and 64 MiB between instances with a cluster secret, whose UCX frames
//     are sealed, beside the same gets between instances without one (-only seal; seal.go);
//   - the peak RSS of a process that Gets a 1 GiB payload, against the payload's size: a get never
//     holds two full copies;
//   - Gets of 8 and 64 MiB over software lanes (tcp) without the opt-in, which take the chunked
//     path, beside the chunked path, and with VELO_UCX_SOFTWARE_RMA=1 beside it (-only lanes;
//     lanes.go);
//   - with -velobench, velobench's get point of the same sizes in the same rounds, beside this
//     bench's RDMA get: velobench's own overhead (make bench-velobench-overhead; velobench.go).
//
// The baseline runs as the UCX benchmark of the ucx module (ucx/internal/benchrma, `make
// bench-rma`) runs it, so the two tables compare: ucx_perftest gets the UCX settings the engine
// applies on its own (read from the UCX transport, exported to its environment: on UCX 1.13
// UCX_ZCOPY_THRESH=inf among them), the same UCX_TLS, its default warm-up, and about 512 MiB per
// measurement (8 to 4000 iterations). The velo side moves the same bytes: as many gets per
// measurement as perftest iterations, and its figure is the bytes over the summed time of those
// gets, as perftest's "overall" is. A velo get here is what a caller pays: the acquire round trip
// and the GET (the detach that ends the lease is not timed).
//
// Owner and consumer are separate processes, as in a deployment: the bench runs itself again as
// the owner and measures from the parent. Each round runs ucx_perftest, then the velo RDMA gets,
// then the chunked gets, so machine noise falls on all three; the table shows the median of the
// rounds and their range. It asserts nothing, but it stops if a get does not take the path it
// measures.
//
// Over tcp, ucx_perftest -t ucp_get is UCX's software emulation of a GET, which velo's static UCX
// (its guard patch set) refuses: linked with it, the bench leaves that baseline out and says so;
// the system's UCX (make bench-rendezvous-rdma) gives it.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/ucx/benchkit"
	"github.com/velo-go/velo/velo"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/transport/tcp"
	"github.com/velo-go/velo/velo/transport/ucxtransport"
)

var sizes = []int{1 << 20, 8 << 20, 64 << 20}

// ownerInfo is the owner process's first line on stdout.
type ownerInfo struct {
	Peer     velo.PeerInfo
	Pinned   []velo.Handle // one per size
	Plain    []velo.Handle
	RSS      *velo.Handle // the large payload, when asked for
	Baseline int64        // the owner's peak RSS before it staged the large payload (bytes)
	Peak     int64        // and after
}

func main() {
	role := flag.String("role", "", "internal: owner, rss, region, sealowner or shmowner")
	quick := flag.Bool("quick", false, "fewer rounds and gets (a smoke run)")
	rssMiB := flag.Int("rss", 1024, "payload of the peak-RSS measurement in MiB (0 skips it)")
	only := flag.String("only", "", `run one table: "get" (beside perftest and the chunked path), "seal" (sealed beside plain), "rss", "samehost" (the same-host path beside memcpy and the RDMA path) or "lanes" (software lanes: the default beside the chunked path, and the opt-in)`)
	shmRounds := flag.Int("rounds", 5, "alternating rounds of the samehost table")
	flag.IntVar(&shmSingleCopyMin, "single-copy-min", 1<<20, "SameHostConfig.SingleCopyMin of the samehost table's same-host instances (0: every get through the ring)")
	sealRounds := flag.Int("seal-rounds", 5, "alternating rounds of the seal table")
	flag.StringVar(&velobenchBin, "velobench", "", "a velobench binary: its get point joins the get table's rounds, beside this bench's RDMA get (velobench's overhead)")
	flag.Parse()
	log.SetFlags(0)
	if os.Getenv("UCX_TLS") == "" {
		os.Setenv("UCX_TLS", "tcp") // the same for velo and ucx_perftest
	}
	if os.Getenv(ucxtransport.SoftwareRMAEnv) == "" && *role == "" && *only != "lanes" {
		// The tables measure the RDMA path, over tcp's software lanes too (the owner child
		// inherits it). The lanes table sets it per pair.
		os.Setenv(ucxtransport.SoftwareRMAEnv, "1")
	}
	var err error
	switch *role {
	case "owner":
		err = runOwner(*rssMiB)
	case "rss":
		err = runRSS()
	case "region":
		err = runRegion(*rssMiB)
	case "sealowner":
		err = runSealOwner()
	case "shmowner":
		err = runSameHostOwner()
	case "":
		switch *only {
		case "":
			if err = runBench(*quick, *rssMiB, true, true); err == nil {
				err = runSeal(*quick, *sealRounds)
			}
		case "get":
			err = runBench(*quick, 0, true, false)
		case "rss":
			err = runBench(*quick, *rssMiB, false, true)
		case "seal":
			err = runSeal(*quick, *sealRounds)
		case "lanes":
			err = runLanes(*quick)
		case "samehost":
			rounds := *shmRounds
			if *quick {
				rounds = 1
			}
			err = runSameHost(*quick, rounds)
		default:
			err = fmt.Errorf("-only %q: want get, seal, rss, samehost or lanes", *only)
		}
	default:
		err = fmt.Errorf("-role %q", *role)
	}
	if err != nil {
		log.Fatalf("rdmabench: %v", err)
	}
}

// start brings up an instance with a TCP control plane and the UCX transport beside it.
func start(ctx context.Context, opts ...velo.Option) (*velo.Velo, *ucxtransport.Transport, error) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctl, err := tcp.New(tcp.Config{})
	if err != nil {
		return nil, nil, err
	}
	u, err := ucxtransport.New(ucxtransport.Config{EagerEndpoints: true, Logger: quiet})
	if err != nil {
		ctl.Close()
		return nil, nil, err
	}
	v, err := velo.New(ctx, append([]velo.Option{velo.WithTransport(ctl), velo.WithUCXTransport(u), velo.WithLogger(quiet),
		velo.WithRDMA(velo.RDMAConfig{Pool: velo.RDMAPoolConfig{RegisteredBytesBudget: 4 << 30}})}, opts...)...)
	return v, u, err
}

func peakRSS() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Maxrss << 10 // KiB on Linux
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*7) + seed
	}
}

// runOwner stages every size twice (pinned and plain), prints ownerInfo, and when stdin says
// "rss" stages the large payload and prints ownerInfo again; it exits when stdin closes.
func runOwner(rssMiB int) error {
	ctx := context.Background()
	v, _, err := start(ctx)
	if err != nil {
		return err
	}
	defer v.Close()
	info := ownerInfo{Peer: v.PeerInfo()}
	for i, n := range sizes {
		b := make([]byte, n)
		fill(b, byte(i))
		hp, err := v.StageDataPinned(ctx, b)
		if err != nil {
			return err
		}
		if md, _ := v.Metadata(ctx, hp); !md.Pinned {
			return fmt.Errorf("the %d-byte payload is not in pinned memory (reason %s)", n, md.Staging)
		}
		hu, err := v.StageData(ctx, b)
		if err != nil {
			return err
		}
		info.Pinned, info.Plain = append(info.Pinned, hp), append(info.Plain, hu)
	}
	enc := json.NewEncoder(os.Stdout)
	if err := enc.Encode(info); err != nil {
		return err
	}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if in.Text() != "rss" {
			continue
		}
		info.Baseline = peakRSS()
		b := make([]byte, rssMiB<<20)
		fill(b, 9)
		h, err := v.StageDataPinned(ctx, b)
		if err != nil {
			return err
		}
		b = nil
		info.RSS, info.Peak = &h, peakRSS()
		if err := enc.Encode(info); err != nil {
			return err
		}
	}
	return nil
}

// regionInfo is what the region owner reports: its peer info, the staged region's handle, and
// its peak RSS before and after it took, filled and staged the region.
type regionInfo struct {
	Peer         velo.PeerInfo
	Handle       velo.Handle
	Before, Peak int64
}

// runRegion is a fresh owner process that stages rssMiB MiB without a copy: NewRegion, written
// in place, StageRegion. It reports its peak RSS around that and serves reads until stdin closes.
func runRegion(rssMiB int) error {
	ctx := context.Background()
	v, _, err := start(ctx)
	if err != nil {
		return err
	}
	defer v.Close()
	info := regionInfo{Peer: v.PeerInfo(), Before: peakRSS()}
	g, err := v.NewRegion(rssMiB << 20)
	if err != nil {
		return err
	}
	defer g.Free()
	if !g.Pinned() {
		return fmt.Errorf("the region is not pinned (reason %s)", g.Reason())
	}
	fill(g.Bytes(), 9)
	if info.Handle, err = v.StageRegion(ctx, g); err != nil {
		return err
	}
	info.Peak = peakRSS()
	if err := benchkit.Announce(info); err != nil {
		return err
	}
	benchkit.UntilStdinCloses()
	return nil
}

// regionRSS runs the region owner and checks, with one ranged read, that consumers read it on the
// RDMA path.
func regionRSS(ctx context.Context, v *velo.Velo, rssMiB int) (regionInfo, error) {
	var info regionInfo
	child, err := benchkit.StartChild(nil, &info, "-role", "region", "-rss", strconv.Itoa(rssMiB))
	if err != nil {
		return info, fmt.Errorf("the region owner: %w", err)
	}
	defer child.Stop()
	if err := v.RegisterPeer(ctx, info.Peer); err != nil {
		return info, err
	}
	l, err := v.Acquire(ctx, info.Handle)
	if err != nil {
		return info, err
	}
	defer l.Detach(ctx)
	off := uint64(rssMiB<<20) / 2
	rs := []velo.Range{{Offset: off, Length: 4096, Dst: make([]byte, 4096)}}
	if err := l.ReadRanges(ctx, rs); err != nil {
		return info, err
	}
	if l.Path != metrics.PathRDMA || rs[0].Dst[0] != byte(off*7)+9 {
		return info, fmt.Errorf("a read of the region took %s/%s or returned the wrong bytes", l.Path, l.Reason)
	}
	return info, nil
}

// runRSS is a fresh consumer process: one Get of the large payload, then its peak RSS.
func runRSS() error {
	ctx := context.Background()
	var info ownerInfo
	if err := json.Unmarshal([]byte(os.Getenv("RDMABENCH_OWNER")), &info); err != nil {
		return err
	}
	v, _, err := start(ctx)
	if err != nil {
		return err
	}
	defer v.Close()
	if err := v.RegisterPeer(ctx, info.Peer); err != nil {
		return err
	}
	before := peakRSS()
	l, err := v.Get(ctx, *info.RSS)
	if err != nil {
		return err
	}
	after := peakRSS()
	b := l.Bytes()
	for _, i := range []int{0, len(b) / 2, len(b) - 1} {
		if b[i] != byte(i*7)+9 {
			return fmt.Errorf("byte %d of the large payload differs", i)
		}
	}
	if err := l.Release(ctx); err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]any{"before": before, "after": after, "path": string(l.Path) + "/" + string(l.Reason)})
}

// iterationsFor is how many GETs one measurement of n bytes makes, on both sides: about 512 MiB,
// as ucx/internal/benchrma measures, so one scheduling hiccup does not decide a figure.
func iterationsFor(n int, quick bool) int {
	if quick {
		return 3
	}
	return max(8, min(4000, (512<<20)/n))
}

// rounds is how many alternating rounds each size gets (as in ucx/internal/benchrma).
const rounds = 3

func runBench(quick bool, rssMiB int, table, rss bool) error {
	ctx := context.Background()
	nrounds := rounds
	if quick {
		nrounds = 1
	}
	var info ownerInfo
	owner, err := benchkit.StartChild(nil, &info, "-role", "owner", "-rss", strconv.Itoa(rssMiB))
	if err != nil {
		return fmt.Errorf("reading the owner: %w", err)
	}
	defer owner.Stop()
	stdin, dec := owner.In, json.NewDecoder(owner.Out)
	v, u, err := start(ctx)
	if err != nil {
		return err
	}
	defer v.Close()
	if err := v.RegisterPeer(ctx, info.Peer); err != nil {
		return err
	}
	// ucx_perftest runs with the UCX configuration velo's engine runs with: the defaults the
	// engine applies itself (UCX_ZCOPY_THRESH=inf on UCX 1.13, rcache and memory events off) go
	// to its environment; whatever the user set is there already.
	var same []string
	for _, st := range u.Settings() {
		if st.Source == ucx.SourceProgram {
			os.Setenv("UCX_"+st.Name, st.Value)
			same = append(same, "UCX_"+st.Name+"="+st.Value)
		}
	}

	fmt.Printf("rendezvous RDMA path, UCX %s (linked), UCX_TLS=%s, %d alternating rounds\n", ucx.Version().String, os.Getenv("UCX_TLS"), nrounds)
	printLoad()
	perftestTool, perftestErr = benchkit.Find()
	if perftestErr == nil {
		perftestErr = perftestGetRefused()
	}
	if perftestErr == nil {
		fmt.Printf("baseline: %s (UCX %s, the linked release)\n", perftestTool.Path, perftestTool.Version)
	} else {
		fmt.Printf("baseline: none: %v\n", perftestErr)
	}
	if len(same) > 0 {
		fmt.Printf("engine defaults, exported to ucx_perftest too: %s\n", strings.Join(same, " "))
	}
	fmt.Printf("MiB/s over about 512 MiB per measurement (gets = perftest iterations); median of the rounds [min–max]\n\n")
	if velobenchBin != "" {
		fmt.Printf("velobench: %s local --ops get --lanes off --perftest off, one run per size and round, between this bench's RDMA and chunked gets\n", velobenchBin)
	}
	fmt.Printf("%-7s %5s %22s %22s %22s %10s %10s", "size", "gets", "ucx_perftest", "velo rdma", "velo chunked", "rdma/perf", "rdma/chunk")
	if velobenchBin != "" {
		fmt.Printf(" %22s %8s", "velobench get", "vb/rdma")
	}
	fmt.Println()
	for i, n := range sizes {
		if !table {
			break
		}
		iters := iterationsFor(n, quick)
		dst := make([]byte, n)
		// Warm up both paths (endpoint wireup, first registration, page faults in dst).
		for _, h := range []velo.Handle{info.Pinned[i], info.Plain[i]} {
			if _, err := getOnce(ctx, v, h, dst, ""); err != nil {
				return err
			}
		}
		var perf, rdma, chunked, vb []float64
		for r := 0; r < nrounds; r++ {
			if perftestErr == nil {
				p, err := perftest(n, iters)
				if err != nil {
					return err
				}
				perf = append(perf, p)
			}
			x, err := velorate(ctx, v, info.Pinned[i], dst, iters, metrics.PathRDMA)
			if err != nil {
				return err
			}
			rdma = append(rdma, x)
			if velobenchBin != "" {
				if x, err = velobenchRate(n, iters); err != nil {
					return err
				}
				vb = append(vb, x)
			}
			if x, err = velorate(ctx, v, info.Plain[i], dst, iters, metrics.PathChunked); err != nil {
				return err
			}
			chunked = append(chunked, x)
		}
		r, c := median(rdma), median(chunked)
		perfCol, perfRatio := "-", "-"
		if len(perf) > 0 {
			perfCol, perfRatio = spread(perf), fmt.Sprintf("%.2fx", r/median(perf))
		}
		fmt.Printf("%-7s %5d %22s %22s %22s %10s %9.2fx", fmt.Sprintf("%d MiB", n>>20), iters, perfCol, spread(rdma), spread(chunked), perfRatio, r/c)
		if len(vb) > 0 {
			fmt.Printf(" %22s %7.2fx", spread(vb), median(vb)/r)
		}
		fmt.Println()
	}
	if !rss || rssMiB <= 0 {
		return nil
	}
	fmt.Println()
	if _, err := io.WriteString(stdin, "rss\n"); err != nil {
		return err
	}
	if err := dec.Decode(&info); err != nil {
		return fmt.Errorf("reading the owner: %w", err)
	}
	enc, _ := json.Marshal(info)
	cons := exec.Command(os.Args[0], "-role", "rss")
	cons.Env = append(os.Environ(), "RDMABENCH_OWNER="+string(enc))
	cons.Stderr = os.Stderr
	out, err := cons.Output()
	if err != nil {
		return fmt.Errorf("the peak-RSS consumer: %w", err)
	}
	var res struct {
		Before, After int64
		Path          string
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return err
	}
	size := int64(rssMiB) << 20
	fmt.Printf("peak RSS of a %d MiB Get (path %s), in a fresh consumer process:\n", rssMiB, res.Path)
	fmt.Printf("  consumer: peak %d MiB before the get, %d MiB after: the get added %.2f× the payload (two full copies would add ≥ 2×)\n",
		res.Before>>20, res.After>>20, float64(res.After-res.Before)/float64(size))
	fmt.Printf("  owner:    peak %d MiB before staging it, %d MiB after StageDataPinned: staging added %.2f× the payload (the caller's buffer and its pinned copy)\n",
		info.Baseline>>20, info.Peak>>20, float64(info.Peak-info.Baseline)/float64(size))
	ri, err := regionRSS(ctx, v, rssMiB)
	if err != nil {
		return err
	}
	fmt.Printf("  owner:    peak %d MiB before, %d MiB after NewRegion, writing it in place and StageRegion, in a fresh process: zero-copy staging added %.2f× the payload\n",
		ri.Before>>20, ri.Peak>>20, float64(ri.Peak-ri.Before)/float64(size))
	return nil
}

func getOnce(ctx context.Context, v *velo.Velo, h velo.Handle, dst []byte, want metrics.Path) (time.Duration, error) {
	start := time.Now()
	l, err := v.GetInto(ctx, h, dst)
	took := time.Since(start)
	if err != nil {
		return 0, err
	}
	if want != "" && l.Path != want {
		return 0, fmt.Errorf("a get measured as %s took %s/%s", want, l.Path, l.Reason)
	}
	return took, l.Detach(ctx)
}

// velorate is the rate of n gets of h in MiB/s: their bytes over their summed time (the
// detaches between them not counted), as perftest's overall bandwidth is.
func velorate(ctx context.Context, v *velo.Velo, h velo.Handle, dst []byte, n int, want metrics.Path) (float64, error) {
	var total time.Duration
	for i := 0; i < n; i++ {
		d, err := getOnce(ctx, v, h, dst, want)
		if err != nil {
			return 0, err
		}
		total += d
	}
	return float64(len(dst)) * float64(n) / (1 << 20) / total.Seconds(), nil
}

// spread prints a median and the range of the rounds.
func spread(v []float64) string {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return fmt.Sprintf("%.0f [%.0f–%.0f]", median(s), s[0], s[len(s)-1])
}

// The ucx_perftest of the linked UCX (ucx.FindTool), found once at start.
var (
	perftestTool ucx.Tool
	perftestErr  error
)

// perftest runs ucx_perftest -t ucp_get between a server and a client on loopback and returns the
// client's overall bandwidth in MiB/s. Both inherit this process's environment, the engine's UCX
// defaults included. No -w: perftest's default warm-up, as ucx/internal/benchrma runs it.
func perftest(size, iters int) (float64, error) {
	if perftestErr != nil {
		return 0, perftestErr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r, err := benchkit.Run(ctx, perftestTool, "-t", "ucp_get", "-s", strconv.Itoa(size), "-n", strconv.Itoa(iters))
	return r.BandwidthOverall, err
}

// perftestGetRefused says why ucx_perftest -t ucp_get cannot be the baseline, or nil: over tcp
// (and ud) its GET is software RMA, which velo's guard refuses. The refused GET does not fail
// perftest, it hangs it (its server spinning), so on a guarded UCX one direct GET between two
// engines of this process is tried first (benchkit.ProbeLoopbackGet).
func perftestGetRefused() error {
	g, err := ucx.SoftwareRMAGuard()
	if err != nil || !g.Enforced {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	switch err := benchkit.ProbeLoopbackGet(ctx); {
	case errors.Is(err, benchkit.ErrGetRefusedByGuard):
		return fmt.Errorf("%w (for this benchmark: make bench-rendezvous-rdma)", err)
	case err != nil:
		return fmt.Errorf("ucx_perftest -t ucp_get is not run: a direct GET between two engines failed: %w", err)
	}
	return nil
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
