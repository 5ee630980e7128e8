package rdma_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/rendezvous"
	"github.com/velo-go/velo/velo/rendezvous/rdma"
	"github.com/velo-go/velo/velo/transport"
)

// The registry's memory types below the seam, on the in-process RMA (which registers host
// memory only, as a transport without transport.MemoryRMA does). The same paths run over the
// real UCX transport in velo's TestRDMAMemory* suite.

func regionSlot(t *testing.T, g *rdma.Region) rendezvous.Slot {
	t.Helper()
	o, err := g.Stage()
	require.NoError(t, err)
	t.Cleanup(o.OnFree)
	return rendezvous.Slot{ID: 7, Data: g.Bytes(), Opts: o, Lease: rendezvous.LeaseInfo{ID: 9, Consumer: 3}}
}

// A consumer offers version 3, and version 2 to an owner that refused version 3; an owner answers
// each offer with the descriptor version its consumer reads, naming the memory type in version 3.
func TestMemoryOfferAndDescriptorVersions(t *testing.T) {
	r, _ := newRegistry(t, rdma.Config{})
	c := r.Consumer()
	offer, err := c.Offer(5)
	require.NoError(t, err)
	assert.Equal(t, []byte{wire.RDMAOfferVersion}, offer)
	c.OfferRefused(5)
	legacy, err := c.Offer(5)
	require.NoError(t, err)
	assert.Equal(t, []byte{wire.RDMALegacyOfferVersion}, legacy)
	other, err := c.Offer(6)
	require.NoError(t, err)
	assert.Equal(t, offer, other, "only the owner that refused gets version 2")

	mem := make([]byte, 8192)
	g, err := r.WrapRegionMemory(mem, rendezvous.Memory{Type: transport.MemoryHost, Device: -1}, -1)
	require.NoError(t, err)
	defer g.Free()
	sl := regionSlot(t, g)
	for _, o := range []struct {
		offer []byte
		desc  uint8
	}{{offer, wire.RDMADescriptorMemoryVersion}, {legacy, wire.RDMADescriptorVersion}} {
		desc, end, reason, err := r.Owner().Serve(context.Background(), sl, o.offer)
		require.NoError(t, err)
		require.Equal(t, metrics.ReasonOK, reason)
		d, err := wire.DecodeRDMADescriptor(desc)
		require.NoError(t, err)
		assert.Equal(t, o.desc, d.Version)
		assert.Equal(t, wire.RDMAMemoryHost, d.Memory)
		end()
	}
}

// Memory taking the device path is not registered on a transport that registers host memory
// only: the lease is refused with device_bounce and nothing stays registered; CUDA memory is
// refused at WrapRegionMemory with an error matching errors.ErrUnsupported; a typed read on
// such a transport fails alone.
func TestMemoryTypedOnAHostOnlyTransport(t *testing.T) {
	r, rt := newRegistry(t, rdma.Config{})
	mem := make([]byte, 4096)
	g, err := r.WrapRegionMemory(mem, rendezvous.Memory{Type: transport.MemoryHost, Device: -1, Bounce: true}, -1)
	require.NoError(t, err)
	defer g.Free()
	assert.True(t, g.Memory().Typed())
	sl := regionSlot(t, g)
	_, end, reason, err := r.Owner().Serve(context.Background(), sl, wire.AppendRDMAOffer(nil))
	require.Error(t, err)
	assert.Nil(t, end)
	assert.Equal(t, metrics.ReasonDeviceBounce, reason)
	assert.Zero(t, rt.LiveRegistrations())
	assert.Zero(t, r.Stats().LeaseRegistrations)
	assert.Equal(t, transport.MemoryHost, sl.Opts.Memory.Type)
	assert.True(t, sl.Opts.Memory.Bounce, "the staging carries the region's memory")

	_, err = r.WrapRegionMemory(mem, rendezvous.Memory{Type: transport.MemoryCUDA, Device: 0}, 0)
	require.ErrorIs(t, err, errors.ErrUnsupported)
	require.ErrorIs(t, err, rdma.ErrUnsupportedMemory)
	assert.Contains(t, err.Error(), "-tags cuda,ucx_static")
	require.ErrorIs(t, r.CopyMemory(mem, transport.MemoryCUDA, mem, transport.MemoryHost), errors.ErrUnsupported)

	var got []error
	r.Consumer().GetMany(context.Background(), 2, []rendezvous.RemoteRead{{
		Descriptor: mustDescriptor(t), Dst: mem[:16], Memory: rendezvous.Memory{Type: transport.MemoryCUDA},
	}}, 4, func(i int, err error) { got = append(got, err) })
	require.Len(t, got, 1)
	require.ErrorIs(t, got[0], rdma.ErrUnsupportedMemory)
	require.ErrorIs(t, r.Consumer().GetMemory(context.Background(), 2, mustDescriptor(t), mem[:16], transport.MemoryCUDA), errors.ErrUnsupported)
}

func mustDescriptor(t *testing.T) []byte {
	t.Helper()
	d, err := wire.AppendRDMADescriptor(nil, wire.RDMADescriptor{Version: wire.RDMADescriptorMemoryVersion, Memory: wire.RDMAMemoryCUDA, Key: []byte{1, 2, 3}})
	require.NoError(t, err)
	return d
}
