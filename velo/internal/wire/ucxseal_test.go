package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	sealKeyA = bytes.Repeat([]byte{0xa1}, 32)
	sealKeyB = bytes.Repeat([]byte{0xb2}, 32)
	// a -> b on epoch 3, and the reverse direction of the same slot.
	epAB = UCXEndpoint{Sender: 0xa, SenderInc: 0xa0, Receiver: 0xb, ReceiverInc: 0xb0, Epoch: 3}
	epBA = UCXEndpoint{Sender: 0xb, SenderInc: 0xb0, Receiver: 0xa, ReceiverInc: 0xa0, Epoch: 3}
)

func mustKey(t testing.TB, key []byte, ep UCXEndpoint) *UCXFrameKey {
	t.Helper()
	k, err := NewUCXFrameKey(key, ep)
	require.NoError(t, err)
	return k
}

func TestUCXSealOpens(t *testing.T) {
	send, recv := mustKey(t, sealKeyA, epAB), mustKey(t, sealKeyA, epAB)
	payload := []byte("a frame of the runtime")
	hdr := send.Seal(nil, UCXData, 0, 7, payload[:5], payload[5:])
	require.Len(t, hdr, UCXSealedHeaderLen)
	h, err := recv.Open(hdr, payload)
	require.NoError(t, err)
	assert.Equal(t, UCXHeader{Incarnation: 0xa0, Sender: 0xa, Kind: UCXData, Sealed: true, Epoch: 3, Seq: 7}, h)
	_, err = recv.Open(send.Seal(nil, UCXData, 0, 7, payload), payload)
	require.NoError(t, err, "one part seals as the parts' concatenation")

	fin := send.Seal(nil, UCXFin, UCXFinAsk|UCXFinBye, 7)
	h, err = recv.Open(fin, nil)
	require.NoError(t, err)
	assert.Equal(t, UCXFin, h.Kind)
	assert.Equal(t, byte(UCXFinAsk|UCXFinBye), h.Flags)

	empty := send.Seal(nil, UCXData, 0, 8)
	_, err = recv.Open(empty, []byte{})
	require.NoError(t, err, "an empty frame is sealed too")
}

// TestUCXSealRefusesTampering: any byte of the header, the seal or the payload changed, the
// payload cut or extended — the frame does not open.
func TestUCXSealRefusesTampering(t *testing.T) {
	k := mustKey(t, sealKeyA, epAB)
	payload := bytes.Repeat([]byte{0x5a}, 100)
	hdr := k.Seal(nil, UCXData, 0, 42, payload)
	for i := range hdr {
		for _, bit := range []byte{0x01, 0x80} {
			bad := append([]byte(nil), hdr...)
			bad[i] ^= bit
			_, err := k.Open(bad, payload)
			require.Error(t, err, "header byte %d ^ %#x", i, bit)
			assert.True(t, errors.Is(err, ErrUCXSeal) || errors.Is(err, ErrMalformed), "byte %d: %v", i, err)
		}
	}
	for i := range payload {
		bad := append([]byte(nil), payload...)
		bad[i] ^= 1
		_, err := k.Open(hdr, bad)
		require.ErrorIs(t, err, ErrUCXSeal, "payload byte %d", i)
	}
	_, err := k.Open(hdr, payload[:99])
	require.ErrorIs(t, err, ErrUCXSeal, "cut payload")
	_, err = k.Open(hdr, append(append([]byte(nil), payload...), 0))
	require.ErrorIs(t, err, ErrUCXSeal, "extended payload")
	_, err = k.Open(hdr[:UCXSealedHeaderLen-1], payload)
	require.ErrorIs(t, err, ErrMalformed, "short seal")
	_, err = k.Open(hdr[:UCXHeaderLen], payload)
	require.ErrorIs(t, err, ErrMalformed, "a header that says sealed, without its seal")
}

