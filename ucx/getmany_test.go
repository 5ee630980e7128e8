//go:build cgo && linux

package ucx

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGetManyBlocks: 2,048 reads of 4 KiB and 1,024 of 64 KiB from two registrations, on both
// GET paths, with a window smaller than the batch. Every read reports once, every byte matches;
// where the linked UCX's guard refuses software RMA, every direct read reports its refusal.
func TestGetManyBlocks(t *testing.T) {
	for _, mode := range []RMAMode{RMAGuarded, RMADirect} {
		t.Run(mode.String(), func(t *testing.T) {
			ctx := testContext(t)
			a, b, _ := enginePair(t, func(c *EngineConfig) { c.RMA = mode })
			if mode == RMAGuarded {
				skipIfReplyBroken(t, a)
			}
			ab, err := a.Connect(ctx, b.Address(), ConnectOptions{VectoredGet: true})
			require.NoError(t, err)
			src1, src2 := allocFilled(t, 8<<20, 21), allocFilled(t, 64<<20, 22)
			reg1, err := b.Register(ctx, src1.Bytes())
			require.NoError(t, err)
			reg2, err := b.Register(ctx, src2.Bytes())
			require.NoError(t, err)
			k1, err := ParseRegionKey(reg1.RemoteKey())
			require.NoError(t, err)
			k2, err := ParseRegionKey(reg2.RemoteKey())
			require.NoError(t, err)
			var reads []KeyRead
			var want [][]byte
			for i := 0; i < 2048; i++ {
				off := uint64(i) * 4096
				reads = append(reads, KeyRead{Key: k1, Offset: off, Dst: make([]byte, 4096)})
				want = append(want, src1.Bytes()[off:off+4096])
			}
			for i := 0; i < 1024; i++ {
				off := uint64(i) * 64 << 10
				reads = append(reads, KeyRead{Key: k2, Offset: off, Dst: make([]byte, 64<<10)})
				want = append(want, src2.Bytes()[off:off+64<<10])
			}
			if mode == RMADirect && softwareRMARefused(t, ab) {
				// The guarded UCX refuses software RMA: every direct read reports once, with
				// UCS_ERR_REJECTED, and writes nothing. A share of each size is enough to show it.
				some := append(append([]KeyRead(nil), reads[:32]...), reads[2048:2048+32]...)
				before := guardRefused(t).Get
				seen := make([]int, len(some))
				ab.GetMany(ctx, some, 16, func(i int, err error) {
					seen[i]++
					assert.ErrorIs(t, err, StatusRejected, "read %d", i)
				})
				for i, r := range some {
					require.Equal(t, 1, seen[i], "read %d reported %d times", i, seen[i])
					require.Equal(t, make([]byte, len(r.Dst)), r.Dst, "refused read %d wrote into its destination", i)
				}
				require.GreaterOrEqual(t, guardRefused(t).Get-before, uint64(len(some)), "the guard's GET counter")
				t.Logf("the linked UCX's guard refused all %d direct reads (software RMA over tcp)", len(some))
				return
			}
			seen := make([]int, len(reads))
			ab.GetMany(ctx, reads, 16, func(i int, err error) {
				seen[i]++
				assert.NoError(t, err, "read %d", i)
			})
			for i, r := range reads {
				require.Equal(t, 1, seen[i], "read %d reported %d times", i, seen[i])
				require.True(t, bytes.Equal(r.Dst, want[i]), "read %d: bytes differ", i)
			}
			if mode == RMAGuarded {
				vectors := testutil.ToFloat64(a.metrics.ops.WithLabelValues("get_guarded_vector", "ok"))
				// Half the window per request (16/2 = 8 reads, 512 KiB at most here): the window
				// frees by whole requests, so every request is full.
				assert.Equal(t, float64(len(reads)/8), vectors, "the reads were not posted in vectored requests of half the window")
				// A peer that did not say it answers vectored requests never gets one.
				plain, err := a.Connect(ctx, b.Address(), ConnectOptions{})
				require.NoError(t, err)
				var failed error
				plain.GetMany(ctx, reads[:256], 16, func(i int, err error) {
					if err != nil && failed == nil {
						failed = err
					}
				})
				require.NoError(t, failed)
				assert.Equal(t, vectors, testutil.ToFloat64(a.metrics.ops.WithLabelValues("get_guarded_vector", "ok")))
			}
			require.NoError(t, reg1.Unregister(ctx))
			require.NoError(t, reg2.Unregister(ctx))
		})
	}
}

