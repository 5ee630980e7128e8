package attack

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/test/internal/linecmd"
	"github.com/velo-go/velo/test/internal/linecmd/driver"
)

// clusterSecret is what the victim and the legitimate consumer share; the attacker never has it.
const clusterSecret = "velo-attack-suite-cluster-secret-0123456789abcdef"

// bins are the suite's programs, built once by TestMain.
var bins struct {
	victim, attacker string
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "velo-attack-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bins.victim, bins.attacker = filepath.Join(dir, "victim"), filepath.Join(dir, "ucxattacker")
	for path, pkg := range map[string]string{bins.victim: "./cmd/victim", bins.attacker: "./cmd/ucxattacker"} {
		args := []string{"build", "-o", path}
		if buildTags != "" {
			args = append(args, "-tags", buildTags)
		}
		if out, err := exec.Command("go", append(args, pkg)...).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "go build %s (tags %q): %v\n%s", pkg, buildTags, err, out)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// tcpInTransports reports whether UCX runs over tcp here: the suite pins UCX_TLS=tcp unless the
// environment names transports (an InfiniBand run), and then only if tcp is among them.
func tcpInTransports() bool {
	tls := os.Getenv("UCX_TLS")
	if tls == "" {
		return true
	}
	for _, t := range strings.Split(strings.TrimPrefix(tls, "^"), ",") {
		if t == "tcp" || t == "all" {
			return !strings.HasPrefix(tls, "^")
		}
	}
	return strings.HasPrefix(tls, "^") // "^x" excludes x: tcp is still in
}

func osUCXTLS() string { return os.Getenv("UCX_TLS") }

// proc is one of the suite's processes, driven one command a line (driver.Proc), failing its
// test where the test wants that.
type proc struct {
	*driver.Proc
	t testing.TB
}

// env is this process's environment for a child, without the cluster secret and TLS credentials
// unless withSecret, then extra (driver.Start adds UCX_TLS=tcp unless it is set).
func env(withSecret bool, extra ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "VELO_CLUSTER_SECRET") || strings.HasPrefix(name, "VELO_TLS_") {
			continue
		}
		out = append(out, kv)
	}
	if withSecret {
		out = append(out, "VELO_CLUSTER_SECRET="+clusterSecret)
	}
	return append(out, extra...)
}

// start runs bin and waits for its first line, {"ready":true}. The process is ended when the
// test ends, and its standard error is logged if the test failed.
func start(t testing.TB, name, bin string, environ []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = environ
	return &proc{Proc: driver.StartT(t, name, cmd), t: t}
}

// do sends one command (a string, or anything else as JSON) and returns the answer.
func (p *proc) do(command any, timeout time.Duration) (map[string]any, error) {
	line, ok := command.(string)
	if !ok {
		b, err := json.Marshal(command)
		if err != nil {
			return nil, err
		}
		line = string(b)
	}
	return p.Do(line, timeout)
}

// ok is do, failing the test on an error or an error answer.
func (p *proc) ok(command any) map[string]any {
	p.t.Helper()
	r, err := p.do(command, 2*time.Minute)
	require.NoError(p.t, err)
	if e, _ := r["error"].(string); e != "" {
		require.Fail(p.t, fmt.Sprintf("%s: %v: %s", p.Name, command, e))
	}
	return r
}

// instance is what a velo process says about itself.
type instance struct {
	info       string // PeerInfo as JSON
	id, inc    string // hex
	pid        int
	ctlPort    int
	ucxVersion string
	blob       string // the published UCX address blob (hex)
	global     region
	heap       region
	rawInfo    map[string]any
	idU, incU  uint64
}

type region struct{ addr, len uint64 }

func regionOf(v any) region {
	m, _ := v.(map[string]any)
	return region{addr: num(m["addr"]), len: num(m["len"])}
}

func num(v any) uint64 {
	f, _ := v.(float64)
	return uint64(f)
}

func infoOf(t testing.TB, p *proc) instance {
	r := p.ok("info")
	b, err := json.Marshal(r["info"])
	require.NoError(t, err)
	in := instance{info: string(b), id: r["id"].(string), inc: r["incarnation"].(string), pid: int(num(r["pid"])),
		ctlPort: int(num(r["ctl_port"])), ucxVersion: r["ucx_version"].(string), blob: r["ucx_blob"].(string),
		global: regionOf(r["global"]), heap: regionOf(r["heap"]), rawInfo: r}
	in.idU, _ = strconv.ParseUint(in.id, 16, 64)
	in.incU, _ = strconv.ParseUint(in.inc, 16, 64)
	return in
}

