//go:build cgo && linux && ucx_static

package ucxstatic_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/test/ucxstatic"
)

// guardAMBytes is the active message the RMA probe sends after the refusals: large enough for
// ucp's rendezvous, which no longer finds a tcp PUT to use and moves it over active messages.
const guardAMBytes = 64 << 20

// guardHelper runs one probe of the patch set in this (child) process and prints its report as
// one JSON line after "helper: report ": the target is a worker or interface of the child, so
// a probe that made UCX write at its global, or crash, is seen by the parent.
func guardHelper(mode string) int {
	var rep any
	var err error
	switch mode {
	case "rma":
		rep, err = ucxstatic.SoftwareRMAProbe(guardAMBytes)
	case "tcpput":
		rep, err = ucxstatic.TCPPutProbe()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	b, err := json.Marshal(rep)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	fmt.Printf("helper: report %s\n", b)
	return 0
}

// runGuardHelper runs the probe in a child and decodes its report into rep; it returns the
// child's whole output (UCX's log lines included: they go to standard error, which is not
// buffered, since the child ends with os.Exit, which does not flush C's standard output).
func runGuardHelper(t *testing.T, mode string, rep any, env ...string) string {
	t.Helper()
	out, err := runSelf(t, mode, append([]string{"UCX_LOG_FILE=stderr"}, env...)...)
	require.NoError(t, err, "the probe's process failed (a refused request must never crash the target):\n%s", out)
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if js, ok := strings.CutPrefix(sc.Text(), "helper: report "); ok {
			require.NoError(t, json.Unmarshal([]byte(js), rep), "report line %q", js)
			return out
		}
	}
	t.Fatalf("the probe printed no report:\n%s", out)
	return out
}

// guardLines returns UCX's warning lines of the given refusal kind.
func guardLines(out, kind string) []string {
	re := regexp.MustCompile(`(?m)^.*velo-ucx-guard: refused a ` + regexp.QuoteMeta(kind) + `: .*$`)
	return re.FindAllString(out, -1)
}

// TestStaticGuardMarker: the static UCX carries the patch set's marker, which velo reads at run
// time, and its counters.
func TestStaticGuardMarker(t *testing.T) {
	assert.Equal(t, ucxstatic.GuardVersionWant, ucxstatic.GuardVersion())
	c := ucxstatic.GuardCounters()
	assert.Len(t, c, 5)
}

// TestStaticSoftwareRMARefused runs a software PUT, GET and two atomics at a global of a live
// target worker (in a child process): the global is untouched, each refusal is counted, the PUT
// and the non-fetching atomic complete and flush (the target still sends the completion), the
// GET and the fetching atomic complete with UCS_ERR_REJECTED and deliver nothing, the target
// survives, and the same endpoint then carries a 64 MiB active message over tcp. The two
// atomics, refused within 10 seconds, print one warning line between them.
func TestStaticSoftwareRMARefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
	}{{"default protocols", nil}, {"UCX_PROTO_ENABLE=y", []string{"UCX_PROTO_ENABLE=y"}}} {
		t.Run(tc.name, func(t *testing.T) {
			var rep ucxstatic.RMAProbeReport
			out := runGuardHelper(t, "rma", &rep, append([]string{"UCX_TLS=tcp"}, tc.env...)...)
			rejected := "Operation rejected by remote peer" // ucs_status_string(UCS_ERR_REJECTED)
			assert.Equal(t, uint64(ucxstatic.RMAProbeTarget), rep.Target, "the target's global changed:\n%s", out)
			assert.Equal(t, "Success", rep.Put)
			assert.Equal(t, "Success", rep.PutFlush, "a refused PUT still completes remotely, so flush ends")
			assert.Equal(t, rejected, rep.Get)
			assert.Zero(t, rep.GetDelivered, "the refused GET delivered data")
			assert.Equal(t, "Success", rep.AtomicPost)
			assert.Equal(t, "Success", rep.AtomicFlush)
			assert.Equal(t, rejected, rep.AtomicFetch)
			assert.Zero(t, rep.FetchDelivered, "the refused atomic delivered data")
			assert.Equal(t, "Success", rep.AM, "a 64 MiB active message after the refusals")
			assert.Equal(t, ucxstatic.GuardCounts{1, 1, 2, 0, 0}, rep.Counted,
				"counters moved (PUT, GET, atomics, tcp PUT, wire ids)")
			assert.Len(t, guardLines(out, "software PUT"), 1, "%s", out)
			assert.Len(t, guardLines(out, "software GET"), 1, "%s", out)
			assert.Len(t, guardLines(out, "software atomic"), 1, "two atomic refusals in 10 s print one line:\n%s", out)
			for _, l := range guardLines(out, "software PUT") {
				assert.Contains(t, l, "8 bytes at address 0x")
			}
		})
	}
}

