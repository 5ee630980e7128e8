//go:build cgo && linux && ucx_static

package ucxstatic_test

import (
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/velo-go/velo/test/ucxstatic"
)

// helperEnv selects what the test binary does when a test re-runs it as a child: the child is
// the same statically linked program, started with an environment that UCX reads in its
// constructors (UCX_LOG_LEVEL and friends are read before main).
const helperEnv = "VELO_UCXSTATIC_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		dir, err := os.MkdirTemp("", "ucxstatic-probe-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		probeDir = dir
		code := m.Run()
		os.RemoveAll(dir)
		os.Exit(code)
	case "init":
		rep, err := ucxstatic.InitTCP()
		if err != nil {
			fmt.Fprintln(os.Stderr, "helper:", err)
			os.Exit(1)
		}
		fmt.Printf("helper: ucp_init ok tls=%s address=%d\n", rep.TLS, rep.WorkerAddressBytes)
		os.Exit(0)
	case "rma", "tcpput":
		os.Exit(guardHelper(os.Getenv(helperEnv)))
	default:
		fmt.Fprintln(os.Stderr, "helper: unknown mode", os.Getenv(helperEnv))
		os.Exit(2)
	}
}

// runSelf re-runs this test binary as a helper with the given environment added.
func runSelf(t *testing.T, mode string, env ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0])
	cmd.Env = append(append(os.Environ(), helperEnv+"="+mode), env...)
	var buf bytes.Buffer
	cmd.Stdout = &buf
	cmd.Stderr = &buf
	err := cmd.Run()
	return buf.String(), err
}

func TestStaticUCPInitOverTCP(t *testing.T) {
	rep, err := ucxstatic.InitTCP()
	if err != nil {
		t.Fatalf("ucp_init over %s in the static binary: %v", rep.TLS, err)
	}
	if want := builtVersion(t); rep.Version != want {
		t.Errorf("linked UCX version %q; the recipe's build/ holds %s", rep.Version, want)
	}
	if rep.WorkerAddressBytes <= 0 {
		t.Errorf("worker address is %d bytes", rep.WorkerAddressBytes)
	}
	res, err := ucxstatic.TransportResources("tcp")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(res, "tcp/lo") {
		t.Errorf("the tcp transport lists no loopback device: %q", res)
	}
}

func TestStaticEveryComponentConstructorRan(t *testing.T) {
	comps, err := ucxstatic.Components()
	if err != nil {
		t.Fatal(err)
	}
	// Each component registers itself from a constructor in its own object file: ib and rdmacm
	// from the IB modules, cma from its module, the rest from libuct. A plain archive link drops
	// the first three (nothing references their objects).
	for _, want := range []string{"ib", "rdmacm", "cma", "self", "tcp", "sysv", "posix"} {
		if !slices.Contains(comps, want) {
			t.Errorf("UCT component %q is not registered, so its constructor did not run; registered: %q", want, comps)
		}
	}
}

// rdmaLib matches shared libraries of rdma-core (verbs, its providers, rdmacm, umad).
var rdmaLib = regexp.MustCompile(`^lib(ibverbs|rdmacm|ibumad|ibmad|ibnetdisc|mlx4|mlx5|efa|hns|mana|mthca|cxgb4|irdma|qedr|vmw_pvrdma|bnxt_re|siw|rxe|hfi1verbs|ipathverbs|ocrdma|ionic|erdma)[.-]`)

// ucxLib matches UCX's own shared libraries and plugins.
var ucxLib = regexp.MustCompile(`^libuc[mpst]([._-]|$)|^libucx`)

var allowedRDMA = []string{"libibverbs.so.1", "libmlx5.so.1", "librdmacm.so.1"}

// checkDynamicDeps asserts the guide's promise for a statically linked velo binary: no UCX shared
// object, and among rdma-core's libraries exactly libibverbs, libmlx5 and librdmacm. It checks
// both the direct DT_NEEDED entries and ldd's transitive list.
func checkDynamicDeps(t *testing.T, bin string) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	needed, err := f.ImportedLibraries()
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ldd", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("ldd %s: %v\n%s", bin, err, out)
	}
	var loaded []string
	for _, line := range strings.Split(string(out), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		loaded = append(loaded, filepath.Base(fields[0]))
		if strings.Contains(line, "not found") {
			t.Errorf("ldd: %s", strings.TrimSpace(line))
		}
	}
	for _, set := range []struct {
		what string
		libs []string
	}{{"DT_NEEDED", needed}, {"ldd", loaded}} {
		var rdma []string
		for _, lib := range set.libs {
			if ucxLib.MatchString(lib) {
				t.Errorf("%s of %s lists the UCX shared object %s", set.what, filepath.Base(bin), lib)
			}
			if rdmaLib.MatchString(lib) {
				rdma = append(rdma, lib)
			}
		}
		slices.Sort(rdma)
		if !slices.Equal(rdma, allowedRDMA) {
			t.Errorf("%s of %s: rdma-core libraries %q, want exactly %q (all: %q)", set.what, filepath.Base(bin), rdma, allowedRDMA, set.libs)
		}
	}
}

