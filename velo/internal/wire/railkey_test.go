package wire

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRailKeyRoundTrip(t *testing.T) {
	keys := [][]byte{[]byte("VRK\x01rail-zero"), nil, []byte("two")}
	b, err := AppendRailKey(nil, keys)
	require.NoError(t, err)
	assert.True(t, IsRailKey(b))
	assert.False(t, IsRailKey(keys[0]), "a UCX sealed key must not read as a rail-set key")
	got, err := DecodeRailKey(b)
	require.NoError(t, err)
	assert.Equal(t, keys, got)

	for name, bad := range map[string][][]byte{"none": {nil, nil}, "empty": {{}}, "too long": {make([]byte, MaxRailKeyLen+1)}, "too many rails": make([][]byte, MaxRails+1)} {
		if name == "too many rails" {
			bad[MaxRails] = []byte("k")
		}
		_, err := AppendRailKey(nil, bad)
		assert.ErrorIs(t, err, ErrRailKey, name)
	}
	for name, mut := range map[string]func([]byte) []byte{
		"truncated":   func(b []byte) []byte { return b[:len(b)-1] },
		"checksum":    func(b []byte) []byte { b[len(b)-1] ^= 1; return b },
		"version":     func(b []byte) []byte { b[3] = 2; return b },
		"short":       func(b []byte) []byte { return b[:6] },
		"extra bytes": func(b []byte) []byte { return append(b, 0) },
	} {
		_, err := DecodeRailKey(mut(bytes.Clone(b)))
		assert.ErrorIs(t, err, ErrRailKey, name)
		assert.ErrorIs(t, err, ErrMalformed, name)
	}
}

// FuzzDecodeRailKey: DecodeRailKey never panics, every refusal wraps ErrRailKey, and what it
// accepts encodes back to the same bytes.
func FuzzDecodeRailKey(f *testing.F) {
	good, _ := AppendRailKey(nil, [][]byte{[]byte("a"), []byte("bb")})
	f.Add(good)
	sparse, _ := AppendRailKey(nil, [][]byte{nil, nil, []byte("c")})
	f.Add(sparse)
	f.Add([]byte("VRR\x01\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		keys, err := DecodeRailKey(b)
		if err != nil {
			require.ErrorIs(t, err, ErrRailKey)
			return
		}
		again, err := AppendRailKey(nil, keys)
		require.NoError(t, err, "accepted %x but cannot encode its keys", b)
		require.Equal(t, b, again)
	})
}
