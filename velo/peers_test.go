package velo

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/auth"
	"github.com/velo-go/velo/velo/auth/authtest"
	"github.com/velo-go/velo/velo/discovery"
	"github.com/velo-go/velo/velo/transport"
	"github.com/velo-go/velo/velo/transport/tcp"
)

// memberPolling is member with its own discovery poll interval.
func memberPolling(t *testing.T, dir, name string, poll time.Duration, opts ...Option) *Velo {
	t.Helper()
	d, err := discovery.NewFilesystem(discovery.FilesystemConfig{Dir: dir, Cluster: "test", TTL: 30 * time.Second, Poll: poll})
	require.NoError(t, err)
	return newInstance(t, append([]Option{WithDiscovery(d, name)}, opts...)...)
}

// peerOf is v's view of peer (ok false when v does not list it).
func peerOf(v *Velo, peer InstanceID) (PeerStatus, bool) {
	for _, p := range v.Peers() {
		if p.ID == peer {
			return p, true
		}
	}
	return PeerStatus{}, false
}

// TestPeerNamesTravelWithPeers: the names given to WithDiscovery arrive in the up events, in Peers
// and on the introspection page (JSON and HTML); a peer registered by hand without discovery has
// none.
func TestPeerNamesTravelWithPeers(t *testing.T) {
	dir := t.TempDir()
	a := member(t, dir, "prefill-0")
	events := a.WatchPeers(context.Background())
	b := member(t, dir, "decode-0")
	ev := waitEvent(t, events, PeerUp, b.ID())
	assert.Equal(t, "decode-0", ev.Peer.Name, "the up event names the member")
	p, ok := peerOf(a, b.ID())
	require.True(t, ok)
	assert.Equal(t, "decode-0", p.Name)
	eventually(t, "b lists a by name", func() bool { p, ok := peerOf(b, a.ID()); return ok && p.Name == "prefill-0" })

	ds := httptest.NewServer(a.DebugHandler())
	defer ds.Close()
	get := func(q string) string {
		r, err := http.Get(ds.URL + q)
		require.NoError(t, err)
		defer r.Body.Close()
		body, err := io.ReadAll(r.Body)
		require.NoError(t, err)
		return string(body)
	}
	var in Introspection
	body := get("?format=json")
	require.NoError(t, json.Unmarshal([]byte(body), &in), body)
	require.Len(t, in.Peers, 1)
	assert.Equal(t, "decode-0", in.Peers[0].Name)
	assert.Contains(t, get(""), "<td>decode-0</td>", "the HTML page names the peer")

	// Registered by hand, with no discovery on either side: no name.
	x, y := newInstance(t), newInstance(t)
	require.NoError(t, x.RegisterPeer(tctx(t), y.PeerInfo()))
	p, ok = peerOf(x, y.ID())
	require.True(t, ok)
	assert.Equal(t, "", p.Name)
}

// TestPeersListEveryPeerHeardFrom: a peer that reaches this instance before discovery reported it
// is listed at once, comes up with its name and its transports (it was asked for its PeerInfo),
// and a peer that does not answer that request is still listed, over the transport it used.
func TestPeersListEveryPeerHeardFrom(t *testing.T) {
	for _, asked := range []bool{true, false} {
		t.Run(map[bool]string{true: "peer info asked", false: "peer info unanswered"}[asked], func(t *testing.T) {
			dir := t.TempDir()
			slow := memberPolling(t, dir, "slow-0", time.Hour, WithHandler("echo", echo)) // sees nobody joining
			events := slow.WatchPeers(context.Background())
			time.Sleep(200 * time.Millisecond) // its first scan of the directory, on a goroutine of its own, is done
			var opts []Option
			if !asked {
				opts = append(opts, withoutPeerInfo())
			}
			quick := memberPolling(t, dir, "quick-0", 20*time.Millisecond, opts...)
			eventually(t, "quick found slow", func() bool { _, ok := peerOf(quick, slow.ID()); return ok })
			sp, ok := peerOf(slow, quick.ID())
			require.False(t, ok, "slow's discovery cannot have seen quick: %+v", sp)

			_, err := quick.Request(tctx(t), slow.ID(), "echo", []byte("hi"))
			require.NoError(t, err)
			ev := waitEvent(t, events, PeerUp, quick.ID())
			p, ok := peerOf(slow, quick.ID())
			require.True(t, ok, "a peer heard from is listed")
			assert.Equal(t, StateUp, p.State)
			assert.Contains(t, p.Transports, tcp.Name)
			if asked {
				assert.Equal(t, "quick-0", ev.Peer.Name, "the up event carries the name it gave")
				assert.Equal(t, "quick-0", p.Name)
				assert.Equal(t, quick.Incarnation(), p.Incarnation)
				// Registered with its PeerInfo: slow can call it, not only answer it.
				require.NoError(t, quick.RegisterHandler("echo", echo))
				_, err := slow.Request(tctx(t), quick.ID(), "echo", nil)
				require.NoError(t, err)
			} else {
				assert.Equal(t, "", ev.Peer.Name, "a peer that did not say its name has none")
				assert.Equal(t, []string{tcp.Name}, p.Transports)
			}
		})
	}
}

