package faults

import (
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/transport/ucxtransport"
	"github.com/velo-go/velo/verbs/verbstest"
)

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// TestOwnerRestartedOnTheSameAddress: an owner killed and started again on the same address is a
// new instance. Handles of the old one fail at once with a clear error; the new one's handles
// move on the RDMA path; the consumer loses nothing of its own.
func TestOwnerRestartedOnTheSameAddress(t *testing.T) {
	addr := freePort(t)
	owner := startNode(t, "owner", "-listen", addr)
	cons := startNode(t, "consumer")
	pair(t, owner, cons)
	old := stage(owner, 8<<20, true)
	delivered(t, cons.do("get "+old.Handle), old, okPath)
	old2 := stage(owner, 8<<20, true)
	owner.kill()

	restarted := startNode(t, "restarted", "-listen", addr)
	pair(t, restarted, cons)
	begin := time.Now()
	r := cons.do("get " + old2.Handle)
	require.NotEmpty(t, r["error"], "a handle of the killed owner was fetched")
	assert.Less(t, time.Since(begin), 20*time.Second, "the old handle did not fail promptly")
	t.Logf("old handle: %s (after %v)", r["error"], time.Since(begin).Round(time.Millisecond))

	start := restarted.stats()
	fresh := stage(restarted, 8<<20, true)
	delivered(t, cons.do("get "+fresh.Handle), fresh, okPath)
	backToStart(t, restarted, stats{PinnedBytes: start.PinnedBytes + 64<<20, Slots: start.Slots, StagedSlots: start.StagedSlots})
	restarted.quit(15 * time.Second)
	cons.quit(15 * time.Second)
}

// TestMemlockWithoutIPCLock: an owner as an unprivileged RDMA user runs it, with an 8 MiB memlock
// limit and no CAP_IPC_LOCK (root ignores the limit otherwise). Its first arena cannot be locked:
// it says why, stages in plain memory, and the payload moves by chunks (pool_exhausted).
func TestMemlockWithoutIPCLock(t *testing.T) {
	owner := startConstrained(t, "owner", verbstest.Constraints{MemlockSoft: 8 << 20})
	cons := startNode(t, "consumer")
	pair(t, owner, cons)
	p := stage(owner, 4<<20, true)
	st := owner.stats()
	assert.Zero(t, st.Arenas)
	assert.Zero(t, st.PinnedBytes)
	delivered(t, cons.do("get "+p.Handle), p, "chunked/pool_exhausted")
	for _, want := range []string{"RLIMIT_MEMLOCK", "IPC_LOCK"} {
		owner.logged(want)
	}
	backToStart(t, owner, stats{})
	final := owner.quit(15 * time.Second)
	assert.Zero(t, final.PinnedBytes)
}

// TestPeerBlobVersionSkew: a consumer is handed the owner's UCX address of another wire version
// (a rolling upgrade). It refuses it with the guide's warning, keeps the owner over TCP, and the
// payload moves by chunks (no_offer); the owner serves the next consumer on the RDMA path.
//
// The skewed consumer keeps the same-host path off: the case is UCX's wire version, and with the
// path on the pair would move its bytes through shared memory, which needs no UCX address.
func TestPeerBlobVersionSkew(t *testing.T) {
	owner := startNode(t, "owner")
	cons := startNode(t, "consumer", "-same-host=false")
	r := cons.do("peer " + mustJSON(t, owner.ok("info-skewed")["info"]))
	require.NotEmpty(t, r["error"])
	assert.Contains(t, r["error"], "registered over tcp only")
	assert.Contains(t, r["error"], "unsupported ucx blob version")
	cons.logged(fmt.Sprintf("ucx: rejecting peer blob: unsupported ucx blob version %d (expected %d)", ucxtransport.BlobVersion+1, ucxtransport.BlobVersion))
	owner.ok("peer " + cons.info())
	start := owner.stats()
	p := stage(owner, 8<<20, true)
	delivered(t, cons.do("get "+p.Handle), p, "chunked/no_offer")
	next := startNode(t, "next")
	pair(t, owner, next)
	q := stage(owner, 8<<20, true)
	delivered(t, next.do("get "+q.Handle), q, okPath)
	backToStart(t, owner, stats{PinnedBytes: start.PinnedBytes + 64<<20, Slots: start.Slots, StagedSlots: start.StagedSlots})
	owner.quit(15 * time.Second)
}

// TestIdleReaperUnderBursts: with a short idle timeout, endpoints are reaped between bursts of
// gets and reopened by the next; every payload arrives whole and nothing is left behind. The
// same-host path stays off: the gets must go over UCX for its endpoints to be used and reaped.
func TestIdleReaperUnderBursts(t *testing.T) {
	owner := startNode(t, "owner", "-ep-idle", "150ms", "-log", "debug", "-same-host=false")
	cons := startNode(t, "consumer", "-ep-idle", "150ms", "-log", "debug", "-same-host=false")
	pair(t, owner, cons)
	start := owner.stats()
	for burst := range 6 {
		for i := range 8 {
			size := 64<<10 + (burst*8+i)*4099
			p := stage(owner, size, true)
			delivered(t, cons.do("get "+p.Handle), p, "rdma/ok")
		}
		time.Sleep(400 * time.Millisecond) // past the idle timeout: the endpoints are reaped
	}
	// Either side's reaper may retire the endpoint first (the other then logs retired_by_peer).
	reaped := func() int { return strings.Count(owner.stderr()+cons.stderr(), "why=reaped") }
	deadline := time.Now().Add(10 * time.Second)
	for reaped() < 3 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	assert.GreaterOrEqual(t, reaped(), 3, "the idle reaper never ran between the bursts")
	backToStart(t, owner, stats{PinnedBytes: start.PinnedBytes + 64<<20, Slots: start.Slots, StagedSlots: start.StagedSlots})
	owner.quit(15 * time.Second)
	cons.quit(15 * time.Second)
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// TestSendToAStoppedPeerEndsAtItsContext: a peer that stopped reading (SIGSTOP) fills the TCP
// connection's buffers; the next send then waits, and must end at its context's deadline with an
// error rather than hang.
func TestSendToAStoppedPeerEndsAtItsContext(t *testing.T) {
	sender := startNode(t, "sender")
	stopped := startNode(t, "stopped")
	pair(t, sender, stopped)
	id := stopped.ok("info")["id"].(string)
	sender.ok(fmt.Sprintf("flood %s %d %d %s", id, 1024, 5, "5s")) // the connection is up
	stopped.stop()
	begun := time.Now()
	r := sender.do(fmt.Sprintf("flood %s %d %d %s", id, 200<<10, 2000, "500ms"))
	require.NotEmpty(t, r["error"], "2000 sends of 200 KiB to a stopped peer all went through: %v", r)
	// The transport turns ctx's deadline into the socket's write deadline, so the error reads
	// either way; what matters is that it came at the deadline.
	e, _ := r["error"].(string)
	assert.True(t, strings.Contains(e, "deadline exceeded") || strings.Contains(e, "i/o timeout"), "the send did not end at its deadline: %s", e)
	assert.Less(t, r["seconds"], 5.0, "the blocked send ran %v s past its 500 ms context", r["seconds"])
	t.Logf("%v sends went before the buffers filled; the next ended after %.2f s: %s (all in %v)", r["sent"], r["seconds"], r["error"], time.Since(begun))
	stopped.resume()
}
