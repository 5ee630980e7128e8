//go:build cgo && linux

package ucx

import (
	"bytes"
	"encoding/binary"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/ucx/internal/capi"
)

// putRequest is a guarded PUT request header as a writer sends it (velo_ucx_put_req_hdr_t,
// written by guardwire.go), with any magic, slot, token and range a test wants.
func putRequest(magic, slot uint32, token, addr, n, id uint64) []byte {
	h := make([]byte, guardReqLen)
	putGuardRequest(h, magic, SealedKey{Slot: slot, Token: token}, addr, n, id)
	return h
}

// guardPutTarget is worker b of a low pair answering guarded PUTs, with one memory area whose
// middle part is registered and whose edges are guard bytes that no request may touch.
type guardPutTarget struct {
	p      *lowPair
	mem    []byte // the whole area: guard, region, guard
	reg    []byte // the registered middle
	nextID uint64
}

const lowGuard = 4096

func newGuardPutTarget(t *testing.T, regLen int) *guardPutTarget {
	p := newLowPair(t)
	if p.ctx.protoV2 && p.ctx.traits.v2Experimental {
		t.Skip("protocol v2 on UCX 1.13: the binding refuses AM sends with the reply flag, which the guarded requests need")
	}
	require.NoError(t, p.b.enableGuard(guardReqID, guardRepID))
	require.NoError(t, p.b.enableGuardPut(guardPutReqID, guardPutRepID, guardPutVReqID, guardPutVRepID))
	require.NoError(t, p.a.SetAMHandler(guardPutRepID))
	require.NoError(t, p.a.SetAMHandler(guardPutVRepID))
	m := allocFilled(t, regLen+2*lowGuard, 99)
	return &guardPutTarget{p: p, mem: m.Bytes(), reg: m.Bytes()[lowGuard : lowGuard+regLen]}
}

func (g *guardPutTarget) addr(off int) uint64 { return uint64(uintptr(bufPtr(g.reg))) + uint64(off) }

// send posts one request from worker a and waits for the reply; it returns the reply's status
// (false when no reply came because the target could not answer).
func (g *guardPutTarget) send(t *testing.T, hdr, data []byte, flags AMFlags) (Status, bool) {
	t.Helper()
	g.nextID++
	binary.LittleEndian.PutUint64(hdr[guardReqIDOff:], g.nextID)
	req, err := g.p.ab.SendAM(guardPutReqID, hdr, data, flags|AMReply)
	require.NoError(t, err)
	var status Status
	replied := false
	g.p.until(t, func() bool { return replied && (req == nil || req.Done()) }, func(w *Worker, ev *Event) {
		if w == g.p.a && ev.Kind == EventAM && ev.AM.ID == guardPutRepID {
			r, ok := parseGuardReply(ev.AM.Header, capi.GuardPutMagic)
			require.True(t, ok, "not a guarded PUT reply: %x", ev.AM.Header)
			require.Equal(t, g.nextID, r.ID, "a reply for another request")
			status, replied = r.Status, true
		}
	})
	return status, replied
}

