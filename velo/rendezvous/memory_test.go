package rendezvous_test

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/rendezvous"
	"github.com/velo-go/velo/velo/transport"
)

// trackingClient offers a newer offer until an owner refuses it (as an owner of an earlier
// release answers an offer version it does not know), then the one that owner reads.
type trackingClient struct {
	client
	refused atomic.Int32
}

func (c *trackingClient) Offer(transport.InstanceID) ([]byte, error) {
	if c.refused.Load() > 0 {
		return []byte("offer-blob"), nil
	}
	return []byte("offer-v3"), nil
}

func (c *trackingClient) OfferRefused(transport.InstanceID) { c.refused.Add(1) }

// A consumer whose offer an owner refuses (decode_error) is told so, gets the bytes by chunks,
// and the next get reaches the RDMA path with the older offer.
func TestMemoryRefusedOfferFallsBackToTheOlderOne(t *testing.T) {
	f := newFake()
	cli := &trackingClient{client: client{f}}
	owner, cons := newNode(t, server{f}, nil), newNode(t, nil, cli)
	cons.register(t, owner)
	data := bytes.Repeat([]byte("gpu!"), 100_000)
	h, err := owner.rv.Stage(data, rendezvous.StageOptions{Pinned: pinnedIf(true)})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	l, err := cons.rv.Get(ctx, h)
	require.NoError(t, err)
	require.Equal(t, data, l.Bytes())
	assert.Equal(t, metrics.ReasonDecodeError, l.Reason)
	require.NoError(t, l.Detach(ctx))
	assert.Equal(t, int32(1), cli.refused.Load())

	l, err = cons.rv.Get(ctx, h)
	require.NoError(t, err)
	require.Equal(t, data, l.Bytes())
	assert.Equal(t, metrics.PathRDMA, l.Path)
	require.NoError(t, l.Release(ctx))
	assert.Equal(t, 1.0, cons.count(t, metrics.PathChunked, metrics.ReasonDecodeError))
	assert.Equal(t, 1.0, cons.count(t, metrics.PathRDMA, metrics.ReasonOK))
}

// A typed destination is offered RDMA only through a client that reads typed memory: this one
// does not, so the get goes by chunks through the consumer's bounce buffers (device_bounce), and
// a slot staged as typed memory counts device_bounce on the owner, which answers a consumer that
// does not know the reason with the one it replaces.
func TestMemoryTypedWithoutAMemoryClient(t *testing.T) {
	f := newFake()
	owner, cons := newNode(t, server{f}, nil), newNode(t, nil, client{f})
	cons.register(t, owner)
	data := bytes.Repeat([]byte("dev."), 300_000)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	h, err := owner.rv.Stage(data, rendezvous.StageOptions{Pinned: pinnedIf(true)})
	require.NoError(t, err)
	dst := make([]byte, len(data))
	l, err := cons.rv.GetIntoMemory(ctx, h, dst, rendezvous.Memory{Bounce: true})
	require.NoError(t, err)
	require.Equal(t, data, dst)
	assert.Equal(t, metrics.PathChunked, l.Path)
	assert.Equal(t, metrics.ReasonDeviceBounce, l.Reason)
	require.NoError(t, l.Detach(ctx))
	assert.Equal(t, 1.0, cons.count(t, metrics.PathChunked, metrics.ReasonDeviceBounce))
	assert.Equal(t, 1.0, owner.count(t, metrics.PathChunked, metrics.ReasonNoOffer))

	typed, err := owner.rv.Stage(data, rendezvous.StageOptions{Memory: rendezvous.Memory{Bounce: true}})
	require.NoError(t, err)
	l, err = cons.rv.Get(ctx, typed)
	require.NoError(t, err)
	require.Equal(t, data, l.Bytes())
	assert.Equal(t, metrics.ReasonNotPinned, l.Reason, "the fake offer is no version-3 offer: the reason it replaces")
	require.NoError(t, l.Release(ctx))
	assert.Equal(t, 1.0, owner.count(t, metrics.PathChunked, metrics.ReasonDeviceBounce))
}
