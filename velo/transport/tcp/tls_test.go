package tcp

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/auth"
	"github.com/velo-go/velo/velo/auth/authtest"
)

func tlsConfig(t *testing.T, ca *authtest.CA, m authtest.Member, crl string) Config {
	return Config{Auth: auth.Config{TLS: ca.TLS(t, m, crl)}}
}

// TestMutualTLS: two members of one CA talk both ways over TLS 1.3, each learns the other's
// certificate name, and the instance ID each claims arrives inside the session.
func TestMutualTLS(t *testing.T) {
	ca := authtest.NewCA(t, "cluster-ca")
	ha, hb := newAuthHost(), newAuthHost()
	a := start(t, ha, tlsConfig(t, ca, ca.Valid(t, "node-a"), ""))
	b := start(t, hb, tlsConfig(t, ca, ca.Valid(t, "node-b"), ""))
	addPeer(t, a, b, hb.testHost)
	require.NoError(t, a.Send(ctx(t), hb.id, []byte("over tls")))
	assert.Equal(t, "over tls", string(hb.next(t).frame))
	require.NoError(t, b.Send(ctx(t), ha.id, []byte("back")))
	assert.Equal(t, "back", string(ha.next(t).frame))
	name, ok := hb.identity(ha.id)
	assert.True(t, ok)
	assert.Equal(t, "node-a", name)
	name, _ = ha.identity(hb.id)
	assert.Equal(t, "node-b", name)
	assert.Equal(t, auth.ModeTLS, a.AuthMode())
	require.Len(t, ha.session(hb.id), 32)
	assert.Equal(t, ha.session(hb.id), hb.session(ha.id), "both sides export the same session key")
	assert.Empty(t, allFailures(a))
	assert.Empty(t, allFailures(b))
}

// TestBadCertificatesAreRefused: an expired certificate, one from another CA, a revoked one, and a
// dialer without TLS are each refused before any frame, counted under their reason.
func TestBadCertificatesAreRefused(t *testing.T) {
	ca := authtest.NewCA(t, "cluster-ca")
	good := ca.Valid(t, "acceptor")
	revokedMember := ca.Valid(t, "revoked-node")
	crl := ca.Revoke(t, revokedMember)
	hb := newAuthHost()
	b := start(t, hb, tlsConfig(t, ca, good, crl))

	foreign := authtest.NewCA(t, "other-ca")
	// Loaded while valid, expired by the time it is presented.
	expiring := ca.Issue(t, "expiring-node", time.Now().Add(-time.Minute), time.Now().Add(2*time.Second))
	expiringCreds := ca.TLS(t, expiring, "")
	for _, tc := range []struct {
		name   string
		cfg    func() Config
		reason string
	}{
		{"foreign CA", func() Config { return Config{Auth: auth.Config{TLS: foreignTLS(t, ca, foreign)}} }, reasonCertUnknownCA},
		{"expired", func() Config {
			time.Sleep(time.Until(expiring.NotAfter) + 100*time.Millisecond)
			return Config{Auth: auth.Config{TLS: expiringCreds}}
		}, reasonCertExpired},
		{"revoked", func() Config { return tlsConfig(t, ca, revokedMember, "") }, reasonCertRevoked},
		{"no TLS", func() Config { return Config{} }, reasonTLS},
	} {
		t.Run(tc.name, func(t *testing.T) { refusedDialer(t, tc.cfg(), b, hb, tc.reason) })
	}
}

// foreignTLS is a member of another CA that trusts ours: it presents a certificate we must refuse.
func foreignTLS(t *testing.T, ours, theirs *authtest.CA) *auth.TLS {
	t.Helper()
	m := theirs.Valid(t, "intruder")
	// A CA file holding both CAs: the intruder's own certificate verifies, and so does ours.
	both := t.TempDir() + "/both.pem"
	a, err := os.ReadFile(ours.CAFile)
	require.NoError(t, err)
	b, err := os.ReadFile(theirs.CAFile)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(both, append(a, b...), 0o600))
	c, err := auth.NewTLS(auth.TLSFiles{CAFile: both, CertFile: m.CertFile, KeyFile: m.KeyFile})
	require.NoError(t, err)
	return c
}

// TestCertificateReloadWithoutRestart: replacing an instance's certificate files makes its next
// connections present the new certificate; the connection already open stays up.
func TestCertificateReloadWithoutRestart(t *testing.T) {
	ca := authtest.NewCA(t, "cluster-ca")
	first := ca.Valid(t, "node-a-2025")
	ha, hb := newAuthHost(), newAuthHost()
	aCreds := ca.TLS(t, first, "")
	a := start(t, ha, Config{Auth: auth.Config{TLS: aCreds}})
	b := start(t, hb, tlsConfig(t, ca, ca.Valid(t, "node-b"), ""))
	addPeer(t, a, b, hb.testHost)
	require.NoError(t, a.Send(ctx(t), hb.id, []byte("first")))
	hb.next(t)
	name, _ := hb.identity(ha.id)
	require.Equal(t, "node-a-2025", name)

	renewed := ca.Valid(t, "node-a-2026")
	for _, f := range [][2]string{{renewed.CertFile, first.CertFile}, {renewed.KeyFile, first.KeyFile}} {
		b, err := os.ReadFile(f[0])
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(f[1]+".new", b, 0o600))
		require.NoError(t, os.Rename(f[1]+".new", f[1]))
	}
	time.Sleep(1100 * time.Millisecond) // looked at at most once a second

	// A second instance with the same credentials object dials afresh.
	hc := newAuthHost()
	c := start(t, hc, Config{Auth: auth.Config{TLS: aCreds}})
	addPeer(t, c, b, hb.testHost)
	require.NoError(t, c.Send(ctx(t), hb.id, []byte("renewed")))
	hb.next(t)
	name, _ = hb.identity(hc.id)
	assert.Equal(t, "node-a-2026", name, "the new connection presents the renewed certificate")
	require.NoError(t, aCreds.ReloadError())

	require.NoError(t, a.Send(ctx(t), hb.id, []byte("still open")))
	assert.Equal(t, "still open", string(hb.next(t).frame))
	assert.False(t, hb.wentDown(ha.id))
}
