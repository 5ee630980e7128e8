// Command benchrma prints the latency of active messages between engines, the cost of
// registering memory with UCX and the bandwidth of GETs through the engine, each beside a
// baseline measured in the same run on the same machine, as a ratio. It asserts nothing.
// `make bench-rma` runs it; -only latency|registration|bandwidth runs one part.
//
//   - active-message round trips of 64 B and 1 KiB between engines in two processes
//     against `ucx_perftest -t ucp_am_lat` (-spin sets both engines' EngineConfig.SpinFor).
//   - ucp_mem_map of 4 KiB … 64 MiB against plain mmap+mlock of the same size (the
//     kernel's own cost of pinning that memory), and Engine.Register (mem map, key pack,
//     guard entry) against the same baseline.
//   - GET bandwidth per size, direct (ucp_get_nbx) and guarded, against
//     `ucx_perftest -t ucp_get` run with the same UCX_TLS, owner in another process. Where
//     the linked UCX's guard refuses software RMA (the static build over tcp), a direct GET and
//     perftest's GET are refused, so the table says why and measures the guarded path alone.
//
// UCX_TLS defaults to tcp (the environment wins, as everywhere in the binding).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/ucx/benchkit"
)

const roleEnv = "UCX_BENCH_RMA_ROLE"

func main() {
	quick := flag.Bool("quick", false, "fewer iterations (a smoke run)")
	only := flag.String("only", "", "run one part: latency, registration, bandwidth or many")
	flag.DurationVar(&spinFor, "spin", 0, "EngineConfig.SpinFor of both latency engines (0: the engine's default; negative: no spinning)")
	flag.StringVar(&profilePrefix, "profile", "", "latency: write a CPU profile and an execution trace of both processes to PREFIX.{ping,echo}.{cpu.pprof,trace}")
	flag.Parse()
	if os.Getenv("UCX_TLS") == "" {
		os.Setenv("UCX_TLS", "tcp")
	}
	switch os.Getenv(roleEnv) {
	case "owner":
		if err := owner(); err != nil {
			fmt.Fprintln(os.Stderr, "owner:", err)
			os.Exit(1)
		}
		return
	case "echo":
		if v := os.Getenv(spinEnv); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				fmt.Fprintf(os.Stderr, "echo: %s=%q: %v\n", spinEnv, v, err)
				os.Exit(1)
			}
			spinFor = d
		}
		profilePrefix = os.Getenv(profileEnv)
		if err := echo(); err != nil {
			fmt.Fprintln(os.Stderr, "echo:", err)
			os.Exit(1)
		}
		return
	}
	// The engine may apply UCX defaults of its own (see EngineConfig); export them so
	// ucx_perftest runs with exactly the same UCX configuration.
	probe, err := ucx.NewEngine(context.Background(), ucx.EngineConfig{Name: "bench-probe"})
	if err != nil {
		fmt.Fprintln(os.Stderr, "engine:", err)
		os.Exit(1)
	}
	var same []string
	for _, s := range probe.Settings() {
		if s.Source == ucx.SourceProgram {
			os.Setenv("UCX_"+s.Name, s.Value)
			same = append(same, "UCX_"+s.Name+"="+s.Value)
		}
	}
	probe.Close(context.Background())
	v := ucx.Version()
	fmt.Printf("UCX %s (linked), UCX_TLS=%s, %d CPUs, %s\n", v.String, os.Getenv("UCX_TLS"), runtime.NumCPU(), runtime.Version())
	if perftestTool, perftestErr = benchkit.Find(); perftestErr == nil {
		fmt.Printf("baseline: %s (UCX %s, the linked release)\n", perftestTool.Path, perftestTool.Version)
	} else {
		fmt.Printf("baseline: none: %v\n", perftestErr)
	}
	if len(same) > 0 {
		fmt.Printf("engine defaults, exported to ucx_perftest too: %s\n", strings.Join(same, " "))
	}
	parts := []struct {
		name string
		run  func(quick bool) error
	}{{"latency", latency}, {"registration", registration}, {"bandwidth", bandwidth}, {"many", many}}
	for _, p := range parts {
		if *only != "" && *only != p.name {
			continue
		}
		fmt.Println()
		if err := p.run(*quick); err != nil {
			fmt.Fprintln(os.Stderr, p.name+":", err)
			os.Exit(1)
		}
	}
}

var regSizes = []int{4 << 10, 64 << 10, 1 << 20, 8 << 20, 64 << 20}

