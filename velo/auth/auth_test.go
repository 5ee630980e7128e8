package auth_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/auth"
	"github.com/velo-go/velo/velo/auth/authtest"
)

// TestSecretsNeverPrint: no formatting of the credentials shows the secret.
func TestSecretsNeverPrint(t *testing.T) {
	secret := authtest.Secret("do-not-print")
	s, err := auth.NewSecrets([]byte(secret))
	require.NoError(t, err)
	for _, f := range []string{"%v", "%+v", "%#v", "%s"} {
		assert.NotContains(t, fmt.Sprintf(f, s), secret, f)
		assert.NotContains(t, fmt.Sprintf(f, auth.Config{Secrets: s}), secret, f)
	}
}

// TestSecretFileRules: the file's first line is the current secret and the second the next one;
// short secrets, empty files, more than two secrets and files others can read are refused with
// the fix named.
func TestSecretFileRules(t *testing.T) {
	cur, next := authtest.Secret("current"), authtest.Secret("next")
	p := authtest.SecretFile(t, "# the cluster secret", cur, "", next)
	s, err := auth.SecretsFromFile(p)
	require.NoError(t, err)
	proof := s.Prove(auth.RoleDialer, []byte("transcript"))
	other, _ := auth.NewSecrets([]byte(next))
	assert.False(t, other.Verify(s.Prove(auth.RoleDialer, []byte("t")), auth.RoleDialer, []byte("t")), "proofs are made with the current secret only")
	assert.True(t, s.Verify(other.Prove(auth.RoleDialer, []byte("t")), auth.RoleDialer, []byte("t")), "the next secret is accepted")
	assert.True(t, s.Verify(proof, auth.RoleDialer, []byte("transcript")))
	assert.False(t, s.Verify(proof, auth.RoleAcceptor, []byte("transcript")), "a proof is bound to its role")
	assert.False(t, s.Verify(proof, auth.RoleDialer, []byte("transcript2")), "a proof is bound to its transcript")
	assert.False(t, s.Verify(proof, auth.RoleDialer, []byte("transcrip"), []byte("t")), "parts are length-delimited")

	for _, tc := range []struct {
		name  string
		lines []string
		mode  os.FileMode
		want  string
	}{
		{"short", []string{"too-short"}, 0o600, "at least 32"},
		{"empty", []string{"# nothing"}, 0o600, "holds no secret"},
		{"three", []string{cur, next, cur}, 0o600, "at most one next"},
		{"world-readable", []string{cur}, 0o644, "chmod 600"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := authtest.SecretFile(t, tc.lines...)
			require.NoError(t, os.Chmod(p, tc.mode))
			_, err := auth.SecretsFromFile(p)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.NotContains(t, err.Error(), cur)
		})
	}
	_, err = auth.SecretsFromFile(filepath.Join(t.TempDir(), "missing"))
	require.Error(t, err)
}

// TestSecretFileReload: an edited file takes effect within a second; a broken edit keeps the last
// good secrets and says why.
func TestSecretFileReload(t *testing.T) {
	a, b := authtest.Secret("a"), authtest.Secret("b")
	p := authtest.SecretFile(t, a)
	s, err := auth.SecretsFromFile(p)
	require.NoError(t, err)
	withB, _ := auth.NewSecrets([]byte(b))
	msg := []byte("m")
	require.False(t, s.Verify(withB.Prove(auth.RoleDialer, msg), auth.RoleDialer, msg))
	authtest.WriteSecretFile(t, p, a, b)
	require.Eventually(t, func() bool { return s.Verify(withB.Prove(auth.RoleDialer, msg), auth.RoleDialer, msg) },
		3*time.Second, 50*time.Millisecond, "the next secret was not picked up")
	authtest.WriteSecretFile(t, p, "short")
	time.Sleep(1100 * time.Millisecond)
	assert.True(t, s.Verify(withB.Prove(auth.RoleDialer, msg), auth.RoleDialer, msg), "the last good secrets stay")
	require.Error(t, s.ReloadError())
	assert.Contains(t, s.ReloadError().Error(), "at least 32")
}

