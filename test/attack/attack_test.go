package attack

// What docs/security.md calls protected, and the test that attacks it. Every attack comes from
// a separate process with no cluster secret and no velo instance (cmd/ucxattacker), through the
// lowest layer it can reach: its own UCX endpoint to the victim's worker, or a plain TCP socket
// to the victim's UCX port speaking UCX's tcp protocol itself. After each attack, afterAttack
// asks the same questions: nothing read (no byte of the victim's in the attacker's buffers, and
// the secret marker never on the wire), nothing written (the global, the heap buffer, every
// registered range and the bytes past each registration's end as they were), nothing delivered
// (the owner's handler saw only the legitimate consumer's messages), the legitimate consumer up
// on both sides with every message it sent delivered once and in order, and the owner alive and
// serving a transfer on the RDMA path (the same-host path with VELO_TEST_SAME_HOST=1, doc.go).
// Each test also reads the victim's refusal counters, to show that the attempts arrived and were
// refused rather than lost on the way.
//
//	claim (docs/security.md)                                      test
//	---------------------------------------------------------------------------------------------------
//	software RMA: no read of a global, the heap, a live lease's   TestOneSidedReads/{global,heap,
//	  range without its key, with a revoked key, with another      lease_without_key,revoked_key,
//	  lease's key, or across a registration's end                 foreign_key,across_end}
//	software RMA: no write at any of those                        TestOneSidedWrites/{same}
//	software RMA: no atomic at any of those                       TestAtomics/{same}
//	guarded GET: a bad, revoked or foreign token, or a range     TestGuardedGetByHand/{bad_token,revoked,
//	  past a registration, reads nothing (single and vectored)     foreign,across_end,global,vectored}
//	guarded PUT: no key, a read-only key, a revoked key, a range   TestGuardedPutByHand/{no_key_*,
//	  past a registration or outside it, a length that lies or     read_only_key,revoked_key,
//	  data by rendezvous write nothing; a write-only key reads     past_the_registration,write_key_*,
//	  nothing (guardput_test.go, against cmd/putvictim)            length_lies,by_rendezvous,
//	                                                               get_through_the_write_key}
//	a run (one registration for a batch's neighbouring leases):   TestBatchRunKeys/{inside_the_run,
//	  its token reads nothing from another process inside the      past_the_run,across_the_run_end,
//	  run, nor anything outside it, nor anything once its last     before_the_run,middle_of_g,
//	  lease ended (runs_test.go)                                   revoked_d,_e,_f}
//	keys bound to their holder: reads taken off the wire of a     TestSniffedKeys/{without_the_secret,
//	  live pair (leases and a run) read nothing from another       with_the_secret,
//	  process's endpoint, with or without the secret, nor from     member_with_the_secret}
//	  an authenticated member's own (holder_test.go)
//	UCX frames: none forged in an authenticated peer's name is   TestForgedFrames/{every_epoch,
//	  delivered, at any epoch it opened or any seq; a forged bye    while_streaming,bye}
//	  does not end the peer; its own messages are all delivered
//	tcp transport: its PUT request writes nothing                 TestRawTCPPutRequest
//	ucp over a raw socket: PUT, GET and atomic messages with       TestRawUCPSoftwareRMA/{put,get,atomic}
//	  guessed endpoint ids touch nothing
//	ucp over a raw socket: forged direct (pointer) endpoint ids    TestRawUCPForgedWireIDs
//	  are refused, not followed
//	UCX connections: requests planted in the consumer's name      TestPlantedConnectionRequests/
//	  (its addresses, sequence numbers 0..15) before the pair's     {before_peering,while_streaming}
//	  endpoints exist or while it streams take nothing over
//	  (plant_test.go)
//	flooding: a flood to the owner's descriptor limit stops its    TestUCXListenerSurvivesFdFlood
//	  UCX listener only while it lasts; its log grows by a few
//	  lines (flood_test.go)
//	flooding: one source keeps at most 256 connections to the     TestUCXConnectionCapPerSource
//	  UCX port; others and the pair are served meanwhile
//	log flooding: 4,000 frames with an active-message id nobody   TestUCXUnhandledAMLogLimited
//	  handles grow the owner's log by a few lines (amlog_test.go)
//	same-host socket (VELO_TEST_SAME_HOST=1): a hello without     TestSameHostSocket/{without_the_secret,
//	  the secret's proof, or a process of another user, gets no     another_user}
//	  ring and reads nothing (samehost_test.go)
//
// Over tcp here; on InfiniBand (UCX_TLS and UCX_NET_DEVICES set without tcp) the raw-socket
// tests and the packet observer are skipped, each saying so.

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// target is one place an attacker reaches for, with the key it uses.
type target struct {
	name string
	addr uint64
	len  uint64
	key  string // "own": packed from the attacker's own memory; else a UCX key (hex)
}