func human(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

// median runs f n times and returns the median duration.
func median(n int, f func() error) (time.Duration, error) {
	d := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if err := f(); err != nil {
			return 0, err
		}
		d = append(d, time.Since(t0))
	}
	for i := 1; i < len(d); i++ {
		for j := i; j > 0 && d[j] < d[j-1]; j-- {
			d[j], d[j-1] = d[j-1], d[j]
		}
	}
	return d[len(d)/2], nil
}

func registration(quick bool) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c, err := ucx.NewContext(ucx.ContextConfig{})
	if err != nil {
		return err
	}
	defer c.Close()
	e, err := ucx.NewEngine(context.Background(), ucx.EngineConfig{Name: "bench-reg"})
	if err != nil {
		return err
	}
	defer e.Close(context.Background())
	fmt.Println("Registration cost (median per call; baseline: mmap+mlock+munlock+munmap of the same size)")
	fmt.Printf("%-8s %14s %14s %8s %16s %8s\n", "size", "mmap+mlock", "ucp_mem_map", "ratio", "Engine.Register", "ratio")
	for _, n := range regSizes {
		iters := 21
		if n >= 8<<20 {
			iters = 7
		}
		if quick {
			iters = 3
		}
		base, err := median(iters, func() error {
			b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
			if err != nil {
				return err
			}
			if err := unix.Mlock(b); err != nil {
				unix.Munmap(b)
				return fmt.Errorf("mlock %s: %w (needs RLIMIT_MEMLOCK or CAP_IPC_LOCK)", human(n), err)
			}
			unix.Munlock(b)
			return unix.Munmap(b)
		})
		if err != nil {
			return err
		}
		mem, err := ucx.AllocMemory(n, ucx.MemoryOptions{})
		if err != nil {
			return err
		}
		mapCost, err := median(iters, func() error {
			mh, err := c.MapMemory(mem.Bytes())
			if err != nil {
				return err
			}
			return mh.Unmap()
		})
		if err != nil {
			return err
		}
		regCost, err := median(iters, func() error {
			r, err := e.Register(context.Background(), mem.Bytes())
			if err != nil {
				return err
			}
			return r.Unregister(context.Background())
		})
		if err != nil {
			return err
		}
		mem.Free()
		fmt.Printf("%-8s %14v %14v %7.3fx %16v %7.3fx\n", human(n), base, mapCost,
			float64(mapCost)/float64(base), regCost, float64(regCost)/float64(base))
	}
	return nil
}

// ownerInfo is what the owner process reports.
type ownerInfo struct {
	Address []byte
	Key     []byte
	Base    uint64
}

var bwSizes = []int{64 << 10, 1 << 20, 8 << 20, 64 << 20}

// owner serves one registration of the largest size until stdin closes.
func owner() error {
	ctx := context.Background()
	e, err := ucx.NewEngine(ctx, ucx.EngineConfig{Name: "owner"})
	if err != nil {
		return err
	}
	defer e.Close(ctx)
	mem, err := ucx.AllocMemory(bwSizes[len(bwSizes)-1], ucx.MemoryOptions{})
	if err != nil {
		return err
	}
	for i := range mem.Bytes() {
		mem.Bytes()[i] = byte(i)
	}
	r, err := e.Register(ctx, mem.Bytes())
	if err != nil {
		return err
	}
	if err := benchkit.Announce(ownerInfo{Address: e.Address(), Key: r.RemoteKey(), Base: r.Addr()}); err != nil {
		return err
	}
	benchkit.UntilStdinCloses()
	return nil
}

func iterationsFor(n int, quick bool) int {
	if quick {
		return 3
	}
	// About 512 MiB per measurement: long enough that one scheduling hiccup on a busy
	// machine does not decide the figure.
	return int(math.Max(8, math.Min(4000, float64(512<<20)/float64(n))))
}

const rounds = 3

