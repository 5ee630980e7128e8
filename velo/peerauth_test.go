//go:build cgo && linux

package velo

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/auth"
	"github.com/velo-go/velo/velo/auth/authtest"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/transport"
	"github.com/velo-go/velo/velo/transport/tcp"
	"github.com/velo-go/velo/velo/transport/ucxtransport"
)

// authNode starts an instance with the given credentials on its TCP control plane and a real UCX
// transport (UCX_TLS=tcp unless the environment says otherwise). ucxFirst puts UCX first, so
// messages travel over it.
func authNode(t *testing.T, creds auth.Config, ucxFirst bool) *Velo {
	t.Helper()
	ctl, err := tcp.New(tcp.Config{Auth: creds})
	require.NoError(t, err)
	reg := prometheus.NewRegistry() // velo's series and the UCX transport's, to read both
	u, err := ucxtransport.New(ucxtransport.Config{TLS: "tcp", EagerEndpoints: true, RMAOverSoftwareLanes: true, Logger: quietLogger(), Metrics: reg})
	require.NoError(t, err)
	opts := []Option{WithLogger(quietLogger()), WithRegisterer(reg), WithTransport(ctl), WithUCXTransport(u)}
	if ucxFirst {
		opts = []Option{WithLogger(quietLogger()), WithRegisterer(reg), WithUCXTransport(u), WithTransport(ctl)}
	}
	v, err := New(context.Background(), opts...)
	require.NoError(t, err)
	t.Cleanup(func() { v.Close() })
	return v
}

func value(t *testing.T, v *Velo, name string, labels map[string]string) float64 {
	t.Helper()
	x, err := metrics.Value(v.Metrics(), name, labels)
	require.NoError(t, err)
	return x
}

// TestAuthenticatedPeersGetOverRDMA: two instances with the cluster secret move a pinned payload
// on the RDMA path, the UCX transport having waited for the control plane's handshake; the
// handshake failure series exist at zero.
func TestAuthenticatedPeersGetOverRDMA(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := auth.NewSecrets([]byte(authtest.Secret("cluster")))
	require.NoError(t, err)
	for _, ucxFirst := range []bool{false, true} {
		owner := authNode(t, auth.Config{Secrets: s}, ucxFirst)
		consumer := authNode(t, auth.Config{Secrets: s}, ucxFirst)
		require.NoError(t, consumer.RegisterPeer(ctx, owner.PeerInfo()))
		payload := bytes.Repeat([]byte("auth"), 1<<18)
		h, err := owner.StageDataPinned(ctx, payload)
		require.NoError(t, err)
		l, err := consumer.Get(ctx, h)
		require.NoError(t, err)
		assert.Equal(t, "rdma", string(l.Path), "ucx first: %v", ucxFirst)
		assert.Equal(t, "ok", string(l.Reason))
		assert.True(t, bytes.Equal(payload, l.Bytes()))
		require.NoError(t, l.Release(ctx))
		for _, p := range consumer.Peers() {
			if p.ID == owner.ID() {
				assert.True(t, p.Authenticated, "Peers says the owner is authenticated")
			}
		}
		for _, p := range consumer.Introspect().Peers {
			assert.Equal(t, "authenticated", p.Auth)
		}
		assert.Zero(t, value(t, owner, "velo_tcp_auth_failures_total", map[string]string{"reason": "bad_proof", "transport": "tcp"}))
		assert.Zero(t, value(t, owner, metrics.AuthRefusalsTotal, map[string]string{"op": "acquire"}))
	}
}

// TestUnauthenticatedPeerGetsNothing: an intruder without the secret, whose messages travel over
// UCX (which has no authentication of its own), reaches the owner's UCX worker but gets no
// handler call, no lease and no remote key: its frames are dropped and counted, and the owner's
// registrations stay as they were.
func TestUnauthenticatedPeerGetsNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := auth.NewSecrets([]byte(authtest.Secret("cluster")))
	require.NoError(t, err)
	owner := authNode(t, auth.Config{Secrets: s}, true)
	called := make(chan struct{}, 1)
	require.NoError(t, owner.RegisterHandler("secret-stuff", func(ctx context.Context, m *Message) ([]byte, error) {
		called <- struct{}{}
		return []byte("leak"), nil
	}))
	h, err := owner.StageDataPinned(ctx, bytes.Repeat([]byte("x"), 1<<20))
	require.NoError(t, err)
	before := owner.RDMAStats()

	intruder := authNode(t, auth.Config{}, true)
	_ = intruder.RegisterPeer(ctx, owner.PeerInfo()) // the TCP handshake is refused; UCX accepts the address
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	defer cancelShort()
	_, err = intruder.Request(short, owner.ID(), "secret-stuff", []byte("?"))
	require.Error(t, err)
	short2, cancel2 := context.WithTimeout(ctx, 2*time.Second)
	defer cancel2()
	_, err = intruder.Get(short2, h)
	require.Error(t, err)
	// A batch asks for small payloads inside the acquire's answer: it gets none of them either.
	small, err := owner.StageDataPinned(ctx, bytes.Repeat([]byte("y"), 1<<10))
	require.NoError(t, err)
	short3, cancel3 := context.WithTimeout(ctx, 2*time.Second)
	defer cancel3()
	for i, r := range intruder.GetBatch(short3, []GetRequest{{Handle: small}, {Handle: h}}, nil) {
		require.Error(t, r.Err, "batch entry %d", i)
	}
	assert.Zero(t, pathCount(t, owner, metrics.PathInline, metrics.ReasonOK), "no payload went inline to the intruder")

	select {
	case <-called:
		t.Fatal("a handler ran for the unauthenticated peer")
	default:
	}
	after := owner.RDMAStats()
	assert.Equal(t, before.LeaseRegistrations, after.LeaseRegistrations, "no lease registration, so no remote key, for the intruder")
	assert.Zero(t, value(t, owner, metrics.ActiveLeases, nil))
	dropped := value(t, owner, "velo_ucx_transport_frames_dropped_total", map[string]string{"reason": "unauthenticated"})
	refused := value(t, owner, "velo_tcp_auth_failures_total", map[string]string{"reason": "unauthenticated", "transport": "tcp"})
	t.Logf("owner: %v UCX frames dropped as unauthenticated, %v TCP handshakes refused", dropped, refused)
	assert.Greater(t, dropped, 0.0, "the intruder's UCX frames are dropped and counted")
	_, ok := owner.auth.lookup(transport.InstanceID(intruder.ID()), 0)
	assert.False(t, ok, "the owner does not count the intruder as authenticated")
}

// TestUCXOnlyInstanceRefusesTheEnvironmentsSecret: the UCX transport takes no credentials (it
// admits the peers a TCP control plane authenticated), so an instance whose only transport is
// UCX, started while VELO_CLUSTER_SECRET is set, would leave the secret unused: New refuses it and
// says to give it a TCP transport or unset the variable.
func TestUCXOnlyInstanceRefusesTheEnvironmentsSecret(t *testing.T) {
	authtest.ClearEnv(t)
	t.Setenv(auth.SecretEnv, authtest.Secret("operator"))
	u, err := ucxtransport.New(ucxtransport.Config{TLS: "tcp", Logger: quietLogger()})
	require.NoError(t, err)
	defer u.Close()
	v, err := New(context.Background(), WithLogger(quietLogger()), WithUCXTransport(u))
	if v != nil {
		v.Close()
	}
	require.Error(t, err)
	assert.Contains(t, err.Error(), auth.SecretEnv)
	assert.Contains(t, err.Error(), "give it a TCP transport")
}
