package attack

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rawOp is an attacker command aimed at the victim's UCX tcp ports (its process, the ports to
// leave out, its UCX release), with the given more fields (name, value, ...).
func (f *fixture) rawOp(op string, kv ...any) map[string]any {
	m := map[string]any{"op": op, "pid": f.v.pid, "skip": []int{f.v.ctlPort}, "version": f.v.ucxVersion}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

// floodMaxFDs is the victim's descriptor limit in TestUCXListenerSurvivesFdFlood: low, so that
// a flood of a few hundred connections reaches it in well under a second.
const floodMaxFDs = 256

// TestUCXListenerSurvivesFdFlood floods the victim's UCX tcp port with plain connections until
// the victim's descriptor table is full (the victim runs with a low RLIMIT_NOFILE), holds them,
// and closes them. The victim's UCX listener must accept a fresh connection within 5 s after the
// flood ends (UCX closed its listening socket at the first failed accept() before patch 0008),
// the legitimate pair must go on untouched (afterAttack: every message delivered once and in
// order, a transfer on the RDMA path), the victim's ucx_engine_tcp_accept_paused_total must
// count the pauses, and its log must grow by at most a few lines per 10 s of attack, however many
// accepts failed.
func TestUCXListenerSurvivesFdFlood(t *testing.T) {
	if !tcpInTransports() {
		t.Skipf("skipped: UCX_TLS=%s has no tcp, so the victim has no UCX tcp port to flood", osUCXTLS())
	}
	f := newFixture(t, fixtureOptions{victimArgs: []string{"-max-fds", fmt.Sprint(floodMaxFDs)}})
	logBefore := f.victim.Stderr.String()
	pausedBefore := sum(series(f.victim, "ucx_engine_tcp_accept_paused_total"))
	start := time.Now()

	r := f.atk.ok(f.rawOp("flood", "count", 4*floodMaxFDs))
	if s, _ := r["skipped"].(string); s != "" {
		t.Skip("skipped: " + s)
	}
	t.Logf("flood: %v connections open to %v in %v (stopped: %q)", r["open"], r["addr"], r["took"], r["stopped"])
	require.Eventually(t, func() bool { return f.victimLog("accept() failed") > 0 }, 10*time.Second, 50*time.Millisecond,
		"the victim never reported a failed accept(): the flood did not reach its descriptor limit")
	time.Sleep(3 * time.Second) // held at the limit
	f.atk.ok(map[string]any{"op": "flood_release"})

	p := f.atk.ok(f.rawOp("accept_probe", "timeout", "5s"))
	results, _ := p["results"].([]any)
	require.NotEmpty(t, results, "the probe found no UCX port")
	for _, x := range results {
		m := x.(map[string]any)
		if assert.Equal(t, true, m["accepted"], "the victim's UCX listener %v accepted no connection within 5 s after the flood ended (last: %v)", m["addr"], m["last"]) {
			t.Logf("the listener %v accepted %.2f s after the flood ended", m["addr"], m["after"])
		}
	}
	f.afterAttack("connection flood")

	// the log line is rate-limited, the counter is not: every pause is there
	paused := sum(series(f.victim, "ucx_engine_tcp_accept_paused_total")) - pausedBefore
	t.Logf("ucx_engine_tcp_accept_paused_total moved by %.0f", paused)
	assert.Positive(t, paused, "the victim's listener paused on failed accepts, but ucx_engine_tcp_accept_paused_total did not move")

	grown := strings.TrimPrefix(f.victim.Stderr.String(), logBefore)
	lines := strings.Count(grown, "\n")
	allowed := 3 * (1 + int(time.Since(start)/(10*time.Second)))
	t.Logf("the victim's log grew by %d lines in %v", lines, time.Since(start).Round(time.Second))
	assert.LessOrEqual(t, lines, allowed, "the victim's log grew by %d lines in %v of flood and its aftermath:\n%s",
		lines, time.Since(start).Round(time.Second), grown)
}

// capPerSource is velo's UCX's cap on live connections from one source address (patch 0010).
const capPerSource = 256

// openFDs counts the descriptors process pid holds.
func openFDs(t *testing.T, pid int) int {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	require.NoError(t, err, "the victim's descriptors (the suite runs as the victim's user)")
	return len(fds)
}

// TestUCXConnectionCapPerSource floods the victim's UCX tcp port from one loopback address
// (127.0.0.2) with four times the per-source cap and holds the connections. While they are held
// the victim keeps at most the cap of them (its descriptors grow by no more), a connection from
// another address is accepted, the legitimate pair goes on untouched (afterAttack), the refusals
// are counted in ucx_engine_tcp_connections_refused_total (it moves; the log line alone is
// rate-limited) and logged in a few lines, naming the source.
func TestUCXConnectionCapPerSource(t *testing.T) {
	if !tcpInTransports() {
		t.Skipf("skipped: UCX_TLS=%s has no tcp, so the victim has no UCX tcp port to flood", osUCXTLS())
	}
	f := newFixture(t, fixtureOptions{})
	logBefore := f.victim.Stderr.String()
	fdsBefore := openFDs(t, f.v.pid)
	refusedBefore := sum(series(f.victim, "ucx_engine_tcp_connections_refused_total"))
	start := time.Now()

	r := f.atk.ok(f.rawOp("flood", "count", 4*capPerSource, "from", "127.0.0.2"))
	if s, _ := r["skipped"].(string); s != "" {
		t.Skip("skipped: " + s)
	}
	t.Logf("flood from 127.0.0.2: %v connections open to %v in %v (stopped: %q)", r["open"], r["addr"], r["took"], r["stopped"])
	require.Eventually(t, func() bool { return f.victimLog("refused a connection from 127.0.0.2") > 0 }, 10*time.Second, 50*time.Millisecond,
		"the victim never reported refusing a connection from 127.0.0.2")
	fds := openFDs(t, f.v.pid)
	t.Logf("the victim holds %d descriptors (%d before the flood)", fds, fdsBefore)
	assert.LessOrEqual(t, fds, fdsBefore+capPerSource+16, "the victim kept more of one source's connections than the cap")

	p := f.atk.ok(f.rawOp("accept_probe", "timeout", "5s"))
	results, _ := p["results"].([]any)
	require.NotEmpty(t, results, "the probe found no UCX port")
	for _, x := range results {
		m := x.(map[string]any)
		assert.Equal(t, true, m["accepted"], "during the flood from 127.0.0.2, the victim's UCX listener %v accepted no connection from another address within 5 s (last: %v)", m["addr"], m["last"])
	}
	refused := sum(series(f.victim, "ucx_engine_tcp_connections_refused_total")) - refusedBefore
	t.Logf("ucx_engine_tcp_connections_refused_total moved by %.0f", refused)
	assert.Positive(t, refused, "the victim refused connections from 127.0.0.2, but ucx_engine_tcp_connections_refused_total did not move")
	f.afterAttack("connections from one source past the cap, held")
	f.atk.ok(map[string]any{"op": "flood_release"})
	f.afterAttack("connections from one source past the cap, released")

	grown := strings.TrimPrefix(f.victim.Stderr.String(), logBefore)
	lines := strings.Count(grown, "\n")
	allowed := 3 * (1 + int(time.Since(start)/(10*time.Second)))
	t.Logf("the victim's log grew by %d lines in %v", lines, time.Since(start).Round(time.Second))
	assert.LessOrEqual(t, lines, allowed, "the victim's log grew by %d lines in %v:\n%s", lines, time.Since(start).Round(time.Second), grown)
}