// TestUCXSealBindsTheEndpoint: a sealed frame does not open under another key, another seq,
// another epoch, another receiver, or back at its sender — even where the key bytes are the
// same, so the binding does not rest on the keys being distinct.
func TestUCXSealBindsTheEndpoint(t *testing.T) {
	send := mustKey(t, sealKeyA, epAB)
	payload := []byte("payload")
	hdr := send.Seal(nil, UCXData, 0, 10, payload)
	rewrite := func(f func(b []byte)) []byte {
		b := append([]byte(nil), hdr...)
		f(b)
		return b
	}
	other := func(mod func(*UCXEndpoint)) *UCXFrameKey {
		ep := epAB
		mod(&ep)
		return mustKey(t, sealKeyA, ep)
	}
	for name, c := range map[string]struct {
		key *UCXFrameKey
		hdr []byte
	}{
		"wrong key":                  {mustKey(t, sealKeyB, epAB), hdr},
		"replayed as the next seq":   {send, rewrite(func(b []byte) { binary.BigEndian.PutUint64(b[24:], 11) })},
		"replayed as an earlier seq": {send, rewrite(func(b []byte) { binary.BigEndian.PutUint64(b[24:], 9) })},
		"made a fin":                 {send, rewrite(func(b []byte) { b[16] = byte(UCXFin) })},
		"reflected to its sender":    {mustKey(t, sealKeyA, epBA), hdr},
		"reflected, header rewritten": {mustKey(t, sealKeyA, epBA), rewrite(func(b []byte) {
			binary.BigEndian.PutUint64(b[0:], epBA.SenderInc)
			binary.BigEndian.PutUint64(b[8:], epBA.Sender)
		})},
		"other epoch":                {other(func(ep *UCXEndpoint) { ep.Epoch = 4 }), hdr},
		"other epoch, header moved":  {other(func(ep *UCXEndpoint) { ep.Epoch = 4 }), rewrite(func(b []byte) { binary.BigEndian.PutUint32(b[20:], 4) })},
		"other receiver":             {other(func(ep *UCXEndpoint) { ep.Receiver = 0xc }), hdr},
		"other receiver incarnation": {other(func(ep *UCXEndpoint) { ep.ReceiverInc++ }), hdr},
		"other sender incarnation":   {other(func(ep *UCXEndpoint) { ep.SenderInc++ }), hdr},
		"other sender, header moved": {other(func(ep *UCXEndpoint) { ep.Sender = 0xc }), rewrite(func(b []byte) { binary.BigEndian.PutUint64(b[8:], 0xc) })},
		"unsealed header":            {send, AppendUCXHeader(nil, UCXHeader{Incarnation: 0xa0, Sender: 0xa, Kind: UCXData, Epoch: 3, Seq: 10})},
		"unsealed bye":               {send, AppendUCXHeader(nil, UCXHeader{Incarnation: 0xa0, Sender: 0xa, Kind: UCXFin, Flags: UCXFinBye, Epoch: 3, Seq: 10})},
		"seal of zeros":              {send, rewrite(func(b []byte) { clear(b[UCXHeaderLen:]) })},
		"seal of another frame":      {send, append(rewrite(func(b []byte) {})[:UCXHeaderLen], send.Seal(nil, UCXData, 0, 9, payload)[UCXHeaderLen:]...)},
	} {
		_, err := c.key.Open(c.hdr, payload)
		assert.ErrorIs(t, err, ErrUCXSeal, name)
	}
}

// TestUCXSealNeverRepeatsANonce: GCM must not see one nonce twice under one key. Each seal takes
// the next value of the key's counter, the same frame sealed twice carries two nonces (and two
// tags), and a key made again for the same endpoint starts its counter elsewhere.
func TestUCXSealNeverRepeatsANonce(t *testing.T) {
	send, recv := mustKey(t, sealKeyA, epAB), mustKey(t, sealKeyA, epAB)
	payload := []byte("the same frame")
	nonce := func(hdr []byte) uint64 { return binary.BigEndian.Uint64(hdr[UCXHeaderLen:]) }
	first := send.Seal(nil, UCXFin, UCXFinAsk, 4, payload)
	again := send.Seal(nil, UCXFin, UCXFinAsk, 4, payload)
	assert.Equal(t, nonce(first)+1, nonce(again), "the counter moves by one per frame")
	assert.NotEqual(t, first[UCXHeaderLen+UCXSealNonceLen:], again[UCXHeaderLen+UCXSealNonceLen:], "a new nonce, a new tag")
	for _, hdr := range [][]byte{first, again} {
		_, err := recv.Open(hdr, payload)
		require.NoError(t, err)
	}
	remade := mustKey(t, sealKeyA, epAB)
	assert.NotEqual(t, nonce(first), nonce(remade.Seal(nil, UCXFin, UCXFinAsk, 4, payload)), "a key made again starts at a random counter")

	// A nonce moved to another frame's does not carry that frame's tag.
	moved := append([]byte(nil), again...)
	copy(moved[UCXHeaderLen:], first[UCXHeaderLen:UCXHeaderLen+UCXSealNonceLen])
	_, err := recv.Open(moved, payload)
	assert.ErrorIs(t, err, ErrUCXSeal)
}

func TestUCXFrameKeyRefusesWeakKeys(t *testing.T) {
	_, err := NewUCXFrameKey(make([]byte, MinUCXFrameKeyLen-1), epAB)
	assert.ErrorContains(t, err, "at least 32")
	for _, ep := range []UCXEndpoint{{Receiver: 1, Epoch: 1}, {Sender: 1, Epoch: 1}, {Sender: 1, Receiver: 1}} {
		_, err := NewUCXFrameKey(sealKeyA, ep)
		assert.Error(t, err, "%+v", ep)
	}
}

