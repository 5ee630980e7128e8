//go:build cgo && linux

package ucxtransport

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/velo/transport"
)

// TestMemoryRMAHostMemory: transport.MemoryRMA with host memory, the memory type CUDA memory
// takes the same calls with. A region registered with its type is read whole and in ranges with
// typed GETs (GetMemory) and with a typed batch (ReadMany with Read.Memory), byte for byte;
// CopyMemory copies host memory; and nothing stays registered.
func TestMemoryRMAHostMemory(t *testing.T) {
	owner, consumer := rmaPair(t)
	var _ transport.MemoryRMA = owner.Transport
	require.True(t, owner.ReadsTypedMany())
	ctx := testCtx(t)
	mem := mapped(t, 1<<20)
	require.NoError(t, owner.CheckMemory(mem, transport.MemoryHost, -1))
	reg, err := owner.RegisterMemoryOf(mem, transport.MemoryHost)
	require.NoError(t, err)
	defer deregister(t, reg)

	dst := make([]byte, len(mem))
	require.NoError(t, consumer.GetMemory(ctx, owner.h.id, reg.Key(), 0, dst, transport.MemoryHost))
	require.Equal(t, mem, dst)

	reads := make([]transport.Read, 16)
	out := make([]byte, 16*4096)
	for i := range reads {
		reads[i] = transport.Read{Key: reg.Key(), Offset: uint64(i * 65536), Dst: out[i*4096 : (i+1)*4096], Memory: transport.MemoryHost}
	}
	var errs []error
	consumer.ReadMany(ctx, owner.h.id, reads, 8, func(i int, err error) { errs = append(errs, err) })
	require.Len(t, errs, len(reads))
	for i, err := range errs {
		require.NoError(t, err, "read %d", i)
	}
	for i := range reads {
		require.Equal(t, mem[i*65536:i*65536+4096], out[i*4096:(i+1)*4096], "read %d", i)
	}

	cp := make([]byte, 4096)
	require.NoError(t, consumer.CopyMemory(cp, transport.MemoryHost, mem[:4096], transport.MemoryHost))
	require.Equal(t, mem[:4096], cp)
	require.Error(t, consumer.CopyMemory(cp, transport.MemoryHost, mem[:10], transport.MemoryHost), "lengths differ")
}

// TestMemoryRMACUDARefusals: CUDA memory in a binary without CUDA is refused with an error
// matching errors.ErrUnsupported that names the tags, with CUDA on a machine without a driver
// with the driver's error; a memory type the transport does not know is refused; nothing is
// registered either way.
func TestMemoryRMACUDARefusals(t *testing.T) {
	owner, consumer := rmaPair(t)
	ctx := testCtx(t)
	mem := mapped(t, 4096)
	reg, err := owner.RegisterMemoryOf(mem, transport.MemoryHost)
	require.NoError(t, err)
	defer deregister(t, reg)

	errs := map[string]error{
		"CheckMemory":      owner.CheckMemory(mem, transport.MemoryCUDA, 0),
		"RegisterMemoryOf": second(owner.RegisterMemoryOf(mem, transport.MemoryCUDA)),
		"GetMemory":        consumer.GetMemory(ctx, owner.h.id, reg.Key(), 0, make([]byte, 16), transport.MemoryCUDA),
		"CopyMemory":       consumer.CopyMemory(make([]byte, 16), transport.MemoryCUDA, mem[:16], transport.MemoryHost),
	}
	for what, err := range errs {
		require.Error(t, err, what)
		if !ucx.CUDAEnabled() {
			require.ErrorIs(t, err, errors.ErrUnsupported, what)
			assert.Contains(t, err.Error(), "-tags cuda,ucx_static", what)
		}
	}
	for _, err := range []error{
		owner.CheckMemory(mem, 9, 0),
		second(owner.RegisterMemoryOf(mem, 9)),
		consumer.GetMemory(ctx, owner.h.id, reg.Key(), 0, make([]byte, 16), 9),
	} {
		require.ErrorContains(t, err, "not a memory type")
	}
	var bad error
	consumer.ReadMany(ctx, owner.h.id, []transport.Read{{Key: reg.Key(), Dst: make([]byte, 16), Memory: 9}}, 1, func(_ int, err error) { bad = err })
	require.ErrorContains(t, bad, "not a memory type")
}

func second[T any](_ T, err error) error { return err }
