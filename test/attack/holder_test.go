package attack

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSniffedKeys takes the keys of a live pair off the wire and uses them from other processes
// (docs/security.md, "Keys bound to their holder"). A guarded GET request carries its key's slot
// and token, the address and the length in the clear; the attacker's packet observer collects
// every such read the legitimate consumer sends while it reads its leases A and B and a run of
// three neighbouring leases (one GetBatch), all of them still live. Then three processes try
// those reads:
//
//   - without_the_secret: the attacker (no cluster secret, no velo instance) from its own UCX
//     endpoint to the owner, each read alone and all in one vectored request;
//   - with_the_secret: the same from a second attacker process that holds the cluster secret;
//   - member_with_the_secret: an authenticated member (a velo instance with the secret, its
//     own UCX endpoints to the owner, which the owner connected back to) reading through its UCX
//     transport with the consumer's whole sealed keys.
//
// Each must read nothing: no byte back, no marker on the wire, the owner counting the refusals as
// not the holder's (ucx_engine_rma_refused_total{kind="holder"}), and the legitimate pair going
// on untouched (afterAttack: its stream delivered in order, its get served on its path). The
// consumer's own leases stay readable to it throughout (the batch and the acquires succeeded with
// the same keys). With the same-host path on, the live pair whose keys are taken is the owner and
// the fixture's lease holder, a consumer of another host, since only such a pair has UCX keys.
func TestSniffedKeys(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	if !f.guardEnforced() {
		t.Skip("skipped: the owner's UCX lacks velo's guard patch set, so its refusal counters are absent")
	}
	hs, _, run := f.leaseRun(t, 16<<10, 3, 3, 300)

	live := []lease{f.live[0], f.live[1], run}
	var reads []guardRead
	if f.observed {
		reads = f.sniffedReads(t, live)
	} else {
		// Blind (no packet socket here): the reads a sniffer would have taken, from the
		// owner's records. The keys and ranges are the same bytes.
		t.Logf("the attacker cannot watch the wire (%s): using the live keys as recorded", f.whyBlind)
		for _, l := range live {
			reads = append(reads, guardRead{Slot: l.slot, Token: l.token, Addr: l.addr, Len: 64})
		}
	}

	attack := func(t *testing.T, atk *proc) {
		f.t = t
		before := f.counters()
		for _, g := range reads {
			r := atk.ok(map[string]any{"op": "guarded_get", "reads": []guardRead{g}})
			t.Logf("guarded GET %+v: replied %v, status %v, %v bytes", g, r["replied"], r["reply_status"], r["data_len"])
			assert.Equal(t, true, r["replied"], "the owner did not answer: a refusal must be answered")
			assert.NotEqual(t, float64(0), r["reply_status"], "the owner served a sniffed key to another process")
			assert.Zero(t, num(r["data_len"]), "bytes came back: %s", preview(r["data"]))
		}
		r := atk.ok(map[string]any{"op": "guarded_getv", "reads": reads})
		for i, s := range asSlice(r["statuses"]) {
			assert.NotEqual(t, float64(0), s, "vectored read %d was served", i)
		}
		assert.Zero(t, num(r["data_len"]), "bytes came back: %s", preview(r["data"]))
		f.holderRefusals(before, 2*len(reads))
		f.afterAttack("sniffed keys")
	}
	t.Run("without_the_secret", func(t *testing.T) { attack(t, f.atk) })
	t.Run("with_the_secret", func(t *testing.T) {
		atk := start(t, "attacker-with-secret", bins.attacker, env(true))
		atk.ok(map[string]any{"op": "connect", "blob": f.v.blob})
		attack(t, atk)
	})
	t.Run("member_with_the_secret", func(t *testing.T) {
		f.t = t
		// Another host's member, with the same-host path on: its own lease and its steals go
		// to the owner's UCX, whose refusal is the claim.
		m := start(t, "member", bins.victim, env(true, otherHost), "-role", "legit")
		mi := infoOf(t, m)
		m.ok("peer " + f.v.info)
		f.victim.ok("peer " + mi.info)
		// The member's own lease first: its endpoints to the owner are up and the owner has
		// connected back to them, so the refusal below is "another holder's key", not a race.
		own := m.ok("acquire " + f.payloads[0].handle)
		require.NotEmpty(t, own["first"], "the member's own lease reads")
		before := f.counters()
		for i, l := range live {
			r := m.ok(fmt.Sprintf("steal %s %s %d %d", f.v.id, l.raw, 0, 64))
			t.Logf("member's GET through the consumer's key %d: read %v, err %v", i, r["read"], r["err"])
			assert.Equal(t, false, r["read"], "a member read through another consumer's key")
			assert.Contains(t, r["err"], "given to another peer", "the member's GET failed for another reason than the owner's refusal")
			assert.Empty(t, r["data"])
		}
		f.holderRefusals(before, len(live))
		f.afterAttack("a member with sniffed keys")
	})
	// The consumer still reads its own leases with the keys the others could not use.
	f.t = t
	r := f.holder.ok("batch " + strings.Join(hs, " "))
	for i, p := range asSlice(r["paths"]) {
		assert.Equal(t, "rdma", p, "the consumer's batch entry %d after the attacks", i)
	}
}

// holderRefusals wants at least n more refusals counted as not the holder's than before. The
// owner's engine copies its guard's counts into its metrics as it progresses, after the refusals
// were answered, so a reading taken as the last answer arrives may still lack them: it reads
// again for a few seconds before it fails.
func (f *fixture) holderRefusals(before counters, n int) {
	f.t.Helper()
	after := f.counters()
	if first := after.holderRefused - before.holderRefused; first < float64(n) {
		began := time.Now()
		for after.holderRefused-before.holderRefused < float64(n) && time.Since(began) < 5*time.Second {
			time.Sleep(50 * time.Millisecond)
			after = f.counters()
		}
		f.t.Logf("the owner's count of refusals as not the holder's read %v of %d at first, %v after %v", first, n,
			after.holderRefused-before.holderRefused, time.Since(began).Round(time.Millisecond))
	}
	assert.GreaterOrEqual(f.t, after.holderRefused-before.holderRefused, float64(n),
		"the owner counted fewer refusals as not the holder's than reads tried (%s)", grew(before, after))
}

// sniffedReads are the guarded GET reads the attacker's observer took off the wire that name one
// of live's keys; it wants at least one for each.
func (f *fixture) sniffedReads(t *testing.T, live []lease) []guardRead {
	var out []guardRead
	found := make([]bool, len(live))
	require.Eventually(t, func() bool {
		out = out[:0]
		o := f.atk.ok(map[string]any{"op": "observed"})
		for _, x := range asSlice(o["sniffed_reads"]) {
			m := x.(map[string]any)
			tok, err := strconv.ParseUint(m["token"].(string), 10, 64)
			require.NoError(t, err, "a sniffed token")
			g := guardRead{Slot: uint32(num(m["slot"])), Token: tok, Addr: num(m["addr"]), Len: num(m["len"])}
			for i, l := range live {
				if g.Slot == l.slot && g.Token == l.token {
					found[i] = true
					out = append(out, g)
				}
			}
		}
		for _, ok := range found {
			if !ok {
				return false
			}
		}
		return true
	}, 10*time.Second, 50*time.Millisecond, "the observer saw no guarded GET request of one of the live keys")
	t.Logf("sniffed %d reads of the %d live keys off the wire", len(out), len(live))
	return out
}
