package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/discovery/etcd/etcdtest"
)

// host is a network namespace with one end of a veth pair: a node of the two-node tests, whose
// processes see only its loopback and its veth, so the bytes cross the link as between two hosts.
type host struct {
	ns, dev, ip string
	dev2, ip2   string // a second link between the same two hosts (secondLink), for rails
}

// wrap is the command prefix that runs a program inside the namespace.
func (h host) wrap() []string { return []string{"ip", "netns", "exec", h.ns} }

// wrapCounted is wrap for a velobench process that counts its lanes: ip netns exec mounts a fresh
// /sys without the cgroup v2 hierarchy, so the hierarchy is mounted again in the mount namespace
// ip made for the process (and nowhere else). Where that fails the process says why its lanes
// are not counted, which checkLanes accepts.
func (h host) wrapCounted() []string {
	return append(h.wrap(), "sh", "-c", `mount -t cgroup2 none /sys/fs/cgroup 2>/dev/null; exec "$0" "$@"`)
}

var pairSeq atomic.Uint32

// twoHosts makes two namespaces joined by a veth pair on a /30 of their own, removed when the test
// ends. Without root or iproute2 it skips the test, saying why.
func twoHosts(t *testing.T) (a, b host) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the two-node test needs root to create network namespaces; run it as root (make test-velobench does)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("the two-node test needs the ip command (Debian package iproute2): run make deps")
	}
	n := pairSeq.Add(1)
	id := fmt.Sprintf("%d%d", os.Getpid()%100000, n) // interface names stay under 15 bytes
	block := (uint32(os.Getpid())*8 + n*4) % (1 << 14)
	third, fourth := 64+byte(block>>8)%64, byte(block)&0xfc
	a = host{ns: "vbench-a" + id, dev: "vba" + id, ip: fmt.Sprintf("10.202.%d.%d", third, fourth+1)}
	b = host{ns: "vbench-b" + id, dev: "vbb" + id, ip: fmt.Sprintf("10.202.%d.%d", third, fourth+2)}
	ipCmd := func(args ...string) error {
		out, err := exec.Command("ip", args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
		}
		return nil
	}
	cleanup := func() {
		_ = ipCmd("netns", "del", a.ns)
		_ = ipCmd("netns", "del", b.ns)
	}
	for _, s := range [][]string{
		{"netns", "add", a.ns}, {"netns", "add", b.ns},
		{"link", "add", a.dev, "type", "veth", "peer", "name", b.dev},
		{"link", "set", a.dev, "netns", a.ns}, {"link", "set", b.dev, "netns", b.ns},
		{"-n", a.ns, "addr", "add", a.ip + "/30", "dev", a.dev}, {"-n", b.ns, "addr", "add", b.ip + "/30", "dev", b.dev},
		{"-n", a.ns, "link", "set", a.dev, "up"}, {"-n", b.ns, "link", "set", b.dev, "up"},
		{"-n", a.ns, "link", "set", "lo", "up"}, {"-n", b.ns, "link", "set", "lo", "up"},
	} {
		if err := ipCmd(s...); err != nil {
			cleanup()
			if strings.Contains(err.Error(), "Operation not permitted") {
				t.Skipf("this machine does not allow network namespaces: %v", err)
			}
			t.Fatal(err)
		}
	}
	t.Cleanup(cleanup)
	// A second veth pair between the same namespaces, on a /30 of its own: a second rail.
	a.dev2, b.dev2 = a.dev+"r", b.dev+"r"
	a.ip2, b.ip2 = fmt.Sprintf("10.203.%d.%d", third, fourth+1), fmt.Sprintf("10.203.%d.%d", third, fourth+2)
	for _, s := range [][]string{
		{"link", "add", a.dev2, "type", "veth", "peer", "name", b.dev2},
		{"link", "set", a.dev2, "netns", a.ns}, {"link", "set", b.dev2, "netns", b.ns},
		{"-n", a.ns, "addr", "add", a.ip2 + "/30", "dev", a.dev2}, {"-n", b.ns, "addr", "add", b.ip2 + "/30", "dev", b.dev2},
		{"-n", a.ns, "link", "set", a.dev2, "up"}, {"-n", b.ns, "link", "set", b.dev2, "up"},
	} {
		require.NoError(t, ipCmd(s...))
	}
	return a, b
}