// TestFromEnv: the environment selects TLS, a secret, or nothing, and refuses both at once.
func TestFromEnv(t *testing.T) {
	t.Setenv(auth.SecretEnv, "")
	os.Unsetenv(auth.SecretEnv)
	c, err := auth.FromEnv()
	require.NoError(t, err)
	assert.Equal(t, auth.ModeNone, c.Mode())

	t.Setenv(auth.SecretEnv, authtest.Secret("env"))
	c, err = auth.FromEnv()
	require.NoError(t, err)
	assert.Equal(t, auth.ModeSecret, c.Mode())
	assert.Equal(t, "cluster secret from environment variable VELO_CLUSTER_SECRET", c.String())

	ca := authtest.NewCA(t, "ca")
	m := ca.Valid(t, "node")
	t.Setenv(auth.TLSCAEnv, ca.CAFile)
	t.Setenv(auth.TLSCertEnv, m.CertFile)
	t.Setenv(auth.TLSKeyEnv, m.KeyFile)
	_, err = auth.FromEnv()
	require.ErrorContains(t, err, "choose one")
	os.Unsetenv(auth.SecretEnv)
	c, err = auth.FromEnv()
	require.NoError(t, err)
	assert.Equal(t, auth.ModeTLS, c.Mode())
}

// TestOwnCertificateIsChecked: NewTLS refuses a certificate of another CA, an expired one, and a
// key that does not match, naming the file.
func TestOwnCertificateIsChecked(t *testing.T) {
	ca, other := authtest.NewCA(t, "ca"), authtest.NewCA(t, "other")
	m := other.Valid(t, "stranger")
	_, err := auth.NewTLS(ca.Files(m, ""))
	require.ErrorIs(t, err, auth.ErrCertUnknownCA)
	old := ca.Issue(t, "old", time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour))
	_, err = auth.NewTLS(ca.Files(old, ""))
	require.ErrorIs(t, err, auth.ErrCertExpired)
	a, b := ca.Valid(t, "a"), ca.Valid(t, "b")
	_, err = auth.NewTLS(auth.TLSFiles{CAFile: ca.CAFile, CertFile: a.CertFile, KeyFile: b.KeyFile})
	require.ErrorContains(t, err, a.CertFile)
	_, err = auth.NewTLS(auth.TLSFiles{CAFile: ca.CAFile})
	require.ErrorContains(t, err, "needs CAFile, CertFile and KeyFile")
}

// TestLogLimiter: one line per source per interval, with the count of those held back.
func TestLogLimiter(t *testing.T) {
	l := auth.LogLimiter{Interval: time.Second}
	t0 := time.Unix(1000, 0)
	ok, _ := l.Allow("10.0.0.9", t0)
	assert.True(t, ok)
	for i := 0; i < 5; i++ {
		ok, _ = l.Allow("10.0.0.9", t0.Add(time.Duration(i)*100*time.Millisecond))
		assert.False(t, ok)
	}
	ok, _ = l.Allow("10.0.0.10", t0)
	assert.True(t, ok, "another source has its own budget")
	ok, n := l.Allow("10.0.0.9", t0.Add(1500*time.Millisecond))
	assert.True(t, ok)
	assert.Equal(t, 5, n)
}

// TestHelloKey: the key that seals a hello's frames comes only with a valid proof, from
// whichever session key made it; it is neither the proof (which travels in the clear) nor the
// same for another hello.
func TestHelloKey(t *testing.T) {
	s1, s2 := []byte(authtest.Secret("session-1")), []byte(authtest.Secret("session-2"))
	hello := []byte("a hello and its receiver")
	proof := auth.HelloProof(s2, hello)
	key, ok := auth.HelloKey([][]byte{s1, s2}, hello, proof)
	require.True(t, ok)
	assert.Len(t, key, 32)
	assert.NotEqual(t, proof, key)
	again, ok := auth.HelloKey([][]byte{s2}, hello, proof)
	require.True(t, ok)
	assert.Equal(t, key, again, "both sides derive the same key")
	other, ok := auth.HelloKey([][]byte{s2}, []byte("another hello"), auth.HelloProof(s2, []byte("another hello")))
	require.True(t, ok)
	assert.NotEqual(t, key, other)
	_, ok = auth.HelloKey([][]byte{s1}, hello, proof)
	assert.False(t, ok, "a session that did not make the proof")
	_, ok = auth.HelloKey([][]byte{s1, s2}, []byte("changed hello"), proof)
	assert.False(t, ok, "a proof over other bytes")
}
