package ucxstatic_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gtestScript is third_party/ucx/ucx-gtest.sh, which runs UCX's own gtest against the patched UCX
// (make ucx-gtest). These tests drive its bookkeeping with a fake gtest binary and fixture
// READMEs; the real run takes tens of minutes and is not part of make test.
var gtestScript = filepath.Join("..", "..", "third_party", "ucx", "ucx-gtest.sh")

// runGtestScript runs the script with the extra environment and arguments.
func runGtestScript(t *testing.T, env []string, args ...string) recipeResult {
	t.Helper()
	return runScript(t, gtestScript, append(cleanGtestEnv(), env...), time.Minute, args...)
}

func cleanGtestEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "VELO_UCX_GTEST_") && !strings.HasPrefix(kv, "UCX_") {
			env = append(env, kv)
		}
	}
	return env
}

// gtestReadme writes a README fixture whose refusal block lists the given tests.
func gtestReadme(t *testing.T, refused ...string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("# fixture\n\n- `before` the block\n\n<!-- ucx-gtest refusals begin -->\n**Refused on purpose:**\n\n")
	for _, name := range refused {
		b.WriteString("- `" + name + "`\n")
	}
	b.WriteString("<!-- ucx-gtest refusals end -->\n\n- `not-a-refusal` after the block\n")
	p := filepath.Join(t.TempDir(), "README.md")
	require.NoError(t, os.WriteFile(p, []byte(b.String()), 0o644))
	return p
}

// fakeGtest is a gtest build tree whose binary lists five tests of tcp/test_ucp_am for the am
// group (none for the others) and runs the tests its filter names the way UCX's gtest reports
// them: pass, UCX's own skip, a failure, and an abort in the middle of a run, as UCX's watchdog
// does when a test hangs.
func fakeGtest(t *testing.T) string {
	t.Helper()
	obj := t.TempDir()
	bin := filepath.Join(obj, "test", "gtest", "gtest")
	require.NoError(t, os.MkdirAll(filepath.Dir(bin), 0o755))
	script := `#!/usr/bin/env bash
filter=""
list=0
for a in "$@"; do
	case "$a" in
	--gtest_list_tests) list=1 ;;
	--gtest_filter=*) filter=${a#--gtest_filter=} ;;
	esac
done
if [ $list = 1 ]; then
	echo "[     INFO ] ib is not available"
	case "$filter" in
	'*/test_ucp_am*'*)
		echo "tcp/test_ucp_am."
		for n in pass/0 skip/0 refused/0 hang/0 after/0; do echo "  $n  # GetParam() = tcp"; done
		;;
	esac
	exit 0
fi
echo "Note: Google Test filter = $filter"
failed=0
IFS=: read -r -a names <<<"$filter"
for n in "${names[@]}"; do
	echo "[ RUN      ] $n <tcp>"
	case "$n" in
	*hang*) echo "watchdog: aborting"; exit 134 ;;
	*skip*) echo "[     SKIP ] (not supported)"; echo "[       OK ] $n (0 ms)" ;;
	*refused*) echo "[  FAILED  ] $n, where GetParam() = tcp (3 ms)"; failed=1 ;;
	*) echo "[       OK ] $n (1 ms)" ;;
	esac
done
[ $failed = 0 ] || echo "[  FAILED  ] 1 test, listed below:"
exit $failed
`
	require.NoError(t, os.WriteFile(bin, []byte(script), 0o755))
	return obj
}

// fakeRun is the environment of a run of the fake gtest into out, with a README listing refused.
func fakeRun(t *testing.T, out string, refused ...string) []string {
	t.Helper()
	return []string{
		"VELO_UCX_GTEST_OBJ=" + fakeGtest(t),
		"VELO_UCX_GTEST_OUT=" + out,
		"VELO_UCX_GTEST_README=" + gtestReadme(t, refused...),
	}
}