// sealedKey is the owner's remote key envelope (ucx/rkey.go, little-endian): magic and version,
// flags and reserved bytes, the guard slot, the UCX key's length, the token, the region's base
// and length, the UCX key, a CRC-32C. Decoded by hand, as an attacker holding the bytes would.
type sealedKey struct {
	slot       uint32
	token      uint64
	base, size uint64
	ucxKey     string // hex
	raw        string // the whole envelope, hex
}

func parseSealedKey(t testing.TB, h string) sealedKey {
	b, err := hex.DecodeString(h)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(b), 44, "a sealed key")
	require.Equal(t, "VRK", string(b[:3]), "a sealed key's magic")
	n := binary.LittleEndian.Uint32(b[12:])
	require.Equal(t, len(b), 44+int(n), "a sealed key's length")
	return sealedKey{
		slot: binary.LittleEndian.Uint32(b[8:]), token: binary.LittleEndian.Uint64(b[16:]),
		base: binary.LittleEndian.Uint64(b[24:]), size: binary.LittleEndian.Uint64(b[32:]),
		ucxKey: hex.EncodeToString(b[40 : 40+n]), raw: h,
	}
}

// lease is one of the victim's lease registrations.
type lease struct {
	sealedKey
	addr, size uint64
	revoked    bool
}

// fixture is one attack's cast: the victim (an owner with a secret), the legitimate consumer
// (with the secret, holding leases and streaming messages to the victim over UCX) and the
// attacker (neither), plus what the suite knows of each.
//
// With the same-host path on (linecmd.SameHostEnv, make test-attack-samehost) the victim and the
// legitimate consumer have it on and share a socket directory: the consumer's gets move through
// shared memory, and its messages still go over UCX. The attacks on lease registrations need
// keys of the owner's UCX, which a same-host consumer is never given, so there the leases are
// held by a second consumer with the secret that is configured as another host
// (VELO_SHM_HOST_ID): its reads stay on UCX, and the owner, same-host path on, must refuse
// every attack on them as before. Without the path, the legitimate consumer holds the leases.
type fixture struct {
	t        *testing.T
	marker   []byte
	victim   *proc
	legit    *proc
	holder   *proc // the consumer whose leases the attacks target: legit, or the other host's
	atk      *proc
	v, l, h  instance
	shmDir   string // the victim's same-host socket directory ("" with the path off)
	payloads []staged
	live     []lease // the legit consumer's live leases: A and B
	revoked  lease   // a lease the consumer released: its key is revoked
	observed bool    // the attacker's packet observer runs
	whyBlind string  // why it does not
	streamed uint64  // legitimate messages the consumer sent before the current pause
	leaks    uint64  // packets with the marker the observer had seen at the last check
	drops    uint64  // packets the observer's socket had lost by then
}

type staged struct{ handle, sha string }

type fixtureOptions struct {
	// legitEPIdle gives the consumer an idle reaper, so its pauses open new epochs.
	legitEPIdle time.Duration
	// victimArgs are more flags for the victim (an owner), e.g. -max-fds.
	victimArgs []string
	// beforePeering runs once the victim, the consumer and the attacker are up, before the
	// victim and the consumer learn of each other (no UCX endpoint between them yet).
	beforePeering func(f *fixture)
}

