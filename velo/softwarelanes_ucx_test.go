//go:build cgo && linux

package velo

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/transport/ucxtransport"
)

// Over UCX_TLS=tcp every lane of a pair's UCX endpoint is a software one: payload bytes take the
// chunked path unless the side opted in (ucxtransport.Config.RMAOverSoftwareLanes), messages keep
// UCX.

// softwareLanesPair is an owner (receiver) and a consumer (writer) over tcp, each with the opt-in
// or not, registered with each other.
func softwareLanesPair(t *testing.T, ownerOptIn, consOptIn bool) (owner, cons *Velo) {
	t.Helper()
	owner = ucxNodeWith(t, ucxtransport.Config{RMAOverSoftwareLanes: ownerOptIn})
	cons = ucxNodeWith(t, ucxtransport.Config{RMAOverSoftwareLanes: consOptIn})
	ctx := tctx(t)
	require.NoError(t, cons.RegisterPeer(ctx, owner.PeerInfo()))
	require.NoError(t, owner.RegisterPeer(ctx, cons.PeerInfo()))
	return owner, cons
}

// softwareLanesTransfers moves a Get of a few MiB from owner to cons and a put of a few MiB from
// cons into a grant of owner's, checks the bytes, and says which path the Get took.
func softwareLanesTransfers(t *testing.T, owner, cons *Velo) metrics.Path {
	t.Helper()
	ctx := tctx(t)
	data := payload(4<<20+17, 44)
	l, err := cons.Get(ctx, stage(t, owner, data, true))
	require.NoError(t, err)
	require.Equal(t, sum(data), sum(l.Bytes()))
	require.NoError(t, l.Release(ctx))

	f := newPushFixture(t, owner, cons, 4<<20+4096, GrantOptions{})
	require.True(t, f.region.Pinned(), "the region is pinned: %s", f.region.Reason())
	require.NoError(t, f.put(t, 1021, payload(4<<20, 45), &PutOptions{Notify: true}))
	<-f.grant.Notifications()
	f.check(t, "after the put")
	return l.Path
}

func softwareLanesReason(h Health) string {
	for _, r := range h.Reasons {
		if strings.Contains(r, "software lanes") {
			return r
		}
	}
	return ""
}

// TestSoftwareLanesTakeTheChunkedPath: without the opt-in a Get and a put of 4 MiB over tcp move
// on the chunked path with reason software_lanes, counted so on both sides (rendezvous and push),
// and the health names no opt-in.
func TestSoftwareLanesTakeTheChunkedPath(t *testing.T) {
	owner, cons := softwareLanesPair(t, false, false)
	get := softwareLanesTransfers(t, owner, cons)
	assert.Equal(t, metrics.PathChunked, get)
	for _, v := range []*Velo{owner, cons} {
		assert.Equal(t, 1.0, pathCount(t, v, metrics.PathChunked, metrics.ReasonSoftwareLanes))
		assert.Zero(t, pathCount(t, v, metrics.PathRDMA, metrics.ReasonOK))
		assert.Empty(t, softwareLanesReason(v.Health()))
	}
	assert.Equal(t, 1.0, pushPath(t, cons, "writer", metrics.PathChunked, metrics.ReasonSoftwareLanes))
	assert.Equal(t, 1.0, pushPath(t, owner, "receiver", metrics.PathChunked, metrics.ReasonSoftwareLanes))
}

// TestSoftwareLanesOptIn: with the opt-in on both sides the same transfers take rdma/ok on both
// sides, and the health and the introspection page name the opt-in; with it on the consumer (the
// writer) alone, the owner (the receiver) refuses the pair and both count software_lanes.
func TestSoftwareLanesOptIn(t *testing.T) {
	t.Run("both", func(t *testing.T) {
		owner, cons := softwareLanesPair(t, true, true)
		get := softwareLanesTransfers(t, owner, cons)
		assert.Equal(t, metrics.PathRDMA, get)
		for _, v := range []*Velo{owner, cons} {
			assert.Equal(t, 1.0, pathCount(t, v, metrics.PathRDMA, metrics.ReasonOK))
			h := v.Health()
			assert.Equal(t, StateDegraded, h.State)
			assert.True(t, h.Ready())
			assert.Contains(t, softwareLanesReason(h), "by opt-in (Config.RMAOverSoftwareLanes)")
			var shown string
			for _, ti := range v.Introspect().Transports {
				if ti.Name == ucxtransport.Name {
					shown = ti.Settings["software_lanes"]
				}
			}
			assert.Equal(t, "RDMA path kept by opt-in (Config.RMAOverSoftwareLanes)", shown)
		}
		assert.Equal(t, 1.0, pushPath(t, cons, "writer", metrics.PathRDMA, metrics.ReasonOK))
		assert.Equal(t, 1.0, pushPath(t, owner, "receiver", metrics.PathRDMA, metrics.ReasonOK))
	})
	t.Run("consumer only", func(t *testing.T) {
		owner, cons := softwareLanesPair(t, false, true)
		get := softwareLanesTransfers(t, owner, cons)
		assert.Equal(t, metrics.PathChunked, get)
		for _, v := range []*Velo{owner, cons} {
			assert.Equal(t, 1.0, pathCount(t, v, metrics.PathChunked, metrics.ReasonSoftwareLanes))
		}
		assert.Equal(t, 1.0, pushPath(t, cons, "writer", metrics.PathChunked, metrics.ReasonSoftwareLanes))
		assert.Equal(t, 1.0, pushPath(t, owner, "receiver", metrics.PathChunked, metrics.ReasonSoftwareLanes))
	})
}
