package faults

// UCX's shared-memory transports never break a pair. velo's endpoints ask UCX for peer failure
// handling, which sysv, posix and cma lack, so under UCX_TLS=sm,self UCX has no lane between two
// processes: from the first transfer on, both sides count the pair's payloads on the chunked path
// with reason no_ucx_lane (never get_failed or rdma), each process says why once, and with the
// same-host path on the pair moves its bytes through shared memory.

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

const noLaneLine = "UCX has no lane to any peer"

// smNode starts a faultnode with UCX_TLS=sm,self.
func smNode(t *testing.T, name string) *node {
	t.Helper()
	cmd := exec.Command(faultnode(t), "-log", "info")
	cmd.Env = append(os.Environ(), "UCX_TLS=sm,self")
	return launch(t, name, cmd)
}

func TestSharedMemoryUCXLanesFallBackWithTheirReason(t *testing.T) {
	owner, cons := smNode(t, "owner"), smNode(t, "consumer")
	pair(t, owner, cons)
	for _, size := range []int{1 << 20, 8<<20 + 5} {
		p := stage(owner, size, true)
		delivered(t, cons.do("get "+p.Handle), p, "chunked/no_ucx_lane")
	}
	for _, n := range []*node{owner, cons} {
		assert.EqualValues(t, 2, sumSeries(n, "velo_rendezvous_rdma_path_total", "path=chunked", "reason=no_ucx_lane"),
			"%s counts both transfers under no_ucx_lane", n.Name)
		assert.Zero(t, sumSeries(n, "velo_rendezvous_rdma_path_total", "reason=get_failed"), "%s: no get was tried and failed", n.Name)
		assert.Zero(t, sumSeries(n, "velo_rendezvous_rdma_path_total", "path=rdma"), n.Name)
		n.logged(noLaneLine)
		assert.Equal(t, 1, strings.Count(n.stderr(), noLaneLine), "%s says why once:\n%s", n.Name, n.stderr())
		assert.Contains(t, n.stderr(), "ucx_tls=sm,self")
	}
	owner.quit(15 * time.Second)
	cons.quit(15 * time.Second)
}

func TestSharedMemoryUCXLanesWithTheSameHostPath(t *testing.T) {
	dir := shmDir(t)
	env := []string{"UCX_TLS=sm,self"}
	owner, cons := shmNode(t, "owner", dir, env), shmNode(t, "consumer", dir, env)
	pair(t, owner, cons)
	cons.waitSameHost(owner.id())
	for _, size := range []int{1 << 20, 8<<20 + 5} {
		p := stage(owner, size, true)
		delivered(t, cons.do("get "+p.Handle), p, "shm/ok")
	}
	assert.EqualValues(t, 2, sumSeries(owner, "velo_rendezvous_rdma_path_total", "path=shm", "reason=ok"), "the owner counts shm/ok")
	assert.EqualValues(t, 2, sumSeries(cons, "velo_rendezvous_rdma_path_total", "path=shm", "reason=ok"), "the consumer counts shm/ok")
	assert.Zero(t, sumSeries(cons, "velo_rendezvous_rdma_path_total", "path=chunked"))
}
