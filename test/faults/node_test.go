package faults

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/verbs/verbstest"
)

var (
	buildOnce sync.Once
	nodeBin   string
	buildErr  error
)

// faultnode builds cmd/faultnode once per test binary.
func faultnode(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "velo-faultnode-")
		if err != nil {
			buildErr = err
			return
		}
		nodeBin = filepath.Join(dir, "faultnode")
		out, err := exec.Command("go", "build", "-o", nodeBin, "github.com/velo-go/velo/test/faults/cmd/faultnode").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build faultnode: %v\n%s", err, out)
		}
	})
	require.NoError(t, buildErr)
	return nodeBin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if nodeBin != "" {
		os.RemoveAll(filepath.Dir(nodeBin))
	}
	os.Exit(code)
}

// node is one faultnode process.
type node struct {
	t      *testing.T
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr *lockedBuffer
	exited chan struct{}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startNode starts a faultnode with flags and waits for it to be ready.
func startNode(t *testing.T, name string, flags ...string) *node {
	t.Helper()
	return launch(t, name, exec.Command(faultnode(t), append([]string{"-log", "info"}, flags...)...))
}

// startConstrained starts a faultnode under c (a memlock limit, capabilities dropped).
func startConstrained(t *testing.T, name string, c verbstest.Constraints, flags ...string) *node {
	t.Helper()
	cmd, err := verbstest.Command(context.Background(), c, faultnode(t), append([]string{"-log", "info"}, flags...)...)
	require.NoError(t, err)
	return launch(t, name, cmd)
}

// launch starts cmd, a faultnode, and waits for it to be ready.
func launch(t *testing.T, name string, cmd *exec.Cmd) *node {
	t.Helper()
	cmd.Env = os.Environ()
	if os.Getenv("UCX_TLS") == "" {
		cmd.Env = append(cmd.Env, "UCX_TLS=tcp")
	}
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	n := &node{t: t, name: name, cmd: cmd, stdin: stdin, lines: make(chan string, 16), stderr: &lockedBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = n.stderr
	require.NoError(t, cmd.Start())
	go func() {
		s := bufio.NewScanner(stdout)
		s.Buffer(make([]byte, 1<<20), 1<<20)
		for s.Scan() {
			n.lines <- s.Text()
		}
		close(n.lines)
	}()
	go func() {
		_ = cmd.Wait()
		close(n.exited)
	}()
	t.Cleanup(func() {
		n.resume()
		stdin.Close()
		select {
		case <-n.exited:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-n.exited
		}
		if t.Failed() {
			t.Logf("%s stderr:\n%s", name, n.stderr.String())
		}
	})
	require.Equal(t, true, n.read(60 * time.Second)["ready"], "%s did not start", name)
	return n
}

// read returns the next reply, failing the test after timeout.
func (n *node) read(timeout time.Duration) map[string]any {
	n.t.Helper()
	select {
	case line, ok := <-n.lines:
		if !ok {
			n.t.Fatalf("%s exited (%v) without answering; stderr:\n%s", n.name, n.cmd.ProcessState, n.stderr.String())
		}
		var m map[string]any
		require.NoError(n.t, json.Unmarshal([]byte(line), &m), "%s said %q", n.name, line)
		return m
	case <-time.After(timeout):
		n.t.Fatalf("%s did not answer within %v; stderr:\n%s", n.name, timeout, n.stderr.String())
		return nil
	}
}

func (n *node) send(cmd string) {
	n.t.Helper()
	_, err := fmt.Fprintln(n.stdin, cmd)
	require.NoError(n.t, err, "%s: %s", n.name, cmd)
}

// do sends cmd and returns its reply.
func (n *node) do(cmd string) map[string]any {
	n.t.Helper()
	n.send(cmd)
	return n.read(2 * time.Minute)
}

// ok sends cmd and fails the test on an error reply.
func (n *node) ok(cmd string) map[string]any {
	n.t.Helper()
	r := n.do(cmd)
	require.Empty(n.t, r["error"], "%s: %s", n.name, cmd)
	return r
}

func (n *node) info() string {
	b, err := json.Marshal(n.ok("info")["info"])
	require.NoError(n.t, err)
	return string(b)
}

// stats is the node's RDMA registry and staging state.
type stats struct {
	Arenas, Slots, LeaseRegistrations, Quarantined, HeldSlots, StagedSlots, OpenLeases int
	ArenaBytes, LeaseBytes, QuarantinedBytes, PinnedBytes                              int64
}

func (n *node) stats() stats {
	n.t.Helper()
	m := n.ok("stats")["stats"].(map[string]any)
	i := func(k string) int { return int(m[k].(float64)) }
	return stats{Arenas: i("arenas"), Slots: i("slots"), LeaseRegistrations: i("lease_registrations"), Quarantined: i("quarantined"),
		HeldSlots: i("held_slots"), StagedSlots: i("staged_slots"), OpenLeases: i("open_leases"),
		ArenaBytes: int64(i("arena_bytes")), LeaseBytes: int64(i("lease_bytes")), QuarantinedBytes: int64(i("quarantined_bytes")), PinnedBytes: int64(i("pinned_bytes"))}
}

// waitStats polls the node's stats until cond holds.
func (n *node) waitStats(what string, timeout time.Duration, cond func(stats) bool) stats {
	n.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		st := n.stats()
		if cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("%s: %s not reached within %v: %+v", n.name, what, timeout, st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (n *node) signal(s syscall.Signal) { _ = n.cmd.Process.Signal(s) }
func (n *node) stop()                   { n.signal(syscall.SIGSTOP) }
func (n *node) resume()                 { n.signal(syscall.SIGCONT) }

func (n *node) kill() {
	n.signal(syscall.SIGKILL)
	<-n.exited
}

// alive reports that the process has not exited.
func (n *node) alive() bool {
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

// quit closes the instance and returns its final stats; it checks the process exits 0.
func (n *node) quit(within time.Duration) stats {
	n.t.Helper()
	begin := time.Now()
	n.send("quit")
	r := n.read(within)
	require.Equal(n.t, true, r["closed"], "%s: quit", n.name)
	require.Empty(n.t, r["err"], "%s: Close", n.name)
	select {
	case <-n.exited:
	case <-time.After(within):
		n.t.Fatalf("%s did not exit within %v of quit", n.name, within)
	}
	require.Less(n.t, time.Since(begin), within, "%s: Close took too long", n.name)
	require.Equal(n.t, 0, n.cmd.ProcessState.ExitCode(), "%s exit status", n.name)
	b, _ := json.Marshal(r["stats"])
	var m map[string]float64
	require.NoError(n.t, json.Unmarshal(b, &m))
	return stats{Arenas: int(m["arenas"]), Slots: int(m["slots"]), Quarantined: int(m["quarantined"]), HeldSlots: int(m["held_slots"]),
		StagedSlots: int(m["staged_slots"]), PinnedBytes: int64(m["pinned_bytes"]), QuarantinedBytes: int64(m["quarantined_bytes"])}
}

// pair registers each node with the other.
func pair(t *testing.T, a, b *node) {
	t.Helper()
	a.ok("peer " + b.info())
	b.ok("peer " + a.info())
}

// staged is a payload an owner staged.
type staged struct {
	handle, sha string
}

func stage(n *node, size int, pinned bool) staged {
	n.t.Helper()
	cmd := "stage"
	if !pinned {
		cmd = "stage-plain"
	}
	r := n.ok(fmt.Sprintf("%s %d %d", cmd, size, rand.Uint64()>>1))
	return staged{handle: r["handle"].(string), sha: r["sha256"].(string)}
}

// delivered checks a get reply: no error, the payload's SHA-256 and, when path is not empty, the path.
func delivered(t *testing.T, r map[string]any, p staged, path string) {
	t.Helper()
	require.Empty(t, r["error"], "get failed")
	require.Equal(t, p.sha, r["sha256"], "the payload reported delivered has other bytes")
	if path != "" {
		require.Equal(t, path, r["path"])
	}
}

// forgedHandle is a handle of the same owner and size whose nonce is wrong.
func forgedHandle(t *testing.T, h string) string {
	t.Helper()
	b, err := hex.DecodeString(h)
	require.NoError(t, err)
	sum := sha256.Sum256(b)
	// Version byte, owner, slot, nonce, size (8 bytes each): byte 20 is inside the nonce.
	b[20] ^= sum[0] | 1
	return hex.EncodeToString(b)
}
