//go:build cgo && linux

package ucxtransport_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/velo"
	"github.com/velo-go/velo/velo/transport/ucxtransport"
)

// These tests take the branch of the UCX this binary links: make test-ucx-transport runs them on
// Debian's shared UCX (no guard), the other UCX suites on the static one (guarded).

func linkedGuard(t *testing.T) ucx.RMAGuard {
	t.Helper()
	g, err := ucx.SoftwareRMAGuard()
	require.NoError(t, err)
	return g
}

// Without the opt-in, a UCX that does not enforce keys is refused before any worker exists: not
// one engine metric was registered.
func TestUnguardedUCXIsRefusedWithoutOptIn(t *testing.T) {
	if g := linkedGuard(t); g.Enforced {
		t.Skipf("the linked UCX enforces keys (%s); make test-ucx-transport runs this on the system UCX too", g.Version)
	}
	t.Setenv(ucxtransport.TrustNetworkEnv, "")
	reg := prometheus.NewRegistry()
	u, err := ucxtransport.New(ucxtransport.Config{TLS: "tcp", Logger: quiet, Metrics: reg})
	require.ErrorIs(t, err, ucxtransport.ErrUnguardedUCX)
	require.Nil(t, u)
	t.Log(err)
	for _, want := range []string{"make ucx-static", "-tags ucx_static", ucxtransport.TrustNetworkEnv + "=1", "Config.TrustNetwork"} {
		assert.Contains(t, err.Error(), want)
	}
	mfs, err := reg.Gather()
	require.NoError(t, err)
	assert.Empty(t, mfs, "the refusal came after a UCX worker was made")

	t.Setenv(ucxtransport.TrustNetworkEnv, "no")
	_, err = ucxtransport.New(ucxtransport.Config{TLS: "tcp", Logger: quiet})
	require.ErrorIs(t, err, ucxtransport.ErrUnguardedUCX)
	assert.Contains(t, err.Error(), `VELO_UCX_TRUST_NETWORK="no" is not an opt-in`)
}

// With the opt-in the transport runs and says so everywhere: a warning at start, the instance's
// health (degraded, still ready, on /readyz and in the JSON), the introspection page, and the
// engine's ucx_engine_rma_guard_enforced at 0.
func TestTrustedNetworkRunsAndSaysSo(t *testing.T) {
	if g := linkedGuard(t); g.Enforced {
		t.Skipf("the linked UCX enforces keys (%s); make test-ucx-transport runs this on the system UCX too", g.Version)
	}
	for _, optIn := range []string{"env", "config"} {
		t.Run(optIn, func(t *testing.T) {
			cfg := ucxtransport.Config{TLS: "tcp"}
			if optIn == "env" {
				t.Setenv(ucxtransport.TrustNetworkEnv, "1")
			} else {
				t.Setenv(ucxtransport.TrustNetworkEnv, "")
				cfg.TrustNetwork = true
			}
			var logs syncBuffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			reg := prometheus.NewRegistry()
			u, err := ucxtransport.New(cfg)
			require.NoError(t, err)
			v, err := velo.New(context.Background(), velo.WithUCXTransport(u), velo.WithLogger(log), velo.WithRegisterer(reg))
			require.NoError(t, err)
			t.Cleanup(func() { v.Close() })

			assert.Regexp(t, `level=WARN msg="ucx: WARNING: trust the network: the linked UCX \S+ does not enforce remote keys on software RMA`, logs.String())
			_, by := u.SoftwareRMAGuard()
			assert.NotEmpty(t, by)

			h := v.Health()
			assert.Equal(t, velo.StateDegraded, h.State)
			assert.True(t, h.Ready(), "trusting the network is the operator's decision: the instance serves")
			require.Len(t, h.Reasons, 1)
			assert.Contains(t, h.Reasons[0], "UCX trusts the network")
			assert.Contains(t, h.Reasons[0], by)

			rec := httptest.NewRecorder()
			v.HealthHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
			assert.Equal(t, http.StatusOK, rec.Code)
			var body struct {
				State   string   `json:"state"`
				Reasons []string `json:"reasons"`
			}
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
			assert.Equal(t, "degraded", body.State)
			assert.Equal(t, h.Reasons, body.Reasons)

			in := v.Introspect()
			require.Len(t, in.Transports, 1)
			assert.Contains(t, in.Transports[0].Settings["rma_guard"], "NOT enforced, trusting the network")
			rec = httptest.NewRecorder()
			v.DebugHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/velo", nil))
			page, _ := io.ReadAll(rec.Body)
			assert.Contains(t, string(page), "UCX trusts the network")
			assert.Contains(t, string(page), "NOT enforced, trusting the network")

			mfs, err := reg.Gather()
			require.NoError(t, err)
			var seen bool
			for _, mf := range mfs {
				if mf.GetName() == "ucx_engine_rma_guard_enforced" {
					seen = true
					assert.Equal(t, float64(0), mf.GetMetric()[0].GetGauge().GetValue())
				}
				assert.NotEqual(t, "ucx_engine_rma_refused_total", mf.GetName())
			}
			assert.True(t, seen, "ucx_engine_rma_guard_enforced is not registered on the instance's Registerer")
		})
	}
}

// On the enforcing UCX the transport starts without any opt-in, names the guard's version at
// start, and has nothing to report in its health.
func TestGuardedUCXNamesItsVersion(t *testing.T) {
	g := linkedGuard(t)
	if !g.Enforced {
		t.Skip("the linked UCX does not enforce keys; the static build does (make ucx-static, -tags ucx_static)")
	}
	t.Setenv(ucxtransport.TrustNetworkEnv, "")
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	reg := prometheus.NewRegistry()
	u, err := ucxtransport.New(ucxtransport.Config{TLS: "tcp"})
	require.NoError(t, err)
	v, err := velo.New(context.Background(), velo.WithUCXTransport(u), velo.WithLogger(log), velo.WithRegisterer(reg))
	require.NoError(t, err)
	t.Cleanup(func() { v.Close() })

	assert.Contains(t, logs.String(), `level=INFO msg="ucx: software RMA is guarded`)
	assert.Contains(t, logs.String(), "guard="+g.Version)
	assert.NotContains(t, logs.String(), "trust the network")
	assert.Equal(t, velo.StateReady, v.Health().State, "reasons: %v", v.Health().Reasons)
	got, by := u.SoftwareRMAGuard()
	assert.True(t, got.Enforced)
	assert.Empty(t, by)
	assert.Equal(t, "enforced ("+g.Version+")", v.Introspect().Transports[0].Settings["rma_guard"])

	mfs, err := reg.Gather()
	require.NoError(t, err)
	kinds := 0
	for _, mf := range mfs {
		if mf.GetName() == "ucx_engine_rma_refused_total" {
			kinds = len(mf.GetMetric())
		}
	}
	assert.Equal(t, len(ucx.GuardRefusalKinds)+1, kinds, "the patch set's kinds and the engine's own, holder")
}
