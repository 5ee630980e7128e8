package velo

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/discovery"
)

func member(t *testing.T, dir, name string, opts ...Option) *Velo {
	t.Helper()
	d, err := discovery.NewFilesystem(discovery.FilesystemConfig{Dir: dir, Cluster: "test", TTL: 600 * time.Millisecond, Poll: 20 * time.Millisecond})
	require.NoError(t, err)
	return newInstance(t, append([]Option{WithDiscovery(d, name)}, opts...)...)
}

// waitEvent waits for an event of kind about peer.
func waitEvent(t *testing.T, ch <-chan PeerEvent, kind PeerEventKind, peer InstanceID) PeerEvent {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			require.True(t, ok, "WatchPeers ended")
			if ev.Kind == kind && ev.Peer.ID == peer {
				return ev
			}
		case <-deadline:
			t.Fatalf("no %s event for %016x", kind, uint64(peer))
		}
	}
}

// TestDiscoveryFindsWatchesAndLosesPeers: three members that never call RegisterPeer find each
// other, talk, see one drain and leave, and see another restart under its name; the restarted
// member's old handles are refused.
func TestDiscoveryFindsWatchesAndLosesPeers(t *testing.T) {
	dir := t.TempDir()
	a := member(t, dir, "a")
	events := a.WatchPeers(context.Background())
	b := member(t, dir, "b")
	c := member(t, dir, "c")
	require.NoError(t, b.RegisterHandler("echo", echo))
	waitEvent(t, events, PeerUp, b.ID())
	waitEvent(t, events, PeerUp, c.ID())
	resp, err := a.Request(tctx(t), b.ID(), "echo", []byte("found"))
	require.NoError(t, err, "a peer found through discovery is not reachable")
	assert.Equal(t, "found", string(resp))

	// c drains and goes: a sees draining, then down.
	go c.Shutdown(context.Background())
	waitEvent(t, events, PeerDraining, c.ID())
	waitEvent(t, events, PeerDown, c.ID())

	// b is replaced by a new instance under the same name (a restart without a clean exit would
	// look the same to the others once the new one publishes).
	h, err := b.StageData(tctx(t), []byte("old payload"))
	require.NoError(t, err)
	oldB := b.ID()
	require.NoError(t, b.Close())
	b2 := member(t, dir, "b")
	ev := waitEvent(t, events, PeerUp, b2.ID())
	assert.Equal(t, StateUp, ev.Peer.State)
	_, err = a.Get(tctx(t), h)
	require.Error(t, err, "a handle of the instance that went was fetched")
	var states = map[InstanceID]State{}
	for _, p := range a.Peers() {
		states[p.ID] = p.State
	}
	assert.Equal(t, StateDown, states[oldB])
	assert.Equal(t, StateUp, states[b2.ID()])
	assert.Equal(t, StateDown, states[c.ID()])
}

// TestDiscoveryRestartEvent: a member whose name is published by another instance while its old
// entry is still there is reported restarted, with the instance it replaced.
func TestDiscoveryRestartEvent(t *testing.T) {
	dir := t.TempDir()
	a := member(t, dir, "a")
	events := a.WatchPeers(context.Background())
	b := member(t, dir, "b")
	waitEvent(t, events, PeerUp, b.ID())
	// Overwrite b's entry with another instance's record, as a restarted b would before the old
	// entry expired.
	nb := newInstance(t)
	d, err := discovery.NewFilesystem(discovery.FilesystemConfig{Dir: dir, Cluster: "test", TTL: 600 * time.Millisecond})
	require.NoError(t, err)
	defer d.Close()
	nb.discovery, nb.memberName = d, "b"
	r, err := nb.record()
	require.NoError(t, err)
	require.NoError(t, d.Publish(context.Background(), r))
	ev := waitEvent(t, events, PeerRestarted, nb.ID())
	assert.Equal(t, b.ID(), ev.Previous)
}

// A backend given to WithDiscovery belongs to the instance, so a New that fails closes it: here
// once because its metrics collide with those of another instance on the same registry, and once
// because an option placed before WithDiscovery is refused. Either way the backend is closed (a
// later Publish says so) and the cluster's folder holds no entry for an instance that never ran.
func TestFailedNewClosesTheDiscoveryBackend(t *testing.T) {
	reg := prometheus.NewRegistry()
	newInstance(t, WithRegisterer(reg))

	for name, opts := range map[string]func(Option) []Option{
		"metrics collide":         func(d Option) []Option { return []Option{WithRegisterer(reg), d} },
		"an earlier option fails": func(d Option) []Option { return []Option{WithTransport(nil), d} },
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			d, err := discovery.NewFilesystem(discovery.FilesystemConfig{Dir: dir, Cluster: "test"})
			require.NoError(t, err)
			v, err := New(context.Background(), opts(WithDiscovery(d, "member-0"))...)
			require.Error(t, err)
			require.Nil(t, v)
			entries, err := os.ReadDir(filepath.Join(dir, "test"))
			if err == nil {
				assert.Empty(t, entries, "an entry stayed published for an instance that never ran")
			}
			assert.ErrorIs(t, d.Publish(context.Background(), discovery.Record{Name: "probe", ID: 1}), discovery.ErrClosed,
				"New failed but left the backend open")
			assert.NoError(t, d.Close(), "closing the backend again")
		})
	}
}
