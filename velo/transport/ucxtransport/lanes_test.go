//go:build cgo && linux

package ucxtransport

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSoftwareOnly(t *testing.T) {
	for lanes, want := range map[string]bool{
		"tcp":                     true,
		"tcp,tcp":                 true,
		"ud_mlx5":                 true,
		"ud_verbs,tcp":            true,
		"rc_mlx5,ud_mlx5":         false, // ud beside rc: the rc lane carries the bytes
		"dc_mlx5":                 false,
		"tcp,cma":                 false, // shared memory: a hardware copy, no socket
		"tcp,cuda_ipc":            false,
		"":                        false, // nothing read: the RDMA path stays (a failed endpoint fails its GET)
		"tcp,gdr_copy,rc_verbs":   false,
		"sysv,posix,cma,tcp,self": false,
	} {
		var ls []string
		if lanes != "" {
			ls = strings.Split(lanes, ",")
		}
		assert.Equal(t, want, softwareOnly(ls), "lanes %q", lanes)
	}
}

func TestSoftwareRMAOptIn(t *testing.T) {
	assert.Empty(t, softwareRMAOptIn(Config{}, ""))
	assert.Empty(t, softwareRMAOptIn(Config{}, "0"))
	assert.Equal(t, "Config.RMAOverSoftwareLanes", softwareRMAOptIn(Config{RMAOverSoftwareLanes: true}, ""))
	assert.Equal(t, SoftwareRMAEnv+"=1", softwareRMAOptIn(Config{}, "1"))
}

// TestSoftwareLanesRefused: over UCX_TLS=tcp the endpoint UCX builds has tcp lanes only, so
// PathRefusal says software_lanes on both sides (each reads its own endpoint's lanes, opening it if
// need be), logs the lanes once per pair however often it is asked, and adds no health reason;
// with the opt-in it says nothing, and the health and the introspection settings name the opt-in
// once it applied to a peer.
func TestSoftwareLanesRefused(t *testing.T) {
	a, b := newNode(t, nil), newNode(t, nil)
	link(t, a, b)
	a.PathRefusal(b.h.id) // opens a's endpoint if need be
	if lanes := endpointLanes(a, b); !softwareOnly(lanes) {
		t.Skipf("the endpoint has a hardware lane (%v; UCX_TLS in the environment wins over tcp)", lanes)
	}
	for range 3 {
		assert.Equal(t, ReasonSoftwareLanes, a.PathRefusal(b.h.id))
		assert.Equal(t, ReasonSoftwareLanes, b.PathRefusal(a.h.id))
	}
	for _, n := range []node{a, b} {
		assert.Equal(t, 1, strings.Count(n.h.logBuf.String(), "reason software_lanes"), "one line per pair:\n%s", n.h.logBuf.String())
		assert.Contains(t, n.h.logBuf.String(), "lanes=tcp")
		assert.Empty(t, n.HealthReasons())
		assert.Equal(t, "chunked path (default)", n.Describe()["software_lanes"])
	}
	assert.True(t, a.CanGet(b.h.id), "the UCX endpoint stays: messages keep it")

	// With the opt-in PathRefusal opens no endpoint: it notes the lanes of the one open (eager).
	c, d := newNode(t, func(c *Config) { c.RMAOverSoftwareLanes, c.EagerEndpoints = true, true }), newNode(t, nil)
	link(t, c, d)
	assert.Empty(t, c.PathRefusal(d.h.id))
	assert.Equal(t, ReasonSoftwareLanes, d.PathRefusal(c.h.id), "the opt-in is each side's own")
	reasons := c.HealthReasons()
	require.Len(t, reasons, 1)
	assert.Contains(t, reasons[0], "software lanes (tcp) with 1 peers by opt-in (Config.RMAOverSoftwareLanes)")
	assert.Equal(t, "RDMA path kept by opt-in (Config.RMAOverSoftwareLanes)", c.Describe()["software_lanes"])
	c.RemovePeer(d.h.id)
	assert.Empty(t, c.HealthReasons(), "a peer forgotten is no longer one the opt-in applies to")
}

// endpointLanes are the lanes of n's current endpoint to peer.
func endpointLanes(n, peer node) []string {
	n.mu.Lock()
	p := n.peers[peer.h.id]
	n.mu.Unlock()
	if p == nil {
		return nil
	}
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	if p.conn == nil {
		return nil
	}
	return p.conn.lanes
}