// TestGetManyEachEntryFailsAlone: a range past the region, a read without a key and a read
// with a revoked key each fail with their own error; the reads around them complete.
func TestGetManyEachEntryFailsAlone(t *testing.T) {
	ctx := testContext(t)
	a, b, ab := enginePair(t, nil)
	skipIfReplyBroken(t, a)
	src, live, kl, kd := liveAndRevoked(t, b, 1<<20, 31)
	guarded := true
	if m, _ := ab.RMAMode(ctx); m != RMAGuarded {
		guarded = false // the NIC enforces keys there; a revoked key is not read either way
	}
	sentinel := bytes.Repeat([]byte{0xA5}, 100)
	reads := []KeyRead{
		{Key: kl, Offset: 0, Dst: make([]byte, 100)},
		{Key: kl, Offset: 1<<20 - 50, Dst: append([]byte(nil), sentinel...)}, // past the end
		{Key: nil, Offset: 0, Dst: make([]byte, 100)},
		{Key: kl, Offset: 200, Dst: make([]byte, 100)},
		{Key: kl, Offset: 4096, Dst: nil}, // zero bytes: nothing to read, nothing refused
	}
	if guarded {
		reads = append(reads, KeyRead{Key: kd, Offset: 0, Dst: append([]byte(nil), sentinel...)})
	}
	errs := make([]error, len(reads))
	var mu sync.Mutex
	ab.GetMany(ctx, reads, 2, func(i int, err error) {
		mu.Lock()
		errs[i] = err
		mu.Unlock()
	})
	assert.NoError(t, errs[0])
	assert.Equal(t, src.Bytes()[:100], reads[0].Dst)
	assert.ErrorIs(t, errs[1], ErrOutOfRange)
	assert.Equal(t, sentinel, reads[1].Dst, "a refused read wrote into its destination")
	assert.ErrorIs(t, errs[2], ErrInvalidRemoteKey)
	assert.NoError(t, errs[3])
	assert.Equal(t, src.Bytes()[200:300], reads[3].Dst)
	assert.NoError(t, errs[4])
	if guarded {
		assert.ErrorIs(t, errs[5], ErrRemoteKeyRevoked)
		assert.Equal(t, sentinel, reads[5].Dst)
	}
	require.NoError(t, live.Unregister(ctx))
}

// TestGetManyCanceled: a context that ends mid-batch fails the reads not yet done with its
// error, and GetMany still returns only once nothing writes any destination.
func TestGetManyCanceled(t *testing.T) {
	ctx := testContext(t)
	a, b, ab := enginePair(t, nil)
	skipIfReplyBroken(t, a)
	reg, k, reads := blockReads(t, b, 41)
	cctx, cancel := context.WithCancel(ctx)
	var ok, canceled, other int
	ab.GetMany(cctx, reads, 4, func(i int, err error) {
		switch {
		case err == nil:
			if ok++; ok == 100 {
				cancel()
			}
		case errors.Is(err, context.Canceled):
			canceled++
		default:
			other++
			t.Errorf("read %d: %v", i, err)
		}
	})
	cancel()
	assert.GreaterOrEqual(t, ok, 100)
	assert.Positive(t, canceled, "no read was canceled: the batch finished before the cancel")
	assert.Equal(t, len(reads), ok+canceled+other)
	// The connection still works afterwards.
	dst := make([]byte, 10)
	require.NoError(t, ab.GetKey(ctx, dst, k, 0))
	require.NoError(t, reg.Unregister(ctx))
}

// TestGetManyEngineClosing: closing the engine under a running batch ends every read (with
// an error for those it cut short) and GetMany returns.
func TestGetManyEngineClosing(t *testing.T) {
	a, b, ab := enginePair(t, nil)
	skipIfReplyBroken(t, a)
	_, _, reads := blockReads(t, b, 51)
	var n, failed int
	ab.GetMany(testContext(t), reads, 4, func(i int, err error) {
		if n++; n == 50 {
			go a.Close(context.Background())
		}
		if err != nil {
			failed++
		}
	})
	assert.Equal(t, len(reads), n)
	assert.Positive(t, failed)
}

// blockReads registers 16 MiB on the owner engine and returns 4,096 reads of 4 KiB covering it.
func blockReads(t *testing.T, owner *Engine, seed uint64) (*Registration, *RegionKey, []KeyRead) {
	t.Helper()
	src := allocFilled(t, 16<<20, seed)
	reg, err := owner.Register(testContext(t), src.Bytes())
	require.NoError(t, err)
	k, err := ParseRegionKey(reg.RemoteKey())
	require.NoError(t, err)
	reads := make([]KeyRead, 4096)
	for i := range reads {
		reads[i] = KeyRead{Key: k, Offset: uint64(i) * 4096, Dst: make([]byte, 4096)}
	}
	return reg, k, reads
}

