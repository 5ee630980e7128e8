//go:build cgo && linux

package ucxtransport

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/transport"
)

func TestProcAddr(t *testing.T) {
	ap, ok := procAddr("0100007F:1F90")
	require.True(t, ok)
	assert.Equal(t, "127.0.0.1:8080", ap.String())
	ap, ok = procAddr("00000000000000000000000001000000:0050")
	require.True(t, ok)
	assert.Equal(t, "[::1]:80", ap.String())
	for _, bad := range []string{"", "0100007F", "zz00007F:1F90", "0100007F:zzzz", "01007F:0050"} {
		_, ok := procAddr(bad)
		assert.False(t, ok, bad)
	}
}

func TestTCPNetDevices(t *testing.T) {
	root := t.TempDir()
	for _, p := range []string{"mlx5_0/ports/1", "mlx5_1/ports/1", "mlx5_1/ports/2"} {
		require.NoError(t, os.MkdirAll(filepath.Join(root, p), 0o755))
	}
	got, err := tcpNetDevices([]string{"lo"}, root)
	require.NoError(t, err)
	assert.Equal(t, "lo,mlx5_0:1,mlx5_1:1,mlx5_1:2", got, "the InfiniBand ports keep their lanes")
	_, err = tcpNetDevices([]string{"lo", "nosuch0"}, root)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"nosuch0" is not a network interface`)

	_, err = New(Config{NetDevices: "lo", TCPInterfaces: []string{"lo"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "set one")
}

// TestTCPInterfacesListenOnlyThere: with TCPInterfaces lo (a control plane on 127.0.0.1) the
// worker's sockets in LISTEN state, read from /proc, are all on loopback addresses, and the
// introspection settings say where; without it UCX listens on the host's other interfaces too.
func TestTCPInterfacesListenOnlyThere(t *testing.T) {
	if v := os.Getenv("UCX_NET_DEVICES"); v != "" {
		t.Skipf("UCX_NET_DEVICES=%s in the environment wins over TCPInterfaces", v)
	}
	n := newNode(t, func(c *Config) { c.TCPInterfaces = []string{"lo"} })
	require.NotEmpty(t, n.tcpListen, "a tcp worker listens somewhere")
	for _, a := range n.tcpListen {
		ap, err := netip.ParseAddrPort(a)
		require.NoError(t, err)
		assert.True(t, ap.Addr().IsLoopback(), "the worker listens on %s, beyond lo", a)
	}
	assert.Equal(t, strings.Join(n.tcpListen, ", "), n.Describe()["tcp_listen"])
	assert.Contains(t, n.h.logBuf.String(), "UCX_NET_DEVICES from Config.TCPInterfaces")
	assert.Contains(t, n.h.logBuf.String(), "ucx: the worker's tcp transport listens")

	d := newNode(t, nil)
	external := false
	for _, a := range d.tcpListen {
		if ap, err := netip.ParseAddrPort(a); err == nil && !ap.Addr().IsLoopback() {
			external = true
		}
	}
	if !external {
		t.Logf("this host has no interface beyond lo for the default to listen on (%v)", d.tcpListen)
	}
}

func TestInterfacesOf(t *testing.T) {
	got, err := InterfacesOf(netip.MustParseAddr("127.0.0.1"))
	require.NoError(t, err)
	assert.Equal(t, []string{"lo"}, got)
	got, err = InterfacesOf(netip.MustParseAddr("0.0.0.0"))
	require.NoError(t, err)
	assert.Nil(t, got, "an unspecified address listens everywhere")
	_, err = InterfacesOf(netip.MustParseAddr("203.0.113.254"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "203.0.113.254")
}

// TestScopeListenFollowsTheControlPlane: where nothing names UCX's devices New creates no worker;
// ScopeListen with the control plane's 127.0.0.1 creates it listening on loopback only, and later
// scopes change nothing. Devices the program names make New create the worker at once (so UCX's
// errors come from New), and ScopeListen leaves them be. A transport closed before any call never
// creates one.
func TestScopeListenFollowsTheControlPlane(t *testing.T) {
	if v := os.Getenv("UCX_NET_DEVICES"); v != "" {
		t.Skipf("UCX_NET_DEVICES=%s in the environment names the devices", v)
	}
	h := newHost()
	tr, err := New(Config{TLS: testTLS, Logger: h.log})
	require.NoError(t, err)
	t.Cleanup(func() { tr.Close() })
	assert.Nil(t, tr.eng, "New waits for the control plane's address")
	before := TCPListeners()
	require.NoError(t, tr.ScopeListen(netip.MustParseAddr("127.0.0.1")))
	require.NotNil(t, tr.eng)
	require.NotEmpty(t, tr.tcpListen)
	assert.Equal(t, tr.tcpListen, newListeners(before, TCPListeners()))
	for _, a := range tr.tcpListen {
		assert.True(t, netip.MustParseAddrPort(a).Addr().IsLoopback(), "the worker listens on %s, beyond lo", a)
	}
	require.NoError(t, tr.ScopeListen(netip.MustParseAddr("0.0.0.0")))
	require.NoError(t, tr.Start(h))
	assert.Contains(t, h.logBuf.String(), "UCX_NET_DEVICES from the control plane's address 127.0.0.1 (interface lo)")
	assert.NotContains(t, h.logBuf.String(), "created before the control plane's address was known")

	named, err := New(Config{TLS: testTLS, NetDevices: "lo", Logger: h.log})
	require.NoError(t, err)
	t.Cleanup(func() { named.Close() })
	require.NotNil(t, named.eng, "with devices named New creates the worker")
	require.NoError(t, named.ScopeListen(netip.MustParseAddr("127.0.0.1")))
	assert.False(t, named.scoped)

	closed, err := New(Config{TLS: testTLS, Logger: h.log})
	require.NoError(t, err)
	require.NoError(t, closed.Close())
	assert.ErrorIs(t, closed.ScopeListen(netip.MustParseAddr("127.0.0.1")), transport.ErrClosed)
	assert.Nil(t, closed.eng)
}
