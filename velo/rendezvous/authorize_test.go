package rendezvous_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/rendezvous"
	"github.com/velo-go/velo/velo/transport"
)

// TestAcquireNeedsAnAuthorizedPeer: with Authorize set, an acquire from a peer it refuses gets
// ErrUnauthenticated, and no lease, registration or remote key comes to exist; an authorized
// peer on the same owner is served on the RDMA path as before.
func TestAcquireNeedsAnAuthorizedPeer(t *testing.T) {
	f := newFake()
	var mu sync.Mutex
	allowed := map[transport.InstanceID]bool{}
	owner := newNodeWith(t, server{f}, nil, func(c *rendezvous.Config) {
		c.Authorize = func(p transport.InstanceID) error {
			mu.Lock()
			defer mu.Unlock()
			if !allowed[p] {
				return errors.New("not on the list")
			}
			return nil
		}
	})
	stranger := newNode(t, nil, client{f})
	friend := newNode(t, nil, client{f})
	stranger.register(t, owner)
	friend.register(t, owner)
	mu.Lock()
	allowed[friend.id] = true
	mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	h, err := owner.rv.Stage([]byte("pinned bytes"), rendezvous.StageOptions{Pinned: pinnedIf(true)})
	require.NoError(t, err)
	_, err = stranger.rv.Get(ctx, h)
	require.ErrorIs(t, err, rendezvous.ErrUnauthenticated)
	assert.Contains(t, err.Error(), "docs/security.md", "the error names the fix")
	f.mu.Lock()
	regs := len(f.regs)
	f.mu.Unlock()
	assert.Zero(t, regs, "no registration (remote key) was made for the stranger")
	refusals, err := metrics.Value(owner.reg, metrics.AuthRefusalsTotal, map[string]string{"op": "acquire"})
	require.NoError(t, err)
	assert.Equal(t, 1.0, refusals)
	leases, err := metrics.Value(owner.reg, metrics.ActiveLeases, nil)
	require.NoError(t, err)
	assert.Zero(t, leases)

	l, err := friend.rv.Get(ctx, h)
	require.NoError(t, err)
	assert.Equal(t, metrics.PathRDMA, l.Path)
	assert.Equal(t, "pinned bytes", string(l.Bytes()))
	l.Detach(ctx)
}
