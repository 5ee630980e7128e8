package faults

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The payload of the stall cases: large enough that a GET over UCX_TLS=tcp on this machine takes
// two seconds or more, so stopping the consumer 100 ms in stops it mid-GET.
const stallSize = 512 << 20

// stallMidGet starts a get of p on cons, stops cons while the GET is in flight, and waits until
// the owner's reaper ended the lease under the stalled read (its key quarantined). It returns the
// owner's stats then.
func stallMidGet(t *testing.T, owner, cons *node, p staged) stats {
	t.Helper()
	cons.send("get " + p.Handle)
	owner.waitStats("a lease registration", 30*time.Second, func(s stats) bool { return s.LeaseRegistrations == 1 })
	time.Sleep(100 * time.Millisecond)
	cons.stop()
	st := owner.waitStats("the stalled lease quarantined", 30*time.Second, func(s stats) bool { return s.Quarantined == 1 })
	require.Zero(t, st.LeaseRegistrations)
	require.Positive(t, st.QuarantinedBytes)
	require.Equal(t, st.ArenaBytes+st.QuarantinedBytes, st.PinnedBytes, "quarantined bytes must count against the budget")
	return st
}

// freeUnderStall has a second consumer fetch and release the stalled payload's only reference:
// the slot is freed, and its pages must stay mapped while the stalled read may touch them.
func freeUnderStall(t *testing.T, owner, second *node, p staged) {
	t.Helper()
	delivered(t, second.do("get "+p.Handle), p, okPath)
	st := owner.waitStats("the freed slot held", 10*time.Second, func(s stats) bool { return s.HeldSlots == 1 })
	assert.Zero(t, st.Slots)
	assert.Equal(t, 1, st.Arenas, "the arena under a live key was unmapped")
}

// backToStart waits until the owner holds nothing it did not hold before the case.
func backToStart(t *testing.T, owner *node, start stats) {
	t.Helper()
	owner.waitStats("registered and pinned bytes back to the start", 30*time.Second, func(s stats) bool {
		return s.Quarantined == 0 && s.HeldSlots == 0 && s.LeaseRegistrations == 0 && s.OpenLeases == 0 &&
			s.PinnedBytes == start.PinnedBytes && s.Slots == start.Slots && s.StagedSlots == start.StagedSlots
	})
	require.True(t, owner.alive(), "the owner died")
}

// ownerFlags are the flags of the stall cases' owner. Its same-host rings (used only when the
// path is on) have buffers of 4 KiB, so that a read through shared memory, which would otherwise
// finish before the consumer is stopped 100 ms in, is still under way then, as a UCX GET is.
// Every read goes through them (single-copy payloads are off unless a node asks for them; the
// TestSameHostSingleCopy cases kill consumers and owners mid-read out of a payload's file).
func ownerFlags(forceAfter time.Duration) []string {
	return []string{"-lease-ttl", "3s", "-force-close-after", forceAfter.String(), "-arena", "1048576", "-budget", "4294967296", "-shm-chunk", "4096"}
}

// TestStalledConsumerResumed is the crash of the issue: a consumer stopped mid-GET past its lease
// TTL, the slot freed by a second consumer, then the first resumed. The owner stays alive, the
// resumed read returns the right bytes or a clear error, and every byte comes back.
func TestStalledConsumerResumed(t *testing.T) {
	owner := startNode(t, "owner", ownerFlags(time.Hour)...)
	cons := startNode(t, "stalled")
	second := startNode(t, "second")
	pair(t, owner, cons)
	pair(t, owner, second)
	start := owner.stats()
	p := stage(owner, stallSize, true)

	stallMidGet(t, owner, cons, p)
	freeUnderStall(t, owner, second, p)
	time.Sleep(500 * time.Millisecond)
	require.True(t, owner.alive())

	cons.resume()
	r := cons.read(2 * time.Minute)
	if r["error"] == nil {
		assert.Equal(t, p.SHA256, r["sha256"], "the resumed read returned other bytes")
	}
	backToStart(t, owner, start)
	time.Sleep(time.Second) // the owner died about 100 ms after the resume before the fix
	require.True(t, owner.alive(), "the owner died after the stalled consumer resumed")
	final := owner.quit(15 * time.Second)
	assert.Zero(t, final.PinnedBytes)
	assert.Zero(t, final.Arenas)
}

