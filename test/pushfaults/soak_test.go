package pushfaults

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/test/internal/linecmd/driver"
)

// The push soak (make soak-push; not part of make test): a writer process puts rounds of small
// notified puts into a receiver process's region while busy threads pinned to the writer's CPU
// load it, and the receiver hashes each notified range the moment its notification arrives. A
// range that does not yet hold the put's bytes is a notification observed before its data; the
// soak fails on one.
//
//	VELO_PUSH_SOAK=N           notified puts on the RDMA path (the test skips without it)
//	VELO_PUSH_SOAK_CHUNKED=M   notified puts on the chunked path (default N; 0 skips it)
//	VELO_PUSH_SOAK_BURN=K      busy threads beside the writer (default 2; 0: no load)
//	VELO_PUSH_SOAK_WINDOW=W    PutBatch's window (default 16)
//	VELO_PUSH_SOAK_MIN=A, _MAX=B  the puts' sizes in bytes (default 4 KiB to 64 KiB; 64 to 4096
//	                           sends them all inside their notifications, velo's default limit)
const (
	soakEnv        = "VELO_PUSH_SOAK"
	soakChunkedEnv = "VELO_PUSH_SOAK_CHUNKED"
	soakBurnEnv    = "VELO_PUSH_SOAK_BURN"
	soakWindowEnv  = "VELO_PUSH_SOAK_WINDOW"
	soakMinEnv     = "VELO_PUSH_SOAK_MIN"
	soakMaxEnv     = "VELO_PUSH_SOAK_MAX"
	killSwitchEnv  = "VELO_RDMA_RENDEZVOUS_DISABLE" // velo.RDMAKillSwitchEnv
)

// The soak's puts: 4 KiB to 64 KiB by default, any size in between (odd ones included), laid end
// to end in a 16 MiB span, about 480 to a round.
const (
	soakSpan = 16 << 20
	soakMin  = 4 << 10
	soakMax  = 64 << 10
)

// TestPushSoak: N notified puts on the RDMA path (a pinned region; the guarded PUT over tcp).
func TestPushSoak(t *testing.T) {
	runSoak(t, soakCount(t, soakEnv, 0), false)
}

// TestPushSoakChunked: the same on the chunked path: the receiver runs with the kill switch, so
// its region is plain memory and every put goes over the control plane in chunks.
func TestPushSoakChunked(t *testing.T) {
	n := soakCount(t, soakEnv, 0)
	n = soakCount(t, soakChunkedEnv, n)
	if n == 0 {
		t.Skipf("%s=0", soakChunkedEnv)
	}
	runSoak(t, n, true)
}

// soakCount reads a count from the environment; the soak skips when VELO_PUSH_SOAK is not set.
func soakCount(t *testing.T, name string, def uint64) uint64 {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		if name == soakEnv {
			t.Skipf("the push soak runs only when %s names how many notified puts to make (make soak-push PUSH_SOAK_PUTS=N)", soakEnv)
		}
		return def
	}
	n, err := strconv.ParseUint(s, 10, 64)
	require.NoError(t, err, "%s=%q", name, s)
	return n
}

// soakChecks is what the receiver's handler counted (pushpeer's checks command).
type soakChecks struct {
	Notes        uint64   `json:"notes"`
	Mismatches   uint64   `json:"mismatches"`
	Settled      uint64   `json:"settled"`
	WrongRange   uint64   `json:"wrong_range"`
	Repeated     uint64   `json:"repeated"`
	BadPayload   uint64   `json:"bad_payload"`
	CanaryCaught uint64   `json:"canary_caught"`
	CanaryMissed uint64   `json:"canary_missed"`
	Examples     []string `json:"examples"`
}

func (p *peer) checks(id uint64) soakChecks {
	p.t.Helper()
	var c soakChecks
	b, err := json.Marshal(p.ok("checks %d", id))
	require.NoError(p.t, err)
	require.NoError(p.t, json.Unmarshal(b, &c))
	return c
}

