package ucx

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/ucx/internal/capi"
)

// TestGuardLayoutMatchesC: every offset and size guardwire.go writes and reads is the one the C
// compiler gives the struct of capi.h that the owner's engine reads and writes, and the lengths
// are capi's (from sizeof in a cgo build). A field moved on either side fails here, not between
// two processes.
func TestGuardLayoutMatchesC(t *testing.T) {
	require.Equal(t, capi.GuardReqHdrLen, guardReqLen)
	require.Equal(t, capi.GuardPutReqHdrLen, guardReqLen)
	require.Equal(t, capi.GuardRepHdrLen, guardRepLen)
	require.Equal(t, capi.GuardPutRepHdrLen, guardRepLen)
	require.Equal(t, capi.GuardVReqHdrLen, guardVReqLen)
	require.Equal(t, capi.GuardPutVReqHdrLen, guardVReqLen)
	require.Equal(t, capi.GuardVEntryLen, guardVEntLen)
	require.Equal(t, capi.GuardVRepHdrLen, guardVRepLen)
	require.Equal(t, capi.GuardPutVRepHdrLen, guardVRepLen)

	c := capi.GuardLayouts()
	if c == nil {
		t.Skip("a build without cgo has no C layout to compare with")
	}
	type at struct{ off, size int }
	req := map[string]at{"": {0, guardReqLen}, "magic": {guardReqMagicOff, 4}, "slot": {guardReqSlotOff, 4},
		"token": {guardReqTokenOff, 8}, "address": {guardReqAddressOff, 8}, "length": {guardReqLengthOff, 8}, "req_id": {guardReqIDOff, 8}}
	rep := map[string]at{"": {0, guardRepLen}, "req_id": {guardRepIDOff, 8}, "status": {guardRepStatusOff, 4}, "magic": {guardRepMagicOff, 4}}
	vreq := map[string]at{"": {0, guardVReqLen}, "magic": {guardVReqMagicOff, 4}, "count": {guardVReqCountOff, 4}, "req_id": {guardVReqIDOff, 8}}
	vent := map[string]at{"": {0, guardVEntLen}, "slot": {guardVEntSlotOff, 4}, "reserved": {guardVEntReservedOff, 4},
		"token": {guardVEntTokenOff, 8}, "address": {guardVEntAddressOff, 8}, "length": {guardVEntLengthOff, 8}}
	vrep := map[string]at{"": {0, guardVRepLen}, "req_id": {guardVRepIDOff, 8}, "magic": {guardVRepMagicOff, 4}, "count": {guardVRepCountOff, 4}}
	goSide := map[string]map[string]at{
		"velo_ucx_get_req_hdr_t": req, "velo_ucx_put_req_hdr_t": req,
		"velo_ucx_get_rep_hdr_t": rep, "velo_ucx_put_rep_hdr_t": rep,
		"velo_ucx_getv_req_hdr_t": vreq, "velo_ucx_putv_req_hdr_t": vreq,
		"velo_ucx_getv_entry_t":   vent,
		"velo_ucx_getv_rep_hdr_t": vrep, "velo_ucx_putv_rep_hdr_t": vrep,
	}
	seen := map[string]int{}
	for _, f := range c {
		st, field, _ := strings.Cut(f.Name, ".")
		fields, ok := goSide[st]
		require.True(t, ok, "C struct %s has no Go layout in guardwire.go", st)
		want, ok := fields[field]
		require.True(t, ok, "C field %s has no Go offset in guardwire.go", f.Name)
		assert.Equal(t, want, at{f.Offset, f.Size}, "%s: Go (offset, size) against C's", f.Name)
		seen[st]++
	}
	for st, fields := range goSide {
		assert.Equal(t, len(fields), seen[st], "%s: the Go layout has fields the C struct lacks", st)
	}
}

// The reply decoders read what a peer's engine sent. Their fuzz targets hold them to the rule of
// every decoder of a layout that crosses a process: never a panic, a refusal for anything that is
// not exactly one reply of the wanted kind, and what is accepted encodes back to the bytes read.

// appendGuardReply is what the C side writes for a single reply (velo_ucx_get_rep_hdr_t,
// velo_ucx_put_rep_hdr_t); only the tests build replies in Go.
func appendGuardReply(b []byte, magic uint32, r guardReply) []byte {
	b = binary.LittleEndian.AppendUint64(b, r.ID)
	b = binary.LittleEndian.AppendUint32(b, uint32(int32(r.Status)))
	return binary.LittleEndian.AppendUint32(b, magic)
}

