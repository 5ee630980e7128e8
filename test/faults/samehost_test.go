package faults

// The same-host path between real processes of this host: they take it (metrics on both sides
// say shm), a consumer killed, or stopped and resumed, mid-read and an owner killed mid-read lose
// nothing and leave nothing behind (ring mappings, channel sockets and descriptors are counted in
// /proc), and a process without the cluster secret or of another user reads nothing through it.

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/test/internal/netns"
)

// shmDir is a private socket directory for the nodes of one test.
func shmDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "velo-shm-") // short: a socket path has at most 107 bytes
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// shmNode starts a faultnode with the same-host path on, its socket in dir, with env added to
// this process's environment.
func shmNode(t *testing.T, name, dir string, env []string, flags ...string) *node {
	t.Helper()
	cmd := exec.Command(faultnode(t), append([]string{"-log", "info", "-same-host", "-shm-dir", dir}, flags...)...)
	cmd.Env = append(os.Environ(), env...)
	return launch(t, name, cmd)
}

// sameHost asks n whether its reads from peer take the same-host path.
func (n *node) sameHost(peer string) (bool, string) {
	n.t.Helper()
	r := n.ok("samehost " + peer)
	why, _ := r["why"].(string)
	return r["same_host"] == true, why
}

func (n *node) waitSameHost(peer string) {
	n.t.Helper()
	require.Eventually(n.t, func() bool { ok, _ := n.sameHost(peer); return ok }, 30*time.Second, 20*time.Millisecond,
		"%s never took the same-host path to %s", n.Name, peer)
}

func (n *node) pid() int { return n.Cmd.Process.Pid }

// ringMaps counts the same-host rings mapped in process pid: those it serves reads and writes
// through and those it reads and writes through (both ends map a channel's ring writable, since a
// push hands its bytes over in it).
func ringMaps(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	require.NoError(t, err)
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "velo-shm-ring") {
			n++
		}
	}
	return n
}

// openFDs counts the descriptors process pid holds.
func openFDs(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	require.NoError(t, err)
	return len(ents)
}

// channels counts the owner's accepted channel sockets: the sockets bound to its socket path in
// dir, less its listener (read in the owner's network namespace, which holds them).
func channels(t *testing.T, owner *node, dir, ownerID string) int {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/net/unix", owner.pid()))
	require.NoError(t, err)
	defer f.Close()
	n := 0
	s := bufio.NewScanner(f)
	for s.Scan() {
		if strings.Contains(s.Text(), filepath.Join(dir, ownerID)+"-") {
			n++
		}
	}
	return n - 1
}

// leftNothing waits until the process holds no ring, no payload file and no more descriptors
// than before.
func leftNothing(t *testing.T, n *node, fdsBefore int) {
	t.Helper()
	noPayloadFiles(t, n)
	require.Eventually(t, func() bool { return ringMaps(t, n.pid()) == 0 }, 30*time.Second, 50*time.Millisecond,
		"%s still maps a same-host ring", n.Name)
	require.Eventually(t, func() bool { return openFDs(t, n.pid()) <= fdsBefore }, 30*time.Second, 50*time.Millisecond,
		"%s holds %d descriptors, %d before", n.Name, openFDs(t, n.pid()), fdsBefore)
}

func TestSameHostTwoProcessesTakeThePath(t *testing.T) {
	dir := shmDir(t)
	owner, cons := shmNode(t, "owner", dir, nil), shmNode(t, "consumer", dir, nil)
	pair(t, owner, cons)
	ownerID := owner.id()
	cons.waitSameHost(ownerID)
	assert.Equal(t, 1, channels(t, owner, dir, ownerID), "the probe opened one channel")
	// Each side registered the other, so each probed the other: every process maps one ring as
	// owner and one as consumer.
	assert.Equal(t, 2, ringMaps(t, owner.pid()))
	assert.Equal(t, 2, ringMaps(t, cons.pid()))

	for _, size := range []int{8 << 20, 64<<20 + 12345} {
		p := stage(owner, size, true)
		delivered(t, cons.do("get "+p.Handle), p, "shm/ok")
	}
	assert.EqualValues(t, 2, sumSeries(owner, "velo_rendezvous_rdma_path_total", "path=shm", "reason=ok"), "the owner counts shm/ok")
	assert.EqualValues(t, 2, sumSeries(cons, "velo_rendezvous_rdma_path_total", "path=shm", "reason=ok"), "the consumer counts shm/ok")
	assert.Zero(t, sumSeries(owner, "velo_rendezvous_rdma_path_total", "path=rdma"))
	owner.waitStats("leases end", 30*time.Second, func(s stats) bool { return s.OpenLeases == 0 && s.LeaseRegistrations == 0 })
	cons.quit(15 * time.Second)
	require.Eventually(t, func() bool { return channels(t, owner, dir, ownerID) == 0 && ringMaps(t, owner.pid()) == 0 }, 10*time.Second, 20*time.Millisecond,
		"the owner kept the departed consumer's channel")
	final := owner.quit(15 * time.Second)
	assert.Zero(t, final.PinnedBytes)
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, ents, "a socket outlived its instance")
}