// TestGetManyVectorOutcomes: reads posted together in one vectored request each get their own
// outcome from the owner (served, revoked key, range outside the registration the owner
// checked), small and large replies (eager and rendezvous) land in place, and a read above the
// vector bound goes alone.
func TestGetManyVectorOutcomes(t *testing.T) {
	ctx := testContext(t)
	a, b, _ := enginePair(t, nil)
	skipIfReplyBroken(t, a)
	ab, err := a.Connect(ctx, b.Address(), ConnectOptions{VectoredGet: true})
	require.NoError(t, err)
	if m, _ := ab.RMAMode(ctx); m != RMAGuarded {
		t.Skipf("this endpoint resolves to %v: vectored requests are the guarded path's", m)
	}
	src, live, kl, kd := liveAndRevoked(t, b, 4<<20, 61)
	sk, err := ParseSealedKey(live.RemoteKey())
	require.NoError(t, err)
	sk.Length *= 2 // claims more than the owner registered: only the owner can tell
	kw, err := ParseRegionKey(AppendSealedKey(nil, sk))
	require.NoError(t, err)

	sentinel := bytes.Repeat([]byte{0x5A}, 64<<10)
	type want struct {
		err error
		off int
	}
	var reads []KeyRead
	var wants []want
	add := func(k *RegionKey, off, n int, w error) {
		dst := append([]byte(nil), sentinel[:min(n, len(sentinel))]...)
		if n > len(sentinel) {
			dst = make([]byte, n)
		}
		reads = append(reads, KeyRead{Key: k, Offset: uint64(off), Dst: dst})
		wants = append(wants, want{w, off})
	}
	for i := 0; i < 12; i++ {
		switch i % 4 {
		case 0, 1:
			add(kl, i*4096, 4096, nil)
		case 2:
			add(kd, i*4096, 4096, ErrRemoteKeyRevoked)
		case 3:
			add(kw, 4<<20+i*4096, 4096, ErrOutOfRange)
		}
	}
	for i := 0; i < 8; i++ {
		add(kl, 1<<20+i*(64<<10), 64<<10, nil) // a vector whose reply arrives by rendezvous
	}
	add(kl, 2<<20, 1<<20, nil) // above the vector bound: alone
	errs := make([]error, len(reads))
	ab.GetMany(ctx, reads, 64, func(i int, err error) { errs[i] = err })
	for i, w := range wants {
		if w.err == nil {
			require.NoError(t, errs[i], "read %d", i)
			require.Equal(t, src.Bytes()[w.off:w.off+len(reads[i].Dst)], reads[i].Dst, "read %d", i)
			continue
		}
		require.ErrorIs(t, errs[i], w.err, "read %d", i)
		require.Equal(t, sentinel[:len(reads[i].Dst)], reads[i].Dst, "refused read %d wrote into its destination", i)
	}
	require.NoError(t, live.Unregister(ctx))
}

// liveAndRevoked registers n bytes twice on the owner engine and revokes the second
// registration: the memory, the live registration and the keys of both.
func liveAndRevoked(t *testing.T, owner *Engine, n int, seed uint64) (*Memory, *Registration, *RegionKey, *RegionKey) {
	t.Helper()
	ctx := testContext(t)
	src := allocFilled(t, n, seed)
	live, err := owner.Register(ctx, src.Bytes())
	require.NoError(t, err)
	dead, err := owner.Register(ctx, src.Bytes())
	require.NoError(t, err)
	kl, err := ParseRegionKey(live.RemoteKey())
	require.NoError(t, err)
	kd, err := ParseRegionKey(dead.RemoteKey())
	require.NoError(t, err)
	require.NoError(t, dead.Unregister(ctx))
	return src, live, kl, kd
}

// TestRegisterMany: regions registered in one call each get their own key (a revoked one does not
// read another's bytes), and an empty region fails alone.
func TestRegisterMany(t *testing.T) {
	ctx := testContext(t)
	a, b, ab := enginePair(t, nil)
	skipIfReplyBroken(t, a)
	src := allocFilled(t, 3*4096, 71)
	mems := [][]byte{src.Bytes()[:4096], nil, src.Bytes()[4096:8192], src.Bytes()[8192:]}
	regs, errs := b.RegisterMany(ctx, mems)
	require.Len(t, regs, 4)
	require.ErrorIs(t, errs[1], StatusInvalidParam)
	assert.Nil(t, regs[1])
	keys := map[string]bool{}
	for _, i := range []int{0, 2, 3} {
		require.NoError(t, errs[i])
		keys[string(regs[i].RemoteKey())] = true
		dst := make([]byte, 4096)
		require.NoError(t, ab.Get(ctx, dst, regs[i].Addr(), regs[i].RemoteKey()))
		require.Equal(t, mems[i], dst)
	}
	assert.Len(t, keys, 3, "the registrations share a key")
	require.NoError(t, regs[2].Unregister(ctx))
	if m, _ := ab.RMAMode(ctx); m == RMAGuarded {
		err := ab.Get(ctx, make([]byte, 10), regs[2].Addr(), regs[2].RemoteKey())
		require.ErrorIs(t, err, ErrRemoteKeyRevoked)
	}
	require.NoError(t, ab.Get(ctx, make([]byte, 10), regs[3].Addr(), regs[3].RemoteKey()))
	require.NoError(t, regs[0].Unregister(ctx))
	require.NoError(t, regs[3].Unregister(ctx))
}
