package rails

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRailKeyRoundTrip(t *testing.T) {
	keys := [][]byte{[]byte("VRK\x01rail-zero"), nil, []byte("two")}
	b, err := appendRailKey(nil, keys)
	require.NoError(t, err)
	assert.True(t, isRailKey(b))
	assert.False(t, isRailKey(keys[0]), "a UCX sealed key must not read as a rail-set key")
	got, err := parseRailKey(b)
	require.NoError(t, err)
	assert.Equal(t, keys, got)

	for name, bad := range map[string][][]byte{"none": {nil, nil}, "empty": {{}}, "too long": {make([]byte, MaxKeyLen+1)}, "too many rails": make([][]byte, MaxRails+1)} {
		if name == "too many rails" {
			bad[MaxRails] = []byte("k")
		}
		_, err := appendRailKey(nil, bad)
		assert.ErrorIs(t, err, errKey, name)
	}
	for name, mut := range map[string]func([]byte) []byte{
		"truncated":   func(b []byte) []byte { return b[:len(b)-1] },
		"checksum":    func(b []byte) []byte { b[len(b)-1] ^= 1; return b },
		"version":     func(b []byte) []byte { b[3] = 2; return b },
		"short":       func(b []byte) []byte { return b[:6] },
		"extra bytes": func(b []byte) []byte { return append(b, 0) },
	} {
		c := mut(bytes.Clone(b))
		_, err := parseRailKey(c)
		assert.ErrorIs(t, err, errKey, name)
	}
}

// FuzzRailKey: parseRailKey never panics, and what it accepts encodes back to the same bytes.
func FuzzRailKey(f *testing.F) {
	good, _ := appendRailKey(nil, [][]byte{[]byte("a"), []byte("bb")})
	f.Add(good)
	sparse, _ := appendRailKey(nil, [][]byte{nil, nil, []byte("c")})
	f.Add(sparse)
	f.Add([]byte("VRR\x01\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		keys, err := parseRailKey(b)
		if err != nil {
			return
		}
		again, err := appendRailKey(nil, keys)
		if err != nil {
			t.Fatalf("accepted %x but cannot encode its keys: %v", b, err)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("%x decodes and encodes to %x", b, again)
		}
	})
}
