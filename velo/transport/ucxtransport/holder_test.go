//go:build cgo && linux

package ucxtransport

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/velo/transport"
)

// TestKeysBoundToTheirConsumer: keys registered for a peer (RegisterMemoryFor,
// RegisterMemoryWritableFor) read and write for that peer alone. The consumer's very first
// operations go out before the owner has an endpoint of its own back to it (no endpoint exists
// until they open one), so the owner answers some of them "not yet connected back" and the
// transport tries them again: every read and write succeeds, single and batched. A third
// transport that the owner also knows, using the same keys, reads and writes nothing, and each of
// its operations fails with the owner's refusal.
func TestKeysBoundToTheirConsumer(t *testing.T) {
	owner, consumer := rmaPair(t)
	stranger := newNode(t, nil)
	link(t, owner, stranger)
	if consumer.rmaMode(t, owner.h.id) != ucx.RMAGuarded || stranger.rmaMode(t, owner.h.id) != ucx.RMAGuarded {
		t.Skip("the endpoints' RMA lanes are hardware-keyed: the HCA checks keys and range, not the requester")
	}
	// rmaMode opened the endpoints: a fresh consumer reads before the owner connects back.
	fresh := newNode(t, nil)
	link(t, owner, fresh)

	const n = 8
	mem := mapped(t, n*4096)
	regs, errs := owner.RegisterMemoryFor(fresh.h.id, [][]byte{mem})
	require.NoError(t, errs[0])
	key := regs[0].Key()
	reads := make([]transport.Read, n)
	for i := range reads {
		reads[i] = transport.Read{Key: key, Offset: uint64(i) * 4096, Dst: make([]byte, 4096)}
	}
	got := make([]error, n)
	fresh.ReadMany(testCtx(t), owner.h.id, reads, 16, func(i int, err error) { got[i] = err })
	for i := range reads {
		require.NoError(t, got[i], "the consumer's read %d", i)
		require.Equal(t, mem[i*4096:(i+1)*4096], reads[i].Dst, "the consumer's read %d", i)
	}
	one := make([]byte, 100)
	require.NoError(t, fresh.Get(testCtx(t), owner.h.id, key, 10, one))
	require.Equal(t, mem[10:110], one)

	sentinel := bytes.Repeat([]byte{0xC3}, 4096)
	dst := append([]byte(nil), sentinel...)
	err := stranger.Get(testCtx(t), owner.h.id, key, 0, dst)
	require.Error(t, err, "another peer read with the consumer's key")
	assert.True(t, errors.Is(err, ucx.ErrRemoteKeyRevoked) || errors.Is(err, ucx.StatusNotConnected), "not the owner's refusal: %v", err)
	assert.Equal(t, sentinel, dst, "a refused read wrote into its destination")
	stolen := []transport.Read{{Key: key, Dst: append([]byte(nil), sentinel...)}, {Key: key, Offset: 4096, Dst: append([]byte(nil), sentinel...)}}
	stranger.ReadMany(testCtx(t), owner.h.id, stolen, 16, func(i int, err error) {
		assert.Error(t, err, "another peer's batched read %d", i)
	})
	for i := range stolen {
		assert.Equal(t, sentinel, stolen[i].Dst, "another peer's batched read %d wrote into its destination", i)
	}
	deregister(t, regs[0])

	// A write grant's key: the writer writes, another peer does not.
	target := mapped(t, 4096)
	before := append([]byte(nil), target...)
	wreg, err := owner.RegisterMemoryWritableFor(fresh.h.id, target)
	require.NoError(t, err)
	var werr error
	stranger.WriteMany(testCtx(t), owner.h.id, []transport.Write{{Key: wreg.Key(), Offset: 0, Src: sentinel[:256]}}, 4, func(_ int, err error) { werr = err })
	require.Error(t, werr, "another peer wrote with the writer's key")
	require.Equal(t, before, target, "a refused write changed the target")
	werr = errors.New("no report")
	fresh.WriteMany(testCtx(t), owner.h.id, []transport.Write{{Key: wreg.Key(), Offset: 512, Src: sentinel[:256]}}, 4, func(_ int, err error) { werr = err })
	require.NoError(t, werr, "the writer's own write")
	require.Equal(t, sentinel[:256], target[512:768])
	deregister(t, wreg)
}
