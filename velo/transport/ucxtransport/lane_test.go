//go:build cgo && linux

package ucxtransport

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/velo/transport"
)

// TestNoUCXLaneUnderSharedMemoryTransports: under UCX_TLS=sm,self UCX has no lane for velo's
// endpoints (they ask for peer failure handling, which the shared-memory transports lack). New
// finds that out before any peer is known: no peer is reached for messages, none is offered
// RDMA, PathRefusal says no_ucx_lane, a send fails saying so without creating an endpoint, and
// Start's warning, which names the fix, is logged once.
func TestNoUCXLaneUnderSharedMemoryTransports(t *testing.T) {
	t.Setenv("UCX_TLS", "sm,self")
	a, b := newNode(t, nil), newNode(t, nil)
	require.NotEmpty(t, a.noLanes, "New must find that UCX has no lane")
	require.NoError(t, a.AddPeer(testCtx(t), b.addr()))
	assert.False(t, a.Reaches(b.h.id), "messages to the peer go on the control plane")
	assert.False(t, a.CanGet(b.h.id), "no RDMA offer to the peer")
	assert.Equal(t, ReasonNoUCXLane, a.PathRefusal(b.h.id))
	for range 3 {
		err := a.Send(testCtx(t), b.h.id, []byte("x"))
		require.ErrorIs(t, err, transport.ErrPeerUnreachable)
		assert.Contains(t, err.Error(), "no lane")
	}
	logs := a.h.logBuf.String()
	assert.Equal(t, 1, strings.Count(logs, "UCX has no lane to any peer"), "one warning:\n%s", logs)
	assert.Contains(t, logs, "ucx_tls=sm,self")
	assert.Contains(t, logs, "velo.WithSameHost")
}

// TestNoUCXLaneToOnePeer: where UCX refuses an endpoint to one peer with UNREACHABLE (no lane to
// its worker), that peer alone is marked: it is no longer reached nor offered RDMA, PathRefusal
// says no_ucx_lane, the warning is logged once however often it happens, and the peer's next
// incarnation starts with no verdict. Another peer is untouched. The opt-in keeps the pairs over
// tcp off software_lanes, so that a pair with a lane has no reason at all.
func TestNoUCXLaneToOnePeer(t *testing.T) {
	a, b, c := newNode(t, func(c *Config) { c.RMAOverSoftwareLanes = true }), newNode(t, nil), newNode(t, nil)
	require.NoError(t, a.AddPeer(testCtx(t), b.addr()))
	require.NoError(t, a.AddPeer(testCtx(t), c.addr()))
	a.mu.Lock()
	p := a.peers[b.h.id]
	a.mu.Unlock()
	for range 3 {
		a.noteConnectFailed(p, fmt.Errorf("ucx: ucp_ep_create: %w", ucx.StatusUnreachable))
	}
	assert.False(t, a.Reaches(b.h.id))
	assert.False(t, a.CanGet(b.h.id))
	assert.Equal(t, ReasonNoUCXLane, a.PathRefusal(b.h.id))
	err := a.Send(testCtx(t), b.h.id, []byte("x"))
	require.ErrorIs(t, err, transport.ErrPeerUnreachable)
	assert.Contains(t, err.Error(), "no lane")
	logs := a.h.logBuf.String()
	assert.Equal(t, 1, strings.Count(logs, "UCX has no lane to this peer"), "one warning per peer:\n%s", logs)

	assert.True(t, a.Reaches(c.h.id), "another peer keeps its lane")
	assert.True(t, a.CanGet(c.h.id))
	assert.Empty(t, a.PathRefusal(c.h.id))
	require.NoError(t, a.Send(testCtx(t), c.h.id, []byte("x")))

	// Another failure (a peer that went) marks nothing.
	a.mu.Lock()
	pc := a.peers[c.h.id]
	a.mu.Unlock()
	a.noteConnectFailed(pc, fmt.Errorf("ucx: %w", ucx.StatusConnectionReset))
	assert.Empty(t, a.PathRefusal(c.h.id))

	// The peer restarted: its new incarnation is tried afresh.
	b2 := newNode(t, nil)
	addr := b2.addr()
	addr.ID = b.h.id
	b2.h.id = b.h.id
	require.NoError(t, a.AddPeer(testCtx(t), addr))
	assert.Empty(t, a.PathRefusal(b.h.id), "a new incarnation starts with no verdict")
	assert.True(t, a.CanGet(b.h.id))
}

// TestNoUCXLaneBeforeSoftwareLanes: without the opt-in, a peer UCX has no lane to says
// no_ucx_lane (it has no lanes to judge), and a peer reached over tcp alone says software_lanes.
func TestNoUCXLaneBeforeSoftwareLanes(t *testing.T) {
	a, b, c := newNode(t, nil), newNode(t, nil), newNode(t, nil)
	require.NoError(t, a.AddPeer(testCtx(t), b.addr()))
	require.NoError(t, a.AddPeer(testCtx(t), c.addr()))
	a.mu.Lock()
	p := a.peers[b.h.id]
	a.mu.Unlock()
	a.noteConnectFailed(p, fmt.Errorf("ucx: ucp_ep_create: %w", ucx.StatusUnreachable))
	assert.Equal(t, ReasonNoUCXLane, a.PathRefusal(b.h.id))
	if tls := os.Getenv("UCX_TLS"); tls == "" || tls == testTLS { // testTLS is tcp

		assert.Equal(t, ReasonSoftwareLanes, a.PathRefusal(c.h.id))
	}
}
