package ucx

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A sealed key says what the registration grants: a read key is the same bytes as before writes
// existed (flags 0), a write key sets bit 0, a write-only key bits 0 and 1; anything else in the
// flags byte is refused.
func TestSealedKeyAccess(t *testing.T) {
	base := SealedKey{Slot: 3, Token: 0xfeed, Base: 0x1000, Length: 4096, UCXKey: tcpKey}
	for _, c := range []struct {
		access Access
		flags  byte
		want   Access
	}{
		{0, 0, AccessRead},
		{AccessRead, 0, AccessRead},
		{AccessWrite, 3, AccessWrite},
		{AccessRead | AccessWrite, 1, AccessRead | AccessWrite},
	} {
		k := base
		k.Access = c.access
		b := AppendSealedKey(nil, k)
		assert.Equal(t, c.flags, b[4], "flags of %v", c.access)
		got, err := ParseSealedKey(b)
		require.NoError(t, err)
		assert.Equal(t, c.want, got.Access)
		rk, err := ParseRegionKey(b)
		require.NoError(t, err)
		assert.Equal(t, c.want, rk.Access())
	}
	for _, flags := range []byte{2, 4, 0x80, 0xff} {
		b := AppendSealedKey(nil, base)
		b[4] = flags
		b = AppendCRC(b[:len(b)-4])
		_, err := ParseSealedKey(b)
		assert.ErrorIs(t, err, ErrInvalidRemoteKey, "flags %#x", flags)
	}
	assert.True(t, (AccessRead | AccessWrite).Has(AccessWrite))
	assert.False(t, AccessRead.Has(AccessWrite))
	assert.Equal(t, "read+write", (AccessRead | AccessWrite).String())
	assert.Equal(t, "none", Access(0).String())
	assert.Error(t, Access(0).valid())
	assert.Error(t, Access(4).valid())
	assert.NoError(t, AccessWrite.valid())
}
