//go:build !cgo && linux

package ucx

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// A binary built with CGO_ENABLED=0 runs the same package code; its first call into UCX
// says, in words a user can act on, that UCX is not compiled in, and nothing pretends to
// have applied a UCX setting.
func TestWithoutCgoEveryEntryPointSaysNotCompiled(t *testing.T) {
	_, err := NewContext(ContextConfig{})
	require.ErrorIs(t, err, ErrNotCompiled)
	require.ErrorIs(t, err, errors.ErrUnsupported, "the standard library's sentinel for the same meaning")
	require.Contains(t, err.Error(), "rebuild with cgo")

	_, err = NewEngine(context.Background(), EngineConfig{})
	require.ErrorIs(t, err, ErrNotCompiled)

	_, err = QueryResources()
	require.ErrorIs(t, err, ErrNotCompiled)

	require.Zero(t, Version().Major, "no UCX is linked, so there is no version")
	_, err = FindTool("ucx_info")
	require.ErrorIs(t, err, ErrNotCompiled)

	for _, d := range ApplyEnvDefaults() {
		require.NotEqual(t, "ucm_set_global_opts", d.Via, "%s: nothing of UCX is loaded to apply it to", d.Name)
		require.NotEqual(t, "library constructor", d.Via, "%s: no constructor ran", d.Name)
	}
}

// Without UCX there is no guard to ask about, and the answer says so rather than "not
// enforced".
func TestWithoutCgoTheRMAGuardIsNotCompiled(t *testing.T) {
	g, err := SoftwareRMAGuard()
	require.ErrorIs(t, err, ErrNotCompiled)
	require.False(t, g.Enforced)
}
