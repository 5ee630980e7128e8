package attack

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGuardedPutByHand writes velo's guarded PUT request (what a writer's engine sends where the
// lanes have no hardware RMA) by hand, from a process with no key of the target's at all or with
// the wrong one, at a target that holds a read-only registration, a write-only one, a revoked
// one and a write-only one bound to another writer (cmd/putvictim, a bare ucx engine: the protocol is the engine's, below any velo
// credentials). Each attempt must be answered with a refusal, write nothing anywhere (the global,
// the heap buffer, every registration and the guard area after each), be counted by the target
// under its reason, and leave the target serving: at the end a write with the right key in range
// lands, and only there.
//
//	claim (docs/security.md)                                        case
//	-----------------------------------------------------------------------------------------------
//	guarded PUT: no write without a key the target issued           no_key_guessed_slots, no_key_global
//	guarded PUT: a read-only key does not write                      read_only_key
//	guarded PUT: a revoked key does not write                        revoked_key
//	guarded PUT: a write key writes only inside its registration     past_the_registration,
//	                                                                 write_key_at_the_global,
//	                                                                 write_key_at_another_registration
//	guarded PUT: a live write key bound to another writer does not   write_key_of_another_writer,
//	  write from the attacker's endpoint                             vector_write_key_of_another_writer
//	guarded PUT: a request whose length lies, or whose data comes    length_lies, by_rendezvous
//	  by rendezvous, writes nothing
//	vectored guarded PUT: each write checked as a single one is      vector_no_key_guessed_slots,
//	                                                                 vector_each_refused_for_its_reason
//	vectored guarded PUT: data that is not exactly the entries'      vector_length_lies,
//	  bytes writes nothing                                           vector_length_wraps
//	guarded GET: a write-only key does not read                      get_through_the_write_key
func TestGuardedPutByHand(t *testing.T) {
	bin := buildPutVictim(t)
	marker := make([]byte, 16)
	_, _ = rand.Read(marker)
	v := start(t, "putvictim", bin, env(false), "-marker", hex.EncodeToString(marker))
	atk := start(t, "attacker", bins.attacker, env(false))
	info := v.ok("info")
	regs := info["regs"].(map[string]any)
	key := func(name string) sealedKey {
		return parseSealedKey(t, regs[name].(map[string]any)["key"].(string))
	}
	read, write, revoked, bound := key("read"), key("write"), key("revoked"), key("bound")
	global := regionOf(info["global"])
	t.Logf("target: UCX %v, pid %v; read slot %d, write slot %d, revoked slot %d", info["ucx_version"], info["pid"], read.slot, write.slot, revoked.slot)
	atk.ok(map[string]any{"op": "connect", "blob": info["blob"]})
	require.Empty(t, v.ok("check")["changed"])

	data := hex.EncodeToString(attackerBytes)
	guessedToken := uint64(0x0123456789abcdef)
	cases := []struct {
		name    string
		writes  []guardRead
		data    string
		rndv    bool
		outcome string
	}{
		{"no_key_guessed_slots", []guardRead{
			{Slot: 0, Token: 0, Addr: write.base, Len: 64}, {Slot: 1, Token: 0, Addr: write.base, Len: 64},
			{Slot: 2, Token: guessedToken, Addr: write.base, Len: 64}, {Slot: 7, Token: 1, Addr: write.base, Len: 64},
		}, data, false, "revoked"},
		{"no_key_global", []guardRead{{Slot: write.slot, Token: guessedToken, Addr: global.addr + 64, Len: 64}}, data, false, "revoked"},
		{"read_only_key", []guardRead{{Slot: read.slot, Token: read.token, Addr: read.base, Len: 64}}, data, false, "read_only"},
		{"revoked_key", []guardRead{{Slot: revoked.slot, Token: revoked.token, Addr: revoked.base, Len: 64}}, data, false, "revoked"},
		{"past_the_registration", []guardRead{{Slot: write.slot, Token: write.token, Addr: write.base + write.size - 32, Len: 64}}, data, false, "out_of_range"},
		{"write_key_at_the_global", []guardRead{{Slot: write.slot, Token: write.token, Addr: global.addr, Len: 64}}, data, false, "out_of_range"},
		{"write_key_at_another_registration", []guardRead{{Slot: write.slot, Token: write.token, Addr: read.base, Len: 64}}, data, false, "out_of_range"},
		{"length_lies", []guardRead{{Slot: write.slot, Token: write.token, Addr: write.base, Len: 16}}, data, false, "malformed"},
		{"write_key_of_another_writer", []guardRead{{Slot: bound.slot, Token: bound.token, Addr: bound.base + 64, Len: 64}}, data, false, "holder"},
		{"by_rendezvous", []guardRead{{Slot: write.slot, Token: write.token, Addr: write.base, Len: 64 << 10}}, hex.EncodeToString(make([]byte, 64<<10)), true, "malformed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := putCounters(t, v)
			for _, w := range c.writes {
				r := atk.ok(map[string]any{"op": "guarded_put", "reads": []guardRead{w}, "data": c.data, "rndv": c.rndv})
				t.Logf("guarded PUT %+v: replied %v, status %v", w, r["replied"], r["reply_status"])
				assert.Equal(t, true, r["replied"], "the target did not answer (it should refuse, not go quiet)")
				assert.NotEqual(t, float64(0), r["reply_status"], "the target served the write")
			}
			assert.Empty(t, v.ok("check")["changed"], "the target's memory changed")
			after := putCountersReach(t, v, "put:"+c.outcome, before["put:"+c.outcome]+float64(len(c.writes)))
			assert.Equal(t, before["put:"+c.outcome]+float64(len(c.writes)), after["put:"+c.outcome], "refusals counted as %s: %v", c.outcome, after)
			assert.Equal(t, before["put:served"], after["put:served"], "the target counted a write as served")
		})
	}

	// The vectored request: the same checks entry by entry, and data that is not exactly the
	// entries' bytes writes nothing at all.
	two := data + data
	vcases := []struct {
		name     string
		writes   []guardRead
		data     string
		outcomes map[string]float64
	}{
		{"vector_no_key_guessed_slots", []guardRead{
			{Slot: 0, Token: 0, Addr: write.base, Len: 64}, {Slot: 3, Token: guessedToken, Addr: write.base + 64, Len: 64},
		}, two, map[string]float64{"revoked": 2}},
		{"vector_each_refused_for_its_reason", []guardRead{
			{Slot: read.slot, Token: read.token, Addr: read.base, Len: 64},
			{Slot: revoked.slot, Token: revoked.token, Addr: revoked.base, Len: 64},
			{Slot: write.slot, Token: write.token, Addr: global.addr, Len: 64},
			{Slot: write.slot, Token: write.token, Addr: write.base + write.size - 32, Len: 64},
		}, two + two, map[string]float64{"read_only": 1, "revoked": 1, "out_of_range": 2}},
		{"vector_write_key_of_another_writer", []guardRead{
			{Slot: bound.slot, Token: bound.token, Addr: bound.base, Len: 64}, {Slot: bound.slot, Token: bound.token, Addr: bound.base + 64, Len: 64},
		}, two, map[string]float64{"holder": 2}},
		{"vector_length_lies", []guardRead{
			{Slot: write.slot, Token: write.token, Addr: write.base, Len: 64}, {Slot: write.slot, Token: write.token, Addr: write.base + 64, Len: 65},
		}, two, map[string]float64{"malformed": 2}},
		{"vector_length_wraps", []guardRead{
			{Slot: write.slot, Token: write.token, Addr: write.base, Len: 64}, {Slot: write.slot, Token: write.token, Addr: write.base + 64, Len: ^uint64(0) - 32},
		}, two, map[string]float64{"malformed": 2}},
	}
	for _, c := range vcases {
		t.Run(c.name, func(t *testing.T) {
			before := putCounters(t, v)
			r := atk.ok(map[string]any{"op": "guarded_putv", "reads": c.writes, "data": c.data})
			t.Logf("vectored guarded PUT of %d writes: replied %v, statuses %v", len(c.writes), r["replied"], r["statuses"])
			require.Equal(t, true, r["replied"], "the target did not answer (it should refuse, not go quiet)")
			statuses := r["statuses"].([]any)
			require.Len(t, statuses, len(c.writes))
			for j, st := range statuses {
				assert.NotEqual(t, float64(0), st, "the target served write %d", j)
			}
			assert.Empty(t, v.ok("check")["changed"], "the target's memory changed")
			for outcome, n := range c.outcomes {
				after := putCountersReach(t, v, "put:"+outcome, before["put:"+outcome]+n)
				assert.Equal(t, before["put:"+outcome]+n, after["put:"+outcome], "refusals counted as %s: %v", outcome, after)
			}
			assert.Equal(t, before["put:served"], putCounters(t, v)["put:served"], "the target counted a write as served")
		})
	}

	t.Run("get_through_the_write_key", func(t *testing.T) {
		r := atk.ok(map[string]any{"op": "guarded_get", "reads": []guardRead{{Slot: write.slot, Token: write.token, Addr: write.base, Len: 64}}})
		assert.Equal(t, true, r["replied"])
		assert.NotEqual(t, float64(0), r["reply_status"], "a write-only registration was read")
		assert.Zero(t, num(r["data_len"]), "bytes came back")
		assert.Empty(t, v.ok("check")["changed"])
	})

	// The target is alive and serves the right key, in range, and nowhere else.
	t.Run("legit_write_still_served", func(t *testing.T) {
		r := atk.ok(map[string]any{"op": "guarded_put", "reads": []guardRead{{Slot: write.slot, Token: write.token, Addr: write.base + 128, Len: 64}}, "data": data})
		require.Equal(t, float64(0), r["reply_status"], "the right key in range was refused: %v", r)
		changed := v.ok("check")["changed"].([]any)
		require.Len(t, changed, 1, "%v", changed)
		assert.Contains(t, changed[0], "write: byte 128 is \"PWNED")
		assert.Equal(t, float64(1), putCountersReach(t, v, "put:served", 1)["put:served"])
	})
	t.Run("legit_vector_still_served", func(t *testing.T) {
		r := atk.ok(map[string]any{"op": "guarded_putv", "data": data + data, "reads": []guardRead{
			{Slot: write.slot, Token: write.token, Addr: write.base + 512, Len: 64},
			{Slot: write.slot, Token: write.token, Addr: write.base + 1024, Len: 64},
		}})
		require.Equal(t, []any{float64(0), float64(0)}, r["statuses"], "the right key in range was refused: %v", r)
		changed := v.ok("check")["changed"].([]any)
		require.Len(t, changed, 1, "%v", changed)
		assert.Contains(t, changed[0], "write: byte 512 is \"PWNED")
		assert.Equal(t, float64(3), putCountersReach(t, v, "put:served", 3)["put:served"])
	})
}

// putCounters is the target's guarded-PUT and guarded-GET counters.
func putCounters(t *testing.T, v *proc) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for k, x := range v.ok("counters")["counters"].(map[string]any) {
		out[k], _ = x.(float64)
	}
	return out
}

// putCountersReach reads the target's counters until key reaches want, for at most five seconds,
// and returns the last reading. The engine folds the worker's counts into its metrics after the
// progress turn that served the request, and the reply leaves inside that turn: a reading taken
// the moment the attacker has its answer can be one turn behind (seen under load in CI).
func putCountersReach(t *testing.T, v *proc, key string, want float64) map[string]float64 {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := putCounters(t, v)
		if got[key] >= want || time.Now().After(deadline) {
			return got
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// buildPutVictim builds cmd/putvictim with the suite's tags into the test's temporary directory.
func buildPutVictim(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "putvictim")
	args := []string{"build", "-o", bin}
	if buildTags != "" {
		args = append(args, "-tags", buildTags)
	}
	cmd := exec.Command("go", append(args, "./cmd/putvictim")...)
	cmd.Env = os.Environ()
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build ./cmd/putvictim (tags %q):\n%s", buildTags, out)
	return bin
}
