package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/ucx/benchkit"
)

// manyWindow is how many GETs Conn.GetMany keeps in flight, and perftest's -O.
const manyWindow = 64

// many measures Conn.GetMany: 64 MiB in reads of 4 KiB and of 64 KiB from one registration, on
// both GET paths, against `ucx_perftest -t ucp_get` of the same size with the same number of
// operations outstanding (-O). It is the engine's share of a velo GetBatch of small blocks.
func many(quick bool) error {
	ctx := context.Background()
	const total = 64 << 20
	info, conns, dst, stop, err := startGetters(ctx, "many", total)
	if err != nil {
		return err
	}
	defer stop()
	key, err := ucx.ParseRegionKey(info.Key)
	if err != nil {
		return err
	}
	run := func(mode ucx.RMAMode, size int) (float64, error) {
		n := total / size
		if quick {
			n /= 8
		}
		reads := make([]ucx.KeyRead, n)
		for i := range reads {
			reads[i] = ucx.KeyRead{Key: key, Offset: uint64(i * size), Dst: dst.Bytes()[i*size : (i+1)*size]}
		}
		var failed error
		t0 := time.Now()
		conns[mode].GetMany(ctx, reads, manyWindow, func(i int, err error) {
			if err != nil && failed == nil {
				failed = fmt.Errorf("%v read %d: %w", mode, i, err)
			}
		})
		return float64(n*size) / (1 << 20) / time.Since(t0).Seconds(), failed
	}
	refused, err := directRefused(ctx, conns[ucx.RMADirect], info)
	if err != nil {
		return err
	}
	fmt.Printf("Conn.GetMany of 64 MiB, %d in flight (MiB/s, median of %d alternating rounds; baseline: ucx_perftest -t ucp_get -O %d, UCX_TLS=%s, same run)\n", manyWindow, rounds, manyWindow, os.Getenv("UCX_TLS"))
	fmt.Printf("%-8s %12s %12s %8s %12s %8s\n", "read", "ucx_perftest", "direct", "ratio", "guarded", "ratio")
	for _, size := range []int{4 << 10, 64 << 10} {
		if refused {
			// Only the guarded path moves data here; see directRefused's line above the table.
			var guarded []float64
			for r := 0; r <= rounds; r++ { // the first is the warm-up
				g, err := run(ucx.RMAGuarded, size)
				if err != nil {
					return err
				}
				if r > 0 {
					guarded = append(guarded, g)
				}
			}
			fmt.Printf("%-8s %12s %12s %8s %12.1f %8s\n", human(size), "-", "-", "-", med(guarded), "-")
			continue
		}
		for _, mode := range []ucx.RMAMode{ucx.RMADirect, ucx.RMAGuarded} {
			if _, err := run(mode, size); err != nil { // warm up
				return err
			}
		}
		var base, direct, guarded []float64
		for r := 0; r < rounds; r++ {
			if perftestErr != nil {
				return perftestErr
			}
			n := total / size
			if quick {
				n /= 8
			}
			res, err := benchkit.Run(ctx, perftestTool, "-t", "ucp_get", "-s", strconv.Itoa(size), "-n", strconv.Itoa(n), "-O", strconv.Itoa(manyWindow))
			if err != nil {
				return err
			}
			d, err := run(ucx.RMADirect, size)
			if err != nil {
				return err
			}
			g, err := run(ucx.RMAGuarded, size)
			if err != nil {
				return err
			}
			base, direct, guarded = append(base, res.BandwidthOverall), append(direct, d), append(guarded, g)
		}
		b, d, g := med(base), med(direct), med(guarded)
		fmt.Printf("%-8s %12.1f %12.1f %7.2fx %12.1f %7.2fx\n", human(size), b, d, d/b, g, g/b)
	}
	return nil
}
