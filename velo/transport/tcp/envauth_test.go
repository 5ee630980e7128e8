package tcp

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/auth"
	"github.com/velo-go/velo/velo/auth/authtest"
)

// The credentials an operator puts in the environment are used by every transport a program
// builds by hand with no Auth, or refused at New: never left unused while the instance runs
// unauthenticated.

// TestHandBuiltTransportTakesTheEnvironmentsSecret: with VELO_CLUSTER_SECRET_FILE set, two
// transports built with an empty Config authenticate each other with that secret, and one built
// after the variable is gone (no credentials at all) is refused by them.
func TestHandBuiltTransportTakesTheEnvironmentsSecret(t *testing.T) {
	authtest.ClearEnv(t)
	file := authtest.SecretFile(t, authtest.Secret("operator"))
	t.Setenv(auth.SecretFileEnv, file)

	ha, hb := newAuthHost(), newAuthHost()
	a, b := start(t, ha, Config{}), start(t, hb, Config{})
	require.Equal(t, auth.ModeSecret, a.AuthMode(), "the environment's secret is the transport's")
	assert.Equal(t, "cluster secret from secret file "+file, a.Describe()["auth"])
	addPeer(t, a, b, hb.testHost)
	require.NoError(t, a.Send(ctx(t), hb.id, []byte("ping")))
	assert.Equal(t, "ping", string(hb.next(t).frame))
	_, ok := hb.identity(ha.id)
	assert.True(t, ok, "the acceptor authenticated the dialer with the environment's secret")

	// Credentials from code equal to the environment's (auth.FromEnv, or the same file) are fine.
	env, err := auth.FromEnv()
	require.NoError(t, err)
	start(t, newAuthHost(), Config{Auth: env})
	same, err := auth.SecretsFromFile(file)
	require.NoError(t, err)
	start(t, newAuthHost(), Config{Auth: auth.Config{Secrets: same}})

	// Without the variable, an empty Config authenticates nobody, and the others refuse it.
	require.NoError(t, os.Unsetenv(auth.SecretFileEnv))
	err = refusedDialer(t, Config{}, b, hb, reasonUnauthenticated)
	assert.Contains(t, err.Error(), "requires credentials this instance lacks")
}

// TestHandBuiltTransportTakesTheEnvironmentsTLS: VELO_TLS_* set, an empty Config is mutual TLS.
func TestHandBuiltTransportTakesTheEnvironmentsTLS(t *testing.T) {
	authtest.ClearEnv(t)
	ca := authtest.NewCA(t, "ca")
	m := ca.Valid(t, "node")
	t.Setenv(auth.TLSCAEnv, ca.CAFile)
	t.Setenv(auth.TLSCertEnv, m.CertFile)
	t.Setenv(auth.TLSKeyEnv, m.KeyFile)
	ha, hb := newAuthHost(), newAuthHost()
	a, b := start(t, ha, Config{}), start(t, hb, Config{})
	require.Equal(t, auth.ModeTLS, a.AuthMode())
	addPeer(t, a, b, hb.testHost)
	require.NoError(t, a.Send(ctx(t), hb.id, []byte("ping")))
	assert.Equal(t, "ping", string(hb.next(t).frame))
	id, ok := hb.identity(ha.id)
	assert.True(t, ok)
	assert.Equal(t, "node", id)
	// The same files given in code, one path written another way: the same credentials.
	start(t, newAuthHost(), Config{Auth: auth.Config{TLS: ca.TLS(t, m, "")}})
	files := ca.Files(m, "")
	files.CAFile = filepath.Join(filepath.Dir(files.CAFile), ".", filepath.Base(files.CAFile))
	tl, err := auth.NewTLS(files)
	require.NoError(t, err)
	start(t, newAuthHost(), Config{Auth: auth.Config{TLS: tl}})
}

// TestEnvironmentCredentialsUnusedOrBrokenRefuseToStart: every way the environment's credentials
// could go unused, or cannot be used, makes New fail with an error that names the variables and
// the fix; nothing is listening afterwards.
func TestEnvironmentCredentialsUnusedOrBrokenRefuseToStart(t *testing.T) {
	ca := authtest.NewCA(t, "ca")
	m := ca.Valid(t, "node")
	open := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(open, []byte(authtest.Secret("x")+"\n"), 0o644))
	for _, c := range []struct {
		name     string
		env      map[string]string
		auth     func(t *testing.T) auth.Config
		conflict bool
		says     []string
	}{
		{"secret too short", map[string]string{auth.SecretEnv: "short"}, nil, false,
			[]string{"at least 32", auth.SecretEnv, "fix them or unset them"}},
		{"secret set but empty", map[string]string{auth.SecretEnv: ""}, nil, false, []string{auth.SecretEnv, "0 bytes"}},
		{"secret file others can read", map[string]string{auth.SecretFileEnv: open}, nil, false, []string{"chmod 600", auth.SecretFileEnv}},
		{"secret file missing", map[string]string{auth.SecretFileEnv: "/nonexistent/velo-secret"}, nil, false, []string{"/nonexistent/velo-secret"}},
		{"next secret alone", map[string]string{auth.NextSecretEnv: authtest.Secret("next")}, nil, false, []string{auth.NextSecretEnv, auth.SecretEnv}},
		{"TLS certificate without the CA", map[string]string{auth.TLSCertEnv: m.CertFile, auth.TLSKeyEnv: m.KeyFile}, nil, false,
			[]string{auth.TLSCertEnv, "VELO_TLS_CA is not"}},
		{"TLS and a secret", map[string]string{auth.TLSCAEnv: ca.CAFile, auth.TLSCertEnv: m.CertFile, auth.TLSKeyEnv: m.KeyFile,
			auth.SecretEnv: authtest.Secret("x")}, nil, false, []string{"choose one"}},
		{"another secret in code", map[string]string{auth.SecretEnv: authtest.Secret("env")},
			func(t *testing.T) auth.Config { return auth.Config{Secrets: secrets(t, authtest.Secret("code"))} }, true,
			[]string{"secrets given in code", auth.SecretEnv, "would go unused"}},
		{"TLS in code, a secret in the environment", map[string]string{auth.SecretFileEnv: authtest.SecretFile(t, authtest.Secret("env"))},
			func(t *testing.T) auth.Config { return auth.Config{TLS: ca.TLS(t, m, "")} }, true,
			[]string{"mutual TLS", auth.SecretFileEnv}},
		{"a secret in code, broken TLS in the environment", map[string]string{auth.TLSCAEnv: "/nonexistent/ca.pem"},
			func(t *testing.T) auth.Config { return auth.Config{Secrets: secrets(t, authtest.Secret("code"))} }, true,
			[]string{"unusable", auth.TLSCAEnv}},
	} {
		t.Run(c.name, func(t *testing.T) {
			authtest.ClearEnv(t)
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			cfg := Config{ListenAddress: "127.0.0.1:0"}
			if c.auth != nil {
				cfg.Auth = c.auth(t)
			}
			tr, err := New(cfg)
			require.Error(t, err)
			require.Nil(t, tr)
			if c.conflict {
				require.ErrorIs(t, err, auth.ErrEnvConflict)
			}
			for _, s := range c.says {
				assert.Contains(t, err.Error(), s)
			}
		})
	}
}