func TestUCXSealedHeaderDecode(t *testing.T) {
	k := mustKey(t, sealKeyA, epAB)
	h, err := DecodeUCXHeader(k.Seal(nil, UCXFin, UCXFinBye, 5))
	require.NoError(t, err)
	assert.True(t, h.Sealed)
	for name, b := range map[string][]byte{
		"sealed hello":          append(AppendUCXHeader(nil, UCXHeader{Sender: 1, Kind: UCXHello, Sealed: true, Epoch: 1}), make([]byte, UCXSealLen)...),
		"unknown header flag":   func() []byte { b := AppendUCXHeader(nil, UCXHeader{Sender: 1, Epoch: 1, Seq: 1}); b[18] = 2; return b }(),
		"seal on an unsealed":   append(AppendUCXHeader(nil, UCXHeader{Sender: 1, Epoch: 1, Seq: 1}), make([]byte, UCXSealLen)...),
		"sealed without seal":   AppendUCXHeader(nil, UCXHeader{Sender: 1, Epoch: 1, Seq: 1, Sealed: true}),
		"sealed, seal too long": append(k.Seal(nil, UCXData, 0, 1), 0),
	} {
		_, err := DecodeUCXHeader(b)
		assert.ErrorIs(t, err, ErrMalformed, name)
	}
}

// TestUCXSealAllocatesNothing: the hot path reuses the key's cipher state and scratch space.
func TestUCXSealAllocatesNothing(t *testing.T) {
	send, recv := mustKey(t, sealKeyA, epAB), mustKey(t, sealKeyA, epAB)
	payload := make([]byte, 1024)
	buf := make([]byte, 0, UCXSealedHeaderLen)
	var hdr []byte
	allocs := testing.AllocsPerRun(100, func() { hdr = send.Seal(buf[:0], UCXData, 0, 1, payload[:100], payload[100:]) })
	assert.Zero(t, allocs, "Seal")
	allocs = testing.AllocsPerRun(100, func() {
		if _, err := recv.Open(hdr, payload); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs, "Open")
	forged := append([]byte(nil), hdr...)
	forged[UCXHeaderLen] ^= 1
	allocs = testing.AllocsPerRun(100, func() { _, _ = recv.Open(forged, payload) })
	assert.Zero(t, allocs, "Open of a forged frame")
}

func FuzzUCXFrameOpen(f *testing.F) {
	k := mustKey(f, sealKeyA, epAB)
	// What the seeds sealed. Each fuzzing process makes its own key object (same key bytes, its
	// own nonce counter), so a frame is named by what it says, not by its nonce.
	sealed := map[string]bool{}
	name := func(kind UCXKind, flags byte, seq uint64, payload []byte) string {
		return fmt.Sprintf("%d/%d/%d/%x", kind, flags, seq, payload)
	}
	seal := func(kind UCXKind, flags byte, seq uint64, payload []byte) []byte {
		sealed[name(kind, flags, seq, payload)] = true
		return k.Seal(nil, kind, flags, seq, payload)
	}
	f.Add(seal(UCXData, 0, 1, []byte("x")), []byte("x"))
	f.Add(seal(UCXFin, UCXFinAsk|UCXFinBye, 9, nil), []byte(nil))
	f.Add(AppendUCXHeader(nil, UCXHeader{Incarnation: 0xa0, Sender: 0xa, Kind: UCXData, Epoch: 3, Seq: 1}), []byte("x"))
	f.Add(make([]byte, UCXSealedHeaderLen), []byte{})
	f.Fuzz(func(t *testing.T, hdr, payload []byte) {
		h, err := k.Open(hdr, payload)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUCXSeal) {
				t.Fatalf("refusal wraps neither ErrMalformed nor ErrUCXSeal: %v", err)
			}
			return
		}
		// Only what the key sealed opens.
		if !sealed[name(h.Kind, h.Flags, h.Seq, payload)] {
			t.Fatalf("%x with payload %x opened as %+v, and the key never sealed it", hdr, payload, h)
		}
	})
}

func BenchmarkUCXSeal(b *testing.B) {
	for _, size := range []int{64, 1 << 10, 64 << 10} {
		send, recv := mustKey(b, sealKeyA, epAB), mustKey(b, sealKeyA, epAB)
		payload := make([]byte, size)
		buf := make([]byte, 0, UCXSealedHeaderLen)
		b.Run(fmt.Sprintf("seal/%dB", size), func(b *testing.B) {
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				send.Seal(buf[:0], UCXData, 0, uint64(i+1), payload)
			}
		})
		hdr := send.Seal(nil, UCXData, 0, 1, payload)
		b.Run(fmt.Sprintf("open/%dB", size), func(b *testing.B) {
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := recv.Open(hdr, payload); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