// targets are the places of the one-sided attacks: a global and the heap (no registration at
// all), a live lease's range with a key of the attacker's own, a revoked lease's range with its
// old key, lease A's range with lease B's key, and a live key stretched past its region's end.
func (f *fixture) targets() []target {
	a, b := f.live[0], f.live[1]
	return []target{
		{"global", f.v.global.addr + 128, 64, "own"},
		{"heap", f.v.heap.addr + 256, 64, "own"},
		{"lease_without_key", a.addr + 64, 64, "own"},
		{"revoked_key", f.revoked.addr, 64, f.revoked.ucxKey},
		{"foreign_key", a.addr, 64, b.ucxKey},
		{"across_end", a.addr + a.size - 32, 64, a.ucxKey},
	}
}

// attackerBytes is what the attacker writes: recognisable, and unlike anything the victim holds.
var attackerBytes = bytes.Repeat([]byte("PWNED-BY-THE-ATTACKER!"), 3)[:64]

func TestOneSidedReads(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	for _, tg := range f.targets() {
		t.Run(tg.name, func(t *testing.T) {
			f.t = t
			before := f.counters()
			r := f.atk.ok(map[string]any{"op": "get", "addr": tg.addr, "len": tg.len, "key": tg.key})
			t.Logf("GET %d bytes at %#x with key %s: %v", tg.len, tg.addr, short(tg.key), r["status"])
			assert.NotEqual(t, "ok", r["status"], "the GET completed as if served")
			assert.Equal(t, false, r["changed"], "bytes arrived in the attacker's buffer: %s", preview(r["data"]))
			f.afterAttack("GET " + tg.name)
			f.refusalsSeen(before, "get")
		})
	}
}

func TestOneSidedWrites(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	for _, tg := range f.targets() {
		t.Run(tg.name, func(t *testing.T) {
			f.t = t
			before := f.counters()
			r := f.atk.ok(map[string]any{"op": "put", "addr": tg.addr, "data": hex.EncodeToString(attackerBytes), "key": tg.key})
			t.Logf("PUT %d bytes at %#x with key %s: %v (flush %v)", len(attackerBytes), tg.addr, short(tg.key), r["status"], r["flush"])
			f.afterAttack("PUT " + tg.name)
			f.refusalsSeen(before, "put")
		})
	}
}

// TestAtomics sends fetching atomics at each target. With velo's guard (patches 0003 and 0007)
// every one is answered with a refusal, never left waiting, and counted as kind atomic; none
// reaches UCX's stub for ids without a handler.
func TestAtomics(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	ops := []string{"add", "swap", "cswap", "xor"}
	for _, tg := range f.targets() {
		t.Run(tg.name, func(t *testing.T) {
			f.t = t
			before, dropped := f.counters(), f.victimLog(noHandler(ucpAtomicReq))
			atomicsBefore := sum(series(f.victim, "ucx_engine_rma_refused_total"), "kind=atomic")
			r := f.atk.ok(map[string]any{"op": "atomic", "atomics": ops, "addr": tg.addr &^ 7,
				"value": uint64(0x4141414141414141), "key": tg.key, "timeout": "1500ms"})
			for op, x := range r["ops"].(map[string]any) {
				m := x.(map[string]any)
				t.Logf("atomic %s at %#x with key %s: %v", op, tg.addr&^7, short(tg.key), m["status"])
				assert.NotEqual(t, "ok", m["status"], "atomic %s completed as if served (fetched %v)", op, m["fetched"])
				if f.guardEnforced() {
					assert.Contains(t, m["status"], "REJECTED", "atomic %s was not answered with the guard's refusal", op)
				}
			}
			f.afterAttack("atomics at " + tg.name)
			f.atomicsArrived(before, dropped)
			if f.guardEnforced() {
				atomics := sum(series(f.victim, "ucx_engine_rma_refused_total"), "kind=atomic") - atomicsBefore
				assert.GreaterOrEqual(t, atomics, float64(len(ops)), "the owner counted %v atomics refused, %d were sent", atomics, len(ops))
				assert.Equal(t, dropped, f.victimLog(noHandler(ucpAtomicReq)), "atomic requests reached UCX's stub for ids without a handler")
			}
		})
	}
}