// TestGtestRunResumesAfterAnAbortAndClassifies: a test that aborts gtest is recorded as CRASHED
// and the run goes on with the tests after it; a failure listed in the README is an expected
// refusal, one that is not (the crash) is breakage and fails the run.
func TestGtestRunResumesAfterAnAbortAndClassifies(t *testing.T) {
	t.Parallel()
	out := t.TempDir()
	r := runGtestScript(t, append(fakeRun(t, out, "tcp/test_ucp_am.refused/0"), "VELO_UCX_GTEST_REFUSALS=run"), "run", "am")
	wantRefusal(t, r, "gtest stopped (exit 134) in tcp/test_ucp_am.hang/0; resuming after it",
		"run 5: passed 2, skipped 1, expected refusals 1, other failures 1",
		"breakage: CRASHED tcp/test_ucp_am.hang/0")
	results, err := os.ReadFile(filepath.Join(out, "results"))
	require.NoError(t, err)
	assert.Equal(t, []string{
		"OK tcp/test_ucp_am.pass/0",
		"SKIPPED tcp/test_ucp_am.skip/0",
		"FAILED tcp/test_ucp_am.refused/0",
		"CRASHED tcp/test_ucp_am.hang/0",
		"OK tcp/test_ucp_am.after/0",
	}, strings.Split(strings.TrimSpace(string(results)), "\n"))
	assert.NotContains(t, r.out, "breakage: FAILED")
}

// TestGtestRunLeavesOutTheListedRefusals: by default the tests the README lists are not run (some
// wait for the watchdog); they are counted as left out, and the other tests decide the outcome.
func TestGtestRunLeavesOutTheListedRefusals(t *testing.T) {
	t.Parallel()
	out := t.TempDir()
	r := runGtestScript(t, fakeRun(t, out, "tcp/test_ucp_am.refused/0", "tcp/test_ucp_am.hang/0"), "run", "am")
	wantAccepted(t, r)
	assert.Contains(t, r.out, "group am: 5 tests, 3 to run")
	assert.Contains(t, r.out, "run 3: passed 2, skipped 1, expected refusals 0, other failures 0")
	assert.Contains(t, r.out, "left out: 2 expected refusals")
	logs, err := filepath.Glob(filepath.Join(out, "am.*.log"))
	require.NoError(t, err)
	require.Len(t, logs, 1, "one gtest run, no abort")
	log, err := os.ReadFile(logs[0])
	require.NoError(t, err)
	assert.NotContains(t, string(log), "refused/0")
	assert.NotContains(t, string(log), "hang/0")
}

// TestGtestRunOnlyTheNamedTests: VELO_UCX_GTEST_ONLY runs the tests of the groups that the file
// names and nothing else; a path that is not a file is refused.
func TestGtestRunOnlyTheNamedTests(t *testing.T) {
	t.Parallel()
	only := filepath.Join(t.TempDir(), "only")
	require.NoError(t, os.WriteFile(only, []byte("tcp/test_ucp_am.after/0\ntcp/test_ucp_tag.other/0\n"), 0o644))
	out := t.TempDir()
	env := fakeRun(t, out)
	r := runGtestScript(t, append(env, "VELO_UCX_GTEST_ONLY="+only), "run", "am")
	wantAccepted(t, r)
	assert.Contains(t, r.out, "run 1: passed 1, skipped 0, expected refusals 0, other failures 0")
	results, err := os.ReadFile(filepath.Join(out, "results"))
	require.NoError(t, err)
	assert.Equal(t, "OK tcp/test_ucp_am.after/0\n", string(results))

	r = runGtestScript(t, append(env, "VELO_UCX_GTEST_ONLY="+filepath.Join(out, "nothing")), "run", "am")
	wantRefusal(t, r, "is not a file")
}

