//go:build linux

package lanes

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const childEnv = "VELO_LANES_TEST_CHILD"

// TestMain lets the test binary play the child processes the counter counts.
func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "":
		os.Exit(m.Run())
	case "loopback":
		childLoopback()
	case "dualstack":
		childDualStack()
	case "sleep":
		fmt.Println("ready")
		time.Sleep(time.Hour)
	case "counter-then-sleep":
		childCounterThenSleep()
	}
	os.Exit(0)
}

// childLoopback writes n bytes from a client to a server on loopback, both in this process, and
// prints the two ports.
func childLoopback() {
	n, _ := strconv.Atoi(os.Getenv("BYTES"))
	host := "127.0.0.1"
	if h := os.Getenv("LOOPBACK"); h != "" {
		host = h
	}
	ln, err := net.Listen("tcp", host+":0")
	if err != nil {
		panic(err)
	}
	done := make(chan int64)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			panic(err)
		}
		got, _ := io.Copy(io.Discard, c)
		done <- got
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		panic(err)
	}
	buf := make([]byte, 1<<20)
	for left := n; left > 0; left -= len(buf) {
		if _, err := c.Write(buf[:min(left, len(buf))]); err != nil {
			panic(err)
		}
	}
	c.Close()
	if got := <-done; got != int64(n) {
		panic(fmt.Sprintf("server read %d of %d bytes", got, n))
	}
	fmt.Printf("server %d client %d\n", ln.Addr().(*net.TCPAddr).Port, c.LocalAddr().(*net.TCPAddr).Port)
}

// childDualStack listens on a dual-stack socket ("[::]:0", AF_INET6), connects to it over
// 127.0.0.1 (AF_INET), writes n bytes and prints the two ports. The server's socket is AF_INET6
// while its packets are IPv4, as for a control plane that listens on every address.
func childDualStack() {
	n, _ := strconv.Atoi(os.Getenv("BYTES"))
	ln, err := net.Listen("tcp", "[::]:0")
	if err != nil {
		panic(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	done := make(chan int64)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			panic(err)
		}
		got, _ := io.Copy(io.Discard, c)
		c.Write([]byte("ok")) // the server's socket sends too
		c.Close()
		done <- got
	}()
	c, err := net.Dial("tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		panic(err)
	}
	if _, err := c.Write(make([]byte, n)); err != nil {
		panic(err)
	}
	c.(*net.TCPConn).CloseWrite()
	io.Copy(io.Discard, c)
	c.Close()
	if got := <-done; got != int64(n) {
		panic(fmt.Sprintf("server read %d of %d bytes", got, n))
	}
	fmt.Printf("server %d client %d\n", port, c.LocalAddr().(*net.TCPAddr).Port)
}

// childCounterThenSleep makes a counter with a child in it and waits to be killed.
func childCounterThenSleep() {
	c, err := New(Options{Parent: os.Getenv("PARENT")})
	if err != nil {
		panic(err)
	}
	cmd := c.Command(os.Args[0])
	cmd.Env = append(os.Environ(), childEnv+"=sleep")
	if err := cmd.Start(); err != nil {
		panic(err)
	}
	var ids []string
	for _, p := range c.progs {
		if info, err := p.Info(); err == nil {
			if id, ok := info.ID(); ok {
				ids = append(ids, strconv.Itoa(int(id)))
			}
		}
	}
	fmt.Println(c.Cgroup(), strings.Join(ids, ","))
	time.Sleep(time.Hour)
}

// transfer runs this test binary as the child mode in c's cgroup, moving n bytes (env: more of the
// child's settings), and returns the ports the child printed.
func transfer(t *testing.T, c *Counter, mode string, n int, env ...string) (server, client uint16) {
	t.Helper()
	cmd := c.Command(os.Args[0])
	cmd.Env = append(append(os.Environ(), childEnv+"="+mode, "BYTES="+strconv.Itoa(n)), env...)
	out, err := cmd.Output()
	require.NoError(t, err)
	_, err = fmt.Sscanf(string(out), "server %d client %d", &server, &client)
	require.NoError(t, err, "child said %q", out)
	return server, client
}