// TestGuardedGetByHand writes velo's own guarded GET request (what the engine sends over tcp)
// by hand, with tokens and ranges the owner never granted.
func TestGuardedGetByHand(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	a, b, c := f.live[0], f.live[1], f.revoked
	reads := map[string]guardRead{
		"bad_token":  {Slot: a.slot, Token: a.token ^ 0x5a5a5a5a5a5a5a5a, Addr: a.base, Len: 64},
		"revoked":    {Slot: c.slot, Token: c.token, Addr: c.base, Len: 64},
		"foreign":    {Slot: b.slot, Token: b.token, Addr: a.base, Len: 64},
		"across_end": {Slot: a.slot, Token: a.token, Addr: a.base + a.size - 32, Len: 64},
		"global":     {Slot: a.slot, Token: a.token, Addr: f.v.global.addr, Len: 64},
	}
	for _, name := range []string{"bad_token", "revoked", "foreign", "across_end", "global"} {
		f.guardedGetRefused(t, name, reads[name])
	}
	t.Run("vectored", func(t *testing.T) {
		f.t = t
		before := f.counters()
		all := []guardRead{reads["bad_token"], reads["revoked"], reads["foreign"], reads["across_end"], reads["global"]}
		r := f.atk.ok(map[string]any{"op": "guarded_getv", "reads": all})
		t.Logf("vectored guarded GET of %d reads: replied %v, statuses %v, %v bytes", len(all), r["replied"], r["statuses"], r["data_len"])
		for i, s := range asSlice(r["statuses"]) {
			assert.NotEqual(t, float64(0), s, "read %d was served", i)
		}
		assert.Zero(t, num(r["data_len"]), "bytes came back: %s", preview(r["data"]))
		f.afterAttack("vectored guarded GET")
		assert.GreaterOrEqual(t, f.counters().guardRefused-before.guardRefused, float64(len(all)), "the owner counted fewer refusals than reads")
	})
}

