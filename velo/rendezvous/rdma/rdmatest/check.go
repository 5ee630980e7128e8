package rdmatest

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/velo-go/velo/velo/metrics"
)

// Pair is one series of velo_rendezvous_rdma_path_total.
type Pair struct {
	Path   metrics.Path
	Reason metrics.Reason
}

// Pairs are every series of the path metric: rdma/ok, inline/ok and chunked with each chunked
// reason.
func Pairs() []Pair {
	ps := []Pair{{metrics.PathRDMA, metrics.ReasonOK}, {metrics.PathInline, metrics.ReasonOK}}
	for _, r := range metrics.ChunkedReasons {
		ps = append(ps, Pair{metrics.PathChunked, r})
	}
	return ps
}

// PathCount reads one series of the path metric from g.
func PathCount(t testing.TB, g prometheus.Gatherer, p Pair) float64 {
	t.Helper()
	x, err := metrics.Value(g, metrics.RDMAPathTotal, metrics.PathLabels(p.Path, p.Reason))
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// ExpectPaths checks that g counted exactly want on the path metric and zero on every other
// series, so a test sees both the reason it expects and that nothing else was counted.
func ExpectPaths(t testing.TB, who string, g prometheus.Gatherer, want map[Pair]float64) {
	t.Helper()
	for _, p := range Pairs() {
		if got := PathCount(t, g, p); got != want[p] {
			t.Errorf("%s: %s/%s = %v, want %v", who, p.Path, p.Reason, got, want[p])
		}
	}
}

// Eventually polls cond until it holds or within passes: a bounded wait on state another
// goroutine or process changes, never a sleep standing in for synchronisation.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