// TestStaticTCPPutRefused sends a tcp PUT (uct_ep_put_zcopy) at a global of a tcp interface of
// a child process: nothing is written, the refusal is counted, the receiver closes the sender's
// connection, and the child survives. ucp itself no longer sees a tcp PUT: the interface does not
// advertise one (TestStaticSoftwareRMARefused's 64 MiB message goes over active messages).
func TestStaticTCPPutRefused(t *testing.T) {
	var rep ucxstatic.TCPProbeReport
	out := runGuardHelper(t, "tcpput", &rep)
	assert.Equal(t, uint64(ucxstatic.TCPProbeTarget), rep.Target, "the tcp PUT wrote the target's global:\n%s", out)
	assert.Equal(t, ucxstatic.GuardCounts{0, 0, 0, 1, 0}, rep.Counted)
	assert.GreaterOrEqual(t, rep.SenderErrors, 1, "the sender's connection was not closed:\n%s", out)
	lines := guardLines(out, "tcp PUT request")
	require.Len(t, lines, 1, "%s", out)
	assert.Contains(t, lines[0], "8 bytes at address 0x")
	assert.Contains(t, lines[0], "connection closed")
}

// ptrMapProgram exercises ucs_ptr_map as the wire-id lookups use it (UCX's own inline code, from
// the build's source tree): keys are indirect whatever the caller asks, and a key without the
// indirect bit (an object's address, as a forged id would be) or an unknown one is not found.
const ptrMapProgram = `
#include <ucs/datastruct/ptr_map.inl>
#include <ucs/config/global_opts.h>
#include <stdio.h>

UCS_PTR_MAP_DEFINE(velo_probe, 0);
UCS_PTR_MAP_DEFINE(velo_probe_safe, 1);

int main(void)
{
    UCS_PTR_MAP_T(velo_probe) map;
    UCS_PTR_MAP_T(velo_probe_safe) smap;
    static long obj[2];
    uint64_t c0[5], c1[5];
    ucs_ptr_map_key_t k1, k2, k3;
    void *p;
    int s;

    UCS_PTR_MAP_INIT(velo_probe, &map);
    UCS_PTR_MAP_INIT(velo_probe_safe, &smap);
    velo_ucx_guard_counters(c0, 5);
    s = UCS_PTR_MAP_PUT(velo_probe, &map, obj, 0, &k1);
    printf("put-direct %d %d\n", s, (int)(k1 & 1));
    s = UCS_PTR_MAP_PUT(velo_probe, &map, obj, 1, &k2);
    printf("put-indirect %d %d\n", s, (int)(k2 & 1));
    s = UCS_PTR_MAP_PUT(velo_probe_safe, &smap, obj, 0, &k3);
    printf("put-safe %d %d\n", s, (int)(k3 & 1));
    printf("distinct %d\n", (k1 != k2) && ((k1 >> 32) != (k2 >> 32) || (k1 >> 32) != (k3 >> 32)));
    s = UCS_PTR_MAP_GET(velo_probe, &map, k1, 0, &p);
    printf("get-k1 %d %d\n", s, p == (void*)obj);
    s = UCS_PTR_MAP_GET(velo_probe_safe, &smap, k3, 0, &p);
    printf("get-safe %d %d\n", s, p == (void*)obj);
    s = UCS_PTR_MAP_GET(velo_probe, &map, (uintptr_t)obj, 0, &p);
    printf("get-address %d %d\n", s, p == NULL);
    printf("get-unknown %d\n", UCS_PTR_MAP_GET(velo_probe, &map, k1 ^ (1ull << 40), 0, &p));
    printf("del-invalid %d\n", UCS_PTR_MAP_DEL(velo_probe, &map, UCS_PTR_MAP_KEY_INVALID));
    s = UCS_PTR_MAP_DEL(velo_probe, &map, k1);
    printf("del %d", s);
    s = UCS_PTR_MAP_DEL(velo_probe, &map, k2);
    printf(" %d", s);
    s = UCS_PTR_MAP_DEL(velo_probe_safe, &smap, k3);
    printf(" %d\n", s);
    velo_ucx_guard_counters(c1, 5);
    printf("wire-ids %lu\n", (unsigned long)(c1[4] - c0[4]));
    UCS_PTR_MAP_DESTROY(velo_probe, &map);
    UCS_PTR_MAP_DESTROY(velo_probe_safe, &smap);
    return 0;
}
`

