package attack

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBatchRunKeys attacks the one registration an owner makes for a batch's neighbouring
// slots (docs/security.md, "Runs"). Payloads D, E, F and G are staged one after another; the
// legitimate consumer leases D, E and F in one GetBatch, which the owner registers as one run,
// each lease with the key of its own slot. With the run's token (a stolen key), the attacker
// reads nothing of G (the slot right after the run, leased by nobody), nothing across the
// run's end or before its start, and nothing at all once the last of the three leases ended;
// while one of them lives, the whole run stays readable, which is what a run key is.
func TestBatchRunKeys(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	const size = 16 << 10
	var hs []string
	for i := range 4 {
		r := f.victim.ok(fmt.Sprintf("stage %d %d", size, 200+i))
		hs = append(hs, r["handle"].(string))
	}
	before := len(f.regs())
	r := f.legit.ok("batch " + strings.Join(hs[:3], " "))
	for i, p := range asSlice(r["paths"]) {
		require.Equal(t, "rdma", p, "batch entry %d's path", i)
	}
	leases := asSlice(r["leases"])
	regs := f.regs()
	require.Len(t, regs, before+1, "the three neighbouring slots are one registration")
	run := regs[before]
	require.Equal(t, uint64(3*size), run.size, "the run covers the three slots, no more")
	require.Equal(t, run.addr, run.base, "the registration's key names the run")

	// The new stagings wrote after the fixture's registrations (D follows C's slot): the
	// victim's memory check starts over from here.
	_, err := f.victim.do("check", time.Minute)
	require.NoError(t, err)

	tok := func(addr uint64) guardRead {
		return guardRead{Slot: run.slot, Token: run.token, Addr: addr, Len: 64}
	}
	// The token is live and reaches every slot of the run: a read of E's part is served.
	r = f.atk.ok(map[string]any{"op": "guarded_get", "reads": []guardRead{tok(run.addr + size)}})
	require.Equal(t, float64(0), r["reply_status"], "a read inside the run")
	require.Equal(t, uint64(64), num(r["data_len"]), "bytes of a read inside the run")

	f.guardedGetRefused(t, "past_the_run", tok(run.addr+run.size))
	f.guardedGetRefused(t, "across_the_run_end", tok(run.addr+run.size-32))
	f.guardedGetRefused(t, "before_the_run", tok(run.addr-64))
	f.guardedGetRefused(t, "middle_of_g", tok(run.addr+run.size+size/2))

	// D and E end: F's lease keeps the run's key alive.
	f.legit.ok(fmt.Sprintf("end %v", leases[0]))
	f.legit.ok(fmt.Sprintf("end %v", leases[1]))
	assert.False(t, f.regs()[before].revoked, "the run's key died before its last lease ended")
	// F ends: the run's key is revoked, and nothing of D, E or F can be read with it.
	f.legit.ok(fmt.Sprintf("end %v", leases[2]))
	require.Eventually(t, func() bool { return f.regs()[before].revoked }, 10*time.Second, 20*time.Millisecond, "the run's key is revoked once its last lease ended")
	for i, name := range []string{"revoked_d", "revoked_e", "revoked_f"} {
		f.guardedGetRefused(t, name, tok(run.addr+uint64(i)*size))
	}
}