// TestForgedFrames forges velo's UCX transport frames in the legitimate consumer's name: data
// frames at every epoch the consumer opened, at seqs around the last one seen and far ahead,
// with no seal and with a seal of random bytes; a hello that would move the consumer's address
// to the attacker; and a fin marked bye, which would report the consumer gone.
func TestForgedFrames(t *testing.T) {
	f := newFixture(t, fixtureOptions{legitEPIdle: 300 * time.Millisecond})
	// Idle gaps longer than the consumer's reaper: each ends an epoch, the next send opens one.
	for range 2 {
		f.legit.ok("pause")
		time.Sleep(900 * time.Millisecond)
		f.legit.ok("resume")
		time.Sleep(150 * time.Millisecond)
	}

	t.Run("every_epoch", func(t *testing.T) {
		f.t = t
		before := f.counters()
		f.legit.ok("pause")
		time.Sleep(50 * time.Millisecond)
		seen := f.learnFrames()
		var frames []forgedFrame
		newest := uint32(0)
		for e, s := range seen {
			newest = max(newest, e)
			frames = append(frames, forgedAround(e, s, "quiet")...)
		}
		frames = append(frames, forgedAround(newest+1, 0, "quiet")...) // an epoch it has not opened yet
		frames = append(frames, forgedFrame{Kind: "hello", Epoch: newest + 1})
		r := f.atk.ok(map[string]any{"op": "forge", "sender": f.l.id, "inc": f.l.inc, "frames": frames})
		t.Logf("forged %v frames over epochs %v (failures %v)", r["sent"], seen, r["failures"])
		time.Sleep(100 * time.Millisecond)
		f.legit.ok("resume")
		time.Sleep(100 * time.Millisecond)
		f.afterAttack("forged frames at every epoch")
		f.framesRefused(before, num(r["sent"]))
	})

	t.Run("while_streaming", func(t *testing.T) {
		f.t = t
		before := f.counters()
		var sent uint64
		for range 5 {
			seen := f.learnFrames()
			newest := uint32(0)
			for e := range seen {
				newest = max(newest, e)
			}
			r := f.atk.ok(map[string]any{"op": "forge", "sender": f.l.id, "inc": f.l.inc, "frames": forgedAround(newest, seen[newest], "live")})
			sent += num(r["sent"])
			time.Sleep(30 * time.Millisecond)
		}
		f.afterAttack("forged frames while the consumer streams")
		f.framesRefused(before, sent)
	})

	t.Run("bye", func(t *testing.T) {
		f.t = t
		before := f.counters()
		seen := f.learnFrames()
		var frames []forgedFrame
		for e, s := range seen {
			for _, sealed := range []bool{false, true} {
				frames = append(frames, forgedFrame{Kind: "fin", Epoch: e, Seq: s, Flags: finBye, Sealed: sealed},
					forgedFrame{Kind: "fin", Epoch: e, Seq: s, Flags: finAsk, Sealed: sealed})
			}
		}
		r := f.atk.ok(map[string]any{"op": "forge", "sender": f.l.id, "inc": f.l.inc, "frames": frames})
		t.Logf("forged %v fins (bye and ask) over epochs %v", r["sent"], seen)
		time.Sleep(300 * time.Millisecond)
		f.afterAttack("a forged bye")
		f.framesRefused(before, num(r["sent"]))
	})
}

// forgedFrame is the attacker's frame description (cmd/ucxattacker).
type forgedFrame struct {
	Kind    string `json:"kind"`
	Epoch   uint32 `json:"epoch"`
	Seq     uint64 `json:"seq"`
	Flags   uint8  `json:"flags,omitempty"`
	Sealed  bool   `json:"sealed,omitempty"`
	Payload string `json:"payload,omitempty"`
}

// guardedGetRefused runs subtest name: one guarded GET by hand, which the owner must refuse
// (counted), with no byte back and nothing changed (afterAttack).
func (f *fixture) guardedGetRefused(t *testing.T, name string, g guardRead) {
	t.Run(name, func(t *testing.T) {
		f.t = t
		before := f.counters()
		r := f.atk.ok(map[string]any{"op": "guarded_get", "reads": []guardRead{g}})
		t.Logf("guarded GET %+v: replied %v, status %v, %v bytes", g, r["replied"], r["reply_status"], r["data_len"])
		assert.NotEqual(t, float64(0), r["reply_status"], "the owner served the request")
		assert.Zero(t, num(r["data_len"]), "bytes came back: %s", preview(r["data"]))
		f.afterAttack("guarded GET " + name)
		assert.Greater(t, f.counters().guardRefused, before.guardRefused, "the owner counted no refusal: the request did not arrive?")
	})
}

type guardRead struct {
	Slot  uint32 `json:"slot"`
	Token uint64 `json:"token"`
	Addr  uint64 `json:"addr"`
	Len   uint64 `json:"len"`
}

const (
	finAsk = 1 << 0
	finBye = 1 << 1
)

// forgedAround is a data frame at seqs live-1, live, live+1 and live+1000 of epoch, each once
// without a seal and once with a seal of random bytes.
func forgedAround(epoch uint32, live uint64, round string) []forgedFrame {
	var out []forgedFrame
	for _, seq := range []uint64{live - 1, live, live + 1, live + 1000} {
		if seq == 0 || seq > live+1000 {
			continue
		}
		for _, sealed := range []bool{false, true} {
			out = append(out, forgedFrame{Kind: "data", Epoch: epoch, Seq: seq, Sealed: sealed,
				Payload: fmt.Sprintf("FORGED %s epoch %d seq %d sealed %v", round, epoch, seq, sealed)})
		}
	}
	return out
}