// TestGtestClassify: only failures the README lists pass; a listed test that passes is breakage
// too (the list must say what happens) unless it is marked "(may pass)", and so is a test gtest
// listed but never ran.
func TestGtestClassify(t *testing.T) {
	t.Parallel()
	readme := gtestReadme(t, "tcp/test_ucp_rma.put/0", "test_datatype_ptr_map.unsafe_put")
	env := []string{"VELO_UCX_GTEST_README=" + readme}
	write := func(lines ...string) string {
		p := filepath.Join(t.TempDir(), "results")
		require.NoError(t, os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644))
		return p
	}

	r := runGtestScript(t, env, "classify", write("OK a.b/0", "FAILED tcp/test_ucp_rma.put/0",
		"FAILED test_datatype_ptr_map.unsafe_put", "SKIPPED c.d/1"))
	wantAccepted(t, r)
	assert.Contains(t, r.out, "run 4: passed 1, skipped 1, expected refusals 2, other failures 0")

	r = runGtestScript(t, env, "classify", write("FAILED a.b/0", "OK tcp/test_ucp_rma.put/0", "MISSING e.f/2"))
	wantRefusal(t, r, "other failures 2", "breakage: FAILED a.b/0", "breakage: MISSING e.f/2",
		"breakage: an expected refusal passed: tcp/test_ucp_rma.put/0")

	// A refusal marked "(may pass)" may also pass.
	mayPass := filepath.Join(t.TempDir(), "README.md")
	require.NoError(t, os.WriteFile(mayPass, []byte("<!-- ucx-gtest refusals begin -->\n"+
		"- `tcp/test_ucp_amo.flush/0` (may pass)\n- `tcp/test_ucp_rma.put/0`\n<!-- ucx-gtest refusals end -->\n"), 0o644))
	env = []string{"VELO_UCX_GTEST_README=" + mayPass}
	r = runGtestScript(t, env, "classify", write("OK tcp/test_ucp_amo.flush/0", "FAILED tcp/test_ucp_rma.put/0"))
	wantAccepted(t, r)
	assert.Contains(t, r.out, "run 2: passed 1, skipped 0, expected refusals 1, other failures 0")
	r = runGtestScript(t, env, "classify", write("FAILED tcp/test_ucp_amo.flush/0", "OK tcp/test_ucp_rma.put/0"))
	wantRefusal(t, r, "breakage: an expected refusal passed: tcp/test_ucp_rma.put/0")
	assert.NotContains(t, r.out, "passed: tcp/test_ucp_amo.flush/0")
}

// TestGtestRefusalsComeFromTheReadme: the list is read from the one block in the README (text
// outside it is not a refusal); a README without the block is refused.
func TestGtestRefusalsComeFromTheReadme(t *testing.T) {
	t.Parallel()
	r := runGtestScript(t, []string{"VELO_UCX_GTEST_README=" + gtestReadme(t, "x.y/0", "z.w")}, "refusals")
	wantAccepted(t, r)
	assert.Equal(t, "x.y/0\nz.w\n", r.out)

	empty := filepath.Join(t.TempDir(), "README.md")
	require.NoError(t, os.WriteFile(empty, []byte("# no block\n"), 0o644))
	r = runGtestScript(t, []string{"VELO_UCX_GTEST_README=" + empty}, "refusals")
	wantRefusal(t, r, "must hold exactly one '<!-- ucx-gtest refusals begin -->'")

	// The real list: the two ptr-map tests and tcp's refused RMA and atomics, each named once.
	r = runGtestScript(t, nil, "refusals")
	wantAccepted(t, r)
	names := strings.Fields(r.out)
	assert.Contains(t, names, "test_datatype_ptr_map.unsafe_put")
	assert.Contains(t, names, "test_datatype_ptr_map_safe.safe_put/mt_num_threads")
	seen := map[string]bool{}
	for _, n := range names {
		assert.False(t, seen[n], "%s is listed twice", n)
		seen[n] = true
	}
}

// TestGtestGroupsDoNotOverlap: each group's filter leaves out what the groups before it select,
// so no test runs twice; an unknown group is refused by name.
func TestGtestGroupsDoNotOverlap(t *testing.T) {
	t.Parallel()
	r := runGtestScript(t, nil, "groups")
	wantAccepted(t, r)
	filters := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(r.out), "\n") {
		f := strings.Fields(line)
		require.Len(t, f, 2, line)
		filters[f[0]] = f[1]
	}
	assert.Equal(t, "*/test_ucp_am*", filters["am"])
	assert.Equal(t, "*/test_ucp_wireup*-*/test_ucp_am*:*/test_ucp_tag*:*keepalive*", filters["wireup"])
	assert.Equal(t, "tcp/*-*test_ucp*:*/test_ucp_am*:*/test_ucp_tag*:*keepalive*:*/test_ucp_wireup*:"+
		"*/test_ucp_peer_failure*:*/test_ucp_sockaddr*:*/test_ucp_stream*", filters["uct-tcp"])

	r = runGtestScript(t, fakeRun(t, t.TempDir()), "run", "rdma")
	wantRefusal(t, r, "unknown group 'rdma'")
}
