package wire

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func shmFileSamples() []SHMFileFrame {
	return []SHMFileFrame{
		{Kind: SHMFileRead, Req: 7, Offset: 0, Length: 8 << 20, Size: 8 << 20},
		{Kind: SHMFileRead, Req: 255, Offset: 4096, Length: 1, Size: 3 << 20},
		{Kind: SHMFileDone, Req: 7},
	}
}

func TestSHMFileFrameRoundTrip(t *testing.T) {
	for _, f := range shmFileSamples() {
		b, err := AppendSHMFileFrame(nil, f)
		require.NoError(t, err)
		require.Len(t, b, SHMFileFrameLen)
		got, err := DecodeSHMFileFrame(b)
		require.NoError(t, err)
		assert.Equal(t, f, got)
	}
	for name, f := range map[string]SHMFileFrame{
		"read of nothing":     {Kind: SHMFileRead, Size: 10},
		"read past the file":  {Kind: SHMFileRead, Offset: 8, Length: 4, Size: 10},
		"read wrapping":       {Kind: SHMFileRead, Offset: 9, Length: ^uint64(0), Size: 10},
		"done with a range":   {Kind: SHMFileDone, Length: 1},
		"done with a size":    {Kind: SHMFileDone, Size: 1},
		"a ring frame's kind": {Kind: 'C', Length: 1, Size: 1},
	} {
		_, err := AppendSHMFileFrame(nil, f)
		assert.ErrorIs(t, err, ErrSHMFileFrame, name)
	}
	good, err := AppendSHMFileFrame(nil, shmFileSamples()[1])
	require.NoError(t, err)
	for name, mut := range map[string]func([]byte) []byte{
		"short":     func(b []byte) []byte { return b[:SHMFileFrameLen-1] },
		"long":      func(b []byte) []byte { return append(b, 0) },
		"version":   func(b []byte) []byte { b[1] = 2; return b },
		"reserved":  func(b []byte) []byte { b[5] = 1; return b },
		"tail":      func(b []byte) []byte { b[63] = 1; return b },
		"past size": func(b []byte) []byte { b[32] = 0; b[33] = 0; b[34] = 0; return b },
	} {
		_, err := DecodeSHMFileFrame(mut(bytes.Clone(good)))
		assert.ErrorIs(t, err, ErrSHMFileFrame, name)
		assert.ErrorIs(t, err, ErrMalformed, name)
	}
	b := bytes.Clone(good)
	b[1] = 2
	_, err = DecodeSHMFileFrame(b)
	assert.ErrorIs(t, err, ErrVersion, "a frame of another version says so")
}

// FuzzDecodeSHMFileFrame: DecodeSHMFileFrame never panics, every refusal wraps ErrSHMFileFrame,
// what it accepts encodes back to the same bytes, and an accepted read lies inside its file.
func FuzzDecodeSHMFileFrame(f *testing.F) {
	for _, s := range shmFileSamples() {
		b, _ := AppendSHMFileFrame(nil, s)
		f.Add(b)
	}
	f.Add([]byte("M\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := DecodeSHMFileFrame(b)
		if err != nil {
			require.ErrorIs(t, err, ErrSHMFileFrame)
			return
		}
		again, err := AppendSHMFileFrame(nil, fr)
		require.NoError(t, err, "accepted %x but cannot encode it", b)
		require.Equal(t, b, again)
		if fr.Kind == SHMFileRead {
			require.NotZero(t, fr.Length)
			require.LessOrEqual(t, fr.Offset+fr.Length, fr.Size)
			require.GreaterOrEqual(t, fr.Offset+fr.Length, fr.Offset)
		}
	})
}
