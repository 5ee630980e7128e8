package wire

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func cudaIPCSamples() []CUDAIPCFrame {
	exp := CUDAIPCFrame{Kind: CUDAIPCExport, Req: 7, Slot: 3, Token: 0xfeedface, AllocID: 42, AllocSize: 1 << 30, Offset: 4096, Length: 64 << 20}
	exp.Device[0], exp.Handle[63] = 0xaa, 0x55
	open := CUDAIPCFrame{Kind: CUDAIPCOpen, Req: 9}
	copy(open.Key[:], "VSH\x02 a same-host device key..")
	return []CUDAIPCFrame{open, exp,
		{Kind: CUDAIPCExport, Req: 8, Code: 1},
		{Kind: CUDAIPCDone, Req: 9},
		{Kind: CUDAIPCRevoked, Slot: 3, Token: 0xfeedface},
		{Kind: CUDAIPCDropped, Slot: 3, Token: 0xfeedface},
	}
}

func TestCUDAIPCFrameRoundTrip(t *testing.T) {
	for _, f := range cudaIPCSamples() {
		b, err := AppendCUDAIPCFrame(nil, f)
		require.NoError(t, err, "%q", f.Kind)
		require.Len(t, b, CUDAIPCFrameLen)
		got, err := DecodeCUDAIPCFrame(b)
		require.NoError(t, err, "%q", f.Kind)
		assert.Equal(t, f, got)
	}
	// A kind never carries another kind's fields, and an export stays inside its allocation.
	for name, f := range map[string]CUDAIPCFrame{
		"done with a key":        {Kind: CUDAIPCDone, Req: 1, Key: [32]byte{1}},
		"revoked with a request": {Kind: CUDAIPCRevoked, Req: 1, Slot: 1},
		"open with a code":       {Kind: CUDAIPCOpen, Code: 2},
		"refusal with an export": {Kind: CUDAIPCExport, Code: 1, AllocSize: 10, Length: 1},
		"export past its alloc":  {Kind: CUDAIPCExport, AllocSize: 10, Offset: 8, Length: 4},
		"export wrapping":        {Kind: CUDAIPCExport, AllocSize: 10, Offset: 9, Length: ^uint64(0)},
		"export of nothing":      {Kind: CUDAIPCExport, AllocSize: 10},
		"unknown kind":           {Kind: 'Z'},
	} {
		_, err := AppendCUDAIPCFrame(nil, f)
		assert.ErrorIs(t, err, ErrCUDAIPCFrame, name)
	}
	good, err := AppendCUDAIPCFrame(nil, cudaIPCSamples()[1])
	require.NoError(t, err)
	for name, mut := range map[string]func([]byte) []byte{
		"short":    func(b []byte) []byte { return b[:CUDAIPCFrameLen-1] },
		"long":     func(b []byte) []byte { return append(b, 0) },
		"magic":    func(b []byte) []byte { b[0] = 'W'; return b },
		"reserved": func(b []byte) []byte { b[170] = 1; return b },
		"pad":      func(b []byte) []byte { b[6] = 1; return b },
		"kind":     func(b []byte) []byte { b[3] = 'O'; return b },
	} {
		_, err := DecodeCUDAIPCFrame(mut(bytes.Clone(good)))
		assert.ErrorIs(t, err, ErrCUDAIPCFrame, name)
		assert.ErrorIs(t, err, ErrMalformed, name)
	}
}

// FuzzDecodeCUDAIPCFrame: DecodeCUDAIPCFrame never panics, every refusal wraps ErrCUDAIPCFrame,
// what it accepts encodes back to the same bytes, and an accepted export lies inside its
// allocation.
func FuzzDecodeCUDAIPCFrame(f *testing.F) {
	for _, s := range cudaIPCSamples() {
		b, _ := AppendCUDAIPCFrame(nil, s)
		f.Add(b)
	}
	f.Add([]byte("VCIX"))
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := DecodeCUDAIPCFrame(b)
		if err != nil {
			require.ErrorIs(t, err, ErrCUDAIPCFrame)
			return
		}
		again, err := AppendCUDAIPCFrame(nil, fr)
		require.NoError(t, err, "accepted %x but cannot encode it", b)
		require.Equal(t, b, again)
		if fr.Kind == CUDAIPCExport && fr.Code == 0 {
			require.LessOrEqual(t, fr.Offset+fr.Length, fr.AllocSize)
			require.GreaterOrEqual(t, fr.Offset+fr.Length, fr.Offset)
		}
	})
}
