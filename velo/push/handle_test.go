package push

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The push protocol's messages are fuzzed where their layouts live (velo/internal/wire). This
// target holds the public GrantHandle to the same rule through its own methods: a refusal wraps
// ErrBadGrant and leaves nothing behind, and what is accepted encodes back to exactly its bytes.

var fuzzNonce = [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}

func FuzzGrantHandle(f *testing.F) {
	good, err := GrantHandle{Receiver: 1, Writer: 2, ID: 3, Nonce: fuzzNonce, Expires: 99,
		Ranges: []Range{{0, 10}, {4096, 1 << 20}}}.MarshalBinary()
	require.NoError(f, err)
	f.Add(good)
	f.Add(good[:len(good)-1])
	f.Add([]byte("VPG\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var h GrantHandle
		if err := h.UnmarshalBinary(b); err != nil {
			require.ErrorIs(t, err, ErrBadGrant)
			require.True(t, h.IsZero(), "a refused handle left a value behind")
			return
		}
		back, err := h.MarshalBinary()
		require.NoError(t, err)
		require.Equal(t, b, back)
	})
}
