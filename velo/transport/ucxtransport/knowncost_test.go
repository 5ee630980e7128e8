//go:build cgo && linux

package ucxtransport

import (
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/transport"
)

// TestKnownPeerCost bounds the UCX transport's entry for a peer it knows and never talked to:
// 1,000 peers added (each its own incarnation of a real worker's address), no endpoint opened, and
// the Go heap grows by less than 1 KiB per peer (about 0.3 KiB measured: the peer record and its
// address). Nothing per peer is made before first use: no endpoint, no goroutine, no metric series.
func TestKnownPeerCost(t *testing.T) {
	const peers = 1000
	n, other := newNode(t, nil), newNode(t, nil)
	b, err := decodeBlob(other.Address())
	require.NoError(t, err)
	ctx := testCtx(t)
	inUse := func() int64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&m)
		return int64(m.HeapInuse + m.StackInuse)
	}
	before := inUse()
	for range peers {
		b.Incarnation = rand.Uint64()
		require.NoError(t, n.AddPeer(ctx, transport.PeerAddress{ID: transport.InstanceID(rand.Uint64() | 1), Incarnation: b.Incarnation, Blob: appendBlob(nil, b)}))
	}
	perPeer := float64(inUse()-before) / peers
	t.Logf("a known peer: %.2f KiB (worker address %d bytes)", perPeer/1024, len(b.Worker))
	assert.Less(t, perPeer, 1024.0, "a known peer costs the UCX transport %.2f KiB", perPeer/1024)
	assert.Zero(t, n.openEPs.Load(), "adding peers opened endpoints")
}