func runSoak(t *testing.T, total uint64, chunked bool) {
	burners := int(soakCount(t, soakBurnEnv, 2))
	window := soakCount(t, soakWindowEnv, 16)
	minSz, maxSz := soakCount(t, soakMinEnv, soakMin), soakCount(t, soakMaxEnv, soakMax)
	require.True(t, minSz > 0 && maxSz >= minSz && 2*maxSz <= soakSpan, "%s=%d, %s=%d: want 0 < min <= max <= %d", soakMinEnv, minSz, soakMaxEnv, maxSz, soakSpan/2)
	cpu := runtime.NumCPU() - 1

	if chunked {
		t.Setenv(killSwitchEnv, "1")
	}
	recv := startPeer(t, "receiver")
	if chunked {
		t.Setenv(killSwitchEnv, "") // the writer keeps its RDMA path; the receiver answers chunked
	}
	r := recv.ok("region %d %d", soakSpan+2*guard, regionSeed)
	require.Equal(t, !chunked, r["pinned"], "the receiver's region (reason %v)", r["reason"])

	var flags []string
	load := "none"
	if burners > 0 {
		startBurner(t, burners, cpu)
		flags = []string{"-cpu", strconv.Itoa(cpu)}
		load = fmt.Sprintf("the writer and %d busy threads bound to CPU %d of %d", burners, cpu, runtime.NumCPU())
	}
	writer := startPeer(t, "writer", flags...)
	link(t, recv, writer)
	g := recv.ok("checkgrant %s %d %d %s", writer.ident, guard, soakSpan, 24*time.Hour)
	id, h := uint64(g["grant"].(float64)), g["handle"].(string)

	path := "RDMA (guarded PUT)"
	if chunked {
		path = "chunked"
	}
	t.Logf("%d notified puts of %d to %d bytes, window %d, path %s, load: %s", total, minSz, maxSz, window, path, load)
	writer.send("soak %s %d %d %d %d %d %d %d", h, guard, soakSpan, total, window, time.Now().UnixNano(), minSz, maxSz)
	res := awaitSoak(t, writer, recv, id)

	c := recv.checks(id)
	secs := res["seconds"].(float64)
	puts := uint64(res["puts"].(float64))
	mib := res["bytes"].(float64) / (1 << 20)
	t.Logf("%s: %d puts in %v rounds, %.1f s: %.0f puts/s, %.1f MiB/s, %v inside their notifications; %d notifications checked, %d observed before their data (%d held the data 5 ms later); canary caught %d",
		path, puts, res["rounds"], secs, float64(puts)/secs, mib/secs, res["inline"], c.Notes, c.Mismatches, c.Settled, c.CanaryCaught)
	for _, e := range c.Examples {
		t.Logf("receiver: %s", e)
	}

	require.Empty(t, res["failures"], "puts failed")
	require.EqualValues(t, total, puts)
	assert.Equal(t, total, c.Notes, "one notification checked per put")
	assert.Zero(t, c.Mismatches, "notifications observed before their data")
	assert.Zero(t, c.WrongRange, "notifications naming another range than their put's")
	assert.Zero(t, c.Repeated, "notifications delivered twice")
	assert.Zero(t, c.BadPayload, "notifications with a payload the check cannot read")
	require.Empty(t, res["canary_error"], "the canary put")
	assert.EqualValues(t, 1, c.CanaryCaught, "the canary (a notification claiming a wrong SHA-256) was not caught: the check checks nothing")
	assert.Zero(t, c.CanaryMissed)

	want := 1
	if chunked {
		want = 0
	}
	assert.Equal(t, want, recv.stats().LeaseRegistrations, "registrations for the grant (1: the RDMA path, 0: chunked)")
	recv.guards("after the soak", guard, soakSpan)
	recv.ok("revoke %d", id)
	recv.done(id, 10*time.Second)
	recv.clean()
}

// awaitSoak waits for the writer's answer to soak, logging the receiver's count every 15 s.
func awaitSoak(t *testing.T, writer, recv *peer, id uint64) map[string]any {
	t.Helper()
	start := time.Now()
	for {
		// The answer, or after 15 s of none (ErrNoAnswer) the receiver's count.
		m, err := writer.Read(15 * time.Second)
		if errors.Is(err, driver.ErrNoAnswer) {
			c := recv.checks(id)
			t.Logf("%3.0f s: %d notifications checked, %d before their data", time.Since(start).Seconds(), c.Notes, c.Mismatches)
			continue
		}
		require.NoError(t, err, "the writer during the soak")
		require.Empty(t, m["error"], "soak")
		return m
	}
}

// startBurner starts pushpeer -burn: threads busy threads bound to cpu, until the test ends.
func startBurner(t *testing.T, threads, cpu int) {
	t.Helper()
	cmd := exec.Command(pushpeer.Path(t), "-burn", strconv.Itoa(threads), "-cpu", strconv.Itoa(cpu))
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.Contains(t, line, `"burning"`, "the burner's first line")
}
