package ucxtransport

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/ucx"
)

// The policy on its own, for every kind of UCX and opt-in, whatever this binary links.
func TestGuardPolicy(t *testing.T) {
	guarded := ucx.RMAGuard{Enforced: true, Version: "velo-ucx-guard/2", UCX: "1.22.0"}
	open := ucx.RMAGuard{UCX: "1.13.1"}

	g, err := decideGuard(guarded, Config{}, "")
	require.NoError(t, err)
	assert.Empty(t, g.trustedBy)
	assert.Empty(t, g.reason(), "a guarded UCX is nothing to report")
	assert.Equal(t, "enforced (velo-ucx-guard/2)", g.describe())

	g, err = decideGuard(guarded, Config{TrustNetwork: true}, "1")
	require.NoError(t, err)
	assert.Empty(t, g.trustedBy, "an opt-in means nothing where the guard is enforced")

	for _, env := range []string{"", "0", "no", "maybe"} {
		_, err = decideGuard(open, Config{}, env)
		require.ErrorIs(t, err, ErrUnguardedUCX, "env %q", env)
		for _, want := range []string{"UCX 1.13.1", "make ucx-static", "-tags ucx_static", "VELO_UCX_TRUST_NETWORK=1", "Config.TrustNetwork", "docs/security.md"} {
			assert.Contains(t, err.Error(), want, "env %q", env)
		}
		if env != "" {
			assert.Contains(t, err.Error(), "is not an opt-in", "a value that is not affirmative is named")
		}
	}

	for _, env := range []string{"1", "true", " YES ", "on"} {
		g, err = decideGuard(open, Config{}, env)
		require.NoError(t, err, "env %q", env)
		assert.Contains(t, g.trustedBy, TrustNetworkEnv+"=")
		assert.Contains(t, g.reason(), "UCX trusts the network")
		assert.Contains(t, g.reason(), "read and write all of this process's memory")
		assert.Contains(t, g.reason(), "make ucx-static")
		assert.Contains(t, g.describe(), "NOT enforced")
	}
	g, err = decideGuard(open, Config{TrustNetwork: true}, "")
	require.NoError(t, err)
	assert.Equal(t, "Config.TrustNetwork", g.trustedBy)
	assert.Contains(t, g.reason(), "Config.TrustNetwork says to trust the network")

	assert.False(t, errors.Is(err, ErrUnguardedUCX))
}
