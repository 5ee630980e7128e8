package tcp

import (
	"encoding/binary"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/transport"
)

// inUseBytes is the Go heap and the goroutine stacks in use after a collection.
func inUseBytes() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse + m.StackInuse)
}

// TestIdleConnectionCost measures what a connection costs this process while it is idle, and
// after the idle close: a hub exchanges a small frame and a 256 KiB one with each of 32 peers
// (so every connection has read with its large buffer), then everything goes quiet. Both ends of
// each connection live in this process. An idle connection, both ends together, must hold less
// than 32 KiB of Go heap and stacks (5-8 KiB measured; about 135 KiB while each end kept its own
// 64 KiB read buffer), and once the hub closed them all by the goodbye exchange, what is left per
// peer must be under 8 KiB (the peer entries on both sides and the test host's records; 3-5 KiB
// measured).
func TestIdleConnectionCost(t *testing.T) {
	const peers = 32
	hub := newSeqHost()
	a := start(t, hub, Config{IdleTimeout: -1})
	hosts := make([]*seqHost, peers)
	trs := make([]*Transport, peers)
	for i := range trs {
		hosts[i] = newSeqHost()
		trs[i] = start(t, hosts[i], Config{IdleTimeout: -1})
		require.NoError(t, a.AddPeer(ctx(t), transport.PeerAddress{ID: hosts[i].id, Incarnation: hosts[i].inc, Blob: trs[i].Address()}))
	}
	big := make([]byte, 256<<10)
	before := inUseBytes()
	for i, tr := range trs {
		require.NoError(t, a.Send(ctx(t), hosts[i].id, binary.BigEndian.AppendUint32(nil, 1), big))
		require.Eventually(t, func() bool { return hosts[i].received(hub.id) == 1 }, wait, time.Millisecond)
		require.NoError(t, tr.Send(ctx(t), hub.id, binary.BigEndian.AppendUint32(nil, 1)))
	}
	for i := range trs {
		require.Eventually(t, func() bool { return hub.received(hosts[i].id) == 1 }, wait, time.Millisecond)
	}
	require.Equal(t, peers, openConns(a))
	time.Sleep(50 * time.Millisecond) // the readers are back waiting for a frame
	open := inUseBytes()
	perConn := float64(open-before) / peers
	t.Logf("an idle connection, both ends: %.1f KiB", perConn/1024)
	assert.Less(t, perConn, float64(32<<10), "an idle connection holds %.1f KiB", perConn/1024)

	a.mu.Lock()
	var conns []*conn
	for _, p := range a.peers {
		for c := range p.conns {
			conns = append(conns, c)
		}
	}
	a.mu.Unlock()
	for _, c := range conns {
		require.True(t, c.goodbye(closeIdle))
	}
	require.Eventually(t, func() bool {
		for _, tr := range trs {
			if openConns(tr) != 0 {
				return false
			}
		}
		return openConns(a) == 0
	}, wait, 5*time.Millisecond)
	closed := inUseBytes()
	perPeer := float64(closed-before) / peers
	t.Logf("a peer once talked to, its connection closed: %.1f KiB", perPeer/1024)
	assert.Less(t, perPeer, float64(8<<10), "a peer whose connection closed still holds %.1f KiB", perPeer/1024)
	hub.check(t)
	for _, h := range hosts {
		h.check(t)
	}
}