// TestLowGuardedPutChecks drives the target's check by hand: only a live write registration's
// token, with the whole range inside it and the data sent eagerly, writes; everything else is
// answered with its own status, counted by reason, and leaves every byte as it was.
func TestLowGuardedPutChecks(t *testing.T) {
	g := newGuardPutTarget(t, 64<<10)
	before := append([]byte(nil), g.mem...)
	const token = 0x1234_5678_9abc_def0
	wslot, err := g.p.b.guardAddAccess(token, g.addr(0), uint64(len(g.reg)), AccessWrite)
	require.NoError(t, err)
	rslot, err := g.p.b.guardAddAccess(token+1, g.addr(0), uint64(len(g.reg)), AccessRead)
	require.NoError(t, err)
	gone, err := g.p.b.guardAddAccess(token+2, g.addr(0), uint64(len(g.reg)), AccessRead|AccessWrite)
	require.NoError(t, err)
	g.p.b.guardRevoke(gone)

	data := bytes.Repeat([]byte("written-by-a-guarded-put|"), 40)[:1000]
	bad := []struct {
		name   string
		hdr    []byte
		data   []byte
		flags  AMFlags
		want   Status
		reason int
	}{
		{"bad magic", putRequest(0x12345678, wslot, token, g.addr(0), 1000, 0), data, AMEager, StatusMessageTruncated, capi.PutRefusedMalformed},
		{"length above the data", putRequest(capi.GuardPutMagic, wslot, token, g.addr(0), 1001, 0), data, AMEager, StatusMessageTruncated, capi.PutRefusedMalformed},
		{"length below the data", putRequest(capi.GuardPutMagic, wslot, token, g.addr(0), 999, 0), data, AMEager, StatusMessageTruncated, capi.PutRefusedMalformed},
		{"data by rendezvous", putRequest(capi.GuardPutMagic, wslot, token, g.addr(0), 1000, 0), data, AMRendezvous, StatusMessageTruncated, capi.PutRefusedMalformed},
		{"wrong token", putRequest(capi.GuardPutMagic, wslot, token^0x5a5a, g.addr(0), 1000, 0), data, AMEager, StatusRejected, capi.PutRefusedRevoked},
		{"unknown slot", putRequest(capi.GuardPutMagic, 1<<20, token, g.addr(0), 1000, 0), data, AMEager, StatusRejected, capi.PutRefusedRevoked},
		{"revoked registration", putRequest(capi.GuardPutMagic, gone, token+2, g.addr(0), 1000, 0), data, AMEager, StatusRejected, capi.PutRefusedRevoked},
		{"read-only registration", putRequest(capi.GuardPutMagic, rslot, token+1, g.addr(0), 1000, 0), data, AMEager, StatusUnsupported, capi.PutRefusedReadOnly},
		{"past the end", putRequest(capi.GuardPutMagic, wslot, token, g.addr(len(g.reg)-999), 1000, 0), data, AMEager, StatusInvalidAddr, capi.PutRefusedRange},
		{"before the start", putRequest(capi.GuardPutMagic, wslot, token, g.addr(0)-1, 1000, 0), data, AMEager, StatusInvalidAddr, capi.PutRefusedRange},
		{"address wrapping", putRequest(capi.GuardPutMagic, wslot, token, ^uint64(0)-10, 1000, 0), data, AMEager, StatusInvalidAddr, capi.PutRefusedRange},
	}
	// No subtests: the low layer's workers belong to this goroutine's locked thread.
	for _, c := range bad {
		was := g.p.b.guardPutStats()
		status, replied := g.send(t, c.hdr, c.data, c.flags)
		require.True(t, replied, c.name)
		assert.Equal(t, c.want, status, c.name)
		assert.True(t, bytes.Equal(before, g.mem), "%s: a refused request changed the target's memory", c.name)
		now := g.p.b.guardPutStats()
		assert.Equal(t, was.Refused[c.reason]+1, now.Refused[c.reason], "%s: refusal not counted under its reason", c.name)
		assert.Equal(t, was.Served, now.Served, c.name)
		assert.Equal(t, c.reason, now.LastReason, c.name)
	}

	{ // a header too short to name anything
		was := g.p.b.guardPutStats()
		req, err := g.p.ab.SendAM(guardPutReqID, make([]byte, 12), data, AMEager|AMReply)
		require.NoError(t, err)
		g.p.until(t, func() bool {
			return g.p.b.guardPutStats().Refused[capi.PutRefusedMalformed] > was.Refused[capi.PutRefusedMalformed] && (req == nil || req.Done())
		}, nil)
		assert.True(t, bytes.Equal(before, g.mem))
		assert.Equal(t, uint32(1<<32-1), g.p.b.guardPutStats().LastSlot, "an unusable header names no slot")
	}

	{ // served
		for _, off := range []int{0, 1, 4095, len(g.reg) - len(data)} {
			status, replied := g.send(t, putRequest(capi.GuardPutMagic, wslot, token, g.addr(off), uint64(len(data)), 0), data, AMEager)
			require.True(t, replied)
			require.Equal(t, StatusOK, status, "offset %d", off)
			require.Equal(t, data, g.reg[off:off+len(data)], "offset %d", off)
		}
		// Zero bytes at the region's end: served, nothing written.
		status, _ := g.send(t, putRequest(capi.GuardPutMagic, wslot, token, g.addr(len(g.reg)), 0, 0), nil, AMEager)
		require.Equal(t, StatusOK, status)
		// Only the registration changed: the guard bytes on either side are as they were.
		assert.Equal(t, before[:lowGuard], g.mem[:lowGuard])
		assert.Equal(t, before[lowGuard+len(g.reg):], g.mem[lowGuard+len(g.reg):])
		// The whole region in one eager message of 64 KiB.
		whole := allocFilled(t, len(g.reg), 7).Bytes()
		status, _ = g.send(t, putRequest(capi.GuardPutMagic, wslot, token, g.addr(0), uint64(len(whole)), 0), whole, AMEager)
		require.Equal(t, StatusOK, status)
		require.Equal(t, whole, g.reg)
		st := g.p.b.guardPutStats()
		assert.EqualValues(t, 6, st.Served)
		assert.EqualValues(t, 4*len(data)+len(whole), st.ServedBytes)
	}

	{ // revoked after use
		snapshot := append([]byte(nil), g.mem...)
		g.p.b.guardRevoke(wslot)
		status, _ := g.send(t, putRequest(capi.GuardPutMagic, wslot, token, g.addr(0), uint64(len(data)), 0), data, AMEager)
		assert.Equal(t, StatusRejected, status)
		assert.True(t, bytes.Equal(snapshot, g.mem))
	}
}