// The target on one host and the initiator on another find each other through the filesystem
// backend and through etcd, sweep a few points over the veth on the RDMA path, and the report
// says where the target was reached. Over the filesystem the ucx_perftest baseline runs across
// the link too (a server the target starts, a client on the initiator's host). Over etcd both
// sides use velo's rails over the two links (--rails), and each point says how many bytes each
// rail carried. Both sides count their lanes across the link (as root): the payload on UCX's
// sockets, the etcd connections in the lane of their own.
func TestTwoNodes(t *testing.T) {
	a, b := twoHosts(t)
	for _, backend := range []string{"filesystem", "etcd"} {
		t.Run(backend, func(t *testing.T) {
			dir := t.TempDir()
			js := filepath.Join(dir, "r.json")
			var meet, targetRails, initRails []string
			perftest := "auto"
			targetEnv, initEnv := childEnv("UCX_NET_DEVICES="+a.dev), childEnv("UCX_NET_DEVICES="+b.dev)
			if backend == "etcd" {
				meet = []string{"--etcd", startEtcd(t, a, b), "--cluster", "twonodes"}
				perftest = "off"
				targetEnv, initEnv = childEnv(), childEnv()
				targetRails, initRails = []string{"--rails", a.dev + "," + a.dev2}, []string{"--rails", b.dev + "," + b.dev2}
			} else {
				meet = []string{"--dir", filepath.Join(dir, "disc")}
			}
			target := start(t, "target", targetEnv, a.wrapCounted(), append(append([]string{"target", "--once"}, meet...), targetRails...)...)
			target.waitLine("ready", 30*time.Second)
			init := start(t, "initiator", initEnv, b.wrapCounted(), append(append(append([]string{"initiator", "--wait", "30s",
				"--ops", "get,batch", "--blocks", "64K,1M", "--batch", "4", "--perftest", perftest, "--json", js}, meet...), initRails...), quickSweep()...)...)
			require.Equal(t, 0, init.wait(90*time.Second), init.errOut())
			require.Equal(t, 0, target.wait(20*time.Second), "the target did not exit after the initiator's bye (--once)")

			_, r := readJSONReport(t, js)
			assert.True(t, r.Complete)
			assert.Equal(t, "two-node", r.Mode)
			assert.Equal(t, a.ip, r.TargetAddress, "the target advertised an address the other host cannot reach")
			if backend == "etcd" {
				assert.Contains(t, r.Discovery, "etcd "+meet[1])
				assert.Contains(t, r.Initiator.Rails, b.dev)
				assert.Contains(t, r.Initiator.Rails, b.dev2)
				assert.Contains(t, r.Target.Rails, a.dev2)
			} else {
				assert.Contains(t, r.Discovery, "directory "+meet[1])
				assert.Equal(t, a.dev, r.Target.UCXEnv["UCX_NET_DEVICES"])
				assert.Equal(t, b.dev, r.Initiator.UCXEnv["UCX_NET_DEVICES"])
				assert.Empty(t, r.Initiator.Rails)
			}
			require.Len(t, r.Points, 4)
			for _, pt := range r.Points {
				assert.GreaterOrEqual(t, pt.PathsInitiator["rdma/ok"], float64(pt.Operations*pt.Batch), pt.label())
				assert.GreaterOrEqual(t, pt.PathsTarget["rdma/ok"], float64(pt.Operations*pt.Batch), pt.label())
				assert.Positive(t, pt.GBps, pt.label())
				checkLanes(t, r, pt)
				if os.Geteuid() == 0 {
					assert.True(t, strings.HasPrefix(r.Initiator.Lanes, "counted"), r.Initiator.Lanes)
					assert.True(t, strings.HasPrefix(r.Target.Lanes, "counted"), r.Target.Lanes)
				}
				t.Logf("%s: %.3f GB/s, lanes %+v / %+v, rails %v", pt.label(), pt.GBps, pt.LanesInitiator, pt.LanesTarget, pt.RailsInitiator)
				if backend != "etcd" {
					assert.Nil(t, pt.RailsInitiator, pt.label())
					continue
				}
				// The reader's rails carried the payload between them, each a share: the rail a
				// transfer starts from turns, and a batch's reads spread over both.
				require.Len(t, pt.RailsInitiator, 2, pt.label())
				var sum float64
				for rail, n := range pt.RailsInitiator {
					assert.Positive(t, n, "%s: rail %s carried nothing", pt.label(), rail)
					sum += n
				}
				assert.GreaterOrEqual(t, sum, float64(pt.Bytes), pt.label())
			}
			if backend == "filesystem" && !r.Initiator.UCXGuard && !strings.HasPrefix(r.Initiator.Perftest, "none") {
				for _, pt := range r.Points {
					require.NotNil(t, pt.Perftest, pt.label())
					assert.Positive(t, pt.Perftest.GBps, "%s: %s", pt.label(), pt.Perftest.Note)
				}
			}
		})
	}
}

// startEtcd runs a one-member etcd on host a's address (Debian's etcd-server, which make deps
// installs), waits until it answers from host b, and stops it when the test ends. (etcdtest's
// own health check dials from this process's namespace, which has no route to the pair.)
func startEtcd(t *testing.T, a, b host) string {
	t.Helper()
	bin := etcdtest.Binary(t)
	url := "http://" + a.ip + ":2379"
	var out bytes.Buffer
	cmd := exec.Command("ip", append(a.wrap(), bin, "--name", "vbench", "--data-dir", t.TempDir(),
		"--listen-client-urls", url, "--advertise-client-urls", url,
		"--listen-peer-urls", "http://127.0.0.1:2380", "--initial-advertise-peer-urls", "http://127.0.0.1:2380",
		"--initial-cluster", "vbench=http://127.0.0.1:2380", "--log-level", "warn")[1:]...)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if healthy, err := etcdHealthFrom(b, a.ip+":2379"); err == nil && healthy {
			return url
		}
		select {
		case <-exited:
			t.Fatalf("etcd (%s) exited: %v\n%s", strings.Join(cmd.Args, " "), waitErr, out.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd on %s did not answer from %s within 30s:\n%s", url, b.ns, out.String())
		}
	}
}

// etcdHealthFrom asks etcd's /health from inside host h's namespace, by running this test binary
// there in its health-check role (healthEnv). A thread of this process that entered the namespace
// would have to die afterwards, and a dying thread takes with it the children it forked under
// Pdeathsig, etcd's among them.
func etcdHealthFrom(h host, addr string) (bool, error) {
	exe, err := os.Executable()
	if err != nil {
		return false, err
	}
	cmd := exec.Command("ip", "netns", "exec", h.ns, exe)
	cmd.Env = append(os.Environ(), healthEnv+"=http://"+addr+"/health")
	return cmd.Run() == nil, nil
}

// healthCheck is the health-check role: exit 0 when the URL answers that etcd is healthy.
func healthCheck(url string) int {
	c := &http.Client{Timeout: time.Second}
	r, err := c.Get(url)
	if err != nil {
		return 1
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	if strings.Contains(string(b), `"health":"true"`) {
		return 0
	}
	return 1
}
