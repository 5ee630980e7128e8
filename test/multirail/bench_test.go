package multirail

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBenchRails is make bench-rails: one 256 MiB GET and a batch of 512 GETs of 64 KiB over 1, 2
// and 4 rails shaped to the same rate, each as a ratio of one rail's in the same run, and what a
// rail lost mid-GET costs. It prints; it asserts only that every byte arrived. It runs only with
// RAILS_BENCH=1 (about a minute).
func TestBenchRails(t *testing.T) {
	if os.Getenv("RAILS_BENCH") == "" {
		t.Skip("set RAILS_BENCH=1 (make bench-rails) to run the rails benchmark")
	}
	const (
		bigSize    = 256 << 20
		smallSize  = 64 << 10
		smallCount = 512
	)
	type row struct {
		rails        int
		big, small   time.Duration
		bigShare     []float64
		smallOnRails []float64
	}
	var rows []row
	for _, n := range []int{1, 2, 4} {
		rates := make([]string, n)
		for i := range rates {
			rates[i] = railRate
		}
		oh, ch := newHosts(t, rates...)
		o, c := pair(t, oh, ch)
		r := row{rails: n}

		h, sum := stage(t, o, bigSize, 100)
		before := txBytes(t, oh)
		a := c.call(t, "get", h)
		require.Equal(t, sum, a.SHA256)
		require.Equal(t, "rdma", a.Path, "reason %s", a.Reason)
		r.big = time.Duration(a.Seconds * float64(time.Second))
		r.bigShare = shares(delta(before, txBytes(t, oh)))

		var handles []string
		var sums []string
		for i := range smallCount {
			h, s := stage(t, o, smallSize, uint64(1000+i))
			handles, sums = append(handles, h), append(sums, s)
		}
		before = txBytes(t, oh)
		a = c.call(t, "batch", handles...)
		require.Equal(t, sums, a.SHA256s)
		r.small = time.Duration(a.Seconds * float64(time.Second))
		r.smallOnRails = shares(delta(before, txBytes(t, oh)))
		rows = append(rows, r)
		t.Logf("%d rails: 256 MiB GET %v, batch of %d × 64 KiB %v", n, r.big.Round(time.Millisecond), smallCount, r.small.Round(time.Millisecond))
	}

	// A rail lost a quarter of the way into a 256 MiB GET over two.
	oh, ch := newHosts(t, railRate, railRate)
	o, c := pair(t, oh, ch, "-cooldown", "1m")
	h, sum := stage(t, o, bigSize, 200)
	start, done, downAt, atDown := getLosingRail(t, c, oh, h, 60*time.Second, func(d []float64) bool { return d[0]+d[1] > bigSize/4 })
	res := <-done
	require.NoError(t, res.err)
	require.Equal(t, sum, res.a.SHA256)
	total := time.Since(start)
	left := float64(bigSize) - atDown[0] - atDown[1]
	// What the GET would have taken had the rail been removed, not lost: its bytes until then over
	// two rails, the rest over one.
	ideal := downAt.Sub(start) + time.Duration(left/railBytesPerS*float64(time.Second))

	var b strings.Builder
	fmt.Fprintf(&b, "\nrails: links shaped to %s (%.0f MB/s) each, UCX_TLS=tcp, slices of 512 KiB\n", railRate, railBytesPerS/1e6)
	fmt.Fprintf(&b, "%-6s %-14s %-10s %-22s %-16s %-10s %s\n", "rails", "256 MiB GET", "MB/s", "ratio to one rail", "batch 512×64KiB", "ratio", "kernel tx share by rail (GET)")
	for _, r := range rows {
		fmt.Fprintf(&b, "%-6d %-14v %-10.1f %-22.2f %-16v %-10.2f %.2f\n", r.rails, r.big.Round(time.Millisecond), bigSize/r.big.Seconds()/1e6,
			rows[0].big.Seconds()/r.big.Seconds(), r.small.Round(time.Millisecond), rows[0].small.Seconds()/r.small.Seconds(), r.bigShare)
	}
	fmt.Fprintf(&b, "failover: rail 1 of 2 down after %.0f MiB of a 256 MiB GET (at %v): the GET took %v (path %s); with the rail taken out at that moment instead, %v: the loss cost %v\n",
		(atDown[0]+atDown[1])/(1<<20), downAt.Sub(start).Round(time.Millisecond), total.Round(time.Millisecond), res.a.Path, ideal.Round(time.Millisecond), (total - ideal).Round(time.Millisecond))
	t.Log(b.String())
	fmt.Print(b.String())
}
