//go:build cgo && linux

package ucxtransport

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/auth"
	"github.com/velo-go/velo/velo/transport"
)

// gatedHost is a testHost whose runtime requires authenticated peers. What the control plane
// would have learned in its handshakes (which incarnation is authenticated, with which session
// key) is set by the test; the proofs are the real ones of package auth. The runtime's own table
// behind this seam is tested over real TCP and UCX in package velo.
type gatedHost struct {
	*testHost
	mu       sync.Mutex
	sessions map[transport.InstanceID][]byte // peer -> session key
	incs     map[transport.InstanceID]uint64
}

func newGatedHost() *gatedHost {
	return &gatedHost{testHost: newHost(), sessions: map[transport.InstanceID][]byte{}, incs: map[transport.InstanceID]uint64{}}
}

func (h *gatedHost) trust(peer *testHost, session []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sessions[peer.id], h.incs[peer.id] = session, peer.inc
}

func (h *gatedHost) AuthRequired() bool { return true }
func (h *gatedHost) Authenticated(p transport.InstanceID, inc uint64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.sessions[p]
	return ok && h.incs[p] == inc
}
func (h *gatedHost) Authenticate(ctx context.Context, p transport.InstanceID) error {
	if h.Authenticated(p, h.incOf(p)) {
		return nil
	}
	return errors.New("not authenticated on the control plane")
}
func (h *gatedHost) incOf(p transport.InstanceID) uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.incs[p]
}
func (h *gatedHost) HelloProof(p transport.InstanceID, msg []byte) ([]byte, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	k, ok := h.sessions[p]
	if !ok {
		return nil, errors.New("no session")
	}
	return auth.HelloProof(k, msg), nil
}
func (h *gatedHost) HelloKey(p transport.InstanceID, inc uint64, msg, proof []byte) ([]byte, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	k, ok := h.sessions[p]
	if !ok || h.incs[p] != inc {
		return nil, false
	}
	return auth.HelloKey([][]byte{k}, msg, proof)
}

// The fake is a gate: a change of transport.AuthGate that it misses fails the build, not the
// tests' premise.
var _ transport.AuthGate = (*gatedHost)(nil)

func gatedNode(t *testing.T) (node, *gatedHost) {
	t.Helper()
	h := newGatedHost()
	tr, err := New(Config{TLS: testTLS, Logger: h.log})
	require.NoError(t, err)
	require.NoError(t, tr.Start(h))
	t.Cleanup(func() { tr.Close() })
	return node{tr, h.testHost}, h
}

func unauthenticatedDrops(n node) float64 {
	return testutil.ToFloat64(n.m.dropped.WithLabelValues("unauthenticated"))
}

// TestGatedHelloNeedsTheSessionKey: with the runtime requiring authenticated peers, frames flow
// between peers that share the control plane's session key; a hello proven with another key (a
// process claiming an authenticated peer's name) or with none (a transport whose runtime does not
// authenticate) is dropped and counted, and nothing of it reaches the runtime.
func TestGatedHelloNeedsTheSessionKey(t *testing.T) {
	session := bytes.Repeat([]byte{7}, 32)
	a, ga := gatedNode(t)
	b, gb := gatedNode(t)
	ga.trust(b.h, session)
	gb.trust(a.h, session)
	link(t, a, b)
	require.NoError(t, a.Send(testCtx(t), b.h.id, []byte("authenticated")))
	assert.Equal(t, "authenticated", string(b.h.waitFrames(t, 1)[0].frame))
	require.NoError(t, b.Send(testCtx(t), a.h.id, []byte("back")))
	assert.Equal(t, "back", string(a.h.waitFrames(t, 1)[0].frame))
	assert.Zero(t, unauthenticatedDrops(a)+unauthenticatedDrops(b))

	// An impostor: the receiver believes it authenticated c, but c proves with another key.
	c, gc := gatedNode(t)
	gb.trust(c.h, bytes.Repeat([]byte{1}, 32))
	gc.trust(b.h, bytes.Repeat([]byte{2}, 32))
	link(t, c, b)
	_ = c.Send(testCtx(t), b.h.id, []byte("forged"))
	eventually(t, "the forged hello is dropped", func() bool { return unauthenticatedDrops(b) >= 1 })

	// A transport whose runtime authenticates nobody sends hellos without a proof.
	d := newNode(t, nil)
	gb.trust(d.h, session) // even an incarnation the gate knows needs the proof
	link(t, d, b)
	_ = d.Send(testCtx(t), b.h.id, []byte("no proof"))
	eventually(t, "the unproven hello is dropped", func() bool { return unauthenticatedDrops(b) >= 2 })

	time.Sleep(100 * time.Millisecond)
	b.h.mu.Lock()
	defer b.h.mu.Unlock()
	for _, f := range b.h.frames {
		assert.NotEqual(t, "forged", string(f.frame))
		assert.NotEqual(t, "no proof", string(f.frame))
	}
}

// TestGatedSenderWaitsForTheControlPlane: a gated transport opens no endpoint to a peer the
// control plane has not authenticated; the send fails naming why.
func TestGatedSenderWaitsForTheControlPlane(t *testing.T) {
	a, _ := gatedNode(t)
	b := newNode(t, nil)
	require.NoError(t, a.AddPeer(testCtx(t), b.addr()))
	err := a.Send(testCtx(t), b.h.id, []byte("x"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not authenticated on the control plane")
	assert.Zero(t, testutil.ToFloat64(a.m.endpoints.WithLabelValues("opened")), "no endpoint was opened")
}
