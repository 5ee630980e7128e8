//go:build cgo && linux

package ucxtransport

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tcpSockets counts the TCP sockets this process holds open (descriptors linking to a socket
// that /proc/net/tcp or tcp6 lists), and names them by state for the failure message. Both
// sides of these tests live in this process, so it counts both ends of each connection.
func tcpSockets(t testing.TB) (int, string) {
	t.Helper()
	states := map[string]string{} // inode -> state (hex, as the kernel prints it)
	for _, f := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		fh, err := os.Open(f)
		if os.IsNotExist(err) {
			continue
		}
		require.NoError(t, err)
		s := bufio.NewScanner(fh)
		for s.Scan() {
			if fs := strings.Fields(s.Text()); len(fs) > 9 && fs[0] != "sl" {
				states[fs[9]] = fs[3]
			}
		}
		fh.Close()
	}
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	n, by := 0, map[string]int{}
	for _, e := range ents {
		l, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil || !strings.HasPrefix(l, "socket:[") {
			continue
		}
		if st, ok := states[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")]; ok {
			n++
			by[st]++
		}
	}
	return n, fmt.Sprintf("%d TCP sockets by state (0A listening, 01 established, 08 close-wait): %v", n, by)
}

// awaitSockets waits up to five seconds for the process to hold want TCP sockets.
func awaitSockets(t *testing.T, want int, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, s := tcpSockets(t)
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: want %d TCP sockets within 5 s, have %s", what, want, s)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// exchange sends one numbered frame each way between a and b and waits for both.
func exchange(t *testing.T, a, b node, n uint32) {
	t.Helper()
	require.NoError(t, a.Send(testCtx(t), b.h.id, binary.BigEndian.AppendUint32(nil, n)))
	require.NoError(t, b.Send(testCtx(t), a.h.id, binary.BigEndian.AppendUint32(nil, n)))
}

// TestRetiredEndpointsCloseTheirSockets: over UCX's tcp, a slot retired by the fin exchange
// gives its sockets back on both sides. With a budget of one endpoint, talking to a second peer
// evicts the first one's slot: the process then holds the sockets of one connection, not two;
// removing the second peer (a fin exchange too) returns it to the sockets it held before any
// connection, and so does the idle reaper in a second pair. The evicted peer is reached again
// afterwards, and no frame is lost and no peer reported down on the way.
func TestRetiredEndpointsCloseTheirSockets(t *testing.T) {
	if tls := os.Getenv("UCX_TLS"); tls != "" && tls != "tcp" {
		t.Skipf("counts the sockets of UCX's tcp transport; UCX_TLS=%s", tls)
	}
	a := newNode(t, func(c *Config) { c.MaxEndpoints = 1 })
	b, c := newNode(t, nil), newNode(t, nil)
	link(t, a, b)
	link(t, a, c)
	before, _ := tcpSockets(t)

	exchange(t, a, b, 1)
	one, s := tcpSockets(t)
	require.Greater(t, one, before, "a connection opened no socket: %s", s)
	perConn := one - before

	exchange(t, a, c, 1) // past the budget: b's slot is evicted
	eventually(t, "b's endpoint evicted and closed on both sides", func() bool {
		return testutil.ToFloat64(a.m.endpoints.WithLabelValues("evicted")) >= 1 && b.openEPs.Load() == 0
	})
	awaitSockets(t, before+perConn, "after the eviction only the connection to c")

	a.RemovePeer(c.h.id)
	eventually(t, "c's endpoint closed", func() bool { return c.openEPs.Load() == 0 && a.openEPs.Load() == 0 })
	awaitSockets(t, before, "after the removal of c")

	exchange(t, a, b, 2) // the evicted peer is reached again, on a new slot
	assert.Len(t, b.h.waitFrames(t, 2), 2)
	assert.Len(t, a.h.waitFrames(t, 3), 3)
	for _, n := range []node{a, b, c} {
		assert.Zero(t, testutil.ToFloat64(n.m.lost), "frames lost")
		assert.Zero(t, testutil.ToFloat64(n.m.endpoints.WithLabelValues("failed")), "endpoints failed")
		assert.Empty(t, n.h.downs, "peers reported down")
	}

	// The idle reaper retires a slot the same way.
	const idle = 100 * time.Millisecond
	d := newNode(t, func(c *Config) { c.EPIdleTimeout = idle })
	e := newNode(t, func(c *Config) { c.EPIdleTimeout = idle })
	link(t, d, e)
	before, _ = tcpSockets(t)
	exchange(t, d, e, 1)
	eventually(t, "the idle slot reaped on both sides", func() bool { return d.openEPs.Load() == 0 && e.openEPs.Load() == 0 })
	awaitSockets(t, before, "after the reap")
	assert.Empty(t, d.h.downs)
	assert.Empty(t, e.h.downs)
}
