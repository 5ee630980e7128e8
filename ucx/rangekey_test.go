//go:build cgo && linux

package ucx

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRangeKey: a key for one part of a registration reads that part as a region of its own, is
// refused locally past the part's end, reaches the rest of the registration when a reader names
// it by address (what RangeKey promises no more than), and dies with the registration.
func TestRangeKey(t *testing.T) {
	ctx := testContext(t)
	a, b, _ := enginePair(t, func(c *EngineConfig) { c.RMA = RMAGuarded })
	skipIfReplyBroken(t, a)
	ab, err := a.Connect(ctx, b.Address(), ConnectOptions{VectoredGet: true})
	require.NoError(t, err)
	const part = 64 << 10
	src := allocFilled(t, 3*part, 31)
	reg, err := b.Register(ctx, src.Bytes())
	require.NoError(t, err)

	for _, bad := range [][2]int{{-1, 16}, {0, 0}, {2 * part, part + 1}, {3 * part, 1}} {
		_, err := reg.RangeKey(bad[0], bad[1])
		assert.ErrorIs(t, err, StatusInvalidParam, "RangeKey(%d, %d)", bad[0], bad[1])
	}
	raw, err := reg.RangeKey(part, part)
	require.NoError(t, err)
	k, err := ParseRegionKey(raw)
	require.NoError(t, err, "a range key is a well-formed sealed key")
	assert.Equal(t, reg.Addr()+part, k.Base())
	assert.Equal(t, uint64(part), k.Len())

	dst := make([]byte, part)
	require.NoError(t, ab.GetKey(ctx, dst, k, 0))
	assert.Equal(t, src.Bytes()[part:2*part], dst, "the middle part")
	assert.ErrorIs(t, ab.GetKey(ctx, make([]byte, 64), k, part-32), ErrOutOfRange, "past the part's end")

	// The bounds in a sealed key are the reader's to rewrite (its checksum is no seal against
	// its holder): widened to the whole registration, the same key reads the first part, since
	// the owner's guard knows the registration, not the part; widened further, the guard refuses.
	wide := k.k
	wide.Base, wide.Length = reg.Addr(), 3*part
	wk, err := ParseRegionKey(AppendSealedKey(nil, wide))
	require.NoError(t, err)
	first := make([]byte, 64)
	require.NoError(t, ab.GetKey(ctx, first, wk, 0))
	assert.Equal(t, src.Bytes()[:64], first)
	wide.Length = 4 * part
	wk, err = ParseRegionKey(AppendSealedKey(nil, wide))
	require.NoError(t, err)
	beyond := make([]byte, 64)
	assert.ErrorIs(t, ab.GetKey(ctx, beyond, wk, 3*part-32), ErrOutOfRange, "across the registration's end")
	assert.Equal(t, make([]byte, 64), beyond)

	require.NoError(t, reg.Unregister(ctx))
	clear(dst)
	assert.ErrorIs(t, ab.GetKey(ctx, dst, k, 0), ErrRemoteKeyRevoked, "a range key dies with its registration")
	assert.Equal(t, make([]byte, part), dst)
}
