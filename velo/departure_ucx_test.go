//go:build cgo && linux

package velo

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/transport/ucxtransport"
)

// With TCP and UCX, each transport reports the departing peer lost as its connection closes; the
// peer still reads departed, in the down event and in Peers, whichever transport spoke last.
func TestCleanShutdownOverTCPAndUCXReadsAsDeparted(t *testing.T) {
	node := func() *Velo {
		u, err := ucxtransport.New(ucxtransport.Config{TLS: "tcp", Logger: quietLogger()})
		require.NoError(t, err)
		return newInstance(t, WithTransport(mustTCP(t)), WithUCXTransport(u))
	}
	a, b := node(), node()
	require.NoError(t, a.RegisterPeer(tctx(t), b.PeerInfo()))
	require.NoError(t, b.RegisterPeer(tctx(t), a.PeerInfo()))
	h, err := b.StageDataPinned(tctx(t), payload(1<<20, 1))
	require.NoError(t, err)
	l, err := a.Get(tctx(t), h) // the UCX endpoints are up
	require.NoError(t, err)
	require.NoError(t, l.Release(tctx(t)))
	events := a.WatchPeers(tctx(t))

	require.NoError(t, b.Shutdown(tctx(t)))
	require.NoError(t, b.Close())

	waitEvent(t, events, PeerDraining, b.ID())
	assert.Equal(t, DepartedReason, waitEvent(t, events, PeerDown, b.ID()).Peer.Err)
	// The UCX transport's report (it counts it just before) may come after TCP's; Peers keeps
	// the departure.
	eventually(t, "UCX to report the peer down too", func() bool {
		return metric(t, a, "velo_ucx_transport_peer_down_total", nil) >= 1
	})
	assert.Equal(t, DepartedReason, peerSeen(t, a, b.ID()).Err)
}