// slowOwner serves through rings of 4 KiB buffers (ownerFlags), so that a read of a few hundred
// MiB takes long enough to be interrupted mid-way on any machine.
func slowOwner(t *testing.T, dir string, flags ...string) *node {
	return shmNode(t, "owner", dir, nil, append(ownerFlags(time.Hour), flags...)...)
}

// midRead starts a get of p on cons and waits until the owner's copy of it is under way.
func midRead(t *testing.T, owner, cons *node, p staged) {
	t.Helper()
	cons.send("get " + p.Handle)
	owner.waitStats("a lease registration", 30*time.Second, func(s stats) bool { return s.LeaseRegistrations == 1 })
	time.Sleep(100 * time.Millisecond)
}

func TestSameHostConsumerKilledMidRead(t *testing.T) {
	dir := shmDir(t)
	owner := slowOwner(t, dir)
	ownerID := owner.id()
	fdsBefore := openFDs(t, owner.pid())
	start := owner.stats()
	cons := shmNode(t, "consumer", dir, nil)
	pair(t, owner, cons)
	cons.waitSameHost(ownerID)
	p := stage(owner, 256<<20, true)

	midRead(t, owner, cons, p)
	cons.kill()
	owner.ok("release " + p.Handle)
	backToStart(t, owner, start)
	require.Eventually(t, func() bool { return channels(t, owner, dir, ownerID) == 0 }, 30*time.Second, 50*time.Millisecond, "a channel of the dead consumer is open")
	leftNothing(t, owner, fdsBefore)
	// The owner goes on serving: a new consumer gets the payload through the path.
	second := shmNode(t, "second", dir, nil)
	pair(t, owner, second)
	second.waitSameHost(ownerID)
	q := stage(owner, 1<<20, true)
	delivered(t, second.do("get "+q.Handle), q, "shm/ok")
}

func TestSameHostConsumerStoppedAndResumed(t *testing.T) {
	dir := shmDir(t)
	const bound = 5 * time.Second
	owner := shmNode(t, "owner", dir, nil, ownerFlags(bound)...)
	ownerID := owner.id()
	cons := shmNode(t, "consumer", dir, nil)
	pair(t, owner, cons)
	cons.waitSameHost(ownerID)
	start := owner.stats()
	p := stage(owner, 256<<20, true)

	midRead(t, owner, cons, p)
	cons.stop()
	st := owner.waitStats("the stalled lease quarantined", 30*time.Second, func(s stats) bool { return s.Quarantined == 1 })
	require.Zero(t, st.LeaseRegistrations)
	quarantinedAt := time.Now()
	owner.ok("release " + p.Handle)
	backToStart(t, owner, start)
	assert.GreaterOrEqual(t, time.Since(quarantinedAt), bound-time.Second, "memory reused before the force bound")
	if !assert.Zero(t, channels(t, owner, dir, ownerID), "the force close must close the stalled consumer's channels") {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/net/unix", owner.pid()))
		t.Logf("the owner's unix sockets:\n%s", b)
	}
	// Both directions' channels to the stalled consumer closed (ForceClosePeer), and none opens
	// again while it is stopped (it never greets): the owner maps no ring.
	require.Eventually(t, func() bool { return ringMaps(t, owner.pid()) == 0 }, 10*time.Second, 20*time.Millisecond,
		"the owner still maps a ring shared with the stalled consumer")

	cons.resume()
	r := cons.read(2 * time.Minute)
	if r["error"] == nil {
		assert.Equal(t, p.SHA256, r["sha256"], "the resumed read returned other bytes")
	}
	require.True(t, owner.alive())
	// The resumed consumer opens a new channel and reads through the path again.
	q := stage(owner, 2<<20, true)
	var last map[string]any
	require.Eventually(t, func() bool {
		owner.ok("ref " + q.Handle)
		last = cons.do("get " + q.Handle)
		return last["error"] == nil && last["sha256"] == q.SHA256 && last["path"] == "shm/ok"
	}, 30*time.Second, 100*time.Millisecond, "the resumed consumer never read through the path again: %v", last)
	fdsBefore := openFDs(t, cons.pid())
	owner.quit(15 * time.Second)
	require.Eventually(t, func() bool { return ringMaps(t, cons.pid()) == 0 }, 30*time.Second, 50*time.Millisecond)
	assert.LessOrEqual(t, openFDs(t, cons.pid()), fdsBefore)
}

func TestSameHostOwnerKilledMidRead(t *testing.T) {
	dir := shmDir(t)
	owner := slowOwner(t, dir)
	ownerID := owner.id()
	cons := shmNode(t, "consumer", dir, nil)
	fdsBefore := openFDs(t, cons.pid())
	pair(t, owner, cons)
	cons.waitSameHost(ownerID)
	p := stage(owner, 256<<20, true)

	midRead(t, owner, cons, p)
	owner.kill()
	r := cons.read(2 * time.Minute)
	assert.NotEmpty(t, r["error"], "a get whose owner died must fail")
	assert.Empty(t, r["sha256"])
	require.True(t, cons.alive())
	leftNothing(t, cons, fdsBefore+2) // the TCP and UCX sides of the dead peer may linger
	require.Eventually(t, func() bool { return ringMaps(t, cons.pid()) == 0 }, 30*time.Second, 50*time.Millisecond)
	st := cons.quit(15 * time.Second)
	assert.Zero(t, st.OpenLeases)
}

