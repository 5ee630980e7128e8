//go:build cgo && linux

package velo

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/transport"
	"github.com/velo-go/velo/velo/transport/tcp"
	"github.com/velo-go/velo/velo/transport/ucxtransport"
)

// families lists the metric family names a gatherer holds, by prefix.
func families(t *testing.T, g prometheus.Gatherer, prefix string) []string {
	t.Helper()
	mfs, err := g.Gather()
	require.NoError(t, err)
	var names []string
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), prefix) {
			names = append(names, mf.GetName())
		}
	}
	return names
}

// The Registerer given to velo reaches every component velo wires: the UCX transport's and its
// engine's families appear there without setting the transport's own Config.Metrics. A
// Registerer given to the transport explicitly still wins: its families go there and only there.
func TestWithRegistererReachesTheUCXTransportAndItsEngine(t *testing.T) {
	reg := prometheus.NewRegistry()
	u, err := ucxtransport.New(ucxtransport.Config{TLS: "tcp", Logger: quietLogger()})
	require.NoError(t, err)
	v, err := New(context.Background(), WithLogger(quietLogger()), WithRegisterer(reg), WithUCXTransport(u))
	require.NoError(t, err)
	t.Cleanup(func() { v.Close() })
	require.NotEmpty(t, families(t, reg, "velo_ucx_transport_"), "the UCX transport's families")
	require.NotEmpty(t, families(t, reg, "ucx_engine_"), "the UCX engine's families")
	require.NotEmpty(t, families(t, reg, "velo_rdma_"), "the RDMA registry's families")
	require.NotEmpty(t, families(t, reg, metrics.RDMAPathTotal), "velo's own families")

	own, theirs := prometheus.NewRegistry(), prometheus.NewRegistry()
	u2, err := ucxtransport.New(ucxtransport.Config{TLS: "tcp", Logger: quietLogger(), Metrics: own})
	require.NoError(t, err)
	v2, err := New(context.Background(), WithLogger(quietLogger()), WithRegisterer(theirs), WithUCXTransport(u2))
	require.NoError(t, err)
	t.Cleanup(func() { v2.Close() })
	require.NotEmpty(t, families(t, own, "velo_ucx_transport_"))
	require.NotEmpty(t, families(t, own, "ucx_engine_"))
	require.Empty(t, families(t, theirs, "velo_ucx_transport_"), "an explicit per-component Registerer wins")
	require.Empty(t, families(t, theirs, "ucx_engine_"))
}

// Every family an instance with both transports and an RDMA registry registers is listed in
// docs/velo.md: a new series without a line there fails here.
func TestDocsListEveryMetricFamily(t *testing.T) {
	doc, err := os.ReadFile("../docs/velo.md")
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	u, err := ucxtransport.New(ucxtransport.Config{TLS: "tcp", Logger: quietLogger()})
	require.NoError(t, err)
	v, err := New(context.Background(), WithLogger(quietLogger()), WithRegisterer(reg), WithUCXTransport(u), WithTransport(mustTCP(t)))
	require.NoError(t, err)
	t.Cleanup(func() { v.Close() })
	names := families(t, reg, "")
	require.GreaterOrEqual(t, len(names), 40, "the instance registered fewer families than velo, TCP, UCX and the registry have")
	for _, name := range names {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
		require.True(t, bytes.Contains(doc, []byte("`"+base+"`")),
			"docs/velo.md, Metrics, has no line for %s", base)
	}
}

func mustTCP(t *testing.T) transport.Transport {
	t.Helper()
	tr, err := tcp.New(tcp.Config{})
	require.NoError(t, err)
	return tr
}
