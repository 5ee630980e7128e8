//go:build cgo && linux

package velo

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/push"
	"github.com/velo-go/velo/velo/rendezvous/rdma"
)

// Push over the real UCX transport (UCX_TLS=tcp here: the guarded PUT; rc/dc on InfiniBand:
// ucp_put_nbx and a flush). The suite links velo's static UCX (make test-rdma-registry), or runs
// where VELO_UCX_TRUST_NETWORK allows a stock UCX.

func ucxPushPair(t *testing.T) (recv, writer *Velo) {
	t.Helper()
	recv, writer = ucxNode(t), ucxNode(t)
	ctx := tctx(t)
	require.NoError(t, recv.RegisterPeer(ctx, writer.PeerInfo()))
	require.NoError(t, writer.RegisterPeer(ctx, recv.PeerInfo()))
	return recv, writer
}

// TestPushOverUCXTransport: puts of 1 KiB to 64 MiB land byte for byte on the RDMA path, the guard bytes
// around the grant stay, both sides count rdma/ok, and once the grant is revoked its key writes
// nothing and nothing stays registered.
func TestPushOverUCXTransport(t *testing.T) {
	recv, writer := ucxPushPair(t)
	f := newPushFixture(t, recv, writer, 64<<20+8192, GrantOptions{})
	require.True(t, f.region.Pinned(), "the region is pinned: %s", f.region.Reason())
	sizes := []int{1 << 10, 64 << 10, 1<<20 + 3, 8 << 20, 64 << 20}
	for i, n := range sizes {
		require.NoError(t, f.put(t, i*1021, payload(n, uint64(i)), &PutOptions{Notify: true}), "%d bytes", n)
		<-f.grant.Notifications()
		f.check(t, "after a put")
	}
	assert.Equal(t, float64(len(sizes)), pushPath(t, writer, "writer", metrics.PathRDMA, metrics.ReasonOK))
	assert.Equal(t, 1.0, pushPath(t, recv, "receiver", metrics.PathRDMA, metrics.ReasonOK))
	assert.Equal(t, 1, recv.RDMAStats().LeaseRegistrations, "one write-only registration for the grant's one range")

	require.NoError(t, f.grant.Revoke(tctx(t)))
	err := f.put(t, 0, payload(4096, 9), nil)
	require.ErrorIs(t, err, ErrGrantEnded)
	t.Logf("%v", err)
	<-f.grant.Done()
	f.check(t, "after the revocation")
	eventually(t, "the grant's registration gone", func() bool { return recv.RDMAStats().LeaseRegistrations == 0 })
}

// TestPushNotificationsOverUCXTransport is TestPushNotificationsAfterData on the RDMA path.
func TestPushNotificationsOverUCXTransport(t *testing.T) {
	for _, size := range []int{64 << 10, 1 << 10} {
		t.Run(sizeName(size), func(t *testing.T) {
			recv, writer := ucxPushPair(t)
			testPushNotifications(t, recv, writer, metrics.PathRDMA, size)
		})
	}
}

// TestPushSmallNotifiedPutsTravelInlineOverUCX is testPushInline on the RDMA path: the message of
// a notified small put goes on the UCX transport, beside the writes.
func TestPushSmallNotifiedPutsTravelInlineOverUCX(t *testing.T) {
	recv, writer := ucxPushPair(t)
	frames := func() float64 {
		return metric(t, recv, "velo_ucx_transport_frames_total", map[string]string{"direction": "received"})
	}
	before := frames()
	f := testPushInline(t, recv, writer, metrics.PathRDMA, metrics.ReasonOK)
	require.True(t, f.region.Pinned(), "the region is pinned: %s", f.region.Reason())
	assert.GreaterOrEqual(t, frames()-before, float64(len(inlineSizes)), "the inline puts came as UCX frames")
}

// TestPushUCXTransportToPlainRegion: a region in plain memory is written by chunks (reason not_pinned) even
// between two instances that can do RDMA.
func TestPushUCXTransportToPlainRegion(t *testing.T) {
	recv, writer := ucxPushPair(t)
	mem := make([]byte, 1<<20)
	g := rdma.PlainRegion(mem, metrics.ReasonNotPinned)
	gr, err := recv.GrantWrite(tctx(t), writer.ID(), g, GrantOptions{})
	require.NoError(t, err)
	src := payload(300<<10, 4)
	require.NoError(t, writer.Put(tctx(t), gr.Handle(), 100, src, &PutOptions{Notify: true}))
	<-gr.Notifications()
	require.Equal(t, src, mem[100:100+len(src)])
	assert.Equal(t, 1.0, pushPath(t, writer, "writer", metrics.PathChunked, metrics.ReasonNotPinned))
}

// TestPushNotificationTravelsWithTheWrites: the notifications of a grant written by RDMA go on
// the UCX transport the writes use (the receiver counts one more UCX frame received per notified
// put), not on the TCP control plane, and still arrive after their data, in order.
func TestPushNotificationTravelsWithTheWrites(t *testing.T) {
	recv, writer := ucxPushPair(t)
	f := newPushFixture(t, recv, writer, 1<<20, GrantOptions{})
	require.True(t, f.region.Pinned(), "the region is pinned: %s", f.region.Reason())
	frames := func() float64 {
		return metric(t, recv, "velo_ucx_transport_frames_total", map[string]string{"direction": "received"})
	}
	require.NoError(t, f.put(t, 0, payload(4096, 1), nil)) // acquires the grant: its messages go by TCP
	before := frames()
	const puts, size = 8, push.DefaultInlineMax + 1 // written by RDMA, then notified
	for i := range puts {
		require.NoError(t, f.put(t, i*size, payload(size, uint64(10+i)), &PutOptions{Notify: true, Payload: []byte{byte(i)}}))
	}
	assert.GreaterOrEqual(t, frames()-before, float64(puts), "the receiver got fewer UCX frames than notifications")
	for i := range puts {
		nt := <-f.grant.Notifications()
		require.Equal(t, []byte{byte(i)}, nt.Payload, "in order")
	}
	f.check(t, "after the notified puts")
	assert.Equal(t, float64(puts+1), pushPath(t, writer, "writer", metrics.PathRDMA, metrics.ReasonOK))
}
