//go:build cgo && linux

package ucxtransport

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"

	"github.com/velo-go/velo/velo/transport"
)

// TestRemoteWarningsAreLimited: however many stale frames and played-again fins a peer sends,
// the log gets one line of each kind per peer in the interval, every frame is counted, and the
// next line says how many were held back.
func TestRemoteWarningsAreLimited(t *testing.T) {
	a := newNode(t, nil)
	peers := []uint64{0x1111, 0x2222}
	a.recvMu.Lock()
	for range 5000 {
		for _, p := range peers {
			a.deliver(transport.InstanceID(p), inResult{stale: 2, finsAgain: 1})
		}
	}
	a.recvMu.Unlock()
	log := a.h.logBuf.String()
	for _, p := range peers {
		peer := fmt.Sprintf("peer=%016x", p)
		assert.Equal(t, 1, countLines(log, "already given up on", peer), "stale frames of %s", peer)
		assert.Equal(t, 1, countLines(log, "already finished", peer), "played fins of %s", peer)
	}
	assert.EqualValues(t, 2*5000*len(peers), testutil.ToFloat64(a.m.dropped.WithLabelValues("stale")))
	assert.EqualValues(t, 5000*len(peers), testutil.ToFloat64(a.m.dropped.WithLabelValues("replayed")))

	// Past the interval the next line carries the count of those held back.
	a.remoteLogs.Interval = 0
	a.recvMu.Lock()
	a.deliver(transport.InstanceID(peers[0]), inResult{stale: 1})
	a.recvMu.Unlock()
	assert.Contains(t, a.h.logBuf.String(), "suppressed_since_last=4999")
}

func countLines(log string, parts ...string) int {
	n := 0
next:
	for _, l := range strings.Split(log, "\n") {
		for _, p := range parts {
			if !strings.Contains(l, p) {
				continue next
			}
		}
		n++
	}
	return n
}