// newCounter makes a counter, or skips the test where counting cannot work: not root (the suite
// makes cgroups and loads programs), or no cgroup v2 mount. Anywhere else a failure is a failure.
func newCounter(t *testing.T, parent string) *Counter {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("lane counting needs root here (cgroups and BPF programs); skipped")
	}
	if _, err := cgroup2Mount(); err != nil {
		t.Skipf("skipped: %v", err)
	}
	c, err := New(Options{Parent: parent})
	require.NoError(t, err)
	t.Cleanup(func() {
		c.Close()
		if root, err := cgroup2Mount(); err == nil {
			_ = os.Remove(filepath.Join(root, parent)) // once its last counter is gone
		}
	})
	return c
}

func testParent(t *testing.T) string { return "velo-lanes-test-" + strconv.Itoa(os.Getpid()) }

// TestCountsALoopbackTransfer: 64 MiB written on loopback by a process started in the cgroup is
// counted on the client's socket going out and on the server's coming in, each at least the
// payload (IP and TCP headers come on top) and not much more.
func TestCountsALoopbackTransfer(t *testing.T) {
	c := newCounter(t, testParent(t))
	const n = 64 << 20
	server, client := transfer(t, c, "loopback", n)

	flows, err := c.Read()
	require.NoError(t, err)
	var sent, recv uint64
	for _, f := range flows {
		if f.Protocol != ProtoTCP {
			continue
		}
		switch {
		case f.LocalPort == client && f.RemotePort == server && f.Dir == Egress:
			sent += f.Bytes
		case f.LocalPort == server && f.RemotePort == client && f.Dir == Ingress:
			recv += f.Bytes
		}
	}
	for what, got := range map[string]uint64{"client out": sent, "server in": recv} {
		assert.GreaterOrEqual(t, got, uint64(n), "%s: %d bytes for a %d-byte transfer", what, got, n)
		assert.Less(t, got, uint64(n)*102/100, "%s: %d bytes for a %d-byte transfer", what, got, n)
	}
	lanes := Classify(flows, "other", PortsLane("transfer", server))
	require.NotEmpty(t, lanes)
	assert.Equal(t, "transfer", lanes[0].Name)
	assert.GreaterOrEqual(t, lanes[0].BytesOut, uint64(n))
	assert.GreaterOrEqual(t, lanes[0].BytesIn, uint64(n))
	for _, f := range flows {
		if f.Touches(server) {
			assert.Equal(t, "127.0.0.1", f.LocalAddr.String(), "flow %+v", f)
		}
	}
}

// TestLocalAddressTellsInterfacesApart: a server on 127.0.0.2 and its client on 127.0.0.1 (two
// addresses, as two rails of a host have) are told apart by the flows' local address, and an
// address lane takes each side's bytes.
func TestLocalAddressTellsInterfacesApart(t *testing.T) {
	c := newCounter(t, testParent(t))
	const n = 8 << 20
	server, client := transfer(t, c, "loopback", n, "LOOPBACK=127.0.0.2")
	flows, err := c.Read()
	require.NoError(t, err)
	for _, f := range flows {
		switch f.LocalPort {
		case server:
			assert.Equal(t, "127.0.0.2", f.LocalAddr.String(), "the server's flow %+v", f)
		case client:
			assert.Equal(t, "127.0.0.1", f.LocalAddr.String(), "the client's flow %+v", f)
		}
	}
	lanes := Classify(flows, "other",
		AddrLane("server side", netip.MustParsePrefix("127.0.0.2/32")),
		AddrLane("client side", netip.MustParsePrefix("127.0.0.1/32")))
	require.GreaterOrEqual(t, len(lanes), 2)
	assert.GreaterOrEqual(t, lanes[0].BytesIn, uint64(n), "the server's address received the transfer")
	assert.Less(t, lanes[0].BytesOut, uint64(n)/10, "the server's address sent only ACKs")
	assert.GreaterOrEqual(t, lanes[1].BytesOut, uint64(n), "the client's address sent it")
	assert.Less(t, lanes[1].BytesIn, uint64(n)/10)
}

