package attack

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// unhandledAMID is a UCT active-message id that ucp never registers a handler for (its ids start
// at 1, UCP_AM_ID_FIRST, in 1.13 and 1.22), so UCX's stub handler gets its frames.
const unhandledAMID = 0

// amStream is how many such frames each stream of TestUCXUnhandledAMLogLimited sends.
const amStream = 2000

// TestUCXUnhandledAMLogLimited streams 39-byte frames with an active-message id nobody handles
// at the victim's UCX tcp port, twice, from a raw socket. Before patch 0011 each frame made UCX
// print two warnings, a hex dump and a backtrace (about 27 lines); now the victim logs the first
// frame in one line naming the id and the length, holds back every other frame of the 10 s
// window, and its stderr grows by at most a few lines in all. The victim stays alive and the
// legitimate pair goes on untouched (afterAttack).
func TestUCXUnhandledAMLogLimited(t *testing.T) {
	if !tcpInTransports() {
		t.Skipf("skipped: UCX_TLS=%s has no tcp, so the victim has no UCX tcp port to attack", osUCXTLS())
	}
	f := newFixture(t, fixtureOptions{})
	if !f.guardEnforced() {
		t.Skip("skipped: the victim's UCX has no guard patch set (stock UCX logs every such frame at length; patch 0011 limits it)")
	}
	logBefore := f.victim.Stderr.String()
	line := noHandler(unhandledAMID)

	for i := range 2 {
		r := f.atk.ok(f.rawOp("raw_am", "am_id", unhandledAMID, "count", amStream))
		if s, _ := r["skipped"].(string); s != "" {
			t.Skip("skipped: " + s)
		}
		results, _ := r["results"].([]any)
		require.NotEmpty(t, results, "the attacker found no UCX port")
		for _, x := range results {
			m := x.(map[string]any)
			t.Logf("stream %d: %v frames with id %d to %v (handshake %v, closed %q)", i+1, m["sent"], unhandledAMID, m["addr"], m["handshake"], m["closed"])
			assert.Equal(t, float64(amStream), m["sent"], "stream %d to %v: not every frame was written", i+1, m["addr"])
		}
		require.Eventually(t, func() bool { return f.victimLog(line) > 0 }, 10*time.Second, 50*time.Millisecond,
			"the victim never logged a frame with active-message id %d: the frames did not reach UCX's stub handler", unhandledAMID)
	}
	time.Sleep(500 * time.Millisecond) // frames still in the victim's socket buffer reach the handler
	f.afterAttack("frames with an unhandled active-message id")

	grown := strings.TrimPrefix(f.victim.Stderr.String(), logBefore)
	lines := strings.Count(grown, "\n")
	t.Logf("after %d frames the victim's log grew by %d lines:\n%s", 2*amStream, lines, grown)
	assert.LessOrEqual(t, lines, 5, "the victim's log grew by %d lines for %d frames:\n%s", lines, 2*amStream, grown)
	assert.NotContains(t, grown, "payload", "the victim dumped a frame's payload at warning level")
	assert.NotContains(t, grown, "==== backtrace", "the victim printed a backtrace for a frame")
	assert.Contains(t, grown, line+" (34 bytes;", "the victim's line names the length (the frame's, less its 5-byte header)")
}