// bandwidth measures each size in rounds that alternate the baseline and the two engine
// paths, so load on the machine falls on all three; the table shows medians.
func bandwidth(quick bool) error {
	ctx := context.Background()
	info, conns, dst, stop, err := startGetters(ctx, "consumer", bwSizes[len(bwSizes)-1])
	if err != nil {
		return err
	}
	defer stop()
	get := func(mode ucx.RMAMode, n, it int) (float64, error) {
		buf := dst.Bytes()[:n]
		if err := conns[mode].Get(ctx, buf, info.Base, info.Key); err != nil { // warm-up
			return 0, fmt.Errorf("%v GET %s: %w", mode, human(n), err)
		}
		t0 := time.Now()
		for i := 0; i < it; i++ {
			if err := conns[mode].Get(ctx, buf, info.Base, info.Key); err != nil {
				return 0, err
			}
		}
		return float64(n) * float64(it) / time.Since(t0).Seconds() / (1 << 20), nil
	}

	refused, err := directRefused(ctx, conns[ucx.RMADirect], info)
	if err != nil {
		return err
	}

	fmt.Printf("GET bandwidth (MiB/s, median of %d alternating rounds; baseline: ucx_perftest -t ucp_get, UCX_TLS=%s, same run)\n", rounds, os.Getenv("UCX_TLS"))
	fmt.Printf("%-8s %12s %12s %8s %12s %8s\n", "size", "ucx_perftest", "direct", "ratio", "guarded", "ratio")
	for _, n := range bwSizes {
		it := iterationsFor(n, quick)
		var base, direct, guarded []float64
		var perr error
		if refused {
			// Only the guarded path moves data here; see directRefused's line above the table.
			for r := 0; r < rounds; r++ {
				g, err := get(ucx.RMAGuarded, n, it)
				if err != nil {
					return err
				}
				guarded = append(guarded, g)
			}
			fmt.Printf("%-8s %12s %12s %8s %12.1f %8s\n", human(n), "-", "-", "-", med(guarded), "-")
			continue
		}
		for r := 0; r < rounds; r++ {
			b, err := perftest(n, it)
			if err != nil {
				perr = err
				break
			}
			d, err := get(ucx.RMADirect, n, it)
			if err != nil {
				return err
			}
			g, err := get(ucx.RMAGuarded, n, it)
			if err != nil {
				return err
			}
			base, direct, guarded = append(base, b), append(direct, d), append(guarded, g)
		}
		if perr != nil {
			fmt.Printf("%-8s %12s (ucx_perftest failed: %v)\n", human(n), "-", perr)
			continue
		}
		b, d, g := med(base), med(direct), med(guarded)
		fmt.Printf("%-8s %12.1f %12.1f %7.2fx %12.1f %7.2fx\n", human(n), b, d, d/b, g, g/b)
	}
	return nil
}

// directRefused probes the direct path with one small GET (benchkit.ProbeDirectGet). Where the
// linked UCX's guard refuses it as software RMA (the static build over tcp), it prints why the
// direct column and the ucx_perftest baseline stay empty and reports true: perftest's GET would
// be refused the same way and its client would wait forever. Any other failure is returned.
func directRefused(ctx context.Context, direct *ucx.Conn, info ownerInfo) (bool, error) {
	err := benchkit.ProbeDirectGet(ctx, direct, info.Base, info.Key)
	switch {
	case err == nil:
		return false, nil
	case errors.Is(err, benchkit.ErrGetRefusedByGuard):
		fmt.Printf("ucx_perftest and direct: none: %v\n", err)
		return true, nil
	}
	return false, err
}

// startGetters starts the owner process and, in this one, an engine per GET path connected to
// it, and maps n bytes of destination memory; stop ends them all.
func startGetters(ctx context.Context, name string, n int) (ownerInfo, map[ucx.RMAMode]*ucx.Conn, *ucx.Memory, func(), error) {
	var info ownerInfo
	child, err := benchkit.StartChild(append(os.Environ(), roleEnv+"=owner"), &info)
	if err != nil {
		return info, nil, nil, nil, fmt.Errorf("owner process: %w", err)
	}
	var engines []*ucx.Engine
	stop := func() {
		for _, e := range engines {
			e.Close(ctx)
		}
		child.Stop()
	}
	dst, err := ucx.AllocMemory(n, ucx.MemoryOptions{})
	if err != nil {
		stop()
		return info, nil, nil, nil, err
	}
	conns := map[ucx.RMAMode]*ucx.Conn{}
	for _, mode := range []ucx.RMAMode{ucx.RMADirect, ucx.RMAGuarded} {
		e, err := ucx.NewEngine(ctx, ucx.EngineConfig{Name: name + "-" + mode.String(), RMA: mode})
		if err == nil {
			engines = append(engines, e)
			conns[mode], err = e.Connect(ctx, info.Address, ucx.ConnectOptions{VectoredGet: true})
		}
		if err != nil {
			dst.Free()
			stop()
			return info, nil, nil, nil, err
		}
	}
	return info, conns, dst, func() { stop(); dst.Free() }, nil
}

func med(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// The ucx_perftest of the linked UCX (ucx.FindTool), found once at start.
var (
	perftestTool ucx.Tool
	perftestErr  error
)

// perftest runs ucx_perftest's GET bandwidth test on loopback and returns the client's
// overall bandwidth in MiB/s.
func perftest(size, iters int) (float64, error) {
	if perftestErr != nil {
		return 0, perftestErr
	}
	r, err := benchkit.Run(context.Background(), perftestTool, "-t", "ucp_get", "-s", strconv.Itoa(size), "-n", strconv.Itoa(iters))
	return r.BandwidthOverall, err
}