// learnFrames is what the attacker knows of the consumer's frames: from the wire when its
// observer runs (every epoch and the last seq of each); otherwise epoch 1, with the victim's
// count of received frames as its last seq (the consumer then has no idle reaper).
func (f *fixture) learnFrames() map[uint32]uint64 {
	t := f.t
	t.Helper()
	out := map[uint32]uint64{}
	if f.observed {
		o := f.atk.ok(map[string]any{"op": "observed"})
		for k, v := range o["epochs"].(map[string]any) {
			e, err := strconv.ParseUint(k, 10, 32)
			require.NoError(t, err)
			out[uint32(e)] = num(v.(map[string]any)["max_seq"])
		}
		require.NotEmpty(t, out, "the observer saw none of the consumer's frames")
		return out
	}
	t.Logf("no packet observer (%s): forging at epoch 1, last seq from the victim's frame count", f.whyBlind)
	out[1] = uint64(sum(series(f.victim, "velo_ucx_transport_frames_total"), "direction=received"))
	return out
}

// framesRefused: the victim counted at least n dropped frames, so the forgeries arrived.
func (f *fixture) framesRefused(before counters, n uint64) {
	after := f.counters()
	f.t.Logf("victim counters that grew: %s", grew(before, after))
	assert.GreaterOrEqual(f.t, after.framesDropped-before.framesDropped, float64(n),
		"the victim counted fewer dropped frames than were forged: some were taken, or never arrived")
}

// ucpAtomicReq is ucp's id of the software atomic request.
const ucpAtomicReq = 20

// noHandler is UCX's warning for a message whose id has no handler: what a worker without
// atomics (velo's contexts do not ask for them) does with an atomic request.
func noHandler(id int) string {
	return fmt.Sprintf("got active message id %d, but no handler installed", id)
}

// atomicsArrived: the victim refused the atomics (its UCX guard counted them) or dropped them
// for want of a handler (UCX said so): either way they arrived.
func (f *fixture) atomicsArrived(before counters, dropped int) {
	after := f.counters()
	n := f.victimLog(noHandler(ucpAtomicReq)) - dropped
	f.t.Logf("victim counters that grew: %s; atomic requests UCX dropped for want of a handler: %d", grew(before, after), n)
	assert.True(f.t, after.rmaRefused > before.rmaRefused || n > 0, "no sign that the atomics reached the victim (no refusal counted, no drop logged)")
}

// refusalsSeen logs the victim's counters and, where the linked UCX has the guard, wants a
// refusal counted for the attempt.
func (f *fixture) refusalsSeen(before counters, kind string) {
	after := f.counters()
	f.t.Logf("victim counters that grew: %s", grew(before, after))
	if f.guardEnforced() {
		assert.Greater(f.t, after.rmaRefused, before.rmaRefused, "the UCX guard counted no refusal of the %s: did it arrive?", kind)
	}
}

// TestRawTCPPutRequest connects to the victim's UCX tcp port with a plain socket and sends the
// tcp transport's own PUT request at each target.
func TestRawTCPPutRequest(t *testing.T) {
	if !tcpInTransports() {
		t.Skipf("skipped: UCX_TLS=%s has no tcp, so the victim has no UCX tcp port to attack", osUCXTLS())
	}
	f := newFixture(t, fixtureOptions{})
	for _, tg := range f.targets() {
		t.Run(tg.name, func(t *testing.T) {
			f.t = t
			before := f.counters()
			r := f.atk.ok(map[string]any{"op": "raw_tcp_put", "pid": f.v.pid, "skip": []int{f.v.ctlPort}, "version": f.v.ucxVersion,
				"addr": tg.addr, "data": hex.EncodeToString(attackerBytes)})
			if s, _ := r["skipped"].(string); s != "" {
				t.Skip("skipped: " + s)
			}
			t.Logf("raw tcp PUT at %#x: %v", tg.addr, r["results"])
			f.afterAttack("raw tcp PUT " + tg.name)
			f.refusalsSeen(before, "tcp PUT")
		})
	}
}

