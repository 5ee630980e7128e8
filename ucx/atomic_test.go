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
//
// Over tcp the atomics are emulated in software. The endpoint uses UCX's default error mode
// (ErrorModeNone): UCX 1.22 offers no software atomics on an endpoint with peer error handling
// and then fails an assertion of its own. Where the linked UCX's guard refuses software RMA (the
// static build), the test asserts the refusal instead: the fetching atomics complete with
// UCS_ERR_REJECTED and fetch nothing, the post completes, the target's word is unchanged and each
// refusal is counted.
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
	p.ab, err = p.a.Connect(addr, EndpointOptions{ErrorMode: ErrorModeNone})
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
	run := func(op AtomicOp, value uint64, res []byte) error {
		t.Helper()
		binary.LittleEndian.PutUint64(operand, value)
		req, err := p.ab.Atomic(op, operand, res, target, rk)
		if err == nil && req != nil {
			p.until(t, req.Done, nil)
			err = req.Err()
		}
		return err
	}
	if guardEnforced(t) && !rmaLanesKeyed(p.ab.Info()) {
		before := guardRefused(t).Atomic
		for _, c := range []struct {
			op    AtomicOp
			value uint64
		}{{AtomicAdd, 2}, {AtomicSwap, 7}, {AtomicCSwap, 7}} {
			binary.LittleEndian.PutUint64(result, 9)
			require.ErrorIs(t, run(c.op, c.value, result), StatusRejected, "fetching %v on the guarded UCX", c.op)
			require.Equal(t, uint64(9), binary.LittleEndian.Uint64(result), "the refused %v fetched something", c.op)
		}
		require.NoError(t, run(AtomicAdd, 1, nil), "a posted add is dropped by the target and still completes")
		req, err := p.ab.Flush()
		require.NoError(t, err)
		if req != nil {
			p.until(t, req.Done, nil)
			require.NoError(t, req.Err())
		}
		require.Equal(t, uint64(40), binary.LittleEndian.Uint64(word), "the target's word after four refused atomics")
		require.Equal(t, before+4, guardRefused(t).Atomic, "the guard's atomic counter")
		t.Log("the linked UCX's guard refused the four software atomics (three UCS_ERR_REJECTED, one dropped post), all counted")
	} else {
		lowAtomicsApply(t, p, run, result, word)
	}

	for name, call := range map[string]func() error{
		"operand of 3 bytes":       func() error { _, err := p.ab.Atomic(AtomicAdd, local[:3], nil, target, rk); return err },
		"result shorter":           func() error { _, err := p.ab.Atomic(AtomicAdd, operand, local[:4], target, rk); return err },
		"cswap without its result": func() error { _, err := p.ab.Atomic(AtomicCSwap, operand, nil, target, rk); return err },
		"unknown operation":        func() error { _, err := p.ab.Atomic(AtomicXor+1, operand, nil, target, rk); return err },
	} {
		require.True(t, errors.Is(call(), StatusInvalidParam), name)
	}
}

// lowAtomicsApply runs the atomics where UCX carries them out: each fetches the word as it was
// and the target's word shows all four.
func lowAtomicsApply(t *testing.T, p *lowPair, run func(AtomicOp, uint64, []byte) error, result, word []byte) {
	t.Helper()
	require.NoError(t, run(AtomicAdd, 2, result))
	require.Equal(t, uint64(40), binary.LittleEndian.Uint64(result), "fetched before the add")
	require.NoError(t, run(AtomicSwap, 7, result))
	require.Equal(t, uint64(42), binary.LittleEndian.Uint64(result), "fetched before the swap")
	binary.LittleEndian.PutUint64(result, 9) // compare with 7: equal, so 9 goes in
	require.NoError(t, run(AtomicCSwap, 7, result))
	require.Equal(t, uint64(7), binary.LittleEndian.Uint64(result))
	require.NoError(t, run(AtomicAdd, 1, nil)) // a post: nothing fetched
	req, err := p.ab.Flush()
	require.NoError(t, err)
	if req != nil {
		p.until(t, req.Done, nil)
	}
	require.Equal(t, uint64(10), binary.LittleEndian.Uint64(word), "the target's word after add, swap, cswap and a posted add")
}
