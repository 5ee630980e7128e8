package tcp

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// TestConnectionsGauge: velo_tcp_connections counts each side's open connections, dialed and
// accepted; it falls back when a connection goes, also when the peer was forgotten first
// (RemovePeer), and rises again when a send dials anew; Close leaves zero.
func TestConnectionsGauge(t *testing.T) {
	ha, hb := newHost(), newHost()
	a, b := start(t, ha, Config{}), start(t, hb, Config{})
	open := func(tr *Transport) float64 { return testutil.ToFloat64(tr.am.conns) }
	settle := func(want float64) {
		t.Helper()
		require.Eventually(t, func() bool { return open(a) == want && open(b) == want }, wait, 5*time.Millisecond,
			"connections open: a %v, b %v, want %v each", open(a), open(b), want)
	}
	settle(0)
	addPeer(t, a, b, hb)
	require.NoError(t, a.Send(ctx(t), hb.id, []byte("1")))
	hb.next(t)
	settle(1) // the dialer's and the acceptor's ends

	b.RemovePeer(ha.id)
	ha.waitDown(t, hb.id)
	settle(0)

	require.NoError(t, a.Send(ctx(t), hb.id, []byte("2")))
	hb.next(t)
	settle(1)

	require.NoError(t, a.Close())
	require.NoError(t, b.Close())
	require.Zero(t, open(a))
	require.Zero(t, open(b))
}
