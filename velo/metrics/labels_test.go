package metrics

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The path metric reads with its typed constants and no conversion, and the older spellings —
// a map[string]string literal or variable — still compile and read the same series.
func TestValueTakesTypedPathLabels(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	require.NoError(t, err)
	m.CountPath(PathRDMA, ReasonOK)
	m.CountPaths(PathChunked, ReasonNoOffer, 3)

	n, err := Value(reg, RDMAPathTotal, PathLabels(PathRDMA, ReasonOK))
	require.NoError(t, err)
	assert.Equal(t, 1.0, n)
	n, err = Value(reg, RDMAPathTotal, PathLabels(PathChunked, ReasonNoOffer))
	require.NoError(t, err)
	assert.Equal(t, 3.0, n)

	n, err = Value(reg, RDMAPathTotal, map[string]string{"path": "rdma", "reason": "ok"})
	require.NoError(t, err)
	assert.Equal(t, 1.0, n)
	var plain map[string]string = PathLabels(PathChunked, ReasonNoOffer)
	n, err = Value(reg, RDMAPathTotal, plain)
	require.NoError(t, err)
	assert.Equal(t, 3.0, n)

	_, err = Value(reg, RDMAPathTotal, PathLabels(PathRDMA, ReasonNoOffer))
	require.ErrorIs(t, err, ErrNoSeries, "rdma/no_offer is not a pair the metric has")

	n, err = Value(reg, RendezvousBytesTotal, Labels{"direction": "sent", "path": PathRDMA.String()})
	require.NoError(t, err)
	assert.Zero(t, n)
	assert.Equal(t, "chunked/get_failed", fmt.Sprintf("%s/%v", PathChunked, ReasonGetFailed))
}
