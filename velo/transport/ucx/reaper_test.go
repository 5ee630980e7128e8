//go:build cgo && linux

package ucxt

import (
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestReaperLosesNothing: endpoints are reaped over and over while frames flow both ways, each
// burst starting the moment a reap was seen (so bursts race with the fin exchange); every frame
// arrives exactly once and in order, nothing is counted lost or dropped, and no peer is reported
// down. Run with the reaper on both sides and on one side only (the other side then learns of
// each reap only from the fin).
func TestReaperLosesNothing(t *testing.T) {
	const idle = 40 * time.Millisecond
	for _, c := range []struct {
		name         string
		idleA, idleB time.Duration
	}{{"both reap", idle, idle}, {"one side reaps", idle, 0}} {
		t.Run(c.name, func(t *testing.T) {
			a := newNode(t, func(cfg *Config) { cfg.EPIdleTimeout = c.idleA })
			b := newNode(t, func(cfg *Config) { cfg.EPIdleTimeout = c.idleB })
			link(t, a, b)
			reaped := func() float64 {
				return testutil.ToFloat64(a.m.endpoints.WithLabelValues("reaped")) + testutil.ToFloat64(b.m.endpoints.WithLabelValues("reaped"))
			}
			const rounds, burst = 25, 20
			var sentA, sentB uint32
			for round := 0; round < rounds; round++ {
				var wg sync.WaitGroup
				for _, d := range []struct {
					from, to node
					n        *uint32
				}{{a, b, &sentA}, {b, a, &sentB}} {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := 0; i < burst; i++ {
							*d.n++
							if err := d.from.Send(testCtx(t), d.to.h.id, binary.BigEndian.AppendUint32(nil, *d.n)); err != nil {
								t.Errorf("round %d: send %d: %v", round, *d.n, err)
								return
							}
						}
					}()
				}
				wg.Wait()
				if t.Failed() {
					return
				}
				before := reaped()
				eventually(t, fmt.Sprintf("a reap after round %d", round), func() bool { return reaped() > before })
			}
			for _, c := range []struct {
				h    *testHost
				sent uint32
			}{{b.h, sentA}, {a.h, sentB}} {
				got := c.h.waitFrames(t, int(c.sent))
				for i, f := range got {
					if n := binary.BigEndian.Uint32(f.frame); n != uint32(i+1) {
						t.Fatalf("frame %d carries %d: lost, duplicated or reordered", i+1, n)
					}
				}
				if len(got) != int(c.sent) {
					t.Fatalf("%d frames delivered, %d sent", len(got), c.sent)
				}
			}
			for _, n := range []node{a, b} {
				if lost := testutil.ToFloat64(n.m.lost); lost != 0 {
					t.Errorf("frames_lost_total %v", lost)
				}
				for _, r := range dropReasons {
					if v := testutil.ToFloat64(n.m.dropped.WithLabelValues(r)); v != 0 {
						t.Errorf("frames dropped (%s): %v", r, v)
					}
				}
				select {
				case d := <-n.h.downs:
					t.Errorf("PeerDown(%016x) during reaps: %v", uint64(d.peer), d.err)
				default:
				}
			}
			// The reaps were real: endpoints were reopened, the peer of a reaped endpoint learned
			// of it, and every retired endpoint gets closed.
			opened := testutil.ToFloat64(a.m.endpoints.WithLabelValues("opened")) + testutil.ToFloat64(b.m.endpoints.WithLabelValues("opened"))
			byPeer := testutil.ToFloat64(a.m.endpoints.WithLabelValues("retired_by_peer")) + testutil.ToFloat64(b.m.endpoints.WithLabelValues("retired_by_peer"))
			t.Logf("%d rounds: %v reaps, %v endpoints opened, %v retired on the peer's fin", rounds, reaped(), opened, byPeer)
			if opened < rounds || byPeer == 0 {
				t.Fatalf("opened %v endpoints, %v retired by peer: the reaper did not cycle endpoints", opened, byPeer)
			}
			eventually(t, "every endpoint closed after the last reap", func() bool {
				return testutil.ToFloat64(a.m.open)+testutil.ToFloat64(b.m.open) == 0
			})
		})
	}
}
