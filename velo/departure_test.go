package velo

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// peerSeen is p's entry in v.Peers().
func peerSeen(t *testing.T, v *Velo, p InstanceID) PeerStatus {
	t.Helper()
	st, ok := v.peerStatus(p)
	require.True(t, ok, "%v is not in Peers()", p)
	return st
}

// A peer that shuts down cleanly (Shutdown, then Close) reads as departed on the other side, in
// the down event and in Peers alike, and not as a lost connection: whether or not it had
// registered the watcher itself (a peer that only connected to it is told of the drain too).
func TestCleanShutdownReadsAsDeparted(t *testing.T) {
	for _, both := range []bool{false, true} {
		name := map[bool]string{false: "registered on one side", true: "registered both ways"}[both]
		t.Run(name, func(t *testing.T) {
			a, b := pair(t)
			if both {
				require.NoError(t, b.RegisterPeer(tctx(t), a.PeerInfo()))
			}
			require.NoError(t, b.RegisterHandler("echo", echo))
			_, err := a.Request(tctx(t), b.ID(), "echo", []byte("hi"))
			require.NoError(t, err)
			events := a.WatchPeers(tctx(t))

			require.NoError(t, b.Shutdown(tctx(t)))
			require.NoError(t, b.Close(), "Close after Shutdown")

			waitEvent(t, events, PeerDraining, b.ID())
			down := waitEvent(t, events, PeerDown, b.ID())
			assert.Equal(t, DepartedReason, down.Peer.Err, "the down event of a clean departure")
			st := peerSeen(t, a, b.ID())
			assert.Equal(t, StateDown, st.State)
			assert.Equal(t, DepartedReason, st.Err, "Peers after a clean departure")
			assert.NotContains(t, st.Err, "unreachable")
		})
	}
}

// A peer that goes without a drain (Close alone, as a crash would) is down with its transport's
// reason, and the down event carries the same text Peers shows.
func TestDownEventCarriesTheReasonPeersShows(t *testing.T) {
	a, b := pair(t)
	require.NoError(t, b.RegisterHandler("echo", echo))
	_, err := a.Request(tctx(t), b.ID(), "echo", nil)
	require.NoError(t, err)
	events := a.WatchPeers(tctx(t))
	require.NoError(t, b.Close())

	down := waitEvent(t, events, PeerDown, b.ID())
	require.NotEmpty(t, down.Peer.Err, "a down event without a reason")
	assert.Contains(t, down.Peer.Err, "peer unreachable")
	assert.Equal(t, down.Peer.Err, peerSeen(t, a, b.ID()).Err, "the event and Peers disagree on why")
}

// The first report that takes a peer down says why, and a later one — another transport losing
// the same peer, discovery seeing its entry go — does not rewrite it behind the event's back.
func TestTheFirstDownReportKeepsItsReason(t *testing.T) {
	a, b := pair(t)
	events := a.WatchPeers(tctx(t))
	h := &host{v: a}
	h.PeerDown(b.ID(), errors.New("tcp: peer unreachable: EOF"))
	h.PeerDown(b.ID(), errors.New("ucx: peer closed its transport: peer unreachable"))
	a.forget(b.ID(), "left the cluster")

	down := waitEvent(t, events, PeerDown, b.ID())
	assert.Equal(t, "tcp: peer unreachable: EOF", down.Peer.Err)
	assert.Equal(t, "tcp: peer unreachable: EOF", peerSeen(t, a, b.ID()).Err)
	select {
	case ev := <-events:
		t.Fatalf("a second event for a peer already down: %+v", ev)
	default:
	}

	// Registered again, it is up with no reason; the next departure has its own.
	require.NoError(t, a.RegisterPeer(tctx(t), b.PeerInfo()))
	waitEvent(t, events, PeerUp, b.ID())
	assert.Empty(t, peerSeen(t, a, b.ID()).Err)
	_, _, err := a.onDrainNotice(context.Background(), b.ID(), make([]byte, 8))
	require.NoError(t, err)
	h.PeerDown(b.ID(), errors.New("tcp: peer unreachable: EOF"))
	assert.Equal(t, DepartedReason, waitEvent(t, events, PeerDown, b.ID()).Peer.Err)
}

// A drain notice that runs after its sender's connection closed (a peer of an earlier release
// sends it one way) leaves the peer down, reading departed, rather than draining for ever.
func TestALateDrainNoticeLeavesThePeerDown(t *testing.T) {
	a, b := pair(t)
	events := a.WatchPeers(tctx(t))
	(&host{v: a}).PeerDown(b.ID(), errors.New("tcp: peer unreachable: EOF"))
	waitEvent(t, events, PeerDown, b.ID())
	_, _, err := a.onDrainNotice(context.Background(), b.ID(), make([]byte, 8))
	require.NoError(t, err)
	st := peerSeen(t, a, b.ID())
	assert.Equal(t, StateDown, st.State)
	assert.Equal(t, DepartedReason, st.Err)
	select {
	case ev := <-events:
		t.Fatalf("an event for a peer already down: %+v", ev)
	default:
	}
}
