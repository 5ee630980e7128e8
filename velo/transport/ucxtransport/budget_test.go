//go:build cgo && linux

package ucxtransport

import (
	"bytes"
	"encoding/binary"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEndpointBudget: a transport with a budget of two endpoints sends frames to four peers and
// reads their memory, all four at once, round after round, so every round opens endpoints past
// the budget while the evictions of the round before are still under way. Every frame arrives
// once and in order, every read returns the owner's bytes, nothing is lost, dropped or reported
// down, endpoints were evicted, and once the traffic stops the transport holds no more
// endpoints than its budget.
func TestEndpointBudget(t *testing.T) {
	const budget, peers, rounds, burst = 2, 4, 12, 6
	a := newNode(t, func(c *Config) { c.MaxEndpoints = budget })
	owners := make([]node, peers)
	mems := make([][]byte, peers)
	keys := make([][]byte, peers)
	for i := range owners {
		owners[i] = newNode(t, nil)
		link(t, a, owners[i])
		mems[i] = mapped(t, 256<<10)
		reg, err := owners[i].RegisterMemory(mems[i])
		require.NoError(t, err)
		keys[i] = reg.Key()
	}
	evicted := func() float64 { return testutil.ToFloat64(a.m.endpoints.WithLabelValues("evicted")) }
	sent := make([]uint32, peers)
	for round := range rounds {
		// Each round opens endpoints to the peers the round before evicted, past the budget.
		before := evicted()
		var wg sync.WaitGroup
		for i, o := range owners {
			wg.Add(1)
			go func() {
				defer wg.Done()
				dst := make([]byte, len(mems[i]))
				for range burst {
					sent[i]++
					if err := a.Send(testCtx(t), o.h.id, binary.BigEndian.AppendUint32(nil, sent[i])); err != nil {
						t.Errorf("round %d: send %d to peer %d: %v", round, sent[i], i, err)
						return
					}
					if err := a.Get(testCtx(t), o.h.id, keys[i], 0, dst); err != nil {
						t.Errorf("round %d: read of peer %d: %v", round, i, err)
						return
					}
					if !bytes.Equal(dst, mems[i]) {
						t.Errorf("round %d: read of peer %d returned other bytes", round, i)
						return
					}
				}
			}()
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		// Go on the moment the round's eviction began (or once it did, if it came while the
		// round ran), so that the next round's sends and reads race with the fin exchanges of
		// the retired endpoints.
		eventually(t, "an eviction after the round", func() bool { return evicted() > before })
	}
	for i, o := range owners {
		got := o.h.waitFrames(t, int(sent[i]))
		require.Len(t, got, int(sent[i]), "peer %d", i)
		for j, f := range got {
			require.Equal(t, uint32(j+1), binary.BigEndian.Uint32(f.frame), "peer %d, frame %d: lost, duplicated or reordered", i, j+1)
		}
		assert.Zero(t, testutil.ToFloat64(o.m.lost), "peer %d counted frames lost", i)
	}
	assert.Zero(t, testutil.ToFloat64(a.m.endpoints.WithLabelValues("failed")))
	for _, r := range dropReasons {
		for i, o := range owners {
			assert.Zero(t, testutil.ToFloat64(o.m.dropped.WithLabelValues(r)), "peer %d dropped frames: %s", i, r)
		}
	}
	select {
	case d := <-a.h.downs:
		t.Fatalf("peer %016x reported down: %v", uint64(d.peer), d.err)
	default:
	}
	eventually(t, "the endpoints back within the budget", func() bool {
		open := 0
		for _, o := range owners {
			if a.hasOpenEndpoint(o.h.id) {
				open++
			}
		}
		return open <= budget && a.openEPs.Load() <= budget
	})
}

// TestMaxEndpointsRefusesNegative: a negative budget is refused with the fix; zero takes the
// default.
func TestMaxEndpointsRefusesNegative(t *testing.T) {
	_, err := New(Config{MaxEndpoints: -1})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "MaxEndpoints")
	c, err := Config{}.withDefaults()
	require.NoError(t, err)
	assert.Equal(t, DefaultMaxEndpoints, c.MaxEndpoints)
}