func TestStaticLinkLoadsNoUCXSharedObject(t *testing.T) {
	checkDynamicDeps(t, os.Args[0])
}

var (
	probeDir  string // made by TestMain, removed after the tests
	probeOnce sync.Once
	probeErr  error
)

// probeBinary builds cmd/ucxstatic-probe with -tags ucx_static once, as a user would build a
// program. Unlike a test binary (which go test links without a symbol table) it keeps its
// symbols, which the ctor-order walk needs.
func probeBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(probeDir, "ucxstatic-probe")
	probeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, "go", "build", "-tags", "ucx_static", "-o", bin, "./cmd/ucxstatic-probe").CombinedOutput()
		if err != nil {
			probeErr = fmt.Errorf("go build -tags ucx_static ./cmd/ucxstatic-probe: %v\n%s", err, out)
		}
	})
	if probeErr != nil {
		t.Fatal(probeErr)
	}
	return bin
}

// runProbe runs the probe binary with UCX_TLS=tcp and returns its output.
func runProbe(t *testing.T) string {
	t.Helper()
	bin := probeBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := exec.CommandContext(ctx, bin)
	run.Env = append(os.Environ(), "UCX_TLS=tcp")
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", bin, err, out)
	}
	return string(out)
}

// builtVersion is the UCX version of the build the static link uses: build/ links to build-<version>.
func builtVersion(t *testing.T) string {
	t.Helper()
	target, err := os.Readlink(filepath.Join("..", "..", "third_party", "ucx", "build"))
	if err != nil {
		t.Fatalf("third_party/ucx/build is not the recipe's link to a build-<version> folder (run make ucx-static): %v", err)
	}
	return strings.TrimPrefix(filepath.Base(target), "build-")
}

// TestStaticProbeBinary checks the same promises on an ordinary program built with
// -tags ucx_static.
func TestStaticProbeBinary(t *testing.T) {
	checkDynamicDeps(t, probeBinary(t))
	out := runProbe(t)
	for _, want := range []string{"version: " + builtVersion(t), "guard: " + ucxstatic.GuardVersionWant + " counters [",
		"components: ", " ib ", "tcp resources: ", "tcp/lo", "ucp_init: ok tls=tcp"} {
		if !strings.Contains(out, want) {
			t.Errorf("probe output lacks %q:\n%s", want, out)
		}
	}
}

// TestStaticLoggingOnPluginLoaderOff runs ucp_init in a child with debug logging and memory events
// on (the worst case for the loader): UCX must log (Debian's build has logging compiled out,
// ours must not, or the "md open by" line the guide relies on cannot appear), and it must neither
// look for plugin .so files nor dlopen the executable (UCX_SHARED_LIB is off in the static build).
func TestStaticLoggingOnPluginLoaderOff(t *testing.T) {
	out, err := runSelf(t, "init", "UCX_LOG_LEVEL=debug", "UCX_MEM_EVENTS=y", "UCX_TLS=tcp")
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	if !strings.Contains(out, "helper: ucp_init ok tls=tcp") {
		t.Fatalf("helper did not report ucp_init:\n%s", out)
	}
	if !regexp.MustCompile(`UCX\s+DEBUG`).MatchString(out) {
		t.Errorf("UCX_LOG_LEVEL=debug printed no debug line; is logging compiled out?\n%.4000s", out)
	}
	for _, bad := range []string{"dlopen(", "failed to load", "loading modules for"} {
		if strings.Contains(out, bad) {
			t.Errorf("the static UCX runs its plugin loader (%q):\n%.4000s", bad, out)
		}
	}
}

// TestCtorOrderMLX5MemoryDomainsBeforeVerbs is the guide's ctor_order test for UCX 1.13: it reads
// the table uct_ib_md_open walks for every IB device, from this static binary's memory, and
// requires the DEVX and DV (mlx5) implementations ahead of plain verbs. If verbs came first, an
// mlx5 NIC would open as "uct_ib_verbs_md_ops" and the rc_mlx5/dc_mlx5 transports would have no
// devices.
//
// The walk runs in the probe binary (see probeBinary); it fails there, naming why, if the table
// cannot be found or does not hold UCX's own mlx5 entries.
func TestCtorOrderMLX5MemoryDomainsBeforeVerbs(t *testing.T) {
	out := runProbe(t)
	const prefix = "ib md ops: "
	var names []string
	for _, line := range strings.Split(out, "\n") {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			names = strings.Fields(rest)
		}
	}
	if len(names) == 0 {
		t.Fatalf("the probe printed no %q line:\n%s", prefix, out)
	}
	t.Logf("IB memory-domain open order: %q", names)
	at := func(name string) int {
		i := slices.Index(names, name)
		if i < 0 {
			t.Fatalf("%s is not in the IB memory-domain table %q (was DEVX/mlx5-dv compiled in?)", name, names)
		}
		return i
	}
	devx, dv, verbs := at("uct_ib_mlx5_devx_md_ops"), at("uct_ib_mlx5_md_ops"), at("uct_ib_verbs_md_ops")
	if devx != 0 || !(devx < dv && dv < verbs) || verbs != len(names)-1 {
		t.Errorf("IB memory domains are tried in the order %q; want uct_ib_mlx5_devx_md_ops first, then uct_ib_mlx5_md_ops, with uct_ib_verbs_md_ops last", names)
	}
}