// putVEntry is one entry of a vectored guarded PUT request (velo_ucx_getv_entry_t's layout).
type putVEntry struct {
	slot        uint32
	token, addr uint64
	n           uint64
}

// putVRequest is a vectored guarded PUT request header with its entries (written by
// guardwire.go); count is what the header says, which a test may set apart from len(es).
func putVRequest(magic uint32, count uint32, es []putVEntry) []byte {
	h := newGuardVRequest(len(es))
	putGuardVHeader(h, magic, int(count), 0)
	for j, e := range es {
		putGuardEntry(h, j, SealedKey{Slot: e.slot, Token: e.token}, e.addr, e.n)
	}
	return h
}

// pinParts pins the parts SendAMParts hands to C (in an iov) and returns the unpin.
func pinParts(parts [][]byte) func() {
	var pin runtime.Pinner
	for _, p := range parts {
		if len(p) > 0 {
			pin.Pin(&p[0])
		}
	}
	return pin.Unpin
}

// sendV posts one vectored request from worker a and waits for the reply (a status per entry),
// or, with no reply expected, until the target counted a malformed request.
func (g *guardPutTarget) sendV(t *testing.T, hdr []byte, parts [][]byte, flags AMFlags, replyExpected bool) []Status {
	t.Helper()
	g.nextID++
	binary.LittleEndian.PutUint64(hdr[guardVReqIDOff:], g.nextID)
	was := g.p.b.guardPutStats().Refused[capi.PutRefusedMalformed]
	defer pinParts(parts)()
	req, err := g.p.ab.SendAMParts(guardPutVReqID, hdr, parts, flags|AMReply)
	require.NoError(t, err)
	var got []Status
	replied := false
	g.p.until(t, func() bool {
		done := req == nil || req.Done()
		if !replyExpected {
			return done && g.p.b.guardPutStats().Refused[capi.PutRefusedMalformed] > was
		}
		return replied && done
	}, func(w *Worker, ev *Event) {
		if w == g.p.a && ev.Kind == EventAM && ev.AM.ID == guardPutVRepID {
			require.True(t, replyExpected, "a reply to a request the target could not read")
			r, ok := parseGuardVReply(ev.AM.Header, capi.GuardPutVMagic)
			require.True(t, ok, "not a vectored guarded PUT reply: %x", ev.AM.Header)
			require.Equal(t, g.nextID, r.ID, "a reply for another request")
			require.True(t, r.complete(), "a reply of %d bytes for %d writes", len(ev.AM.Header), r.Count)
			for j := range r.Count {
				got = append(got, r.status(j))
			}
			replied = true
		}
	})
	return got
}

