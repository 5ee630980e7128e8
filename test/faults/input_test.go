package faults

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTamperedHandles: handles that are not hex, of another length, with a wrong nonce, or naming a
// slot that never existed get clear errors; the owner is unharmed and its real payload still moves.
func TestTamperedHandles(t *testing.T) {
	owner := startNode(t, "owner")
	cons := startNode(t, "consumer")
	pair(t, owner, cons)
	start := owner.stats()
	p := stage(owner, 8<<20, true)
	withStage := owner.stats()

	for _, tc := range []struct{ name, handle, want string }{
		{"not hex", "zz" + p.Handle[2:], "bad rendezvous handle"},
		{"truncated", p.Handle[:len(p.Handle)-4], "bad rendezvous handle"},
		{"wrong nonce", forgedHandle(t, p.Handle), "does not match its slot"},
		{"unknown slot", p.Handle[:18] + "00000000000000ff" + p.Handle[34:], "no such slot"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := cons.do("get " + tc.handle)
			require.NotEmpty(t, r["error"], "a tampered handle was fetched")
			assert.Contains(t, r["error"], tc.want)
			st := owner.stats()
			assert.Equal(t, withStage.PinnedBytes, st.PinnedBytes)
			assert.Zero(t, st.LeaseRegistrations)
			assert.Zero(t, st.OpenLeases)
		})
	}
	delivered(t, cons.do("get "+p.Handle), p, okPath)
	// The pooled arena the payload was staged in stays mapped (ArenaReclaimAfter is off).
	backToStart(t, owner, stats{PinnedBytes: withStage.ArenaBytes, Slots: start.Slots, StagedSlots: start.StagedSlots})
	owner.quit(15e9)
}

// TestBudgetSpent: an owner whose budget has no room for a payload stages it in plain memory and
// serves it chunked under reason budget; nothing stays counted.
func TestBudgetSpent(t *testing.T) {
	owner := startNode(t, "owner", "-arena", "1048576", "-budget", "2097152")
	cons := startNode(t, "consumer")
	pair(t, owner, cons)
	start := owner.stats()
	p := stage(owner, 3<<20, true) // a dedicated 3 MiB arena would pass the 2 MiB budget
	delivered(t, cons.do("get "+p.Handle), p, "chunked/budget")
	small := stage(owner, 512<<10, true)
	delivered(t, cons.do("get "+small.Handle), small, okPath)
	backToStart(t, owner, stats{PinnedBytes: 1 << 20, Slots: start.Slots, StagedSlots: start.StagedSlots})
	final := owner.quit(15e9)
	assert.Zero(t, final.PinnedBytes)
}
