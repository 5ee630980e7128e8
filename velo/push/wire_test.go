package push

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// The push protocol's decoders read what another process sent. Each fuzz target holds one of them
// to the package's rule: it never panics, refuses what is short, malformed or followed by trailing
// bytes, and what it accepts encodes back to exactly the bytes it read (one encoding per value, so
// nothing can be smuggled in a second form). The seeds run as ordinary tests.

var fuzzRef = grantRef{ID: 7, Nonce: [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}}

func FuzzGrantHandle(f *testing.F) {
	good, err := GrantHandle{Receiver: 1, Writer: 2, ID: 3, Nonce: fuzzRef.Nonce, Expires: 99,
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

func FuzzAcquire(f *testing.F) {
	f.Add(acquireRequest{Ref: fuzzRef, Offer: true}.append(nil))
	f.Add(append(fuzzRef.append(nil), 2))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := decodeAcquireRequest(b)
		if err != nil {
			return
		}
		require.Equal(t, b, a.append(nil))
	})
}

func FuzzAcquireResponse(f *testing.F) {
	for _, a := range []acquireResponse{
		{RDMA: true, Reason: "ok", ChunkSize: 1 << 20, TTLMillis: 60000, Keys: [][]byte{{1, 2, 3}, {}}},
		{Reason: "not_pinned", ChunkSize: 1 << 20},
	} {
		b, err := a.append(nil)
		require.NoError(f, err)
		f.Add(b)
	}
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}) // RDMA without keys
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := decodeAcquireResponse(b)
		if err != nil {
			return
		}
		require.False(t, a.RDMA && len(a.Keys) == 0, "an RDMA answer without keys was accepted")
		back, err := a.append(nil)
		require.NoError(t, err)
		require.Equal(t, b, back)
	})
}

func FuzzWriteHeader(f *testing.F) {
	f.Add(append(writeHeader{Ref: fuzzRef, Offset: 4096}.append(nil), "bytes"...))
	f.Add(fuzzRef.append(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, data, err := decodeWrite(b)
		if err != nil {
			require.Less(t, len(b), writeHeaderLen)
			return
		}
		require.Equal(t, b, append(h.append(nil), data...))
	})
}

func FuzzNotify(f *testing.F) {
	good, err := notifyMessage{Ref: fuzzRef, Entries: []notifyEntry{
		{Ranges: []Range{{0, 64}}, Payload: []byte("block 7")},
		{Ranges: []Range{{64, 64}, {1 << 20, 1}}},
	}}.append(nil)
	require.NoError(f, err)
	f.Add(good)
	f.Add(append(fuzzRef.append(nil), 0, 0)) // no entries
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeNotify(b)
		if err != nil {
			return
		}
		require.NotEmpty(t, m.Entries)
		back, err := m.append(nil)
		require.NoError(t, err)
		require.Equal(t, b, back)
	})
}

func FuzzNoteWrites(f *testing.F) {
	m := noteWriteMessage{Ref: fuzzRef, Entries: []noteWrite{
		{Offset: 4096, Payload: []byte("block 3"), Data: []byte("the bytes")},
		{Offset: 0, Data: []byte{0}},
	}}
	good, err := m.append(nil)
	require.NoError(f, err)
	require.Len(f, good, m.size())
	f.Add(good)
	f.Add(good[:len(good)-1])
	f.Add(append(good, 0))
	empty, _ := noteWriteMessage{Ref: fuzzRef, Entries: []noteWrite{{Offset: 1, Data: []byte{1}}}}.append(nil)
	empty[len(empty)-2] = 0 // a data length of zero
	f.Add(empty[:len(empty)-1])
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeNoteWrites(b)
		if err != nil {
			return
		}
		for _, e := range m.Entries {
			require.NotEmpty(t, e.Data, "a notified write of no bytes was accepted")
		}
		back, err := m.append(nil)
		require.NoError(t, err)
		require.Equal(t, b, back)
		require.Len(t, back, m.size())
	})
}

// TestNoteWritesRefused: the refusals a receiver relies on, by name.
func TestNoteWritesRefused(t *testing.T) {
	one := func(e noteWrite) []byte {
		b := fuzzRef.append(nil)
		b = append(b, 0, 1)
		b = append(b, make([]byte, 8)...)
		b = append(b, byte(len(e.Payload)>>24), byte(len(e.Payload)>>16), byte(len(e.Payload)>>8), byte(len(e.Payload)))
		b = append(b, byte(len(e.Data)>>24), byte(len(e.Data)>>16), byte(len(e.Data)>>8), byte(len(e.Data)))
		b = append(b, e.Payload...)
		return append(b, e.Data...)
	}
	_, err := decodeNoteWrites(one(noteWrite{Payload: []byte("p")}))
	require.ErrorContains(t, err, "no bytes")
	_, err = decodeNoteWrites(append(fuzzRef.append(nil), 0, 0))
	require.ErrorContains(t, err, "0 notified writes")
	ok := one(noteWrite{Payload: []byte("p"), Data: []byte("d")})
	_, err = decodeNoteWrites(ok[:len(ok)-1])
	require.True(t, errors.Is(err, errShort), "%v", err)
	_, err = decodeNoteWrites(append(bytes.Clone(ok), 9))
	require.ErrorContains(t, err, "trailing")
	m, err := decodeNoteWrites(ok)
	require.NoError(t, err)
	require.Equal(t, []noteWrite{{Offset: 0, Payload: []byte("p"), Data: []byte("d")}}, m.Entries)
	_, err = noteWriteMessage{Ref: fuzzRef}.append(nil)
	require.Error(t, err, "a message of no entries is not encoded")
}