// appendGuardVReply is what the C side writes for a vectored reply: the header and a status each.
func appendGuardVReply(b []byte, magic uint32, id uint64, statuses []Status) []byte {
	b = binary.LittleEndian.AppendUint64(b, id)
	b = binary.LittleEndian.AppendUint32(b, magic)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(statuses)))
	for _, s := range statuses {
		b = binary.LittleEndian.AppendUint32(b, uint32(int32(s)))
	}
	return b
}

func FuzzParseGuardReply(f *testing.F) {
	for _, magic := range []uint32{capi.GuardMagic, capi.GuardPutMagic} {
		f.Add(appendGuardReply(nil, magic, guardReply{ID: 7, Status: StatusOK}), true)
		f.Add(appendGuardReply(nil, magic, guardReply{ID: 1 << 40, Status: StatusRejected}), false)
	}
	f.Add([]byte{1, 2, 3}, true)
	f.Fuzz(func(t *testing.T, b []byte, put bool) {
		magic := capi.GuardMagic
		if put {
			magic = capi.GuardPutMagic
		}
		r, ok := parseGuardReply(b, magic)
		if !ok {
			require.Zero(t, r)
			return
		}
		require.Len(t, b, guardRepLen)
		require.Equal(t, b, appendGuardReply(nil, magic, r))
	})
}

func FuzzParseGuardVReply(f *testing.F) {
	for _, magic := range []uint32{capi.GuardVMagic, capi.GuardPutVMagic} {
		good := appendGuardVReply(nil, magic, 9, []Status{StatusOK, StatusRejected, StatusInvalidAddr})
		f.Add(good, magic == capi.GuardPutVMagic)
		f.Add(good[:len(good)-1], magic == capi.GuardPutVMagic)
		f.Add(append(good, 0, 0, 0, 0), magic == capi.GuardPutVMagic)
	}
	f.Add(appendGuardVReply(nil, capi.GuardVMagic, 1, nil), false)
	f.Fuzz(func(t *testing.T, b []byte, put bool) {
		magic := capi.GuardVMagic
		if put {
			magic = capi.GuardPutVMagic
		}
		r, ok := parseGuardVReply(b, magic)
		if !ok {
			require.Zero(t, r)
			return
		}
		require.GreaterOrEqual(t, len(b), guardVRepLen)
		if !r.complete() {
			require.NotEqual(t, uint64(len(b)-guardVRepLen), 4*uint64(r.Count))
			return
		}
		statuses := make([]Status, r.Count)
		for j := range statuses {
			statuses[j] = r.status(j)
		}
		require.Equal(t, b, appendGuardVReply(nil, magic, r.ID, statuses))
	})
}

// TestGuardRequestLayout: a request written by the Go side reads, field by field, at the
// offsets of its C struct (the C side's parse of these bytes is exercised end to end by the
// guarded GET and PUT suites).
func TestGuardRequestLayout(t *testing.T) {
	h := make([]byte, guardReqLen)
	putGuardRequest(h, capi.GuardPutMagic, SealedKey{Slot: 3, Token: 0xfeedface}, 0x1000, 64, 42)
	assert.Equal(t, capi.GuardPutMagic, binary.LittleEndian.Uint32(h[0:]))
	assert.Equal(t, uint32(3), binary.LittleEndian.Uint32(h[4:]))
	assert.Equal(t, uint64(0xfeedface), binary.LittleEndian.Uint64(h[8:]))
	assert.Equal(t, uint64(0x1000), binary.LittleEndian.Uint64(h[16:]))
	assert.Equal(t, uint64(64), binary.LittleEndian.Uint64(h[24:]))
	assert.Equal(t, uint64(42), binary.LittleEndian.Uint64(h[32:]))

	v := newGuardVRequest(2)
	require.Len(t, v, guardVReqLen+2*guardVEntLen)
	putGuardVHeader(v, capi.GuardVMagic, 2, 5)
	putGuardEntry(v, 1, SealedKey{Slot: 8, Token: 9}, 0x2000, 10)
	assert.Equal(t, capi.GuardVMagic, binary.LittleEndian.Uint32(v[0:]))
	assert.Equal(t, uint32(2), binary.LittleEndian.Uint32(v[4:]))
	assert.Equal(t, uint64(5), binary.LittleEndian.Uint64(v[8:]))
	e := v[guardVReqLen+guardVEntLen:]
	assert.Equal(t, uint32(8), binary.LittleEndian.Uint32(e[0:]))
	assert.Equal(t, uint64(9), binary.LittleEndian.Uint64(e[8:]))
	assert.Equal(t, uint64(0x2000), binary.LittleEndian.Uint64(e[16:]))
	assert.Equal(t, uint64(10), binary.LittleEndian.Uint64(e[24:]))
	assert.Equal(t, make([]byte, guardVEntLen), v[guardVReqLen:guardVReqLen+guardVEntLen], "entry 0 untouched")
}
