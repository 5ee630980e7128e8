package faults

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/test/faults/internal/proc"
	"github.com/velo-go/velo/test/internal/linecmd"
	"github.com/velo-go/velo/verbs/verbstest"
)

var (
	buildOnce sync.Once
	nodeBin   string
	buildErr  error
)

// faultnode builds cmd/faultnode once per test binary.
func faultnode(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() { nodeBin, buildErr = proc.Build() })
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

// node is a faultnode process seen from a test: every failure fails the test.
type node struct {
	*proc.Node
	t *testing.T
}

type stats = proc.Stats
type staged = proc.Staged

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

func launch(t *testing.T, name string, cmd *exec.Cmd) *node {
	t.Helper()
	n, err := proc.Start(name, cmd)
	require.NoError(t, err)
	n.Cleanup(t, 20*time.Second)
	return &node{Node: n, t: t}
}

func (n *node) stderr() string { return n.Stderr.String() }

// logged waits until the node's standard error holds want: the copy from the process's pipe
// trails its answers on standard output.
func (n *node) logged(want string) bool {
	n.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(n.stderr(), want) {
		if time.Now().After(deadline) {
			n.t.Errorf("%s never logged %q", n.Name, want)
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// do sends cmd and returns its answer.
func (n *node) do(cmd string) map[string]any {
	n.t.Helper()
	r, err := n.Do(cmd, 2*time.Minute)
	require.NoError(n.t, err)
	return r
}

// send writes cmd without waiting; read takes the answer.
func (n *node) send(cmd string) { n.t.Helper(); require.NoError(n.t, n.Send(cmd)) }
func (n *node) read(timeout time.Duration) map[string]any {
	n.t.Helper()
	r, err := n.Read(timeout)
	require.NoError(n.t, err)
	return r
}

// ok sends cmd and fails the test on an error answer.
func (n *node) ok(cmd string) map[string]any {
	n.t.Helper()
	r, err := n.OK(cmd, 2*time.Minute)
	require.NoError(n.t, err)
	return r
}

func (n *node) info() string {
	n.t.Helper()
	s, err := n.Info()
	require.NoError(n.t, err)
	return s
}

func (n *node) stats() stats {
	n.t.Helper()
	st, err := n.Stats()
	require.NoError(n.t, err)
	return st
}

// waitStats polls the node's stats until cond holds.
func (n *node) waitStats(what string, timeout time.Duration, cond func(stats) bool) stats {
	n.t.Helper()
	st, err := n.WaitStats(timeout, cond)
	require.NoError(n.t, err, what)
	return st
}

func (n *node) stop()       { n.Stop() }
func (n *node) resume()     { n.Resume() }
func (n *node) kill()       { n.Kill() }
func (n *node) alive() bool { return n.Alive() }

// okPath is the path of a rendezvous between two nodes of this host that keep the same-host
// default (linecmd.SameHostEnv): shm/ok with it on, rdma/ok without.
var okPath = linecmd.OKPath()

// pair registers a and b with each other. With the same-host default on, it then waits until each
// side's probe of the other's socket has ended (taken or refused with its reason), so that the
// first transfer takes the path the pair will keep, not UCX while the probe runs.
func pair(t *testing.T, a, b *node) {
	t.Helper()
	require.NoError(t, proc.Pair(a.Node, b.Node))
	if !linecmd.SameHostOn() {
		return
	}
	for _, x := range [][2]*node{{a, b}, {b, a}} {
		peer := x[1].id()
		require.Eventually(t, func() bool { _, why := x[0].sameHost(peer); return why != "probing" }, 30*time.Second, 20*time.Millisecond,
			"%s never finished probing %s's same-host socket", x[0].Name, x[1].Name)
	}
}

// quit closes the instance, checks it exits 0 within the bound, and returns its final stats.
func (n *node) quit(within time.Duration) stats {
	n.t.Helper()
	begin := time.Now()
	st, err := n.Quit(within)
	require.NoError(n.t, err)
	require.Less(n.t, time.Since(begin), within, "%s: Close took too long", n.Name)
	return st
}

func stage(n *node, size int, pinned bool) staged {
	n.t.Helper()
	p, err := n.Stage(size, rand.Uint64()>>1, pinned)
	require.NoError(n.t, err)
	return p
}

// delivered checks a get answer: no error, the payload's SHA-256 and, when path is not empty, the path.
func delivered(t *testing.T, r map[string]any, p staged, path string) {
	t.Helper()
	require.Empty(t, r["error"], "get failed")
	require.Equal(t, p.SHA256, r["sha256"], "the payload reported delivered has other bytes")
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
	return fmt.Sprintf("%x", b)
}
