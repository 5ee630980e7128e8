package rdmapath_test

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/transport/ucxtransport"
)

// softwareGuard reports whether a direct GET here is software RMA that the linked UCX refuses:
// the UCX has velo's guard, and the lanes are tcp (the tests' default; UCX_TLS in the environment
// may name hardware lanes instead).
func softwareGuard(t testing.TB) (ucx.RMAGuard, bool) {
	t.Helper()
	g, err := ucx.SoftwareRMAGuard()
	require.NoError(t, err)
	tls := os.Getenv("UCX_TLS")
	return g, g.Enforced && (tls == "" || strings.Trim(tls, " ") == "tcp")
}

// TestDirectGetIsRefusedByTheGuard: on velo's UCX a consumer configured for ucxtransport.RMADirect reads
// with ucp_get_nbx, which over tcp is a software GET that names the owner's address. The owner's
// UCX refuses it without touching the memory; the consumer's GET fails, the runtime fetches the
// payload by chunks (reason get_failed, never a wrong byte), the owner stays reachable, and the
// refusal is counted in ucx_engine_rma_refused_total{kind="get"}.
func TestDirectGetIsRefusedByTheGuard(t *testing.T) {
	g, refused := softwareGuard(t)
	if !refused {
		t.Skipf("no software GET to refuse here (guard %v, UCX_TLS=%q): the static UCX over tcp has one", g.Enforced, os.Getenv("UCX_TLS"))
	}
	ownerReg := prometheus.NewRegistry()
	owner := startNodeWith(t, ucxtransport.Config{Metrics: ownerReg}, true)
	cons := startNodeWith(t, ucxtransport.Config{RMA: ucxtransport.RMADirect}, true)
	link(t, owner, cons, true)
	ctx := tctx(t)
	refusedGets := func() float64 {
		x, err := metrics.Value(ownerReg, "ucx_engine_rma_refused_total", map[string]string{"kind": "get"})
		require.NoError(t, err)
		return x
	}
	before := refusedGets()
	for i, n := range []int{1, 4096 + 1, 1 << 20} {
		data := randomBytes(n, uint64(60+i))
		h, err := owner.StageDataPinned(ctx, data)
		require.NoError(t, err)
		dst := make([]byte, n)
		l, err := cons.GetInto(ctx, h, dst)
		require.NoError(t, err, "%d bytes", n)
		require.True(t, bytes.Equal(dst, data), "%d bytes: the payload differs", n)
		require.Equal(t, metrics.PathChunked, l.Path, "%d bytes", n)
		require.Equal(t, metrics.ReasonGetFailed, l.Reason, "%d bytes", n)
		require.NoError(t, l.Release(ctx))
	}
	require.Greater(t, refusedGets(), before, "the owner's UCX counted no refused software GET")
	require.Equal(t, float64(3), pathCount(t, cons.Velo, metrics.PathChunked, metrics.ReasonGetFailed))
}