// sameHostEnv is what the victim and its consumers of this host are started with: a socket
// directory of the test's own (a socket path has at most 107 bytes, so a short one), none with the
// same-host path off.
func sameHostEnv(t testing.TB) (dir string, env []string) {
	t.Helper()
	if !linecmd.SameHostOn() {
		return "", nil
	}
	dir, err := os.MkdirTemp("", "velo-shm-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir, []string{"VELO_SHM_DIR=" + dir}
}

// otherHost configures a consumer as another host than the victim's: its same-host path, if
// on, never serves it, and its leases are the owner's UCX registrations.
const otherHost = "VELO_SHM_HOST_ID=attack-suite-another-host"

func newFixture(t *testing.T, o fixtureOptions) *fixture {
	t.Helper()
	f := &fixture{t: t, marker: make([]byte, 16)}
	_, _ = rand.Read(f.marker)
	var shmEnv []string
	f.shmDir, shmEnv = sameHostEnv(t)
	f.victim = start(t, "victim", bins.victim, env(true, shmEnv...), append([]string{"-role", "owner", "-marker", hex.EncodeToString(f.marker)}, o.victimArgs...)...)
	f.v = infoOf(t, f.victim)
	f.atk = start(t, "attacker", bins.attacker, env(false))

	// The attacker watches the wire from before the consumer's first frame.
	r := f.atk.ok(map[string]any{"op": "observe_start", "marker": hex.EncodeToString(f.marker)})
	f.observed, _ = r["observing"].(bool)
	if !f.observed {
		f.whyBlind, _ = r["why"].(string)
	}
	if !tcpInTransports() {
		f.observed, f.whyBlind = false, "UCX_TLS="+osUCXTLS()+" has no tcp: nothing of UCX's traffic crosses the loopback interface"
	}
	args := []string{"-role", "legit"}
	if o.legitEPIdle > 0 && f.observed {
		// New epochs only where the attacker can see them; blind, it forges at epoch 1.
		args = append(args, "-ep-idle", o.legitEPIdle.String())
	}
	f.legit = start(t, "legit", bins.victim, env(true, shmEnv...), args...)
	f.l = infoOf(t, f.legit)
	f.holder, f.h = f.legit, f.l
	if f.shmDir != "" {
		f.holder = start(t, "holder", bins.victim, env(true, otherHost), "-role", "legit")
		f.h = infoOf(t, f.holder)
	}
	if f.observed {
		pids := []int{f.v.pid, f.l.pid}
		if f.holder != f.legit {
			pids = append(pids, f.h.pid)
		}
		f.atk.ok(map[string]any{"op": "watch", "sender": f.l.id, "inc": f.l.inc, "pids": pids})
	}

	if o.beforePeering != nil {
		o.beforePeering(f)
	}
	f.legit.ok("peer " + f.v.info)
	f.victim.ok("peer " + f.l.info)
	if f.holder != f.legit {
		f.holder.ok("peer " + f.v.info)
		f.victim.ok("peer " + f.h.info)
		// The legitimate pair takes the path before the first attack, so that every get after
		// one is a same-host read; the holder, another host, never does.
		waitSameHost(t, f.legit, f.v.id, true)
		waitSameHost(t, f.holder, f.v.id, false)
	}
	for i := range 3 {
		r := f.victim.ok(fmt.Sprintf("stage %d %d", 16<<10, 100+i))
		f.payloads = append(f.payloads, staged{handle: r["handle"].(string), sha: r["sha256"].(string)})
	}
	// Leases A and B stay live; C is released, so its key is revoked.
	for i := range 3 {
		f.holder.ok("acquire " + f.payloads[i].handle)
	}
	f.holder.ok("release 2")
	regs := f.regs()
	require.Len(t, regs, 3, "three lease registrations")
	f.live, f.revoked = regs[:2], regs[2]
	require.False(t, f.live[0].revoked || f.live[1].revoked, "leases A and B are live")
	require.Eventually(t, func() bool { return f.regs()[2].revoked }, 10*time.Second, 20*time.Millisecond, "lease C's key is revoked")
	f.revoked = f.regs()[2]

	f.atk.ok(map[string]any{"op": "connect", "blob": f.v.blob})
	f.legit.ok(fmt.Sprintf("stream %s 4ms", f.v.id))
	t.Logf("victim: UCX %s, rma guard %s; attacker's packet observer: %v %s",
		f.v.ucxVersion, f.guardState(), f.observed, f.whyBlind)
	return f
}

func (f *fixture) regs() []lease {
	var out []lease
	for _, x := range f.victim.ok("regs")["regs"].([]any) {
		m := x.(map[string]any)
		k := parseSealedKey(f.t, m["key"].(string))
		out = append(out, lease{sealedKey: k, addr: num(m["addr"]), size: num(m["len"]), revoked: m["revoked"] == true})
	}
	return out
}

// series reads a metric family of p as "labels" → value.
func series(p *proc, family string) map[string]float64 {
	out := map[string]float64{}
	r, err := p.do("metric "+family, time.Minute)
	if err != nil {
		return out
	}
	m, _ := r["series"].(map[string]any)
	for k, v := range m {
		out[k], _ = v.(float64)
	}
	return out
}

func sum(m map[string]float64, fragments ...string) float64 {
	var s float64
next:
	for k, v := range m {
		for _, f := range fragments {
			if !strings.Contains(k, f) {
				continue next
			}
		}
		s += v
	}
	return s
}

// guardState is the victim's ucx_engine_rma_guard_enforced, as a word.
func (f *fixture) guardState() string {
	m := series(f.victim, "ucx_engine_rma_guard_enforced")
	switch {
	case len(m) == 0:
		return "unknown (no ucx_engine_rma_guard_enforced series)"
	case sum(m) > 0:
		return "enforced"
	}
	return "NOT enforced"
}

// victimLog counts the lines of the victim's standard error that contain s (UCX logs there).
func (f *fixture) victimLog(s string) int { return strings.Count(f.victim.Stderr.String(), s) }

func (f *fixture) guardEnforced() bool {
	return sum(series(f.victim, "ucx_engine_rma_guard_enforced")) > 0
}

// counters are the victim's refusal counters, for before-and-after comparisons.
type counters struct {
	rmaRefused, guardRefused, framesDropped, amDropped float64
	holderRefused                                      float64 // guarded requests not on the key's holder's endpoint
	byKind                                             map[string]float64
}

func (f *fixture) counters() counters {
	rma := series(f.victim, "ucx_engine_rma_refused_total")
	drops := series(f.victim, "velo_ucx_transport_frames_dropped_total")
	return counters{
		rmaRefused:    sum(rma),
		holderRefused: sum(rma, "kind=holder"),
		guardRefused:  sum(series(f.victim, "ucx_engine_guarded_get_requests_total"), "outcome=refused"),
		framesDropped: sum(drops),
		amDropped:     sum(series(f.victim, "ucx_engine_am_dropped_total")),
		byKind:        merge(prefixed("rma_refused ", rma), prefixed("frames_dropped ", drops)),
	}
}

func prefixed(p string, m map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		out[p+k] = v
	}
	return out
}

