package fanout

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEachRunsEveryIndexOnceWithinTheWindow(t *testing.T) {
	const n, window = 200, 4
	var seen [n]atomic.Int32
	var inFlight, peak atomic.Int32
	Each(n, window, func(i int) {
		cur := inFlight.Add(1)
		for {
			p := peak.Load()
			if cur <= p || peak.CompareAndSwap(p, cur) {
				break
			}
		}
		time.Sleep(100 * time.Microsecond)
		seen[i].Add(1)
		inFlight.Add(-1)
	})
	for i := range seen {
		require.EqualValues(t, 1, seen[i].Load(), "index %d", i)
	}
	assert.LessOrEqual(t, peak.Load(), int32(window))
}

func TestEachEmptyAndZeroWindow(t *testing.T) {
	called := false
	Each(0, 4, func(int) { called = true })
	assert.False(t, called)
	var count atomic.Int32
	Each(3, 0, func(int) { count.Add(1) }) // a window below one still makes progress
	assert.EqualValues(t, 3, count.Load())
}
