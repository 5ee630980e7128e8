//go:build cgo && linux

package benchkit

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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

// A real run of the linked release's ucx_perftest over tcp: the baseline the benchmarks use.
func TestRunAGetOverLoopback(t *testing.T) {
	tool, err := Find()
	if err != nil {
		t.Skipf("no ucx_perftest of the linked UCX: %v", err)
	}
	if os.Getenv("UCX_TLS") == "" {
		t.Setenv("UCX_TLS", "tcp") // pinned here unless the environment chose (InfiniBand)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := Run(ctx, tool, "-t", "ucp_get", "-s", "65536", "-n", "200")
	require.NoError(t, err)
	require.Equal(t, 200, r.Iterations)
	require.Greater(t, r.BandwidthOverall, 0.0)
}