// TestDualStackListenerCountsAsTCP: a server on a dual-stack socket ("[::]", family AF_INET6)
// talking to an IPv4 client receives IPv4 packets. The programs read the protocol at the offset
// of the packet's own IP version, so both sockets' bytes are TCP flows over IPv4 and fall in the
// TCP lane, with nothing left for the rest (the protocol was once read at the IPv6 offset for
// such a socket, and its packets showed as ip-proto-64: the IPv4 flags byte).
func TestDualStackListenerCountsAsTCP(t *testing.T) {
	c := newCounter(t, testParent(t))
	const n = 8 << 20
	server, client := transfer(t, c, "dualstack", n)

	flows, err := c.Read()
	require.NoError(t, err)
	var serverIn, serverOut, clientOut uint64
	for _, f := range flows {
		if !f.Touches(server) {
			continue
		}
		assert.Equal(t, "tcp", f.ProtocolName(), "flow %+v of the dual-stack connection", f)
		assert.False(t, f.IPv6, "flow %+v carried IPv4 packets", f)
		if f.RemotePort != 0 {
			assert.Equal(t, "127.0.0.1", f.LocalAddr.String(), "flow %+v: the v4-mapped address is reported as IPv4", f)
		} else { // the handshake, charged to the listener, whose address is the wildcard
			assert.Equal(t, "::", f.LocalAddr.String(), "the listener's flow %+v", f)
		}
		switch {
		case f.LocalPort == server && f.RemotePort == client && f.Dir == Ingress:
			serverIn += f.Bytes
		case f.LocalPort == server && f.RemotePort == client && f.Dir == Egress:
			serverOut += f.Bytes
		case f.LocalPort == client && f.RemotePort == server && f.Dir == Egress:
			clientOut += f.Bytes
		}
	}
	assert.GreaterOrEqual(t, serverIn, uint64(n), "the dual-stack server's socket received the transfer")
	assert.Less(t, serverIn, uint64(n)*102/100)
	assert.GreaterOrEqual(t, clientOut, uint64(n))
	assert.Greater(t, serverOut, uint64(0), "the server's answer and ACKs")

	// As ibcheck lanes groups them: the connection is TCP, nothing is left over for the rest.
	lanes := Classify(flows, "other", ProtocolLane("tcp", ProtoTCP))
	require.Len(t, lanes, 1, "some flows were not TCP: %+v", flows)
	assert.GreaterOrEqual(t, lanes[0].BytesIn, uint64(n))
	assert.GreaterOrEqual(t, lanes[0].BytesOut, uint64(n))
}

// TestIPv6LoopbackCountsAsTCP: a connection over [::1] (IPv6 sockets, IPv6 packets) is counted as
// TCP over IPv6.
func TestIPv6LoopbackCountsAsTCP(t *testing.T) {
	c := newCounter(t, testParent(t))
	probe, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	probe.Close()
	const n = 1 << 20
	server, _ := transfer(t, c, "loopback", n, "LOOPBACK=[::1]")
	flows, err := c.Read()
	require.NoError(t, err)
	var serverIn uint64
	for _, f := range flows {
		if !f.Touches(server) {
			continue
		}
		assert.Equal(t, "tcp", f.ProtocolName(), "flow %+v of %+v", f, flows)
		assert.True(t, f.IPv6, "flow %+v carried IPv6 packets", f)
		assert.Equal(t, "::1", f.LocalAddr.String(), "flow %+v", f)
		if f.LocalPort == server && f.Dir == Ingress {
			serverIn += f.Bytes
		}
	}
	assert.GreaterOrEqual(t, serverIn, uint64(n))
}

// TestTwoCountersDoNotMix: two counters at once each see only their own processes.
func TestTwoCountersDoNotMix(t *testing.T) {
	a := newCounter(t, testParent(t))
	b := newCounter(t, testParent(t))
	run := func(c *Counter, n int) uint16 {
		server, _ := transfer(t, c, "loopback", n)
		return server
	}
	sa := run(a, 8<<20)
	sb := run(b, 1<<20)
	fa, err := a.Read()
	require.NoError(t, err)
	fb, err := b.Read()
	require.NoError(t, err)
	for _, f := range fa {
		assert.False(t, f.Touches(sb), "counter a saw b's transfer: %+v", f)
	}
	for _, f := range fb {
		assert.False(t, f.Touches(sa), "counter b saw a's transfer: %+v", f)
	}
	total := func(fs []Flow) (n uint64) {
		for _, f := range fs {
			n += f.Bytes
		}
		return n
	}
	assert.Greater(t, total(fa), uint64(2*8<<20))
	assert.Less(t, total(fb), uint64(3*8<<20))
}