// TestStaticPtrMapRefusesForgedIds compiles ptrMapProgram against the build's source and object
// trees (the recipe keeps them in src/ucx-<version> and work/obj-<version>) and libvelo_ucx.a.
func TestStaticPtrMapRefusesForgedIds(t *testing.T) {
	version := builtVersion(t)
	ucxDir := filepath.Join("..", "..", "third_party", "ucx")
	src, err := filepath.Abs(filepath.Join(ucxDir, "src", "ucx-"+version, "src"))
	require.NoError(t, err)
	obj, err := filepath.Abs(filepath.Join(ucxDir, "work", "obj-"+version))
	require.NoError(t, err)
	lib, err := filepath.Abs(filepath.Join(ucxDir, "build", "lib", "libvelo_ucx.a"))
	require.NoError(t, err)
	for _, p := range []string{filepath.Join(src, "ucs", "datastruct", "ptr_map.inl"), filepath.Join(obj, "config.h")} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("the build's source or object tree is gone (%v); make ucx-static rebuilds them", err)
		}
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ptrmap.c"), []byte(ptrMapProgram), 0o644))
	bin := filepath.Join(dir, "ptrmap")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := []string{"-DHAVE_CONFIG_H", "-I" + src, "-I" + obj, "-I" + filepath.Join(obj, "src"),
		"-o", bin, filepath.Join(dir, "ptrmap.c"), lib, "-libverbs", "-lmlx5", "-lrdmacm", "-lpthread", "-ldl", "-lrt", "-lm"}
	out, err := exec.CommandContext(ctx, cc, args...).CombinedOutput()
	require.NoError(t, err, "%s %v:\n%s", cc, args, out)
	out, err = exec.CommandContext(ctx, bin).CombinedOutput()
	require.NoError(t, err, "%s", out)
	got := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok && !strings.Contains(line, "UCX") {
			got[k] = v
		}
	}
	const ok, noElem, noProgress = "0", "-12", "-10" // UCS_OK, UCS_ERR_NO_ELEM, UCS_ERR_NO_PROGRESS
	assert.Equal(t, ok+" 1", got["put-direct"], "a key asked for as direct is indirect anyway")
	assert.Equal(t, ok+" 1", got["put-indirect"])
	assert.Equal(t, ok+" 1", got["put-safe"])
	assert.Equal(t, "1", got["distinct"], "keys carry random upper halves")
	assert.Equal(t, ok+" 1", got["get-k1"])
	assert.Equal(t, ok+" 1", got["get-safe"])
	assert.Equal(t, noElem+" 1", got["get-address"], "an address as a key resolves to nothing")
	assert.Equal(t, noElem, got["get-unknown"])
	assert.Equal(t, noProgress, got["del-invalid"], "releasing the invalid id stays a no-op")
	assert.Equal(t, ok+" "+ok+" "+ok, got["del"])
	assert.Equal(t, "2", got["wire-ids"], "the address and the unknown key are counted")
	assert.Regexp(t, `velo-ucx-guard: refused a wire id: id 0x[0-9a-f]+ has no indirect bit`, string(out))
}
