package faults

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/test/faults/internal/proc"
)

// TestMixedUCXBuilds: a member linked with Debian's UCX (no guard, VELO_UCX_TRUST_NETWORK=1) and
// one linked with velo's static UCX meet, as in a rolling change of builds. UCX 1.13 meeting 1.22
// aborts inside UCX, so neither opens a UCX endpoint to the other: each refuses the other's UCX
// address naming both builds, payloads move by chunks either way with reason release_mismatch on
// both sides, messages keep flowing over TCP, and both processes close cleanly.
func TestMixedUCXBuilds(t *testing.T) {
	stockBin, err := proc.BuildStock()
	if err != nil {
		t.Skipf("no second UCX build to meet: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(filepath.Dir(stockBin)) })
	static := startNode(t, "static")
	cmd := exec.Command(stockBin, "-log", "info")
	cmd.Env = append(os.Environ(), "VELO_UCX_TRUST_NETWORK=1")
	stock := launch(t, "stock", cmd)

	staticInfo, stockInfo := static.info(), stock.info()
	for _, c := range []struct {
		n    *node
		peer string
	}{{static, stockInfo}, {stock, staticInfo}} {
		r := c.n.do("peer " + c.peer)
		require.NotEmpty(t, r["error"], "%s took the other build's UCX address", c.n.Name)
		assert.Contains(t, r["error"], "registered over tcp only")
		assert.Contains(t, r["error"], "cannot talk to this one")
	}
	// Each side's warning names both builds: the guarded 1.22 and the stock 1.13.
	for _, n := range []*node{static, stock} {
		n.logged("the peer's UCX build cannot talk to this one")
		assert.Regexp(t, `peer_ucx="[0-9.]+ (with velo-ucx-guard/[0-9]+|\(stock\))" ucx="[0-9.]+ (with velo-ucx-guard/[0-9]+|\(stock\))"`, n.stderr())
	}

	mismatches := func(n *node) float64 {
		return sumSeries(n, "velo_rendezvous_rdma_path_total", "path=chunked", "reason=release_mismatch")
	}
	for _, dir := range []struct{ owner, cons *node }{{static, stock}, {stock, static}} {
		ownerBefore, consBefore := mismatches(dir.owner), mismatches(dir.cons)
		for range 2 {
			p := stage(dir.owner, 4<<20, true)
			delivered(t, dir.cons.do("get "+p.Handle), p, "chunked/release_mismatch")
		}
		assert.Equal(t, 2.0, mismatches(dir.owner)-ownerBefore, "%s (owner) counts the consumer's refusal", dir.owner.Name)
		assert.Equal(t, 2.0, mismatches(dir.cons)-consBefore, "%s (consumer) counts its refusal", dir.cons.Name)
	}
	if resp := static.do("flood " + stock.id() + " 64 3 5s"); assert.Empty(t, resp["error"]) {
		assert.EqualValues(t, 3, resp["sent"], "messages to the other build go over TCP")
	}
	for _, n := range []*node{static, stock} {
		assert.Zero(t, sumSeries(n, "velo_rendezvous_rdma_path_total", "path=rdma"), "%s took the RDMA path", n.Name)
		assert.NotContains(t, n.stderr(), "Assertion", "%s: UCX asserted", n.Name)
		n.quit(15 * time.Second)
	}
	assert.False(t, strings.Contains(static.stderr()+stock.stderr(), "SIGABRT"))
}