// TestCloseRemovesEverything: after Close the cgroup is gone and nothing stays attached; a child
// still running is killed first.
func TestCloseRemovesEverything(t *testing.T) {
	c := newCounter(t, testParent(t))
	cmd := c.Command(os.Args[0])
	cmd.Env = append(os.Environ(), childEnv+"=sleep")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	require.Equal(t, "ready\n", line)
	dir := c.Cgroup()
	require.NoError(t, c.Close())
	_, err = os.Stat(dir)
	assert.True(t, os.IsNotExist(err), "the cgroup %s is still there", dir)
	err = cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "the child was not killed")
	_, err = c.Read()
	assert.Error(t, err)
}

// TestKilledCounterLeavesNothingAttached: a process holding a counter is killed (SIGKILL): its
// programs are detached with its file descriptors at once, its child dies with it, and the next
// counter under the same parent removes the cgroup it left.
func TestKilledCounterLeavesNothingAttached(t *testing.T) {
	parent := testParent(t)
	newCounter(t, parent) // skips where counting is not possible
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), childEnv+"=counter-then-sleep", "PARENT="+parent)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	dir, idList, _ := strings.Cut(strings.TrimSpace(line), " ")
	require.NotEmpty(t, idList, "the child did not say its programs' IDs")
	require.DirExists(t, dir)
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()

	require.Eventually(t, func() bool { return len(cgroupProcs(dir)) == 0 }, 10*time.Second, 10*time.Millisecond,
		"the killed counter's child is still in its cgroup")
	// The killed process's programs went with its file descriptors.
	require.Eventually(t, func() bool {
		for _, f := range strings.Split(idList, ",") {
			id, _ := strconv.Atoi(f)
			if p, err := ebpf.NewProgramFromID(ebpf.ProgramID(id)); err == nil {
				p.Close()
				return false
			}
		}
		return true
	}, 10*time.Second, 10*time.Millisecond, "the killed counter's programs %s are still loaded", idList)
	// The reaper removes the cgroup once the counter's process is gone.
	require.Eventually(t, func() bool {
		_, err := os.Stat(dir)
		return os.IsNotExist(err)
	}, 10*time.Second, 10*time.Millisecond, "the killed counter's cgroup %s is still there", dir)
	next := newCounter(t, parent)
	assert.NotEqual(t, dir, next.Cgroup())
}

// TestSweepRemovesWhatAKilledReaperLeft: should the reaper be killed too, the next counter under
// the same parent removes the cgroup.
func TestSweepRemovesWhatAKilledReaperLeft(t *testing.T) {
	parent := testParent(t)
	newCounter(t, parent)
	root, err := cgroup2Mount()
	require.NoError(t, err)
	dir := filepath.Join(root, parent, "999999999-deadbeef") // a pid no process has
	require.NoError(t, os.Mkdir(dir, 0o755))
	ids, err := attached(dir)
	require.NoError(t, err)
	assert.Empty(t, ids)
	newCounter(t, parent)
	_, err = os.Stat(dir)
	assert.True(t, os.IsNotExist(err), "the next counter did not remove the stale cgroup %s", dir)
}

// attached lists the programs attached to the cgroup at dir, both directions.
func attached(dir string) ([]string, error) {
	f, err := os.Open(filepath.Clean(dir))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	for name, attach := range map[string]ebpf.AttachType{"egress": ebpf.AttachCGroupInetEgress, "ingress": ebpf.AttachCGroupInetIngress} {
		res, err := link.QueryPrograms(link.QueryOptions{Target: int(f.Fd()), Attach: attach})
		if err != nil {
			return nil, err
		}
		for _, p := range res.Programs {
			out = append(out, fmt.Sprintf("%s:%d", name, p.ID))
		}
	}
	return out, nil
}