// TestLowGuardedPutVectorChecks drives the vectored request by hand: each write is decided on its
// own exactly as a single request is (live token, write access, range), only the served ones
// write, and the answer says which; data that is not exactly the entries' bytes, or came by
// rendezvous, writes nothing and is answered malformed for every entry; a header that cannot be
// read (magic, count, length) is counted and not answered.
func TestLowGuardedPutVectorChecks(t *testing.T) {
	g := newGuardPutTarget(t, 64<<10)
	const token = 0x0ddc_0ffe_e0dd_f00d
	wslot, err := g.p.b.guardAddAccess(token, g.addr(0), uint64(len(g.reg)), AccessWrite)
	require.NoError(t, err)
	rslot, err := g.p.b.guardAddAccess(token+1, g.addr(0), uint64(len(g.reg)), AccessRead)
	require.NoError(t, err)
	gone, err := g.p.b.guardAddAccess(token+2, g.addr(0), uint64(len(g.reg)), AccessWrite)
	require.NoError(t, err)
	g.p.b.guardRevoke(gone)
	a, b, c := bytes.Repeat([]byte("a"), 1000), bytes.Repeat([]byte("b"), 3000), bytes.Repeat([]byte("c"), 500)
	want := append([]byte(nil), g.mem...)

	{ // mixed: each entry on its own
		es := []putVEntry{
			{wslot, token, g.addr(100), uint64(len(a))},
			{rslot, token + 1, g.addr(5000), uint64(len(b))},
			{gone, token + 2, g.addr(9000), uint64(len(c))},
			{wslot, token ^ 1, g.addr(9000), uint64(len(c))},
			{wslot, token, g.addr(len(g.reg) - 10), uint64(len(c))},
			{wslot, token, g.addr(20000), uint64(len(b))},
			{wslot, token, g.addr(len(g.reg)), 0},
		}
		was := g.p.b.guardPutStats()
		got := g.sendV(t, putVRequest(capi.GuardPutVMagic, uint32(len(es)), es), [][]byte{a, b, c, c, c, b}, AMEager, true)
		require.Equal(t, []Status{StatusOK, StatusUnsupported, StatusRejected, StatusRejected, StatusInvalidAddr, StatusOK, StatusOK}, got)
		copy(want[lowGuard+100:], a)
		copy(want[lowGuard+20000:], b)
		require.True(t, bytes.Equal(want, g.mem), "only the served entries wrote, where they said")
		now := g.p.b.guardPutStats()
		assert.Equal(t, was.Served+3, now.Served)
		assert.Equal(t, was.ServedBytes+uint64(len(a)+len(b)), now.ServedBytes)
		assert.Equal(t, was.Refused[capi.PutRefusedReadOnly]+1, now.Refused[capi.PutRefusedReadOnly])
		assert.Equal(t, was.Refused[capi.PutRefusedRevoked]+2, now.Refused[capi.PutRefusedRevoked])
		assert.Equal(t, was.Refused[capi.PutRefusedRange]+1, now.Refused[capi.PutRefusedRange])
	}

	two := []putVEntry{{wslot, token, g.addr(0), uint64(len(a))}, {wslot, token, g.addr(30000), uint64(len(b))}}
	truncated := []Status{StatusMessageTruncated, StatusMessageTruncated}
	for _, bad := range []struct {
		name  string
		es    []putVEntry
		parts [][]byte
		flags AMFlags
	}{
		{"a byte short", two, [][]byte{a, b[1:]}, AMEager},
		{"a byte over", two, [][]byte{a, b, {0}}, AMEager},
		{"a length that wraps the sum", []putVEntry{{wslot, token, g.addr(0), uint64(len(a))}, {wslot, token, g.addr(0), ^uint64(0) - 100}}, [][]byte{a, b}, AMEager},
		{"data by rendezvous", two, [][]byte{a, b}, AMRendezvous},
	} {
		was := g.p.b.guardPutStats()
		got := g.sendV(t, putVRequest(capi.GuardPutVMagic, uint32(len(bad.es)), bad.es), bad.parts, bad.flags, true)
		assert.Equal(t, truncated, got, bad.name)
		assert.True(t, bytes.Equal(want, g.mem), "%s: a malformed request wrote", bad.name)
		assert.Equal(t, was.Served, g.p.b.guardPutStats().Served, bad.name)
	}

	for _, bad := range []struct {
		name string
		hdr  []byte
	}{
		{"bad magic", putVRequest(capi.GuardPutMagic, 2, two)},
		{"no entries", putVRequest(capi.GuardPutVMagic, 0, nil)},
		{"more entries than the header holds", putVRequest(capi.GuardPutVMagic, 3, two)},
		{"fewer entries than the header holds", putVRequest(capi.GuardPutVMagic, 1, two)},
		{"above the limit", putVRequest(capi.GuardPutVMagic, uint32(capi.GuardPutVMax+1), make([]putVEntry, capi.GuardPutVMax+1))},
		{"a header too short to name anything", make([]byte, 8)},
	} {
		if len(bad.hdr) < capi.GuardPutVReqHdrLen { // no room for a request id: sent as it is
			was := g.p.b.guardPutStats().Refused[capi.PutRefusedMalformed]
			unpin := pinParts([][]byte{a, b})
			req, err := g.p.ab.SendAMParts(guardPutVReqID, bad.hdr, [][]byte{a, b}, AMEager|AMReply)
			require.NoError(t, err)
			g.p.until(t, func() bool {
				return g.p.b.guardPutStats().Refused[capi.PutRefusedMalformed] > was && (req == nil || req.Done())
			}, func(w *Worker, ev *Event) {
				require.False(t, w == g.p.a && ev.Kind == EventAM && ev.AM.ID == guardPutVRepID, "%s: answered", bad.name)
			})
			unpin()
		} else {
			g.sendV(t, bad.hdr, [][]byte{a, b}, AMEager, false)
		}
		assert.True(t, bytes.Equal(want, g.mem), "%s: an unreadable request wrote", bad.name)
	}
}

