package rdmapath_test

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/velo-go/velo/test/internal/gobuild"
	"github.com/velo-go/velo/test/internal/netns"
	"github.com/velo-go/velo/velo/discovery/etcd/etcdtest"
	"github.com/velo-go/velo/velo/transport/ucxtransport"
)

// example is the two-process example, built once per test binary and run as its users run it.
var example = gobuild.New("github.com/velo-go/velo/velo/examples/rendezvous_rdma_two_proc")

func TestMain(m *testing.M) {
	code := m.Run()
	example.Remove()
	os.Exit(code)
}

// exampleEnv is the environment of an example run: this one's, minus the variables a test sets,
// with the opt-in that keeps the RDMA path over tcp's software lanes (the examples show that path).
func exampleEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "VELO_RDMA_RENDEZVOUS_DISABLE=") || strings.HasPrefix(kv, "UCX_TLS=") || strings.HasPrefix(kv, "UCX_NET_DEVICES=") ||
			strings.HasPrefix(kv, ucxtransport.SoftwareRMAEnv+"=") {
			continue
		}
		env = append(env, kv)
	}
	return append(append(env, ucxtransport.SoftwareRMAEnv+"=1"), extra...)
}

var pathLine = regexp.MustCompile(`^(owner|consumer): velo_rendezvous_rdma_path_total\{path="(\w+)",reason="(\w+)"\} (\d+)$`)

// pathCounts reads the path lines both roles print: counts[role][path/reason].
func pathCounts(out string) map[string]map[string]int {
	c := map[string]map[string]int{"owner": {}, "consumer": {}}
	for _, l := range strings.Split(out, "\n") {
		if m := pathLine.FindStringSubmatch(strings.TrimSpace(l)); m != nil {
			n, _ := strconv.Atoi(m[4])
			c[m[1]][m[2]+"/"+m[3]] = n
		}
	}
	return c
}

// TestExampleOneHost: `UCX_TLS=tcp go run ./velo/examples/rendezvous_rdma_two_proc` with no
// --role starts both roles, moves 8 MiB on the RDMA path and exits 0.
func TestExampleOneHost(t *testing.T) {
	cmd := exec.CommandContext(tctx(t), example.Path(t))
	cmd.Env = exampleEnv("UCX_TLS=tcp")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the example failed: %v\n%s", err, out)
	}
	c := pathCounts(string(out))
	for _, role := range []string{"owner", "consumer"} {
		if c[role]["rdma/ok"] != 1 {
			t.Errorf("%s: rdma/ok = %d\n%s", role, c[role]["rdma/ok"], out)
		}
	}
	// The example gives velo.WithLogger a Warn-level logger and the UCX transport none: the
	// instance's logger reaches every component it wires, so not one INFO line is printed.
	if strings.Contains(string(out), "level=INFO") {
		t.Errorf("a component logged past velo.WithLogger's level:\n%s", out)
	}
}

// TestExampleKillSwitch: with VELO_RDMA_RENDEZVOUS_DISABLE=1 the bytes still arrive, by chunks,
// both sides report kill_switch, and the example exits non-zero.
func TestExampleKillSwitch(t *testing.T) {
	cmd := exec.CommandContext(tctx(t), example.Path(t), "--size", "1048576")
	cmd.Env = exampleEnv("UCX_TLS=tcp", "VELO_RDMA_RENDEZVOUS_DISABLE=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the example exited 0 with the kill switch on:\n%s", out)
	}
	c := pathCounts(string(out))
	for _, role := range []string{"owner", "consumer"} {
		if c[role]["chunked/kill_switch"] != 1 || c[role]["rdma/ok"] != 0 {
			t.Errorf("%s: %v", role, c[role])
		}
	}
	if !strings.Contains(string(out), "SHA-256") || !strings.Contains(string(out), "verified") {
		t.Errorf("the payload was not verified:\n%s", out)
	}
}

// ownerControlPlane finds the address the owner published (and printed) for its control plane.
var ownerControlPlane = regexp.MustCompile(`owner: staged .*; control plane (\S+); waiting `)

var tcpInfoLine = regexp.MustCompile(`^(owner|consumer): kernel TCP_INFO: (velo TCP control plane|other TCP sockets \(UCX\)): (\d+) connections, (\d+) bytes out, (\d+) bytes in$`)

