package velo

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/auth"
	"github.com/velo-go/velo/velo/auth/authtest"
	"github.com/velo-go/velo/velo/transport/tcp"
)

// handBuilt is an instance whose program builds its own TCP transport with no Auth, as the
// examples and the README do.
func handBuilt(t *testing.T) (*Velo, error) {
	t.Helper()
	ctl, err := tcp.New(tcp.Config{ListenAddress: "127.0.0.1:0"})
	if err != nil {
		return nil, err
	}
	v, err := New(context.Background(), WithLogger(quietLogger()), WithTransport(ctl))
	if err != nil {
		ctl.Close()
		return nil, err
	}
	t.Cleanup(func() { v.Close() })
	return v, nil
}

// TestHandBuiltInstancesUseTheClusterSecret: with VELO_CLUSTER_SECRET_FILE set, two instances
// whose programs build their TCP transport by hand with no Auth authenticate each other with the
// secret (Peers says so), and a Request between them works; with a secret too short for use,
// building the transport fails, naming the variable, instead of running unauthenticated.
func TestHandBuiltInstancesUseTheClusterSecret(t *testing.T) {
	authtest.ClearEnv(t)
	t.Setenv(auth.SecretFileEnv, authtest.SecretFile(t, authtest.Secret("operator")))
	a, err := handBuilt(t)
	require.NoError(t, err)
	b, err := handBuilt(t)
	require.NoError(t, err)
	require.NoError(t, b.RegisterHandler("echo", func(ctx context.Context, m *Message) ([]byte, error) { return m.Payload, nil }))
	require.NoError(t, a.RegisterPeer(tctx(t), b.PeerInfo()))
	got, err := a.Request(tctx(t), b.ID(), "echo", []byte("hi"))
	require.NoError(t, err)
	assert.Equal(t, "hi", string(got))
	var seen bool
	for _, p := range a.Peers() {
		if p.ID == b.ID() {
			seen = true
			assert.True(t, p.Authenticated, "the peer was authenticated with the environment's secret")
		}
	}
	assert.True(t, seen)

	authtest.ClearEnv(t)
	t.Setenv(auth.SecretEnv, "too short")
	_, err = handBuilt(t)
	require.Error(t, err)
	assert.Contains(t, err.Error(), auth.SecretEnv)
	assert.Contains(t, err.Error(), "at least 32")
}
