package proc

import (
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// script starts a shell that says it is ready and then answers each command line with what
// answer prints for it.
func script(t *testing.T, answer string) *Node {
	t.Helper()
	n, err := Start("sh", exec.Command("sh", "-c", `echo '{"ready":true}'; while read cmd; do `+answer+`; done`))
	require.NoError(t, err)
	t.Cleanup(func() { n.Kill() })
	return n
}

// TestReadSkipsLinesThatAreNotAnswers: a line a linked library prints on the node's standard
// output (UCX did, before its lines went to standard error) is kept with the node's stderr,
// and each command still gets its own answer.
func TestReadSkipsLinesThatAreNotAnswers(t *testing.T) {
	n := script(t, `echo "[1.2] [vm:1:0] sock.c:355 UCX ERROR connect failed"; echo "{\"cmd\":\"$cmd\"}"`)
	for _, cmd := range []string{"one", "two", "three"} {
		r, err := n.Do(cmd, 10*time.Second)
		require.NoError(t, err)
		assert.Equal(t, cmd, r["cmd"])
	}
	assert.Contains(t, n.Stderr.String(), "(stdout, not an answer) [1.2] [vm:1:0] sock.c:355 UCX ERROR connect failed")
}

// TestLateAnswerIsNotTakenByTheNextCommand: a command that gave up waiting still owes its
// answer; the next command drops it and reads its own.
func TestLateAnswerIsNotTakenByTheNextCommand(t *testing.T) {
	n := script(t, `case $cmd in slow) sleep 1;; esac; echo "{\"cmd\":\"$cmd\"}"`)
	_, err := n.Do("slow", 100*time.Millisecond)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "did not answer within 100ms")
	r, err := n.Do("next", 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, "next", r["cmd"], "the late answer of slow was taken for next's")
}