// TestExampleAcrossNamespaces runs the owner and the consumer on two "hosts" (network namespaces
// joined by a veth pair) with UCX_NET_DEVICES pinned to the veth, and proves the lane: the path
// metric says rdma/ok on both sides, and the kernel's byte counts show that the 8 MiB payload
// crossed UCX's sockets while velo's TCP control plane carried only control messages.
func TestExampleAcrossNamespaces(t *testing.T) {
	bin := example.Path(t)
	p := netns.New(t)
	dir := t.TempDir()
	ctx := tctx(t)
	const size = 8 << 20
	run := func(h netns.Host, role string, out *bytes.Buffer) *exec.Cmd {
		cmd := h.Command(ctx, bin, "--role", role, "--dir", dir, "--size", strconv.Itoa(size))
		cmd.Env = exampleEnv("UCX_TLS=tcp", "UCX_NET_DEVICES="+h.Dev)
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	var ownerOut, consOut bytes.Buffer
	owner := run(p.A, "owner", &ownerOut)
	cons := run(p.B, "consumer", &consOut)
	cerr, oerr := cons.Wait(), owner.Wait()
	if cerr != nil || oerr != nil {
		t.Fatalf("owner: %v\n%s\nconsumer: %v\n%s", oerr, ownerOut.String(), cerr, consOut.String())
	}
	all := ownerOut.String() + consOut.String()
	t.Logf("\n%s", all)

	// Each side published the address another host reaches it at, not loopback.
	if m := ownerControlPlane.FindStringSubmatch(all); m == nil {
		t.Errorf("the owner did not print its control-plane address")
	} else if host, _, _ := net.SplitHostPort(m[1]); host != p.A.IP.String() {
		t.Errorf("the owner published %s, want its veth address %s", m[1], p.A.IP)
	}

	c := pathCounts(all)
	for _, role := range []string{"owner", "consumer"} {
		if c[role]["rdma/ok"] != 1 {
			t.Errorf("%s: rdma/ok = %d", role, c[role]["rdma/ok"])
		}
	}
	counts := map[string]map[string][3]uint64{"owner": {}, "consumer": {}}
	for _, l := range strings.Split(all, "\n") {
		if m := tcpInfoLine.FindStringSubmatch(strings.TrimSpace(l)); m != nil {
			var v [3]uint64
			for i := range v {
				v[i], _ = strconv.ParseUint(m[3+i], 10, 64)
			}
			counts[m[1]][m[2]] = v
		}
	}
	const controlLimit = 64 << 10 // acquire, release, the report: a few KiB; the payload is 8 MiB
	for _, role := range []string{"owner", "consumer"} {
		ctl, ok := counts[role]["velo TCP control plane"]
		if !ok || ctl[0] == 0 {
			t.Fatalf("%s printed no kernel counts for velo's TCP connection", role)
		}
		if ctl[1]+ctl[2] > controlLimit {
			t.Errorf("%s: velo's TCP control plane moved %d bytes out and %d in: more than control messages", role, ctl[1], ctl[2])
		}
	}
	if ucx := counts["consumer"]["other TCP sockets (UCX)"]; ucx[2] < size {
		t.Errorf("the consumer's UCX sockets received %d bytes, less than the %d-byte payload", ucx[2], size)
	}
	// (Not the owner's bytes out: they are bytes the consumer acknowledged, and its last ACK on the
	// UCX socket may still be delayed when the owner reads them.)
}

// TestExampleReusesItsDirectory: runs in one --dir do not see each other's members. Two runs of
// the launcher in a row succeed, and so does a run whose consumer starts while the directory
// still holds the member file of an owner that was killed (it had no chance to remove it): the
// consumer finds that owner dead, says so, and joins the owner that starts after it.
func TestExampleReusesItsDirectory(t *testing.T) {
	bin := example.Path(t)
	dir := t.TempDir()
	ctx := tctx(t)
	for i := 1; i <= 2; i++ {
		cmd := exec.CommandContext(ctx, bin, "--dir", dir, "--size", "1048576")
		cmd.Env = exampleEnv("UCX_TLS=tcp")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("run %d in %s: %v\n%s", i, dir, err, out)
		}
		if c := pathCounts(string(out)); c["consumer"]["rdma/ok"] != 1 {
			t.Fatalf("run %d: consumer %v\n%s", i, c["consumer"], out)
		}
	}

	role := func(name string) (*exec.Cmd, *logBuffer) {
		out := &logBuffer{}
		cmd := exec.CommandContext(ctx, bin, "--role", name, "--dir", dir, "--size", "1048576")
		cmd.Env = exampleEnv("UCX_TLS=tcp")
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, out
	}
	// An owner killed once it staged leaves its member file behind, its heartbeat still fresh.
	memberFile := filepath.Join(dir, "two-proc", "owner.json")
	killed, out := role("owner")
	eventually(t, "the first owner to stage", func() bool { return strings.Contains(out.String(), "waiting for the consumer") })
	killed.Process.Kill()
	killed.Wait()
	if _, err := os.Stat(memberFile); err != nil {
		t.Fatalf("the killed owner left no member file: %v", err)
	}
	cons, consOut := role("consumer")
	eventually(t, "the consumer to find the stale owner dead", func() bool {
		// Either its registration fails, or it registers (nothing is dialled yet) and the join
		// request fails.
		o := consOut.String()
		return strings.Contains(o, "could not register a member") || strings.Contains(o, "did not answer the join")
	})
	owner, ownerOut := role("owner")
	cerr, oerr := cons.Wait(), owner.Wait()
	if cerr != nil || oerr != nil {
		t.Fatalf("owner: %v\n%s\nconsumer: %v\n%s", oerr, ownerOut, cerr, consOut)
	}
	if c := pathCounts(consOut.String()); c["consumer"]["rdma/ok"] != 1 {
		t.Fatalf("after the stale file: consumer %v\n%s", c["consumer"], consOut)
	}
	if _, err := os.Stat(memberFile); !os.IsNotExist(err) {
		t.Errorf("the owner left its member file behind: %v", err)
	}
}

// TestClusterExample: make demo-cluster as its users run it: four members find each other through
// the filesystem discovery backend, then through a real etcd (make demo-cluster ETCD=...), and
// move payloads all-to-all on rdma/ok.
func TestClusterExample(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "cluster")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/velo-go/velo/velo/examples/cluster").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	run := func(t *testing.T, backend string, args ...string) {
		cmd := exec.CommandContext(tctx(t), bin, append([]string{"-n", "4", "--size", "4194304"}, args...)...)
		cmd.Env = exampleEnv("UCX_TLS=tcp")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("the cluster example failed: %v\n%s", err, out)
		}
		if want := "cluster: 4 members found through " + backend + ", 12 transfers, every one on the RDMA path"; !strings.Contains(string(out), want) {
			t.Fatalf("no all-to-all summary %q:\n%s", want, out)
		}
	}
	t.Run("filesystem", func(t *testing.T) { run(t, "the filesystem") })
	t.Run("etcd", func(t *testing.T) { run(t, "etcd", "-etcd", etcdtest.Start(t).Endpoint()) })
}
