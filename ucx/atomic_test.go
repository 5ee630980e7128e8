//go:build cgo && linux

package ucx

import (
	"encoding/binary"
	"errors"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLowAtomic: a fetching add, a swap, a compare-and-swap and a post between two workers of
// one context, each seen in the target's memory; and the argument checks that keep a bad call
// from reaching UCX.
func TestLowAtomic(t *testing.T) {
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	ctx, err := NewContext(ContextConfig{TLS: testTLS, Features: FeatureAM | FeatureRMA | FeatureAMO})
	require.NoError(t, err)
	p := &lowPair{ctx: ctx}
	p.a, err = ctx.NewWorker()
	require.NoError(t, err)
	p.b, err = ctx.NewWorker()
	require.NoError(t, err)
	addr, err := p.b.Address()
	require.NoError(t, err)
	p.ab, err = p.a.Connect(addr, EndpointOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		if r, _ := p.ab.Close(CloseForce); r != nil {
			p.until(t, r.Done, nil)
		}
		p.a.Close()
		p.b.Close()
		ctx.Close()
	})

	mem := allocFilled(t, 4096, 3)
	word := mem.Bytes()[64:72]
	binary.LittleEndian.PutUint64(word, 40)
	mh, err := ctx.MapMemory(mem.Bytes())
	require.NoError(t, err)
	defer mh.Unmap()
	packed, err := mh.PackRemoteKey()
	require.NoError(t, err)
	rk, err := p.ab.UnpackRemoteKey(packed)
	require.NoError(t, err)
	defer rk.Destroy()
	target := mh.Addr() + 64

	local := allocFilled(t, 64, 4).Bytes()
	operand, result := local[0:8], local[8:16]
	do := func(op AtomicOp, value uint64, res []byte) {
		t.Helper()
		binary.LittleEndian.PutUint64(operand, value)
		req, err := p.ab.Atomic(op, operand, res, target, rk)
		require.NoError(t, err)
		if req != nil {
			p.until(t, req.Done, nil)
			require.NoError(t, req.Err())
		}
	}
	do(AtomicAdd, 2, result)
	require.Equal(t, uint64(40), binary.LittleEndian.Uint64(result), "fetched before the add")
	do(AtomicSwap, 7, result)
	require.Equal(t, uint64(42), binary.LittleEndian.Uint64(result), "fetched before the swap")
	binary.LittleEndian.PutUint64(result, 9) // compare with 7: equal, so 9 goes in
	do(AtomicCSwap, 7, result)
	require.Equal(t, uint64(7), binary.LittleEndian.Uint64(result))
	do(AtomicAdd, 1, nil) // a post: nothing fetched
	req, err := p.ab.Flush()
	require.NoError(t, err)
	if req != nil {
		p.until(t, req.Done, nil)
	}
	require.Equal(t, uint64(10), binary.LittleEndian.Uint64(word), "the target's word after add, swap, cswap and a posted add")

	for name, call := range map[string]func() error{
		"operand of 3 bytes":       func() error { _, err := p.ab.Atomic(AtomicAdd, local[:3], nil, target, rk); return err },
		"result shorter":           func() error { _, err := p.ab.Atomic(AtomicAdd, operand, local[:4], target, rk); return err },
		"cswap without its result": func() error { _, err := p.ab.Atomic(AtomicCSwap, operand, nil, target, rk); return err },
		"unknown operation":        func() error { _, err := p.ab.Atomic(AtomicXor+1, operand, nil, target, rk); return err },
	} {
		require.True(t, errors.Is(call(), StatusInvalidParam), name)
	}
}