// TestStaticMDOpenOnHardware checks the guide's lane proof on a real device: UCX_LOG_LEVEL=debug
// shows which implementation opened the memory domain. It needs VELO_TEST_RDMA_DEVICE.
func TestStaticMDOpenOnHardware(t *testing.T) {
	dev := os.Getenv("VELO_TEST_RDMA_DEVICE")
	if dev == "" {
		t.Skip("no RDMA hardware: set VELO_TEST_RDMA_DEVICE=mlx5_0:1 (for example) to run this on a node with one")
	}
	out, err := runSelf(t, "init", "UCX_LOG_LEVEL=debug", "UCX_NET_DEVICES="+dev, "UCX_TLS=")
	if err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	line := regexp.MustCompile(`md open by '([a-z0-9_]+)' is successful`).FindStringSubmatch(out)
	if line == nil {
		t.Fatalf("no 'md open by ... is successful' line with UCX_NET_DEVICES=%s:\n%.4000s", dev, out)
	}
	if strings.HasPrefix(dev, "mlx5") && line[1] != "uct_ib_mlx5_devx_md_ops" {
		t.Errorf("%s opened by %s, want uct_ib_mlx5_devx_md_ops (see the guide's failure table)", dev, line[1])
	}
}

// TestWarmUCXStaticIsCached runs the recipe again over the build this test binary links: the
// stamp matches, so it must not rebuild (a changed flag changing the key is covered by
// TestStampKeyFollowsFlagsAndToolchain).
func TestWarmUCXStaticIsCached(t *testing.T) {
	build := filepath.Join("..", "..", "third_party", "ucx", "build")
	lib := filepath.Join(build, "lib", "libvelo_ucx.a")
	before, err := os.Stat(lib)
	if err != nil {
		t.Fatal(err)
	}
	// Never start a rebuild from a test: if this environment's key differs from the stamp (the
	// build was made with other variables), say so instead.
	stamp, err := os.ReadFile(filepath.Join(build, ".velo-ucx-stamp"))
	if err != nil {
		t.Fatalf("no stamp in %s (run make ucx-static): %v", build, err)
	}
	key := runRecipe(t, passThroughRecipeEnv(), "key")
	wantAccepted(t, key)
	// The recipe's notes (which source it picked) share the output with the key.
	key.out = regexp.MustCompile(`(?m)^ucx-static: .*\n`).ReplaceAllString(key.out, "")
	if key.out != string(stamp) {
		t.Skipf("this environment's stamp key differs from the one the build was made with, so the recipe would rebuild; run make ucx-static in this environment first.\nkey:\n%s\nstamp:\n%s", key.out, stamp)
	}
	r := runRecipe(t, passThroughRecipeEnv(), "build")
	wantAccepted(t, r)
	if !strings.Contains(r.out, "up to date") {
		t.Errorf("a second build with the same inputs did not report up to date:\n%s", r.out)
	}
	after, err := os.Stat(lib)
	if err != nil {
		t.Fatal(err)
	}
	if !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("libvelo_ucx.a was rewritten by a warm build")
	}
}

// passThroughRecipeEnv keeps the caller's recipe variables (the build was made with them), which
// runRecipe otherwise removes.
func passThroughRecipeEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if isRecipeVar(name) {
			env = append(env, kv)
		}
	}
	return env
}

// TestStaticUCXModuleBinary links the ucx module's own test binary with -tags ucx_static (its
// internal/capi/link_static.go) and checks the same dynamic-dependency promise on it. make
// test-static then runs that module's tests against the static UCX.
func TestStaticUCXModuleBinary(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "ucx.test")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "test", "-c", "-tags", "ucx_static", "-o", bin,
		"github.com/velo-go/velo/ucx").CombinedOutput()
	if err != nil {
		t.Fatalf("go test -c -tags ucx_static github.com/velo-go/velo/ucx: %v\n%s", err, out)
	}
	checkDynamicDeps(t, bin)
}
