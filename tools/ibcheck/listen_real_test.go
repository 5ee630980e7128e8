package main

import (
	"context"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/tools/ibcheck/internal/check"
)

// TestProbeListen: the listen probe makes a worker under the caller's UCX_* variables and reports
// where its tcp transport listens: with UCX_NET_DEVICES=lo on loopback addresses only, with a
// UCX_TLS that leaves tcp out nowhere.
func TestProbeListen(t *testing.T) {
	if !check.Live().CGO {
		t.Skip("no UCX in a CGO_ENABLED=0 build")
	}
	t.Setenv("UCX_TLS", "tcp")
	t.Setenv("UCX_NET_DEVICES", "lo")
	info := check.ProbeUCX(context.Background(), nil, false)
	require.NoError(t, info.Err)
	require.NotNil(t, info.Listen)
	require.Empty(t, info.Listen.Err)
	assert.Equal(t, "lo", info.Listen.NetDevices)
	require.NotEmpty(t, info.Listen.Addrs, "a tcp worker on lo listens there")
	for _, a := range info.Listen.Addrs {
		ap, err := netip.ParseAddrPort(a)
		require.NoError(t, err)
		assert.True(t, ap.Addr().IsLoopback(), "listens on %s, beyond lo", a)
	}

	t.Setenv("UCX_TLS", "self")
	info = check.ProbeUCX(context.Background(), nil, false)
	require.NotNil(t, info.Listen)
	require.Empty(t, info.Listen.Err)
	assert.Empty(t, info.Listen.Addrs, "no tcp lane, no tcp listener")
}
