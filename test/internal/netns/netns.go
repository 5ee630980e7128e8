// Package netns gives tests several hosts on one machine: network namespaces joined by veth pairs.
//
// Multi-host behaviour (addresses another node can reach, UCX_NET_DEVICES pinned to one interface,
// traffic that really leaves a host) cannot be tested on loopback alone. A namespace has its own
// interfaces, routes and sockets, so an owner in one namespace and a consumer in another talk over
// the veth link exactly as two nodes talk over a NIC. Creating namespaces needs root (CAP_NET_ADMIN
// and CAP_SYS_ADMIN) and iproute2; without them New skips the test and says why.
package netns

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// Host is one namespace with one end of the veth link.
type Host struct {
	// Name is the namespace name, as `ip netns` lists it.
	Name string
	// Dev is the veth interface inside the namespace.
	Dev string
	// IP is the interface's address.
	IP netip.Addr
}

// Pair is two hosts on one link.
type Pair struct {
	A, B Host
}

var seq atomic.Uint32

// New creates two namespaces joined by a veth pair, with addresses on a /30 of their own and
// loopback up in each, and removes them when the test ends. It skips the test when the machine
// cannot create namespaces.
func New(t testing.TB) *Pair {
	t.Helper()
	requireNamespaces(t)
	n := seq.Add(1)
	// Names stay short: interface names are limited to 15 bytes.
	id := fmt.Sprintf("%d%d", os.Getpid()%100000, n)
	subnet := (uint32(os.Getpid())*64 + n*4) % (1 << 14) // /30 blocks inside 10.200.0.0/16
	base := netip.AddrFrom4([4]byte{10, 200 + byte(subnet>>12), byte(subnet >> 4), byte(subnet&0xf) << 4})
	p := &Pair{
		A: Host{Name: "velo-a" + id, Dev: "va" + id, IP: base.Next()},
		B: Host{Name: "velo-b" + id, Dev: "vb" + id, IP: base.Next().Next()},
	}
	cleanup := func() {
		_ = run("ip", "netns", "del", p.A.Name)
		_ = run("ip", "netns", "del", p.B.Name)
	}
	steps := [][]string{
		{"ip", "netns", "add", p.A.Name},
		{"ip", "netns", "add", p.B.Name},
		{"ip", "link", "add", p.A.Dev, "type", "veth", "peer", "name", p.B.Dev},
		{"ip", "link", "set", p.A.Dev, "netns", p.A.Name},
		{"ip", "link", "set", p.B.Dev, "netns", p.B.Name},
		{"ip", "-n", p.A.Name, "addr", "add", p.A.IP.String() + "/30", "dev", p.A.Dev},
		{"ip", "-n", p.B.Name, "addr", "add", p.B.IP.String() + "/30", "dev", p.B.Dev},
		{"ip", "-n", p.A.Name, "link", "set", p.A.Dev, "up"},
		{"ip", "-n", p.B.Name, "link", "set", p.B.Dev, "up"},
		{"ip", "-n", p.A.Name, "link", "set", "lo", "up"},
		{"ip", "-n", p.B.Name, "link", "set", "lo", "up"},
	}
	runSteps(t, steps, cleanup)
	return p
}

// requireNamespaces skips the test, saying why, on a machine that cannot create namespaces.
func requireNamespaces(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("netns: needs root to create network namespaces; run the test as root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("netns: the ip command (Debian package iproute2) is not installed; run make deps")
	}
}

// runSteps runs the ip commands that build a topology; on a failure it removes what was made and
// skips the test (the machine forbids namespaces) or fails it. cleanup runs when the test ends.
func runSteps(t testing.TB, steps [][]string, cleanup func()) {
	t.Helper()
	for _, s := range steps {
		if err := run(s...); err != nil {
			cleanup()
			if strings.Contains(err.Error(), "Operation not permitted") {
				t.Skipf("netns: this machine does not allow network namespaces: %v", err)
			}
			t.Fatalf("netns: %v", err)
		}
	}
	t.Cleanup(cleanup)
}

// Star is n hosts on one switch: a bridge in this process's namespace with one veth to each
// host, all in one /24. Gateway is the bridge's address, from which the test (which stays in its
// own namespace) reaches every host.
type Star struct {
	Hosts   []Host
	Bridge  string
	Gateway netip.Addr
}

// NewStar creates n namespaces (at most 200) joined by a bridge, and removes them when the test
// ends. It skips the test when the machine cannot create namespaces.
func NewStar(t testing.TB, n int) *Star {
	t.Helper()
	requireNamespaces(t)
	if n < 1 || n > 200 {
		t.Fatalf("netns: a star of %d hosts", n)
	}
	k := seq.Add(1)
	id := fmt.Sprintf("%d%d", os.Getpid()%10000, k)
	third := byte((uint32(os.Getpid())*7 + k) % 250)
	s := &Star{Bridge: "vbr" + id, Gateway: netip.AddrFrom4([4]byte{10, 201, third, 1})}
	for i := range n {
		s.Hosts = append(s.Hosts, Host{Name: fmt.Sprintf("velo-s%s-%d", id, i), Dev: fmt.Sprintf("vs%sh%d", id, i),
			IP: netip.AddrFrom4([4]byte{10, 201, third, byte(i + 2)})})
	}
	cleanup := func() {
		for _, h := range s.Hosts {
			_ = run("ip", "netns", "del", h.Name)
		}
		_ = run("ip", "link", "del", s.Bridge)
	}
	steps := [][]string{
		{"ip", "link", "add", s.Bridge, "type", "bridge"},
		{"ip", "addr", "add", s.Gateway.String() + "/24", "dev", s.Bridge},
		{"ip", "link", "set", s.Bridge, "up"},
	}
	for i, h := range s.Hosts {
		peer := fmt.Sprintf("vs%sb%d", id, i) // the bridge's end
		steps = append(steps,
			[]string{"ip", "netns", "add", h.Name},
			[]string{"ip", "link", "add", h.Dev, "type", "veth", "peer", "name", peer},
			[]string{"ip", "link", "set", h.Dev, "netns", h.Name},
			[]string{"ip", "link", "set", peer, "master", s.Bridge},
			[]string{"ip", "link", "set", peer, "up"},
			[]string{"ip", "-n", h.Name, "addr", "add", h.IP.String() + "/24", "dev", h.Dev},
			[]string{"ip", "-n", h.Name, "link", "set", h.Dev, "up"},
			[]string{"ip", "-n", h.Name, "link", "set", "lo", "up"},
		)
	}
	runSteps(t, steps, cleanup)
	return s
}

// Command returns a command that runs inside the host's namespace (through `ip netns exec`).
// The child sees only the namespace's interfaces: loopback and the veth.
func (h Host) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", h.Name, name}, args...)...)
}

// Do runs f on an OS thread that has entered the host's namespace. Sockets f creates belong to the
// namespace for their whole life, even after the thread returns; that is how an in-process test
// listens on the host's address. The thread is discarded afterwards, never reused by Go.
func (h Host) Do(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		// Not unlocked on purpose: a thread left in another namespace must die with this goroutine.
		runtime.LockOSThread()
		fd, err := unix.Open("/run/netns/"+h.Name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("netns: open %s: %w", h.Name, err)
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("netns: enter %s: %w", h.Name, err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

func run(args ...string) error {
	var out bytes.Buffer
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}
