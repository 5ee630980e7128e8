package velo

import (
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/metrics"
)

// Memory descriptions that describe no memory are refused before anything is asked of anyone,
// on every call that takes one; CUDA memory on an instance without the UCX transport is
// unsupported, and says which build and option have it.
func TestMemoryRefusals(t *testing.T) {
	ctx := tctx(t)
	a, b := pair(t)
	h, err := b.StageData(ctx, payload(4096, 1))
	require.NoError(t, err)

	bad := map[string]Memory{
		"zero length":      CUDAMemory(0x7f0000000000, 0, 0),
		"negative length":  CUDAMemory(0x7f0000000000, -1, 0),
		"no address":       CUDAMemory(0, 4096, 0),
		"wraps around":     CUDAMemory(math.MaxUint64-100, 4096, 0),
		"negative device":  CUDAMemory(0x7f0000000000, 4096, -1),
		"unknown type":     {Addr: 0x1000, Len: 1, Type: 7},
		"empty host":       HostMemory(nil),
		"host, no slice":   {Addr: 0x1000, Len: 16, Type: MemoryHost},
		"host, Len edited": func() Memory { m := HostMemory(make([]byte, 8)); m.Len = 16; return m }(),
	}
	for name, m := range bad {
		t.Run(name, func(t *testing.T) {
			err := a.CheckMemory(m)
			require.ErrorIs(t, err, ErrBadMemory)
			_, err = a.WrapRegionMemory(m)
			require.ErrorIs(t, err, ErrBadMemory)
			_, err = a.GetIntoMemory(ctx, h, m)
			require.ErrorIs(t, err, ErrBadMemory)
			require.ErrorIs(t, a.PutMemory(ctx, GrantHandle{}, 0, m, nil), ErrBadMemory)
			t.Log(err)
		})
	}

	// CUDA memory on an instance without the UCX transport: unsupported, naming the tags and the
	// option, and nothing fetched (the owner's payload keeps its reference).
	dev := CUDAMemory(0x7f0000000000, 4096, 0)
	for what, err := range map[string]error{
		"CheckMemory":      a.CheckMemory(dev),
		"WrapRegionMemory": second(a.WrapRegionMemory(dev)),
		"GetIntoMemory":    second(a.GetIntoMemory(ctx, h, dev)),
		"PutMemory":        a.PutMemory(ctx, GrantHandle{}, 0, dev, nil),
	} {
		require.ErrorIs(t, err, errors.ErrUnsupported, what)
		require.ErrorIs(t, err, ErrUnsupportedMemory, what)
		assert.Contains(t, err.Error(), "-tags cuda,ucx_static", what)
		assert.Contains(t, err.Error(), "WithUCXTransport", what)
	}
	res := a.GetBatch(ctx, []GetRequest{GetRequestInto(h, dev)}, nil)
	require.ErrorIs(t, res[0].Err, errors.ErrUnsupported)
	rg := []Range{RangeInto(0, 4096, dev)}
	require.Error(t, a.ReadRanges(ctx, h, rg))
	require.ErrorIs(t, rg[0].Err, errors.ErrUnsupported)
	md, err := a.Metadata(ctx, h)
	require.NoError(t, err)
	assert.Equal(t, 0, md.Leases, "no lease left behind")
	assert.Equal(t, 0.0, pathCount(t, a, metrics.PathChunked, metrics.ReasonDeviceBounce), "a refused get is no transfer")

	// An entry or range built from a bad description fails alone.
	res = a.GetBatch(ctx, []GetRequest{GetRequestInto(h, CUDAMemory(0, 1, 0))}, nil)
	require.ErrorIs(t, res[0].Err, ErrBufferSize)
}

func second[T any](_ T, err error) error { return err }

// Host memory described with HostMemory and read without an RDMA registry: the chunked path,
// byte for byte, and through the bounce buffers when the test asks the device path of it.
func TestMemoryHostWithoutRDMA(t *testing.T) {
	ctx := tctx(t)
	a, b := pair(t)
	src := payload(5<<20+17, 2)
	g, err := b.WrapRegionMemory(HostMemory(src))
	require.NoError(t, err)
	defer g.Free()
	assert.False(t, g.Pinned())
	assert.Equal(t, metrics.ReasonNotConfigured, g.Reason())
	h, err := b.StageRegion(ctx, g)
	require.NoError(t, err)

	for _, bounce := range []bool{false, true} {
		dst := make([]byte, len(src))
		m := HostMemory(dst)
		m.bounce = bounce
		l, err := a.GetIntoMemory(ctx, h, m)
		require.NoError(t, err)
		require.NoError(t, l.Detach(ctx))
		require.Equal(t, metrics.PathChunked, l.Path)
		require.Equal(t, src, dst, "bounce=%v", bounce)
		if bounce {
			assert.Equal(t, metrics.ReasonDeviceBounce, l.Reason)
		} else {
			assert.Equal(t, metrics.ReasonNotConfigured, l.Reason)
		}
	}
	assert.Equal(t, 1.0, pathCount(t, a, metrics.PathChunked, metrics.ReasonDeviceBounce))
	assert.Equal(t, 1.0, pathCount(t, a, metrics.PathChunked, metrics.ReasonNotConfigured))
}
