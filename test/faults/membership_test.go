package faults

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/test/internal/netns"
	"github.com/velo-go/velo/velo/discovery/etcd/etcdtest"
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

// TestFilesystemMembershipAcrossProcesses and TestEtcdMembershipAcrossProcesses: four
// processes find each other with no RegisterPeer, and every one fetches a payload from every
// other on rdma/ok. A member killed with SIGKILL is seen down by the others within the TTL, and a
// get in flight from it fails with an error that says the owner went. Started again under its
// name and address it is a new instance (a restarted event names the old one), its old handles
// are refused with a clear error, and its new ones move on the RDMA path. Nothing stays pinned on
// the owners.
func TestFilesystemMembershipAcrossProcesses(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cluster")
	membershipAcrossProcesses(t, 2*time.Second, "-discovery", dir)
}

func TestEtcdMembershipAcrossProcesses(t *testing.T) {
	srv := etcdtest.Start(t)
	membershipAcrossProcesses(t, 2*time.Second, "-etcd", srv.Endpoint())
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

func membershipAcrossProcesses(t *testing.T, ttl time.Duration, backend ...string) {
	addrs := map[string]string{}
	start := func(name string) *node {
		if addrs[name] == "" {
			addrs[name] = freeAddr(t)
		}
		flags := append(append([]string{}, backend...), "-name", name, "-discovery-ttl", ttl.String(), "-listen", addrs[name])
		return startNode(t, name, flags...)
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
	for _, name := range names {
		h := nodes[name].ok("health")
		assert.NotContains(t, fmt.Sprint(h["reasons"]), "discovery lost", name)
	}

	victim := nodes["n3"]
	old := stage(victim, 1<<20, true)
	inFlight := stage(victim, 32<<20, true)
	// A get that cannot finish before the kill: the owner is stopped first.
	victim.stop()
	nodes["n1"].send("get " + inFlight.Handle)
	time.Sleep(200 * time.Millisecond)
	victim.kill()
	killed := time.Now()
	r := nodes["n1"].read(time.Minute) // n1 answers nothing else before its get
	require.NotEmpty(t, r["error"], "a get from the killed owner reported success")
	t.Logf("get in flight at the kill: %v", r["error"])
	for _, name := range names[:3] {
		nodes[name].waitPeer(ids["n3"], "down", ttl+10*time.Second)
		took := time.Since(killed)
		assert.Less(t, took, ttl+5*time.Second, "%s saw the killed member down only after %v", name, took)
	}

	back := start("n3")
	newID := back.id()
	require.NotEqual(t, ids["n3"], newID)
	for _, name := range names[:3] {
		nodes[name].waitPeer(newID, "up", 20*time.Second)
	}
	restarted := "restarted " + newID + " " + ids["n3"]
	for _, name := range names[:3] {
		require.Eventually(t, func() bool {
			return slices.Contains(eventsOf(nodes[name]), restarted)
		}, 10*time.Second, 50*time.Millisecond, "%s: no %q among %v", name, restarted, eventsOf(nodes[name]))
	}
	r = nodes["n0"].do("get " + old.Handle)
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

// settledEvents is n's events once they stayed the same over a second of polls.
func settledEvents(t *testing.T, n *node) []string {
	t.Helper()
	last, same := eventsOf(n), 0
	require.Eventually(t, func() bool {
		now := eventsOf(n)
		if slices.Equal(now, last) {
			same++
		} else {
			last, same = now, 0
		}
		return same >= 5
	}, 15*time.Second, 200*time.Millisecond, "%s's events kept changing: %v", n.Name, last)
	return last
}

func eventsOf(n *node) []string {
	var out []string
	for _, e := range n.ok("events")["events"].([]any) {
		out = append(out, e.(string))
	}
	return out
}

// TestEtcdOutage: etcd stopped for 30 s and started again. Transfers between members that know
// each other keep working throughout, every member reports the lost discovery in its health while
// etcd is away, and afterwards the view is what it was: each member sees the others up, once,
// and no member went down or came back meanwhile.
func TestEtcdOutage(t *testing.T) {
	srv := etcdtest.Start(t)
	const ttl = 2 * time.Second
	names := []string{"o0", "o1", "o2"}
	nodes := map[string]*node{}
	ids := map[string]string{}
	for _, name := range names {
		nodes[name] = startNode(t, name, "-etcd", srv.Endpoint(), "-name", name, "-discovery-ttl", ttl.String())
		ids[name] = nodes[name].id()
	}
	for _, a := range names {
		for _, b := range names {
			if a != b {
				nodes[a].waitPeer(ids[b], "up", 20*time.Second)
			}
		}
	}
	// A peer's state changes before its event reaches the node's watcher, and events from before
	// the node subscribed are not replayed: the snapshot is taken once each member's events stay
	// the same for a while, whatever they are.
	before := map[string][]string{}
	for _, name := range names {
		before[name] = settledEvents(t, nodes[name])
	}
	transfer := func() {
		for _, owner := range names {
			p := stage(nodes[owner], 1<<20, true)
			for _, cons := range names {
				if cons != owner {
					nodes[owner].ok("ref " + p.Handle)
					delivered(t, nodes[cons].do("get "+p.Handle), p, "rdma/ok")
				}
			}
			nodes[owner].ok("release " + p.Handle)
		}
	}
	srv.Stop()
	stopped := time.Now()
	sawLost := false
	for time.Since(stopped) < 30*time.Second {
		transfer()
		h := nodes["o0"].ok("health")
		sawLost = sawLost || strings.Contains(fmt.Sprint(h["reasons"]), "discovery lost")
		time.Sleep(time.Second)
	}
	assert.True(t, sawLost, "no member's health said discovery was lost during the outage")
	srv.Restart(t)
	for _, name := range names {
		require.Eventually(t, func() bool {
			return !strings.Contains(fmt.Sprint(nodes[name].ok("health")["reasons"]), "discovery lost")
		}, 30*time.Second, 200*time.Millisecond, "%s did not recover its discovery", name)
	}
	transfer()
	for _, name := range names {
		states := nodes[name].peerStates()
		assert.Len(t, states, len(names)-1, "%s knows %v", name, states)
		for id, st := range states {
			assert.Equal(t, "up", st, "%s sees %s %s", name, id, st)
		}
		assert.Equal(t, before[name], eventsOf(nodes[name]), "%s saw peer events during the outage", name)
	}
	out, err := srv.Ctl(context.Background(), "get", "--prefix", "--keys-only", "/velo/clusters/faults/members/")
	require.NoError(t, err, out)
	for _, name := range names {
		assert.Equal(t, 1, strings.Count(out, "members/"+name+"\n"), "etcd holds %q", out)
	}
}

// TestEtcdEightHostsInNamespaces: eight hosts (network namespaces on one bridge) and etcd in a
// ninth find each other through etcd alone, and every host fetches a payload from every other
// over its veth on rdma/ok, SHA-256 checked.
func TestEtcdEightHostsInNamespaces(t *testing.T) {
	star := netns.NewStar(t, 9)
	etcdHost := star.Hosts[8]
	srv := etcdtest.StartCluster(t, etcdtest.Member{IP: etcdHost.IP.String(), Command: func(name string, args ...string) *exec.Cmd {
		return etcdHost.Command(context.Background(), name, args...)
	}})[0]
	nodes := make([]*node, 8)
	ids := make([]string, 8)
	var wg sync.WaitGroup
	for i := range 8 {
		h := star.Hosts[i]
		name := fmt.Sprintf("h%d", i)
		cmd := h.Command(context.Background(), faultnode(t), "-log", "info", "-etcd", srv.Endpoint(), "-name", name,
			"-discovery-ttl", "5s", "-listen", h.IP.String()+":0")
		cmd.Env = append(os.Environ(), "UCX_TLS=tcp", "UCX_NET_DEVICES="+h.Dev)
		nodes[i] = launch(t, name, cmd)
	}
	for i := range nodes {
		ids[i] = nodes[i].id()
	}
	for i := range nodes {
		for j := range nodes {
			if i != j {
				nodes[i].waitPeer(ids[j], "up", 60*time.Second)
			}
		}
	}
	for i, owner := range nodes {
		p := stage(owner, 2<<20, true)
		for range 6 {
			owner.ok("ref " + p.Handle)
		}
		for j, cons := range nodes {
			if i == j {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := cons.Do("get "+p.Handle, 2*time.Minute)
				if assert.NoError(t, err) {
					assert.Empty(t, r["error"], "h%d from h%d", j, i)
					assert.Equal(t, p.SHA256, r["sha256"], "h%d from h%d", j, i)
					assert.Equal(t, "rdma/ok", r["path"], "h%d from h%d", j, i)
				}
			}()
		}
		wg.Wait()
	}
}