// TestLowGuardedGetNeedsReadAccess: the guarded GET refuses a registration made for writing only,
// as the PUT refuses one made for reading only.
func TestLowGuardedGetNeedsReadAccess(t *testing.T) {
	g := newGuardPutTarget(t, 4096)
	require.NoError(t, g.p.a.SetAMHandler(guardRepID))
	wslot, err := g.p.b.guardAddAccess(77, g.addr(0), 4096, AccessWrite)
	require.NoError(t, err)
	rwslot, err := g.p.b.guardAddAccess(78, g.addr(0), 4096, AccessRead|AccessWrite)
	require.NoError(t, err)
	get := func(slot uint32, token uint64) Status {
		h := make([]byte, guardReqLen)
		putGuardRequest(h, capi.GuardMagic, SealedKey{Slot: slot, Token: token}, g.addr(0), 64, uint64(slot)+1000)
		req, err := g.p.ab.SendAM(guardReqID, h, nil, AMEager|AMReply)
		require.NoError(t, err)
		var status Status
		got := false
		g.p.until(t, func() bool { return got && (req == nil || req.Done()) }, func(w *Worker, ev *Event) {
			if w == g.p.a && ev.Kind == EventAM && ev.AM.ID == guardRepID {
				r, ok := parseGuardReply(ev.AM.Header, capi.GuardMagic)
				require.True(t, ok, "not a guarded GET reply: %x", ev.AM.Header)
				status = r.Status
				if status == StatusOK {
					assert.Equal(t, g.reg[:64], ev.AM.Data)
				} else {
					assert.Empty(t, ev.AM.Data, "a refused GET carried bytes")
				}
				got = true
			}
		})
		return status
	}
	assert.Equal(t, StatusRejected, get(wslot, 77), "a write-only registration was read")
	assert.Equal(t, StatusOK, get(rwslot, 78))
}
