package pushfaults

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/test/internal/gobuild"
)

// TestMixedUCXBuildsPush: a receiver linked with velo's static UCX grants a writer linked with
// Debian's (VELO_UCX_TRUST_NETWORK=1). Neither opens a UCX endpoint to the other: the grant goes
// by chunks with reason release_mismatch on both sides, the notified put lands whole, and both
// processes close cleanly.
func TestMixedUCXBuildsPush(t *testing.T) {
	env, err := gobuild.StockUCX()
	if err != nil {
		t.Skipf("no second UCX build to meet: %v", err)
	}
	stock := gobuild.New("github.com/velo-go/velo/test/pushfaults/cmd/pushpeer", env...)
	t.Cleanup(stock.Remove)
	recv := receiverWithRegionOn(t, oneHost, 1<<20)
	writer := launchPeer(t, nil, stock.Path(t), []string{"VELO_UCX_TRUST_NETWORK=1"}, "writer")
	for _, c := range []struct{ n, peer *peer }{{recv, writer}, {writer, recv}} {
		r := c.n.do("peer %s", c.peer.info())
		require.NotEmpty(t, r["error"], "%s took the other build's UCX address", c.n.name)
		assert.Contains(t, r["error"], "cannot talk to this one")
	}
	id, h := recv.grant(writer, guard, 256<<10, time.Minute)
	r := writer.ok("put %s %d %d %d note", h, guard, 256<<10, 7)
	require.Empty(t, r["error"])
	recv.ok("revoke %d", id)
	assert.Equal(t, r["sha256"], recv.sum(guard, 256<<10), "the put's bytes")
	recv.guards("after the put", guard, 256<<10)
	assert.Equal(t, map[string]any{"writer/chunked/release_mismatch": 1.0}, writer.ok("paths")["paths"])
	assert.Equal(t, map[string]any{"receiver/chunked/release_mismatch": 1.0}, recv.ok("paths")["paths"])
}
