package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/ucx/benchkit"
)

// spinFor is EngineConfig.SpinFor of both engines (-spin); the echo process gets it in
// spinEnv.
var spinFor time.Duration

const spinEnv = "UCX_BENCH_RMA_SPIN"

// echo is the latency benchmark's second process (benchkit.ServeEcho), with -profile's
// profiles when the parent asked for them.
func echo() error {
	stop, err := startProfile("echo")
	if err != nil {
		return err
	}
	defer stop()
	return benchkit.ServeEcho(context.Background(), ucx.EngineConfig{Name: "echo", SpinFor: spinFor}, os.Stdin)
}

var latSizes = []int{64, 1 << 10}

// latency measures active-message round trips between engines in two processes against
// `ucx_perftest -t ucp_am_lat` (also two processes, same UCX_TLS), alternating rounds so load on
// the machine falls on both. Two waits are timed: the caller's (send, then wait on a channel the
// handler fills: one goroutine hand-off per round trip) and the handler's (the pong's handler
// sends the next ping: the engine's own round trip, as perftest's single-thread loop).
func latency(quick bool) error {
	ctx := context.Background()
	p, err := benchkit.StartPinger(ctx, ucx.EngineConfig{Name: "ping", SpinFor: spinFor},
		append(os.Environ(), roleEnv+"=echo", spinEnv+"="+spinFor.String(), profileEnv+"="+profilePrefix))
	if err != nil {
		return err
	}
	defer p.Close()
	iters, rounds := 2000, 5
	if quick {
		iters, rounds = 200, 1
	}
	stop, err := startProfile("ping")
	if err != nil {
		return err
	}
	defer stop()
	spin := "engine default"
	if spinFor != 0 {
		spin = spinFor.String()
	}
	fmt.Printf("Active-message round trip (µs, median of %d rounds of %d; baseline: ucx_perftest -t ucp_am_lat, UCX_TLS=%s, same run; SpinFor %s)\n", rounds, iters, os.Getenv("UCX_TLS"), spin)
	fmt.Printf("%-8s %-8s %14s %14s %14s %8s\n", "size", "waiter", "ucx_perftest", "engine p50", "engine p90", "ratio")
	for _, size := range latSizes {
		if _, err := p.CallerRoundTrips(size, iters/10); err != nil { // warm-up: wireup, buffers
			return err
		}
		var base, p50, p90, hp50, hp90 []float64
		var perr error
		for r := 0; r < rounds; r++ {
			var b time.Duration
			if perftestErr == nil {
				b, perr = benchkit.PerftestAMLatency(ctx, perftestTool, size, iters*5)
			} else {
				perr = perftestErr
			}
			if perr != nil {
				break
			}
			base = append(base, us(b))
			for _, m := range []struct {
				run      func(int, int) ([]time.Duration, error)
				p50, p90 *[]float64
			}{{p.CallerRoundTrips, &p50, &p90}, {p.HandlerRoundTrips, &hp50, &hp90}} {
				d, err := m.run(size, iters)
				if err != nil {
					return err
				}
				sort.Slice(d, func(a, b int) bool { return d[a] < d[b] })
				*m.p50 = append(*m.p50, us(d[len(d)/2]))
				*m.p90 = append(*m.p90, us(d[len(d)*9/10]))
			}
		}
		if perr != nil {
			fmt.Printf("%-8s %14s (ucx_perftest failed: %v)\n", human(size), "-", perr)
			continue
		}
		b := med(base)
		fmt.Printf("%-8s %-8s %14.1f %14.1f %14.1f %7.2fx\n", human(size), "caller", b, med(p50), med(p90), med(p50)/b)
		fmt.Printf("%-8s %-8s %14.1f %14.1f %14.1f %7.2fx\n", human(size), "handler", b, med(hp50), med(hp90), med(hp50)/b)
	}
	return nil
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
