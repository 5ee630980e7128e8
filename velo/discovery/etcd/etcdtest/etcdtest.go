// Package etcdtest runs real etcd servers for tests: one member or a cluster of several, each its
// own process with its own data directory, which a test can stop, kill and start again. It runs
// the etcd binary on PATH (Debian's etcd-server package; `make deps` installs it) and fails the
// test, naming the fix, when there is none.
package etcdtest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Server is one etcd member.
type Server struct {
	Name      string
	ClientURL string // http://ip:port, what clients dial
	PeerURL   string
	dataDir   string
	cluster   string // --initial-cluster
	state     string // --initial-cluster-state
	command   Command

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	output *bytes.Buffer
}

// Command makes the process of one member: exec.Command by default; a test that runs etcd in a
// network namespace passes one that wraps it (ip netns exec).
type Command func(name string, args ...string) *exec.Cmd

// Member places one member: the address it listens on and how its process is made.
type Member struct {
	IP      string  // default 127.0.0.1 (with free ports picked for it)
	Command Command // default exec.Command
}

// Binary is the etcd server binary the package runs, looked up on PATH.
func Binary(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		t.Fatalf("etcdtest: no etcd server on PATH (Debian package etcd-server): run make deps")
	}
	return bin
}

// Start runs a single-member etcd on loopback and stops it when the test ends.
func Start(t testing.TB) *Server { t.Helper(); return StartCluster(t, Member{})[0] }

// StartCluster runs one etcd member per entry of members, joined as one cluster, waits until the
// cluster answers, and stops every member when the test ends.
func StartCluster(t testing.TB, members ...Member) []*Server {
	t.Helper()
	bin := Binary(t)
	var servers []*Server
	var initial []string
	ports := freePorts(t, 2*len(members))
	for i, m := range members {
		s := &Server{Name: fmt.Sprintf("etcd%d", i), dataDir: t.TempDir(), command: m.Command, state: "new"}
		if s.command == nil {
			s.command = exec.Command
		}
		if m.IP == "" {
			s.ClientURL = "http://127.0.0.1:" + ports[2*i]
			s.PeerURL = "http://127.0.0.1:" + ports[2*i+1]
		} else {
			s.ClientURL = "http://" + m.IP + ":2379"
			s.PeerURL = "http://" + m.IP + ":2380"
		}
		initial = append(initial, s.Name+"="+s.PeerURL)
		servers = append(servers, s)
	}
	for _, s := range servers {
		s.cluster = strings.Join(initial, ",")
		s.start(t, bin)
	}
	t.Cleanup(func() {
		for _, s := range servers {
			s.Stop()
		}
	})
	for _, s := range servers {
		s.WaitHealthy(t, 30*time.Second)
	}
	return servers
}

// freePorts picks n distinct free loopback ports. Every listener stays open until all n are
// picked: one closed before the next pick may be handed out again, and a cluster given the same
// port twice refuses to start ("has duplicate url").
func freePorts(t testing.TB, n int) []string {
	t.Helper()
	ports := make([]string, 0, n)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("etcdtest: %v", err)
		}
		defer ln.Close()
		_, port, _ := net.SplitHostPort(ln.Addr().String())
		ports = append(ports, port)
	}
	return ports
}

func (s *Server) start(t testing.TB, bin string) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	args := []string{
		"--name", s.Name, "--data-dir", s.dataDir,
		"--listen-client-urls", s.ClientURL, "--advertise-client-urls", s.ClientURL,
		"--listen-peer-urls", s.PeerURL, "--initial-advertise-peer-urls", s.PeerURL,
		"--initial-cluster", s.cluster, "--initial-cluster-state", s.state,
		"--initial-cluster-token", "velo-test",
		// Short heartbeats so that a lost member is noticed within a test's patience.
		"--heartbeat-interval", "100", "--election-timeout", "1000",
		"--log-level", "warn",
	}
	s.output = &bytes.Buffer{}
	cmd := s.command(bin, args...)
	cmd.Stdout, cmd.Stderr = s.output, s.output
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("etcdtest: starting %s: %v", bin, err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	done := s.done
	go func() { _ = cmd.Wait(); close(done) }()
}

// Endpoint is the member's client URL.
func (s *Server) Endpoint() string { return s.ClientURL }

// Pid is the running member's process ID (0 when it is not running), for a benchmark that reads
// the server's CPU and memory.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	select {
	case <-s.done:
		return 0
	default:
	}
	return s.cmd.Process.Pid
}

// WaitHealthy waits until the member says it is healthy (it has a leader).
func (s *Server) WaitHealthy(t testing.TB, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	c := &http.Client{Timeout: time.Second}
	for time.Now().Before(deadline) {
		r, err := c.Get(s.ClientURL + "/health")
		if err == nil {
			var b bytes.Buffer
			_, _ = b.ReadFrom(r.Body)
			r.Body.Close()
			if strings.Contains(b.String(), `"health":"true"`) {
				return
			}
		}
		select {
		case <-s.exited():
			t.Fatalf("etcdtest: %s exited:\n%s", s.Name, s.Output())
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Fatalf("etcdtest: %s not healthy within %v:\n%s", s.Name, within, s.Output())
}

func (s *Server) exited() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return s.done
}

// Output is what the member printed.
func (s *Server) Output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.output == nil {
		return ""
	}
	return s.output.String()
}

// Stop ends the member with SIGTERM (SIGKILL after 5 s) and waits for it; its data stays, so
// Restart brings back the same member with its keys and leases.
func (s *Server) Stop() { s.signal(syscall.SIGTERM, 5*time.Second) }

// Kill ends the member with SIGKILL and waits for it.
func (s *Server) Kill() { s.signal(syscall.SIGKILL, 5*time.Second) }

func (s *Server) signal(sig syscall.Signal, grace time.Duration) {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-done
	}
	s.mu.Lock()
	s.cmd = nil
	s.mu.Unlock()
}

// Restart starts a stopped member again on the same addresses and data, and waits until it is
// healthy (for a cluster member: until it rejoined a cluster with a leader).
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	s.state = "existing"
	s.start(t, Binary(t))
	s.WaitHealthy(t, 30*time.Second)
}

// Ctl runs etcdctl (Debian package etcd-client) against the member and returns its output.
func (s *Server) Ctl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "etcdctl", append([]string{"--endpoints", s.ClientURL}, args...)...)
	cmd.Env = append(cmd.Environ(), "ETCDCTL_API=3")
	out, err := cmd.CombinedOutput()
	return string(out), err
}
