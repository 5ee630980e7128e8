// Package fanout runs the steps of a batch on a bounded number of goroutines. The rendezvous
// batches (pulls, leases, ends) and the RDMA registry's typed reads share it, so a window means
// the same thing everywhere: at most that many steps in flight, each index run exactly once.
package fanout

import (
	"sync"
	"sync/atomic"
)

// Each runs f(0..n-1) on up to window goroutines (at least one) and returns once every call
// returned. Indexes are handed out in order; a slow step holds only its own goroutine.
func Each(n, window int, f func(i int)) {
	if n <= 0 {
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < min(max(window, 1), n); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				f(i)
			}
		}()
	}
	wg.Wait()
}
