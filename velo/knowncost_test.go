package velo

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/internal/wire"
)

// heapGrowth is how much the Go heap and the goroutine stacks in use grew while grow ran, each
// read after a forced collection (debug.FreeOSMemory runs one).
func heapGrowth(grow func()) int64 {
	var m [2]runtime.MemStats
	debug.FreeOSMemory()
	runtime.ReadMemStats(&m[0])
	grow()
	debug.FreeOSMemory()
	runtime.ReadMemStats(&m[1])
	return int64(m[1].HeapInuse+m[1].StackInuse) - int64(m[0].HeapInuse+m[0].StackInuse)
}

// TestIdleKnownPeerCost bounds what a peer costs an instance that knows it and never talked to
// it: 1,000 members appear in the filesystem backend's directory, the instance registers each
// (its discovery record, the peer table, the messenger's and the TCP transport's entries), and
// the Go heap and stacks in use grow by less than 4 KiB per peer (1.34-1.54 KiB measured; the UCX
// transport's own entry, TestKnownPeerCost in its package, adds about 0.3 KiB).
func TestIdleKnownPeerCost(t *testing.T) {
	const peers = 1000
	dir := t.TempDir()
	v := member(t, dir, "self")
	time.Sleep(100 * time.Millisecond)             // its own first polls
	blob, err := wire.EncodeTCPAddr("127.0.0.1:1") // never dialled: nothing talks to the peers
	require.NoError(t, err)
	grew := heapGrowth(func() {
		for i := range peers {
			id, inc := rand.Uint64()|1, rand.Uint64()
			info, err := json.Marshal(PeerInfo{ID: InstanceID(id), Incarnation: inc, Addresses: map[string][]byte{"tcp": blob}})
			require.NoError(t, err)
			rec := map[string]any{"name": fmt.Sprintf("m%d", i), "id": fmt.Sprint(id), "incarnation": fmt.Sprint(inc), "info": info,
				"heartbeat": time.Now(), "ttl_ns": int64(time.Hour)}
			b, err := json.Marshal(rec)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(dir, "test", fmt.Sprintf("m%d.json", i)), b, 0o644))
		}
		require.Eventually(t, func() bool {
			up := 0
			for _, p := range v.Peers() {
				if p.State == StateUp {
					up++
				}
			}
			return up == peers
		}, time.Minute, 50*time.Millisecond, "the instance did not register every member")
	})
	perPeer := float64(grew) / peers
	t.Logf("an idle known peer: %.2f KiB of Go heap and stacks", perPeer/1024)
	assert.Less(t, perPeer, float64(4<<10), "an idle known peer costs %.2f KiB", perPeer/1024)
}
