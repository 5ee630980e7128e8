//go:build cgo && linux

package ucx

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSendAMPartsUnderGC: a message sent from several parts while the collector runs. The parts'
// addresses are stored into C memory from Go (the iov); the store's write barrier reads each slot's
// old value, so that memory must start zeroed, or the collector meets whatever malloc left there and
// stops the process ("found bad pointer in Go heap").
func TestSendAMPartsUnderGC(t *testing.T) {
	ctx := testContext(t)
	_, b, ab := enginePair(t, nil)
	const id, n = 7, 2000
	var got atomic.Int64
	require.NoError(t, b.HandleAM(id, func(AMMessage) { got.Add(1) }))
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
				runtime.GC()
			}
		}
	}()
	parts := [][]byte{make([]byte, 100), make([]byte, 200), make([]byte, 300), make([]byte, 400)}
	for range n {
		require.NoError(t, ab.SendAM(ctx, id, []byte("hdr"), parts...))
	}
	require.Eventually(t, func() bool { return got.Load() == n }, testTimeout, time.Millisecond)
}
