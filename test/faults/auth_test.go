package faults

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/test/internal/netns"
)

// clusterSecret is the secret the authenticated hosts share (VELO_CLUSTER_SECRET).
const clusterSecret = "velo-faults-cluster-secret-0123456789"

// sumSeries adds up the series of a metric family a node reports, those whose labels contain
// every one of the fragments.
func sumSeries(n *node, family string, fragments ...string) float64 {
	n.t.Helper()
	var sum float64
	series, _ := n.ok("metric " + family)["series"].(map[string]any)
next:
	for labels, v := range series {
		for _, f := range fragments {
			if !strings.Contains(labels, f) {
				continue next
			}
		}
		sum += v.(float64)
	}
	return sum
}

// TestTenantOnTheBridgeGetsNothing: two hosts authenticated by a cluster secret and a "tenant"
// namespace on the same bridge, all three in one discovery directory. The tenant reaches the
// owner's port, but its bytes get no answer, its get fails, no lease or remote key is made for it,
// and its attempts are counted; meanwhile the authenticated consumer's transfers keep running on
// rdma/ok with the right bytes, and both authenticated hosts list the tenant as unauthenticated.
func TestTenantOnTheBridgeGetsNothing(t *testing.T) {
	star := netns.NewStar(t, 3)
	dir := t.TempDir()
	start := func(i int, name string, secret bool) *node {
		h := star.Hosts[i]
		cmd := h.Command(context.Background(), faultnode(t), "-log", "info", "-discovery", dir, "-name", name,
			"-discovery-ttl", "5s", "-listen", fmt.Sprintf("%s:7401", h.IP))
		cmd.Env = append(os.Environ(), "UCX_TLS=tcp", "UCX_NET_DEVICES="+h.Dev)
		if secret {
			cmd.Env = append(cmd.Env, "VELO_CLUSTER_SECRET="+clusterSecret)
		}
		return launch(t, name, cmd)
	}
	owner, consumer := start(0, "owner", true), start(1, "consumer", true)
	tenant := start(2, "tenant", false)
	ownerID, consumerID := owner.id(), consumer.id()
	owner.waitPeer(consumerID, "up", 30*time.Second)
	consumer.waitPeer(ownerID, "up", 30*time.Second)
	tenant.waitPeer(ownerID, "up", 30*time.Second) // it read the directory: it knows where the owner is

	p := stage(owner, 4<<20, true)
	const gets = 12
	for range gets + 2 {
		owner.ok("ref " + p.Handle)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range gets {
			r, err := consumer.Do("get "+p.Handle, 2*time.Minute)
			if assert.NoError(t, err) {
				assert.Empty(t, r["error"], "get %d", i)
				assert.Equal(t, p.SHA256, r["sha256"], "get %d", i)
				assert.Equal(t, "rdma/ok", r["path"], "get %d", i)
			}
		}
	}()

	for range 3 {
		r, err := tenant.Do("get "+p.Handle, time.Minute)
		require.NoError(t, err)
		assert.NotEmpty(t, r["error"], "the tenant's get succeeded")
		assert.Empty(t, r["sha256"])
	}
	// The port is reachable from the tenant's namespace, and answers nothing.
	probe := star.Hosts[2].Command(context.Background(), "bash", "-c",
		fmt.Sprintf("exec 3<>/dev/tcp/%s/7401 && printf 'VELO\\x02' >&3 && timeout 5 cat <&3 | wc -c", star.Hosts[0].IP))
	out, err := probe.CombinedOutput()
	require.NoError(t, err, "the tenant cannot reach the owner's port: %s", out)
	assert.Equal(t, "0", strings.TrimSpace(string(out)), "the owner sent bytes to an unauthenticated client")
	wg.Wait()

	refused := sumSeries(owner, "velo_tcp_auth_failures_total")
	unauth := sumSeries(owner, "velo_tcp_auth_failures_total", "reason=unauthenticated")
	t.Logf("owner: %v handshakes refused (%v unauthenticated)", refused, unauth)
	assert.GreaterOrEqual(t, refused, 2.0, "the tenant's attempts are counted")
	assert.Zero(t, sumSeries(owner, "velo_auth_refusals_total"), "no acquire of the tenant got as far as the rendezvous")
	st := owner.waitStats("leases end", 30*time.Second, func(s stats) bool { return s.OpenLeases == 0 && s.LeaseRegistrations == 0 })
	assert.Zero(t, st.LeaseRegistrations, "a remote key outlived the transfers")
	// The consumer refused the tenant too (it dialled each member it discovered to authenticate
	// it), never the owner: no proof between them failed.
	for _, reason := range []string{"reason=bad_proof", "reason=refused_by_peer", "reason=mode_mismatch"} {
		assert.Zero(t, sumSeries(consumer, "velo_tcp_auth_failures_total", reason), "the authenticated hosts never refused each other (%s)", reason)
	}
	// Both authenticated hosts list the tenant as unauthenticated (its handshake failed).
	tenantID := tenant.id()
	owner.waitPeer(tenantID, "unauthenticated", 30*time.Second)
	consumer.waitPeer(tenantID, "unauthenticated", 30*time.Second)
}
