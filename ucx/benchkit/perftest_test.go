//go:build cgo && linux

package benchkit

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/ucx"
)

func TestParseFinal(t *testing.T) {
	out := []byte("+----+\n|   ...   |\nFinal:           100      1.234     1.300     1.310      700.50     690.25     5000     4900\n")
	r, err := ParseFinal(out)
	require.NoError(t, err)
	require.Equal(t, Result{Iterations: 100, LatencyP50: 1.234, LatencyAvg: 1.3, LatencyOverall: 1.31,
		BandwidthAvg: 700.5, BandwidthOverall: 690.25, RateAvg: 5000, RateOverall: 4900}, r)
	_, err = ParseFinal([]byte("no such line"))
	require.ErrorContains(t, err, "no Final line")
	_, err = ParseFinal([]byte("Final: 1 2 3"))
	require.ErrorContains(t, err, "want 8")
	_, err = ParseFinal([]byte("Final: 1 2 3 4 5 6 7 x"))
	require.ErrorContains(t, err, "field 8")
}

// perftestTool finds the linked release's ucx_perftest and pins UCX_TLS=tcp for it unless the
// environment chose (InfiniBand).
func perftestTool(t *testing.T) ucx.Tool {
	t.Helper()
	tool, err := Find()
	if err != nil {
		t.Skipf("no ucx_perftest of the linked UCX: %v", err)
	}
	if os.Getenv("UCX_TLS") == "" {
		t.Setenv("UCX_TLS", "tcp")
	}
	return tool
}

// A real run of the linked release's ucx_perftest over tcp: the baseline the benchmarks use.
// Where the linked UCX's guard refuses software RMA (the static build over tcp) perftest's GET
// cannot run (its client waits forever on the refusal): the probe must say so, and the test
// skips with that reason.
func TestRunAGetOverLoopback(t *testing.T) {
	tool := perftestTool(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ProbeLoopbackGet(ctx); err != nil {
		require.ErrorIs(t, err, ErrGetRefusedByGuard)
		g, gerr := ucx.SoftwareRMAGuard()
		require.NoError(t, gerr)
		require.True(t, g.Enforced)
		require.Positive(t, g.Refused.Get, "the guard did not count the refused GET")
		t.Skipf("ucx_perftest -t ucp_get is not run: %v", err)
	}
	r, err := Run(ctx, tool, "-t", "ucp_get", "-s", "65536", "-n", "200")
	require.NoError(t, err)
	require.Equal(t, 200, r.Iterations)
	require.Greater(t, r.BandwidthOverall, 0.0)
}

// The active-message baseline runs on every UCX, the guarded one included (the guard leaves
// active messages alone).
func TestRunAMLatencyOverLoopback(t *testing.T) {
	tool := perftestTool(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := PerftestAMLatency(ctx, tool, 64, 1000)
	require.NoError(t, err)
	require.Positive(t, d)
}
