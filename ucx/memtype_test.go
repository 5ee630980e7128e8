//go:build cgo && linux

package ucx

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// liveRegistrations is how many registrations e holds.
func liveRegistrations(e *Engine) int {
	e.wmu.Lock()
	defer e.wmu.Unlock()
	return len(e.regs)
}

// TestMemoryHostThroughTypedPaths registers host memory as MemoryHost (ucp_mem_map with the
// memory type, the guard slot with it) and reads it back into host destinations named as
// MemoryHost, on the guarded path (eager and rendezvous replies, single and vectored) and the
// direct path: every byte must match. It is the code a CUDA buffer takes, with host memory.
func TestMemoryHostThroughTypedPaths(t *testing.T) {
	sizes := []int{1, 100, 4096, 65536 + 3, 1 << 20, 8 << 20}
	for _, mode := range []RMAMode{RMAGuarded, RMADirect} {
		t.Run(mode.String(), func(t *testing.T) {
			ctx := testContext(t)
			a, b := newTestEngine(t, "a", func(c *EngineConfig) { c.RMA = mode }), newTestEngine(t, "b", func(c *EngineConfig) { c.RMA = mode })
			if mode == RMAGuarded {
				skipIfReplyBroken(t, a)
			}
			ab, err := a.Connect(ctx, b.Address(), ConnectOptions{VectoredGet: true})
			require.NoError(t, err)
			src := allocFilled(t, 16<<20, 41)
			reg, err := b.RegisterWith(ctx, src.Bytes(), RegisterOptions{MemoryType: MemoryHost})
			require.NoError(t, err)
			require.Equal(t, MemoryHost, reg.MemoryType())
			key, err := ParseRegionKey(reg.RemoteKey())
			require.NoError(t, err)
			require.Equal(t, MemoryHost, key.MemoryType(), "the memory type UCX packed into the key")

			host := GetOptions{DstMemory: MemoryHost}
			if mode == RMADirect && softwareRMARefused(t, ab) {
				// The guarded UCX refuses software RMA: the typed direct GET is refused like
				// the plain one, and writes nothing.
				dst := make([]byte, 4096)
				err := ab.GetWith(ctx, dst, reg.Addr(), reg.RemoteKey(), host)
				require.ErrorIs(t, err, StatusRejected)
				require.Equal(t, make([]byte, 4096), dst)
				return
			}
			dstMem := allocFilled(t, 16<<20, 42)
			for _, n := range sizes {
				off := (16<<20 - n) / 3
				dst := dstMem.Bytes()[:n]
				require.NoError(t, ab.GetWith(ctx, dst, reg.Addr()+uint64(off), reg.RemoteKey(), host), "%d bytes", n)
				require.Equal(t, digest(src.Bytes()[off:off+n]), digest(dst), "%d bytes read back", n)
				// The key-based form too, into Go memory.
				heap := make([]byte, n)
				require.NoError(t, ab.GetKeyWith(ctx, heap, key, uint64(off), host), "%d bytes (GetKeyWith)", n)
				require.Equal(t, digest(src.Bytes()[off:off+n]), digest(heap), "%d bytes read back (GetKeyWith)", n)
			}

			// A batch: small reads (vectored on the guarded path) and large ones (alone).
			var reads []KeyRead
			for i := 0; i < 60; i++ {
				n := 4096
				if i%8 == 7 {
					n = 512 << 10
				}
				reads = append(reads, KeyRead{Key: key, Offset: uint64(i) * (256 << 10), Dst: make([]byte, n), DstMemory: MemoryHost})
			}
			seen := make([]int, len(reads))
			ab.GetMany(ctx, reads, 16, func(i int, err error) {
				seen[i]++
				assert.NoError(t, err, "read %d", i)
			})
			for i, r := range reads {
				require.Equal(t, 1, seen[i], "read %d reported %d times", i, seen[i])
				want := src.Bytes()[r.Offset : r.Offset+uint64(len(r.Dst))]
				require.Equal(t, digest(want), digest(r.Dst), "read %d", i)
			}
			require.NoError(t, reg.Unregister(ctx))
			require.Zero(t, liveRegistrations(b))
		})
	}
}

