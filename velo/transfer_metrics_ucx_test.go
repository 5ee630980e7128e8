//go:build cgo && linux

package velo

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/transport/tcp"
	"github.com/velo-go/velo/velo/transport/ucxtransport"
)

// ucxNode starts an instance with a TCP control plane and a real UCX transport (UCX_TLS=tcp unless
// the environment says otherwise); the test links velo's static UCX (make test-rdma-registry).
// ucxNode is an instance with a TCP control plane and the UCX transport over tcp, which keeps the
// RDMA path over its software lanes (RMAOverSoftwareLanes): the suites exercise that path without
// RDMA hardware.
func ucxNode(t *testing.T) *Velo {
	t.Helper()
	return ucxNodeWith(t, ucxtransport.Config{RMAOverSoftwareLanes: true})
}

// ucxNodeWith is ucxNode with cfg (tcp, eager endpoints and a quiet logger added).
func ucxNodeWith(t *testing.T, cfg ucxtransport.Config) *Velo {
	t.Helper()
	ctl, err := tcp.New(tcp.Config{})
	require.NoError(t, err)
	cfg.TLS, cfg.EagerEndpoints, cfg.Logger = "tcp", true, quietLogger()
	u, err := ucxtransport.New(cfg)
	require.NoError(t, err)
	v, err := New(context.Background(), WithLogger(quietLogger()), WithTransport(ctl), WithUCXTransport(u))
	require.NoError(t, err)
	t.Cleanup(func() { v.Close() })
	return v
}

// TestTransferTelemetryOverUCXTransport: Gets of known sizes over real UCX land in the transfer
// histogram under rdma and their size class (one plain-memory payload under chunked), the byte
// counters on both sides are exact, and the consumer's series leave the owner with it.
func TestTransferTelemetryOverUCXTransport(t *testing.T) {
	owner, cons := ucxNode(t), ucxNode(t)
	ctx := tctx(t)
	require.NoError(t, cons.RegisterPeer(ctx, owner.PeerInfo()))

	rdmaBytes := 0
	for i, n := range []int{4 << 10, 64 << 10, 1 << 20, 8 << 20} { // le_4k, le_64k, le_1m, le_16m
		data := payload(n, uint64(i))
		l, err := cons.Get(ctx, stage(t, owner, data, true))
		require.NoError(t, err)
		require.Equal(t, metrics.PathRDMA, l.Path, "reason %s", l.Reason)
		require.Equal(t, sum(data), sum(l.Bytes()))
		require.NoError(t, l.Release(ctx))
		rdmaBytes += n
	}
	var reqs []GetRequest
	for i := range 3 {
		reqs = append(reqs, GetRequest{Handle: stage(t, owner, payload(16<<10, uint64(10+i)), true)}) // le_64k each
		rdmaBytes += 16 << 10
	}
	var leases []*Lease
	for _, r := range cons.GetBatch(ctx, reqs, nil) {
		require.NoError(t, r.Err)
		require.Equal(t, metrics.PathRDMA, r.Lease.Path)
		leases = append(leases, r.Lease)
	}
	for _, err := range cons.ReleaseLeases(ctx, leases) {
		require.NoError(t, err)
	}
	plain := payload(100<<10, 20) // plain memory: chunked, not_pinned; le_1m
	l, err := cons.Get(ctx, stage(t, owner, plain, false))
	require.NoError(t, err)
	require.Equal(t, metrics.PathChunked, l.Path)
	require.NoError(t, l.Release(ctx))

	assert.Equal(t, map[string]uint64{
		"rdma/le_4k": 1, "rdma/le_64k": 4, "rdma/le_1m": 1, "rdma/le_16m": 1, "chunked/le_1m": 1,
	}, transferCounts(t, cons))
	assert.Equal(t, peerSeries(owner, pathBytes{rdma: rdmaBytes, chunked: len(plain)}, pathBytes{}), peerBytes(t, cons))
	assert.Equal(t, peerSeries(cons, pathBytes{}, pathBytes{rdma: rdmaBytes, chunked: len(plain)}), peerBytes(t, owner))
	assert.EqualValues(t, rdmaBytes, bytesTotal(t, cons, "received", "rdma"))
	assert.Equal(t, map[string]uint64{"released": 8}, leaseCounts(t, owner))

	require.NoError(t, cons.Close())
	eventually(t, "the departed consumer's series gone from the owner", func() bool { return len(peerBytes(t, owner)) == 0 })
}
