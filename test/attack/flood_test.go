package attack

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// floodMaxFDs is the victim's descriptor limit in TestUCXListenerSurvivesFdFlood: low, so that
// a flood of a few hundred connections reaches it in well under a second.
const floodMaxFDs = 256

// TestUCXListenerSurvivesFdFlood floods the victim's UCX tcp port with plain connections until
// the victim's descriptor table is full (the victim runs with a low RLIMIT_NOFILE), holds them,
// and closes them. The victim's UCX listener must accept a fresh connection within 5 s after the
// flood ends (UCX closed its listening socket at the first failed accept() before patch 0008),
// the legitimate pair must go on untouched (afterAttack: every message delivered once and in
// order, a transfer on the RDMA path), and the victim's log must grow by at most a few lines per
// 10 s of attack, however many accepts failed.
func TestUCXListenerSurvivesFdFlood(t *testing.T) {
	if !tcpInTransports() {
		t.Skipf("skipped: UCX_TLS=%s has no tcp, so the victim has no UCX tcp port to flood", osUCXTLS())
	}
	f := newFixture(t, fixtureOptions{victimArgs: []string{"-max-fds", fmt.Sprint(floodMaxFDs)}})
	raw := map[string]any{"pid": f.v.pid, "skip": []int{f.v.ctlPort}, "version": f.v.ucxVersion}
	with := func(op string, kv ...any) map[string]any {
		m := map[string]any{"op": op}
		for k, v := range raw {
			m[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	logBefore := f.victim.Stderr.String()
	start := time.Now()

	r := f.atk.ok(with("flood", "count", 4*floodMaxFDs))
	if s, _ := r["skipped"].(string); s != "" {
		t.Skip("skipped: " + s)
	}
	t.Logf("flood: %v connections open to %v in %v (stopped: %q)", r["open"], r["addr"], r["took"], r["stopped"])
	require.Eventually(t, func() bool { return f.victimLog("accept() failed") > 0 }, 10*time.Second, 50*time.Millisecond,
		"the victim never reported a failed accept(): the flood did not reach its descriptor limit")
	time.Sleep(3 * time.Second) // held at the limit
	f.atk.ok(map[string]any{"op": "flood_release"})

	p := f.atk.ok(with("accept_probe", "timeout", "5s"))
	results, _ := p["results"].([]any)
	require.NotEmpty(t, results, "the probe found no UCX port")
	for _, x := range results {
		m := x.(map[string]any)
		if assert.Equal(t, true, m["accepted"], "the victim's UCX listener %v accepted no connection within 5 s after the flood ended (last: %v)", m["addr"], m["last"]) {
			t.Logf("the listener %v accepted %.2f s after the flood ended", m["addr"], m["after"])
		}
	}
	f.afterAttack("connection flood")

	grown := strings.TrimPrefix(f.victim.Stderr.String(), logBefore)
	lines := strings.Count(grown, "\n")
	allowed := 3 * (1 + int(time.Since(start)/(10*time.Second)))
	t.Logf("the victim's log grew by %d lines in %v", lines, time.Since(start).Round(time.Second))
	assert.LessOrEqual(t, lines, allowed, "the victim's log grew by %d lines in %v of flood and its aftermath:\n%s",
		lines, time.Since(start).Round(time.Second), grown)
}