// TestMemoryCUDARefusedWithoutCUDA: a binary built without the cuda tag refuses CUDA memory
// everywhere with an error matching errors.ErrUnsupported that names the build to use, and
// nothing stays registered or is sent.
func TestMemoryCUDARefusedWithoutCUDA(t *testing.T) {
	if CUDAEnabled() {
		t.Skip("built with -tags cuda: TestCUDABuildWithoutDevice covers this binary")
	}
	ctx := testContext(t)
	a, b := newTestEngine(t, "a", nil), newTestEngine(t, "b", nil)
	ab, err := a.Connect(ctx, b.Address(), ConnectOptions{})
	require.NoError(t, err)
	mem := allocFilled(t, 1<<20, 43)

	named := func(t *testing.T, err error) {
		t.Helper()
		require.Error(t, err)
		require.True(t, errors.Is(err, errors.ErrUnsupported), "%v does not match errors.ErrUnsupported", err)
		require.ErrorIs(t, err, ErrCUDANotBuilt)
		require.Contains(t, err.Error(), "-tags cuda,ucx_static")
		require.Contains(t, err.Error(), "make ucx-static-cuda")
	}

	reg, err := b.RegisterWith(ctx, mem.Bytes(), RegisterOptions{MemoryType: MemoryCUDA})
	named(t, err)
	require.Nil(t, reg)
	regs, errs := b.RegisterManyWith(ctx, [][]byte{mem.Bytes()[:4096], mem.Bytes()[4096:8192]}, RegisterOptions{MemoryType: MemoryCUDA, Access: AccessRead | AccessWrite})
	for i := range regs {
		require.Nil(t, regs[i])
		named(t, errs[i])
	}
	require.Zero(t, liveRegistrations(b), "a refused registration stays registered")

	// An unknown memory type is a parameter error, not a missing build.
	_, err = b.RegisterWith(ctx, mem.Bytes(), RegisterOptions{MemoryType: 9})
	require.ErrorIs(t, err, StatusInvalidParam)
	require.Zero(t, liveRegistrations(b))

	// A CUDA destination: refused before anything is sent.
	host, err := b.Register(ctx, mem.Bytes())
	require.NoError(t, err)
	served, refused := b.w.GuardStats()
	dst := make([]byte, 4096)
	named(t, ab.GetWith(ctx, dst, host.Addr(), host.RemoteKey(), GetOptions{DstMemory: MemoryCUDA}))
	key, err := ParseRegionKey(host.RemoteKey())
	require.NoError(t, err)
	var got error
	ab.GetMany(ctx, []KeyRead{{Key: key, Dst: dst, DstMemory: MemoryCUDA}}, 4, func(i int, err error) { got = err })
	named(t, got)
	s2, r2 := b.w.GuardStats()
	require.Equal(t, served, s2, "a refused GET reached the owner")
	require.Equal(t, refused, r2)
	require.Equal(t, make([]byte, 4096), dst)
	require.NoError(t, host.Unregister(ctx))

}

// TestVectoredReplyServesOneMemoryType: a vectored guarded reply is one message from one kind of
// memory, so the owner serves the reads of the first served read's memory type and refuses the
// others with UCS_ERR_UNSUPPORTED (never sending from them). Here a second registration's guard
// slot is marked CUDA by hand, which only the owner's table sees.
func TestVectoredReplyServesOneMemoryType(t *testing.T) {
	ctx := testContext(t)
	a, b := newTestEngine(t, "a", func(c *EngineConfig) { c.RMA = RMAGuarded }), newTestEngine(t, "b", func(c *EngineConfig) { c.RMA = RMAGuarded })
	skipIfReplyBroken(t, a)
	ab, err := a.Connect(ctx, b.Address(), ConnectOptions{VectoredGet: true})
	require.NoError(t, err)
	src1, src2 := allocFilled(t, 1<<20, 51), allocFilled(t, 1<<20, 52)
	reg1, err := b.RegisterWith(ctx, src1.Bytes(), RegisterOptions{MemoryType: MemoryHost})
	require.NoError(t, err)
	reg2, err := b.RegisterWith(ctx, src2.Bytes(), RegisterOptions{MemoryType: MemoryHost})
	require.NoError(t, err)
	b.lock()
	b.w.guardSetMemType(reg2.slot, MemoryCUDA.ucs())
	b.wmu.Unlock()
	k1, err := ParseRegionKey(reg1.RemoteKey())
	require.NoError(t, err)
	k2, err := ParseRegionKey(reg2.RemoteKey())
	require.NoError(t, err)
	reads := []KeyRead{
		{Key: k1, Offset: 0, Dst: make([]byte, 4096)},
		{Key: k2, Offset: 0, Dst: make([]byte, 4096)},
		{Key: k1, Offset: 8192, Dst: make([]byte, 4096)},
	}
	errs := make([]error, len(reads))
	ab.GetMany(ctx, reads, 16, func(i int, err error) { errs[i] = err })
	require.NoError(t, errs[0])
	require.NoError(t, errs[2])
	require.Equal(t, src1.Bytes()[:4096], reads[0].Dst)
	require.Equal(t, src1.Bytes()[8192:8192+4096], reads[2].Dst)
	require.ErrorIs(t, errs[1], StatusUnsupported)
	require.Contains(t, errs[1].Error(), "one memory type per reply")
	require.Equal(t, make([]byte, 4096), reads[1].Dst, "a refused read was written")
	require.NoError(t, reg1.Unregister(ctx))
	require.NoError(t, reg2.Unregister(ctx))
}
