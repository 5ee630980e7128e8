package faults

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSixteenMembersWithinAnEndpointBudget: sixteen members found through the filesystem backend,
// each allowed four UCX endpoints, fetch a payload from every other member, four at a time in
// rounds, so every member opens endpoints far past its budget and evicts idle ones while later
// fetches start. Every payload arrives whole on the RDMA path, no endpoint fails, every member
// evicted endpoints, and once the traffic stops every member is back within its budget and has
// nothing pinned beyond its arenas.
func TestSixteenMembersWithinAnEndpointBudget(t *testing.T) { sixteenWithinBudgets(t, false) }

// TestSixteenMembersWithinBothBudgets is the same with the control plane held to four
// connections as well (tcp.Config.MaxConnections): every fetch's acquire, and the peer-info and
// lease traffic around it, runs on connections the budget closes and reopens under it. On top of
// the above, every member closed control connections for the budget, none was lost (no
// connection ended without the goodbye exchange), and once the traffic stops every member holds
// at most four.
func TestSixteenMembersWithinBothBudgets(t *testing.T) { sixteenWithinBudgets(t, true) }

func sixteenWithinBudgets(t *testing.T, conns bool) {
	const members, budget = 16, 4
	dir := filepath.Join(t.TempDir(), "cluster")
	nodes := make([]*node, members)
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			args := []string{"-discovery", dir, "-name", fmt.Sprintf("m%d", i),
				"-max-endpoints", fmt.Sprint(budget), "-arena", fmt.Sprint(4 << 20), "-log", "warn"}
			if conns {
				args = append(args, "-max-conns", fmt.Sprint(budget))
			}
			nodes[i] = startNode(t, fmt.Sprintf("m%d", i), args...)
		}()
	}
	wg.Wait()
	require.NotContains(t, nodes, (*node)(nil))
	ids := make([]string, members)
	for i, n := range nodes {
		ids[i] = n.id()
	}
	for i, n := range nodes {
		for j, id := range ids {
			if i != j {
				n.waitPeer(id, "up", time.Minute)
			}
		}
	}
	// Every member stages one payload for each other member.
	staged := make([][]staged, members)
	for i, n := range nodes {
		for range members - 1 {
			staged[i] = append(staged[i], stage(n, 64<<10, true))
		}
	}
	// Round r: member i fetches from members i+1 .. i+4 (mod 16) shifted by 4r, all at once.
	for round := range (members - 1 + 3) / 4 {
		var fetch sync.WaitGroup
		for i, n := range nodes {
			fetch.Add(1)
			go func() {
				defer fetch.Done()
				for k := range 4 {
					d := 1 + round*4 + k
					if d >= members {
						return
					}
					owner := (i + d) % members
					p := staged[owner][d-1]
					r := n.do("get " + p.Handle)
					assert.Empty(t, r["error"], "m%d from m%d", i, owner)
					assert.Equal(t, p.SHA256, r["sha256"], "m%d from m%d", i, owner)
					assert.Equal(t, "rdma/ok", r["path"], "m%d from m%d", i, owner)
				}
			}()
		}
		fetch.Wait()
	}
	for i, n := range nodes {
		assert.Positive(t, sumSeries(n, "velo_ucx_transport_endpoint_events_total", "event=evicted"), "m%d evicted nothing", i)
		assert.Zero(t, sumSeries(n, "velo_ucx_transport_endpoint_events_total", "event=failed"), "m%d: an endpoint failed", i)
		assert.Eventually(t, func() bool { return sumSeries(n, "velo_ucx_transport_endpoints") <= budget }, 30*time.Second,
			50*time.Millisecond, "m%d holds more endpoints than its budget", i)
		if conns {
			assert.Positive(t, sumSeries(n, "velo_tcp_closes_total", "reason=budget"), "m%d closed no control connection for its budget", i)
			assert.Zero(t, sumSeries(n, "velo_tcp_closes_total", "reason=lost"), "m%d lost a control connection", i)
			assert.Eventually(t, func() bool { return sumSeries(n, "velo_tcp_connections") <= budget }, 30*time.Second,
				50*time.Millisecond, "m%d holds more control connections than its budget", i)
		}
	}
	for _, n := range nodes {
		n.quit(30 * time.Second)
	}
}
