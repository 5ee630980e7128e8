package tcp

import (
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRoutableHostIsThisHosts: the address is an IPv4 address of this host, never the
// unspecified one: a transport listens on it and a client connects to it.
func TestRoutableHostIsThisHosts(t *testing.T) {
	h := RoutableHost()
	ip := net.ParseIP(h)
	require.NotNil(t, ip, "%q is not an IP address", h)
	require.NotNil(t, ip.To4(), "%q is not IPv4", h)
	require.False(t, ip.IsUnspecified())

	ln, err := net.Listen("tcp", net.JoinHostPort(h, "0"))
	require.NoError(t, err, "%s is not an address of this host", h)
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	c.Close()
}