// TestSameHostOutsidersReadNothing: the owner and its consumer share a cluster secret; a third
// process of this user without the secret, and a process of another user, never get a channel,
// and the owner serves them nothing.
func TestSameHostOutsidersReadNothing(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("running a process as another user needs root")
	}
	dir := shmDir(t)
	secret := []string{"VELO_CLUSTER_SECRET=" + clusterSecret}
	owner := shmNode(t, "owner", dir, secret)
	cons := shmNode(t, "consumer", dir, secret)
	pair(t, owner, cons)
	ownerID := owner.id()
	cons.waitSameHost(ownerID)
	p := stage(owner, 4<<20, true)
	owner.ok("ref " + p.Handle)
	delivered(t, cons.do("get "+p.Handle), p, "shm/ok")

	// No secret: the control plane refuses it, and so does the same-host socket.
	nosecret := shmNode(t, "nosecret", dir, nil)
	info, err := owner.Info()
	require.NoError(t, err)
	nosecret.do("peer " + info)
	time.Sleep(time.Second)
	ok, why := nosecret.sameHost(ownerID)
	assert.False(t, ok)
	t.Logf("without the secret: %s", why)
	r := nosecret.do("get " + p.Handle)
	assert.NotEmpty(t, r["error"])
	assert.Empty(t, r["sha256"])

	// Another user: it cannot even reach the socket (the directory is the owner's, mode 0700).
	// The binary goes where that user may run it, and its socket directory is its own.
	otherRoot, err := os.MkdirTemp("", "velo-faults-other-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(otherRoot) })
	require.NoError(t, os.Chmod(otherRoot, 0o755))
	bin := filepath.Join(otherRoot, "faultnode")
	data, err := os.ReadFile(faultnode(t))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(bin, data, 0o755))
	otherDir := filepath.Join(otherRoot, "shm")
	require.NoError(t, os.Mkdir(otherDir, 0o700))
	require.NoError(t, os.Chown(otherDir, 65534, 65534))
	cmd := exec.Command(bin, "-log", "info", "-same-host", "-shm-dir", otherDir)
	cmd.Env = append(os.Environ(), secret...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	other := launch(t, "other-user", cmd)
	pair(t, owner, other)
	require.Eventually(t, func() bool { _, why := other.sameHost(ownerID); return why != "probing" }, 30*time.Second, 50*time.Millisecond)
	ok, why = other.sameHost(ownerID)
	assert.False(t, ok, "a process of another user took the same-host path")
	assert.Contains(t, why, "permission denied")
	r = other.do("get " + p.Handle)
	if r["error"] == nil {
		assert.NotEqual(t, "shm/ok", r["path"], "another user's process read through the same-host path")
	}

	assert.Equal(t, 1, channels(t, owner, dir, ownerID), "only the consumer's channel is open")
	assert.EqualValues(t, 1, sumSeries(owner, "velo_rendezvous_rdma_path_total", "path=shm", "reason=ok"), "the owner served through the path only to its consumer")
}

// TestSameHostAcrossNetworkNamespaces: two network namespaces of this host share its kernel and
// its memory, and the socket directory: they take the path. Configured as separate hosts
// (VELO_SHM_HOST_ID differs), the same two never do, and their gets stay on the RDMA path.
func TestSameHostAcrossNetworkNamespaces(t *testing.T) {
	for _, c := range []struct {
		name         string
		hostA, hostB string
		path         string
	}{
		{"one host", "", "", "shm/ok"},
		{"configured as two hosts", "host-a", "host-b", "rdma/ok"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := netns.New(t)
			dir := shmDir(t)
			start := func(h netns.Host, name, hostID string) *node {
				cmd := h.Command(context.Background(), faultnode(t), "-log", "info", "-same-host", "-shm-dir", dir,
					"-listen", fmt.Sprintf("%s:7401", h.IP))
				cmd.Env = append(os.Environ(), "UCX_TLS=tcp", "UCX_NET_DEVICES="+h.Dev)
				if hostID != "" {
					cmd.Env = append(cmd.Env, "VELO_SHM_HOST_ID="+hostID)
				}
				return launch(t, name, cmd)
			}
			owner, cons := start(p.A, "owner", c.hostA), start(p.B, "consumer", c.hostB)
			pair(t, owner, cons)
			ownerID := owner.id()
			if c.path == "shm/ok" {
				cons.waitSameHost(ownerID)
			} else {
				time.Sleep(500 * time.Millisecond) // a probe, if one were started, would have run
				ok, why := cons.sameHost(ownerID)
				assert.False(t, ok)
				assert.Contains(t, why, "another host")
				assert.Zero(t, channels(t, owner, dir, ownerID), "a consumer of another host connected")
			}
			q := stage(owner, 4<<20, true)
			delivered(t, cons.do("get "+q.Handle), q, c.path)
		})
	}
}
