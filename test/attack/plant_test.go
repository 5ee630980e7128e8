package attack

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// plantedSNs is how many connection sequence numbers each planted claim covers: a UCX tcp
// interface numbers its connections to one address from 0, so the first of them are the ones a
// pair uses.
const plantedSNs = 16

// plant sends connection requests in the legitimate consumer's name to every UCX port of the
// victim: each of the consumer's UCX tcp addresses, sequence numbers 0..plantedSNs-1.
func (f *fixture) plant() {
	t := f.t
	t.Helper()
	ports := f.atk.ok(map[string]any{"op": "raw_ports", "pid": f.l.pid, "skip": []int{f.l.ctlPort}})
	var claims []string
	for _, x := range ports["targets"].([]any) {
		claims = append(claims, x.(map[string]any)["addr"].(string))
	}
	r := f.atk.ok(map[string]any{"op": "plant", "pid": f.v.pid, "skip": []int{f.v.ctlPort}, "version": f.v.ucxVersion,
		"claims": claims, "count": plantedSNs})
	if s, _ := r["skipped"].(string); s != "" {
		t.Skip("skipped: " + s)
	}
	t.Logf("planted %v connection requests claiming %v (sequence numbers 0..%d), %v acknowledged",
		r["sent"], claims, plantedSNs-1, r["acked"])
}

// TestPlantedConnectionRequests plants UCX tcp connection requests in the legitimate consumer's
// name (its interface addresses, sequence numbers 0..15) on the victim's UCX ports, before the
// pair's endpoints exist and while the pair streams. The pair must lose no message and keep
// its transfers on the RDMA path while the planted connections are held (afterAttack), and the
// victim must send nothing of the pair's traffic to the attacker.
func TestPlantedConnectionRequests(t *testing.T) {
	if !tcpInTransports() {
		t.Skipf("skipped: UCX_TLS=%s has no tcp, so the victim has no UCX tcp port to plant on", osUCXTLS())
	}
	check := func(f *fixture, what string) {
		t := f.t
		time.Sleep(2 * time.Second) // traffic while the planted connections are held
		s := f.atk.ok(map[string]any{"op": "plant_status"})
		t.Logf("%s: %v planted connections held, %v closed by the victim, %v bytes of the victim's on them",
			what, s["held"], s["closed_by_victim"], s["bytes"])
		f.afterAttack(what)
		s = f.atk.ok(map[string]any{"op": "plant_release"})
		assert.Zero(t, num(s["bytes"]), "%s: the victim sent %v bytes on planted connections (the pair's traffic, to the attacker)", what, s["bytes"])
		f.afterAttack(what + ", released")
	}
	t.Run("before_peering", func(t *testing.T) {
		f := newFixture(t, fixtureOptions{beforePeering: func(f *fixture) { f.plant() }})
		check(f, "requests planted before the pair's endpoints")
	})
	t.Run("while_streaming", func(t *testing.T) {
		f := newFixture(t, fixtureOptions{})
		require.True(t, f.legit.Alive())
		f.plant()
		check(f, "requests planted while the pair streams")
	})
}
