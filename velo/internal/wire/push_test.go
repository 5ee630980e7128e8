package wire

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// The push protocol's decoders read what another process sent (or, for a grant handle, what an
// application carried). Each fuzz target holds one of them to the package's rule: it never
// panics, refuses what is short, malformed or followed by trailing bytes with an error wrapping
// ErrMalformed, and what it accepts encodes back to exactly the bytes it read (one encoding per
// value, so nothing can be smuggled in a second form). The seeds run as ordinary tests.

var fuzzRef = GrantRef{ID: 7, Nonce: [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}}

func FuzzDecodeGrantHandle(f *testing.F) {
	good, err := AppendGrantHandle(nil, GrantHandle{Receiver: 1, Writer: 2, ID: 3, Nonce: fuzzRef.Nonce, Expires: 99,
		Ranges: []GrantRange{{0, 10}, {4096, 1 << 20}}})
	require.NoError(f, err)
	require.Len(f, good, GrantHandleLen(2))
	f.Add(good)
	f.Add(good[:len(good)-1])
	f.Add([]byte("VPG\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := DecodeGrantHandle(b)
		if err != nil {
			require.ErrorIs(t, err, ErrMalformed)
			require.Zero(t, h.ID, "a refused handle left a value behind")
			return
		}
		back, err := AppendGrantHandle(nil, h)
		require.NoError(t, err)
		require.Equal(t, b, back)
	})
}

func FuzzDecodePushAcquire(f *testing.F) {
	f.Add(AppendPushAcquire(nil, PushAcquire{Ref: fuzzRef, Offer: true}))
	f.Add(append(AppendGrantRef(nil, fuzzRef), 2))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := DecodePushAcquire(b)
		if err != nil {
			require.ErrorIs(t, err, ErrMalformed)
			return
		}
		require.Equal(t, b, AppendPushAcquire(nil, a))
	})
}

func FuzzDecodePushAcquireResponse(f *testing.F) {
	for _, a := range []PushAcquireResponse{
		{RDMA: true, Reason: "ok", ChunkSize: 1 << 20, TTLMillis: 60000, Keys: [][]byte{{1, 2, 3}, {}}},
		{Reason: "not_pinned", ChunkSize: 1 << 20},
	} {
		b, err := AppendPushAcquireResponse(nil, a)
		require.NoError(f, err)
		f.Add(b)
	}
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}) // RDMA without keys
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := DecodePushAcquireResponse(b)
		if err != nil {
			require.ErrorIs(t, err, ErrMalformed)
			return
		}
		require.False(t, a.RDMA && len(a.Keys) == 0, "an RDMA answer without keys was accepted")
		back, err := AppendPushAcquireResponse(nil, a)
		require.NoError(t, err)
		require.Equal(t, b, back)
	})
}

func FuzzDecodePushWrite(f *testing.F) {
	f.Add(append(AppendPushWrite(nil, PushWrite{Ref: fuzzRef, Offset: 4096}), "bytes"...))
	f.Add(AppendGrantRef(nil, fuzzRef))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, data, err := DecodePushWrite(b)
		if err != nil {
			require.ErrorIs(t, err, ErrMalformed)
			require.Less(t, len(b), PushWriteLen)
			return
		}
		require.Equal(t, b, append(AppendPushWrite(nil, h), data...))
	})
}

func FuzzDecodeNotify(f *testing.F) {
	good, err := AppendNotify(nil, Notify{Ref: fuzzRef, Entries: []NotifyEntry{
		{Ranges: []GrantRange{{0, 64}}, Payload: []byte("block 7")},
		{Ranges: []GrantRange{{64, 64}, {1 << 20, 1}}},
	}})
	require.NoError(f, err)
	f.Add(good)
	f.Add(append(AppendGrantRef(nil, fuzzRef), 0, 0)) // no entries
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeNotify(b)
		if err != nil {
			require.ErrorIs(t, err, ErrMalformed)
			return
		}
		require.NotEmpty(t, m.Entries)
		back, err := AppendNotify(nil, m)
		require.NoError(t, err)
		require.Equal(t, b, back)
	})
}

func FuzzDecodeNotifyAnswer(f *testing.F) {
	f.Add([]byte{NotifyOK, NotifyEnded, NotifyRange, NotifyCopy}, 4)
	f.Add([]byte{NotifyOK}, 2)
	f.Fuzz(func(t *testing.T, b []byte, n int) {
		codes, err := DecodeNotifyAnswer(b, n)
		if err != nil {
			require.ErrorIs(t, err, ErrMalformed)
			require.NotEqual(t, len(b), n)
			return
		}
		require.Len(t, codes, n)
	})
}

func FuzzDecodeNoteWrites(f *testing.F) {
	m := NoteWrites{Ref: fuzzRef, Entries: []NoteWrite{
		{Offset: 4096, Payload: []byte("block 3"), Data: []byte("the bytes")},
		{Offset: 0, Data: []byte{0}},
	}}
	good, err := AppendNoteWrites(nil, m)
	require.NoError(f, err)
	require.Len(f, good, m.Size())
	f.Add(good)
	f.Add(good[:len(good)-1])
	f.Add(append(good, 0))
	empty, _ := AppendNoteWrites(nil, NoteWrites{Ref: fuzzRef, Entries: []NoteWrite{{Offset: 1, Data: []byte{1}}}})
	empty[len(empty)-2] = 0 // a data length of zero
	f.Add(empty[:len(empty)-1])
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeNoteWrites(b)
		if err != nil {
			require.ErrorIs(t, err, ErrMalformed)
			return
		}
		for _, e := range m.Entries {
			require.NotEmpty(t, e.Data, "a notified write of no bytes was accepted")
		}
		back, err := AppendNoteWrites(nil, m)
		require.NoError(t, err)
		require.Equal(t, b, back)
		require.Len(t, back, m.Size())
	})
}

// TestNoteWritesRefused: the refusals a receiver relies on, by name.
func TestNoteWritesRefused(t *testing.T) {
	one := func(e NoteWrite) []byte {
		b := AppendGrantRef(nil, fuzzRef)
		b = append(b, 0, 1)
		b = append(b, make([]byte, 8)...)
		b = append(b, byte(len(e.Payload)>>24), byte(len(e.Payload)>>16), byte(len(e.Payload)>>8), byte(len(e.Payload)))
		b = append(b, byte(len(e.Data)>>24), byte(len(e.Data)>>16), byte(len(e.Data)>>8), byte(len(e.Data)))
		b = append(b, e.Payload...)
		return append(b, e.Data...)
	}
	_, err := DecodeNoteWrites(one(NoteWrite{Payload: []byte("p")}))
	require.ErrorContains(t, err, "no bytes")
	_, err = DecodeNoteWrites(append(AppendGrantRef(nil, fuzzRef), 0, 0))
	require.ErrorContains(t, err, "0 notified writes")
	ok := one(NoteWrite{Payload: []byte("p"), Data: []byte("d")})
	_, err = DecodeNoteWrites(ok[:len(ok)-1])
	require.ErrorIs(t, err, errPushShort)
	_, err = DecodeNoteWrites(append(bytes.Clone(ok), 9))
	require.ErrorContains(t, err, "trailing")
	m, err := DecodeNoteWrites(ok)
	require.NoError(t, err)
	require.Equal(t, []NoteWrite{{Offset: 0, Payload: []byte("p"), Data: []byte("d")}}, m.Entries)
	_, err = AppendNoteWrites(nil, NoteWrites{Ref: fuzzRef})
	require.Error(t, err, "a message of no entries is not encoded")
}