// indirectIDs are the endpoint ids ucp hands out for endpoints with peer error handling (every
// velo endpoint): 3, 5, 7, ... A raw attacker guesses them.
func indirectIDs(n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = uint64(2*i + 3)
	}
	return out
}

// TestRawUCPSoftwareRMA sends ucp's software PUT, GET and atomic messages over a raw socket,
// with guessed endpoint ids, at the global and the heap. A guessed id that names one of the
// victim's endpoints makes the victim answer that endpoint's peer (the legitimate consumer), so
// each kind gets a fresh cast: what one does to the consumer is not blamed on the next.
func TestRawUCPSoftwareRMA(t *testing.T) {
	if !tcpInTransports() {
		t.Skipf("skipped: UCX_TLS=%s has no tcp, so the victim has no UCX tcp port to attack", osUCXTLS())
	}
	for _, kind := range []string{"put", "get", "atomic"} {
		t.Run(kind, func(t *testing.T) {
			f := newFixture(t, fixtureOptions{})
			before, dropped := f.counters(), f.victimLog(noHandler(ucpAtomicReq))
			for _, tg := range f.targets()[:2] {
				r := f.atk.ok(map[string]any{"op": "raw_ucp", "ucp": kind, "pid": f.v.pid, "skip": []int{f.v.ctlPort}, "version": f.v.ucxVersion,
					"addr": tg.addr, "len": tg.len, "data": hex.EncodeToString(attackerBytes), "value": uint64(0x4141414141414141), "ep_ids": indirectIDs(64)})
				if s, _ := r["skipped"].(string); s != "" {
					t.Skip("skipped: " + s)
				}
				t.Logf("raw ucp %s at %s (%#x), endpoint ids 3..129: %v", kind, tg.name, tg.addr, r["results"])
			}
			time.Sleep(200 * time.Millisecond)
			f.afterAttack("raw ucp " + kind)
			if kind == "atomic" {
				f.atomicsArrived(before, dropped)
			} else {
				f.refusalsSeen(before, "raw ucp "+kind)
			}
		})
	}
}

// TestRawUCPForgedWireIDs sends ucp's software PUT and GET over a raw socket with endpoint ids
// that are not ids at all but addresses (ucp takes an even id for a pointer to its endpoint):
// into the victim's own global and heap buffer, and arbitrary ones. A UCX that follows them
// reads an "endpoint" from wherever the attacker points; each kind gets a fresh cast.
func TestRawUCPForgedWireIDs(t *testing.T) {
	if !tcpInTransports() {
		t.Skipf("skipped: UCX_TLS=%s has no tcp, so the victim has no UCX tcp port to attack", osUCXTLS())
	}
	for _, kind := range []string{"put", "get"} {
		t.Run(kind, func(t *testing.T) {
			f := newFixture(t, fixtureOptions{})
			ids := []uint64{f.v.global.addr + 1024, f.v.heap.addr + 4096, 0x1000, 0xdead0000}
			before := f.counters()
			r := f.atk.ok(map[string]any{"op": "raw_ucp", "ucp": kind, "pid": f.v.pid, "skip": []int{f.v.ctlPort}, "version": f.v.ucxVersion,
				"addr": f.v.global.addr + 128, "len": 64, "data": hex.EncodeToString(attackerBytes), "ep_ids": ids})
			if s, _ := r["skipped"].(string); s != "" {
				t.Skip("skipped: " + s)
			}
			t.Logf("raw ucp %s with forged endpoint ids %#x: %v", kind, ids, r["results"])
			time.Sleep(200 * time.Millisecond)
			f.afterAttack("raw ucp " + kind + " with forged endpoint ids")
			f.refusalsSeen(before, "forged wire id")
		})
	}
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

func short(key string) string {
	if len(key) > 16 {
		return key[:16] + "…"
	}
	return key
}

func preview(v any) string {
	s, _ := v.(string)
	b, err := hex.DecodeString(s)
	if err != nil || len(b) == 0 {
		return s
	}
	return fmt.Sprintf("%q", b[:min(len(b), 48)])
}
