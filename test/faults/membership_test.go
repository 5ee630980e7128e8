package faults

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func (n *node) id() string { n.t.Helper(); return n.ok("info")["id"].(string) }

// peerStates is what the node's Peers() says: id → state.
func (n *node) peerStates() map[string]string {
	n.t.Helper()
	out := map[string]string{}
	for k, v := range n.ok("peers")["peers"].(map[string]any) {
		out[k] = v.(string)
	}
	return out
}

func (n *node) waitPeer(id, state string, within time.Duration) time.Duration {
	n.t.Helper()
	begun := time.Now()
	require.Eventually(n.t, func() bool { return n.peerStates()[id] == state }, within, 50*time.Millisecond,
		"%s never saw %s %s: %v", n.Name, id, state, n.peerStates())
	return time.Since(begun)
}

// TestFilesystemMembershipAcrossProcesses: four processes find each other through a shared
// directory with no RegisterPeer, and every one fetches a payload from every other on rdma/ok. A
// member killed with SIGKILL is seen down by the others within the TTL; started again under its
// name it is a new instance, its old handles are refused with a clear error, and its new ones
// move on the RDMA path. Nothing stays pinned on the owners.
func TestFilesystemMembershipAcrossProcesses(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cluster")
	const ttl = 2 * time.Second
	start := func(name string) *node {
		return startNode(t, name, "-discovery", dir, "-name", name, "-discovery-ttl", ttl.String())
	}
	names := []string{"n0", "n1", "n2", "n3"}
	nodes := map[string]*node{}
	ids := map[string]string{}
	for _, name := range names {
		nodes[name] = start(name)
		ids[name] = nodes[name].id()
	}
	for _, a := range names {
		for _, b := range names {
			if a != b {
				nodes[a].waitPeer(ids[b], "up", 20*time.Second)
			}
		}
	}
	for _, owner := range names {
		p := stage(nodes[owner], 4<<20, true)
		for _, cons := range names {
			if cons == owner {
				continue
			}
			nodes[owner].ok("ref " + p.Handle)
			delivered(t, nodes[cons].do("get "+p.Handle), p, "rdma/ok")
		}
	}

	victim := nodes["n3"]
	old := stage(victim, 1<<20, true)
	victim.kill()
	for _, name := range names[:3] {
		took := nodes[name].waitPeer(ids["n3"], "down", ttl+10*time.Second)
		assert.Less(t, took, ttl+5*time.Second, "%s saw the killed member down only after %v", name, took)
	}
	back := start("n3")
	newID := back.id()
	require.NotEqual(t, ids["n3"], newID)
	for _, name := range names[:3] {
		nodes[name].waitPeer(newID, "up", 20*time.Second)
	}
	r := nodes["n0"].do("get " + old.Handle)
	require.NotEmpty(t, r["error"], "a handle of the killed instance was fetched")
	assert.Contains(t, r["error"], "is down", "the error does not say the owner went")
	t.Logf("old handle: %v", r["error"])
	fresh := stage(back, 1<<20, true)
	delivered(t, nodes["n0"].do("get "+fresh.Handle), fresh, "rdma/ok")
	for _, name := range names[:3] {
		st := nodes[name].waitStats("nothing leased", 30*time.Second, func(s stats) bool {
			return s.LeaseRegistrations == 0 && s.Quarantined == 0 && s.OpenLeases == 0
		})
		assert.Equal(t, st.ArenaBytes, st.PinnedBytes, fmt.Sprintf("%s holds more than its arenas", name))
	}
}
