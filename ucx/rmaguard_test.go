//go:build cgo && linux

package ucx

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/ucx/internal/capi"
)

// The answer is checked against a witness that does not go through the weak references: the
// static build must carry the marker (make ucx-static applies the patch set), and a shared UCX
// enforces exactly when one of the loaded libraries exports the marker (Debian's 1.13.1 does
// not; a UCX built from the patched source and named by UCX_DIR does).
func TestSoftwareRMAGuardMatchesTheLinkedUCX(t *testing.T) {
	g, err := SoftwareRMAGuard()
	require.NoError(t, err)
	require.Equal(t, Version().releaseString(), g.UCX)
	if linkedStatic {
		require.True(t, g.Enforced, "the static UCX of make ucx-static must carry velo's guard patch set (rebuild it: make ucx-static)")
	} else {
		require.Equal(t, capi.SymbolLoaded("velo_ucx_guard_version"), g.Enforced,
			"the weak reference disagrees with the loaded libraries' symbols")
	}
	if g.Enforced {
		assert.True(t, strings.HasPrefix(g.Version, GuardVersionPrefix), "version %q", g.Version)
		assert.Equal(t, "enforced ("+g.Version+")", g.String())
		return
	}
	assert.Empty(t, g.Version)
	assert.Zero(t, g.Refused)
	assert.Contains(t, g.String(), "not enforced")
	assert.Contains(t, g.String(), g.UCX)
}

// Every engine exports the guard: the enforced gauge always, the refusal counters (one series
// per kind, from zero) and the tcp listener's two only where the guard exists; all lint clean.
func TestEngineExportsTheRMAGuard(t *testing.T) {
	reg := prometheus.NewRegistry()
	newTestEngine(t, "guard", func(c *EngineConfig) { c.Metrics = reg })
	g, err := SoftwareRMAGuard()
	require.NoError(t, err)

	mfs, err := reg.Gather()
	require.NoError(t, err)
	families := map[string]int{}
	var enforced float64 = -1
	kinds := map[string]bool{}
	for _, mf := range mfs {
		families[mf.GetName()] = len(mf.GetMetric())
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "ucx_engine_rma_guard_enforced":
				enforced = m.GetGauge().GetValue()
			case "ucx_engine_rma_refused_total":
				for _, l := range m.GetLabel() {
					if l.GetName() == "kind" {
						kinds[l.GetValue()] = true
					}
				}
			}
		}
	}
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	require.Contains(t, families, "ucx_engine_rma_guard_enforced")
	if !g.Enforced {
		require.Equal(t, float64(0), enforced)
		require.NotContains(t, families, "ucx_engine_rma_refused_total", "no guard, no refusal counts that would read as zero")
		require.NotContains(t, families, "ucx_engine_tcp_accept_paused_total")
		require.NotContains(t, families, "ucx_engine_tcp_connections_refused_total")
		return
	}
	require.Equal(t, float64(1), enforced)
	for _, k := range GuardRefusalKinds {
		require.True(t, kinds[k], "kind %q missing", k)
	}
	require.True(t, kinds["holder"], "kind \"holder\" (the engine's own) missing")
	require.Len(t, kinds, len(GuardRefusalKinds)+1)
	// the tcp listener's counters (patches 0008, 0010): one series each, not RMA kinds
	require.Equal(t, 1, families["ucx_engine_tcp_accept_paused_total"])
	require.Equal(t, 1, families["ucx_engine_tcp_connections_refused_total"])
}