// TestStalledConsumerKilled: stopped mid-GET, then killed. UCX sees the peer die, the read fails,
// and the memory comes back without waiting for the force bound.
func TestStalledConsumerKilled(t *testing.T) {
	owner := startNode(t, "owner", ownerFlags(time.Hour)...)
	cons := startNode(t, "stalled")
	second := startNode(t, "second")
	pair(t, owner, cons)
	pair(t, owner, second)
	start := owner.stats()
	p := stage(owner, stallSize, true)

	stallMidGet(t, owner, cons, p)
	freeUnderStall(t, owner, second, p)
	cons.kill()
	backToStart(t, owner, start)
	final := owner.quit(15 * time.Second)
	assert.Zero(t, final.PinnedBytes)
}

// TestStalledConsumerForceClosed: a consumer that stays stopped has its endpoints closed with
// force after ForceCloseAfter, and only then is the memory reused. Resumed afterwards, it gets a
// clear error (the payload was released meanwhile) and the owner is unharmed.
func TestStalledConsumerForceClosed(t *testing.T) {
	const bound = 5 * time.Second
	owner := startNode(t, "owner", ownerFlags(bound)...)
	cons := startNode(t, "stalled")
	pair(t, owner, cons)
	start := owner.stats()
	p := stage(owner, stallSize, true)

	stallMidGet(t, owner, cons, p)
	quarantinedAt := time.Now()
	// The owner drops the payload's only reference (a second 512 MiB get could outlast the bound
	// on a loaded machine): the slot is freed and its pages must stay held until the force close.
	owner.ok("release " + p.Handle)
	st := owner.waitStats("the freed slot held", 10*time.Second, func(s stats) bool { return s.HeldSlots == 1 })
	assert.Equal(t, 1, st.Arenas, "the arena under a live key was unmapped")
	backToStart(t, owner, start)
	assert.GreaterOrEqual(t, time.Since(quarantinedAt), bound-500*time.Millisecond, "memory reused before the force bound")
	owner.logged("closing its endpoints with force")

	cons.resume()
	r := cons.read(2 * time.Minute)
	if r["error"] == nil {
		assert.Equal(t, p.SHA256, r["sha256"])
	} else {
		assert.Contains(t, r["error"], "released")
	}
	require.True(t, owner.alive())
	// The owner still serves the resumed consumer.
	q := stage(owner, 4<<20, true)
	delivered(t, cons.do("get "+q.Handle), q, "")
	backToStart(t, owner, start)
	owner.quit(15 * time.Second)
}

// TestConsumerKilledMidGet: SIGKILL while the GET is in flight.
func TestConsumerKilledMidGet(t *testing.T) {
	owner := startNode(t, "owner", ownerFlags(time.Hour)...)
	cons := startNode(t, "consumer")
	pair(t, owner, cons)
	start := owner.stats()
	p := stage(owner, stallSize, true)
	cons.send("get " + p.Handle)
	owner.waitStats("a lease registration", 30*time.Second, func(s stats) bool { return s.LeaseRegistrations == 1 })
	time.Sleep(200 * time.Millisecond)
	cons.kill()
	// The payload keeps its reference (nobody released it); everything else comes back.
	owner.waitStats("the killed consumer's lease ended", 30*time.Second, func(s stats) bool {
		return s.OpenLeases == 0 && s.LeaseRegistrations == 0 && s.Quarantined == 0
	})
	require.True(t, owner.alive())
	other := startNode(t, "other")
	pair(t, owner, other)
	delivered(t, other.do("get "+p.Handle), p, okPath)
	backToStart(t, owner, start)
	owner.quit(15 * time.Second)
}

// TestCloseUnderStalledConsumer: the owner closes while a consumer is stopped mid-GET. Close
// returns within its bound (it once blocked ~52 s), the process exits 0, and nothing is left
// pinned or counted.
func TestCloseUnderStalledConsumer(t *testing.T) {
	owner := startNode(t, "owner", ownerFlags(time.Hour)...)
	cons := startNode(t, "stalled")
	pair(t, owner, cons)
	p := stage(owner, stallSize, true)
	stallMidGet(t, owner, cons, p)
	final := owner.quit(15 * time.Second)
	assert.Zero(t, final.PinnedBytes, "%+v", final)
	assert.Zero(t, final.QuarantinedBytes)
	assert.Zero(t, final.Arenas)
	assert.Zero(t, final.HeldSlots)
	cons.resume()
	r := cons.read(2 * time.Minute)
	assert.NotEmpty(t, r["error"], "a get from a closed owner reported success")
}