func tcpWithSecret(t *testing.T, secret string) Option {
	t.Helper()
	s, err := auth.NewSecrets([]byte(authtest.Secret(secret)))
	require.NoError(t, err)
	ctl, err := tcp.New(tcp.Config{Auth: auth.Config{Secrets: s}})
	require.NoError(t, err)
	return WithTransport(ctl)
}

// TestPeerWithAnotherSecretNeverComesUp: members with different cluster secrets find each other
// through discovery, and one is registered by hand; neither ever shows the other as up, in
// WatchPeers or in Peers: they are unauthenticated, with the handshake's reason, and the health
// says so.
func TestPeerWithAnotherSecretNeverComesUp(t *testing.T) {
	dir := t.TempDir()
	a := member(t, dir, "a", tcpWithSecret(t, "one"))
	events := a.WatchPeers(context.Background())
	b := member(t, dir, "b", tcpWithSecret(t, "two"))
	c := newInstance(t, tcpWithSecret(t, "two"))
	err := a.RegisterPeer(tctx(t), c.PeerInfo())
	require.ErrorIs(t, err, transport.ErrUnauthenticated)
	require.ErrorIs(t, err, ErrPeerUnreachable)

	seen := map[InstanceID]PeerEventKind{}
	deadline := time.After(3 * time.Second) // a few discovery polls and dials
	for len(seen) < 2 {
		select {
		case ev := <-events:
			require.NotEqual(t, PeerUp, ev.Kind, "%s came up with another secret", ev.Peer.Name)
			seen[ev.Peer.ID] = ev.Kind
			assert.Equal(t, PeerUnauthenticated, ev.Kind)
		case <-deadline:
			t.Fatalf("events seen: %v; want b and c unauthenticated", seen)
		}
	}
	for _, peer := range []*Velo{b, c} {
		p, ok := peerOf(a, peer.ID())
		require.True(t, ok)
		assert.Equal(t, StateUnauthenticated, p.State)
		assert.Contains(t, p.Err, "peer failed authentication")
		assert.False(t, p.Authenticated)
	}
	p, _ := peerOf(a, b.ID())
	assert.Equal(t, "b", p.Name, "a member that fails authentication is still named")
	eventually(t, "b sees a unauthenticated too", func() bool { p, ok := peerOf(b, a.ID()); return ok && p.State == StateUnauthenticated })
	_, err = a.Request(tctx(t), b.ID(), "echo", nil)
	require.Error(t, err)
	assert.Contains(t, a.Health().Reasons, "2 peers failed authentication (Peers says why): check that every member has the same credentials")
	g, err := a.NewRegion(4096)
	require.NoError(t, err)
	defer g.Free()
	_, err = a.GrantWrite(tctx(t), b.ID(), g, GrantOptions{})
	require.ErrorIs(t, err, ErrUnknownPeer)
	assert.Contains(t, err.Error(), "failed authentication")

	// Nothing comes up later either.
	select {
	case ev := <-events:
		require.NotEqual(t, PeerUp, ev.Kind, "%016x came up", uint64(ev.Peer.ID))
	case <-time.After(300 * time.Millisecond):
	}
}