func merge(a, b map[string]float64) map[string]float64 {
	for k, v := range b {
		a[k] = v
	}
	return a
}

// grew lists the counters that grew between two readings.
func grew(before, after counters) string {
	var out []string
	for k, v := range after.byKind {
		if d := v - before.byKind[k]; d > 0 {
			out = append(out, fmt.Sprintf("%s +%v", k, d))
		}
	}
	if d := after.guardRefused - before.guardRefused; d > 0 {
		out = append(out, fmt.Sprintf("guarded_get refused +%v", d))
	}
	sort.Strings(out)
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// afterAttack asks every question the suite asks after each attack: is every secret byte where
// it was (and none on the wire), is the legitimate peer up on both sides with every message it
// sent delivered once and in order and nothing else delivered, and does the owner still serve
// a transfer on the RDMA path.
func (f *fixture) afterAttack(what string) {
	t := f.t
	t.Helper()
	if !assert.True(t, f.victim.Alive(), "%s: the owner died", what) {
		return
	}
	assert.True(t, f.legit.Alive(), "%s: the legitimate consumer died", what)
	r, err := f.victim.do("check", time.Minute)
	if assert.NoError(t, err, "%s: check", what) {
		assert.Empty(t, r["changed"], "%s: the owner's memory changed (something was written)", what)
	}
	if f.observed {
		o := f.atk.ok(map[string]any{"op": "observed"})
		leaks := num(o["leaks"])
		assert.Equal(t, f.leaks, leaks, "%s: packets with the secret marker crossed the wire (something was read); the first: %v", what, o["leak_sample"])
		f.leaks = leaks
		if d := num(o["drops"]); d > f.drops {
			t.Logf("%s: the kernel dropped %d packets before the observer read them: a leak among them would go unseen", what, d-f.drops)
			f.drops = d
		}
	}
	vp, err := f.victim.do("peers", time.Minute)
	if assert.NoError(t, err) {
		assert.Equal(t, "up", vp["peers"].(map[string]any)[f.l.id], "%s: the owner's view of the legitimate consumer", what)
	}
	lp, err := f.legit.do("peers", time.Minute)
	if assert.NoError(t, err) {
		assert.Equal(t, "up", lp["peers"].(map[string]any)[f.v.id], "%s: the consumer's view of the owner", what)
	}
	f.checkStream(what)
	g, err := f.legit.do("get "+f.payloads[0].handle, 45*time.Second)
	if assert.NoError(t, err, "%s: a legitimate get", what) {
		assert.Empty(t, g["error"], "%s: the owner does not serve a legitimate get", what)
		assert.Equal(t, f.payloads[0].sha, g["sha256"], "%s: a legitimate get's bytes", what)
		assert.Equal(t, linecmd.OKPath(), g["path"], "%s: a legitimate get's path", what)
	}
	if f.holder != f.legit {
		assert.True(t, f.holder.Alive(), "%s: the lease holder died", what)
		g, err := f.holder.do("get "+f.payloads[2].handle, 45*time.Second)
		if assert.NoError(t, err, "%s: the lease holder's get", what) {
			assert.Empty(t, g["error"], "%s: the owner does not serve the lease holder's get", what)
			assert.Equal(t, f.payloads[2].sha, g["sha256"], "%s: the lease holder's bytes", what)
			assert.Equal(t, "rdma/ok", g["path"], "%s: the lease holder (another host) reads over UCX", what)
		}
	}
}

// waitSameHost waits until p's same-host path to peer is decided: taken when want, refused
// (with a reason other than the probe under way) when not.
func waitSameHost(t testing.TB, p *proc, peer string, want bool) {
	t.Helper()
	var why string
	require.Eventually(t, func() bool {
		r := p.ok("samehost " + peer)
		why, _ = r["why"].(string)
		return r["same_host"] == want && why != "probing"
	}, 30*time.Second, 20*time.Millisecond, "%s: same-host path to %s never became %v (last: %s)", p.Name, peer, want, why)
}

// checkStream pauses the consumer's stream and checks that the owner received exactly messages
// 1..n, in order, and nothing else; then the stream goes on.
func (f *fixture) checkStream(what string) {
	t := f.t
	t.Helper()
	// Some of the stream after the attack, so that a message the attack displaced shows: a few
	// more sends, or 5 s on a loaded machine.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		s, err := f.legit.do("sent", time.Minute)
		if err != nil || s["error"] != "" || num(s["sent"]) >= f.streamed+5 {
			break
		}
	}
	r, err := f.legit.do("pause", time.Minute)
	if !assert.NoError(t, err) || !assert.Empty(t, r["error"], "%s: the consumer's stream", what) {
		return
	}
	n := num(r["sent"])
	var legit, foreign []any
	deadline := time.Now().Add(10 * time.Second)
	for {
		rec, err := f.victim.do("received", time.Minute)
		if !assert.NoError(t, err) {
			return
		}
		legit, _ = rec["legit"].([]any)
		foreign, _ = rec["foreign"].([]any)
		if uint64(len(legit)) >= n || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	var got []uint64
	for _, x := range legit {
		got = append(got, num(x))
	}
	if d := streamFaults(n, got); d != "" {
		assert.Fail(t, fmt.Sprintf("%s: the legitimate consumer sent messages 1..%d; the owner received %s", what, n, d))
	}
	if len(foreign) > 0 {
		assert.Fail(t, fmt.Sprintf("%s: %d messages delivered that the legitimate consumer never sent, the first: %v", what, len(foreign), foreign[:min(len(foreign), 4)]))
	}
	assert.Greater(t, n, f.streamed, "%s: the consumer's stream made no progress", what)
	f.streamed = n
	f.legit.ok("resume")
}

// streamFaults describes how got differs from 1..n in order ("" when it does not): how many
// arrived, which are missing or came twice (the first few of each), and where the order broke.
func streamFaults(n uint64, got []uint64) string {
	seen := map[uint64]int{}
	disorder := -1
	for i, g := range got {
		seen[g]++
		if disorder < 0 && g != uint64(i+1) {
			disorder = i
		}
	}
	var missing, dup []uint64
	for k := uint64(1); k <= n; k++ {
		switch seen[k] {
		case 0:
			missing = append(missing, k)
		case 1:
		default:
			dup = append(dup, k)
		}
	}
	if len(missing) == 0 && len(dup) == 0 && uint64(len(got)) == n && disorder < 0 {
		return ""
	}
	first := func(s []uint64) string {
		if len(s) > 8 {
			return fmt.Sprintf("%v… (%d)", s[:8], len(s))
		}
		return fmt.Sprint(s)
	}
	out := fmt.Sprintf("%d messages, missing %s, twice %s", len(got), first(missing), first(dup))
	if disorder >= 0 {
		out += fmt.Sprintf(", out of order from position %d (%v)", disorder, got[disorder:min(len(got), disorder+6)])
	}
	return out
}
