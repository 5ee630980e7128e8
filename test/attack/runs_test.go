package attack

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// leaseRun stages n payloads of size bytes one after another (seeds from seed on) and has the
// consumer lease the first k in one GetBatch, which the owner registers as one run. It returns
// the handles, the batch's lease numbers and the run's registration (the lease holder's: the
// legitimate consumer, or with the same-host path on the consumer of another host, fixture). The stagings wrote after
// the fixture's registrations, so the victim's memory check starts over from here.
func (f *fixture) leaseRun(t *testing.T, size, n, k, seed int) (handles []string, leases []any, run lease) {
	t.Helper()
	for i := range n {
		r := f.victim.ok(fmt.Sprintf("stage %d %d", size, seed+i))
		handles = append(handles, r["handle"].(string))
	}
	before := len(f.regs())
	r := f.holder.ok("batch " + strings.Join(handles[:k], " "))
	for i, p := range asSlice(r["paths"]) {
		require.Equal(t, "rdma", p, "batch entry %d's path", i)
	}
	regs := f.regs()
	require.Len(t, regs, before+1, "the %d neighbouring slots are one registration", k)
	run = regs[before]
	require.Equal(t, uint64(k*size), run.size, "the run covers the %d slots, no more", k)
	require.Equal(t, run.addr, run.base, "the registration's key names the run")
	require.False(t, run.revoked, "the run is live")
	_, err := f.victim.do("check", time.Minute)
	require.NoError(t, err)
	return handles, asSlice(r["leases"]), run
}

// TestBatchRunKeys attacks the one registration an owner makes for a batch's neighbouring
// slots (docs/security.md, "Runs"). Payloads D, E, F and G are staged one after another; the
// legitimate consumer leases D, E and F in one GetBatch, which the owner registers as one run,
// each lease with the key of its own slot. With the run's token (a stolen key), the attacker
// reads nothing: not the run while its leases live (the key is bound to the consumer it was
// given to, and the attacker's endpoint is not that consumer's), not G (the slot right after
// the run, leased by nobody), nothing across the run's end or before its start, and nothing
// once the last of the three leases ended.
func TestBatchRunKeys(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	const size = 16 << 10
	_, leases, run := f.leaseRun(t, size, 4, 3, 200)
	at := len(f.regs()) - 1 // the run is the newest registration

	tok := func(addr uint64) guardRead {
		return guardRead{Slot: run.slot, Token: run.token, Addr: addr, Len: 64}
	}
	// The token is live and reaches every slot of the run, for its holder alone: a read of E's
	// part from the attacker's endpoint is refused as not the holder's.
	held := f.counters().holderRefused
	f.guardedGetRefused(t, "inside_the_run", tok(run.addr+size))
	assert.Greater(t, f.counters().holderRefused, held, "the owner did not count the read inside the run as not the holder's")

	f.guardedGetRefused(t, "past_the_run", tok(run.addr+run.size))
	f.guardedGetRefused(t, "across_the_run_end", tok(run.addr+run.size-32))
	f.guardedGetRefused(t, "before_the_run", tok(run.addr-64))
	f.guardedGetRefused(t, "middle_of_g", tok(run.addr+run.size+size/2))

	// D and E end: F's lease keeps the run's key alive.
	f.holder.ok(fmt.Sprintf("end %v", leases[0]))
	f.holder.ok(fmt.Sprintf("end %v", leases[1]))
	assert.False(t, f.regs()[at].revoked, "the run's key died before its last lease ended")
	// F ends: the run's key is revoked, and nothing of D, E or F can be read with it.
	f.holder.ok(fmt.Sprintf("end %v", leases[2]))
	require.Eventually(t, func() bool { return f.regs()[at].revoked }, 10*time.Second, 20*time.Millisecond, "the run's key is revoked once its last lease ended")
	for i, name := range []string{"revoked_d", "revoked_e", "revoked_f"} {
		f.guardedGetRefused(t, name, tok(run.addr+uint64(i)*size))
	}
}
