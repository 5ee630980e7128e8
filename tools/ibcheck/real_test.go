package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/velo-go/velo/tools/ibcheck/internal/check"
	"github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/verbs"
	"github.com/velo-go/velo/verbs/verbstest"
)

// These tests use the real system: the UCX linked into the test binary, this machine's sysfs and
// memlock limit, and ibcheck built as a real binary (dynamic and static).

// TestUCXProbeReal asks the linked UCX for real, through the same child processes ibcheck uses
// (the test binary stands in for ibcheck; see TestMain).
func TestUCXProbeReal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	info := check.ProbeUCX(ctx, []string{"n", "y", "maybe"}, true)
	if !check.Live().CGO {
		if !errors.Is(info.Err, ucx.ErrNotCompiled) {
			t.Fatalf("without cgo: Err = %v, want ucx.ErrNotCompiled", info.Err)
		}
		return
	}
	if info.Err != nil {
		t.Fatalf("probe failed: %v", info.Err)
	}
	v := info.Version
	t.Logf("linked UCX %s; defaults %v; support %+v; RMA %+v", v.String, info.Defaults, info.Support, info.RMA)
	if v.Major < 1 || v.String == "" {
		t.Errorf("version %+v", v)
	}
	if _, ok := info.Defaults["PROTO_ENABLE"]; !ok {
		t.Errorf("no PROTO_ENABLE default in %v", info.Defaults)
	}
	if info.Resources == nil || len(info.Resources.Components) == 0 {
		t.Fatalf("no resources")
	}
	self := false
	for _, c := range info.Resources.Components {
		self = self || c.Name == "self"
	}
	if !self {
		t.Errorf("the resource list has no self component: %+v", info.Resources)
	}
	for _, val := range []string{"n", "y"} {
		if tr := info.RMA[val]; tr.Inconclusive {
			t.Errorf("the GET trial with UCX_PROTO_ENABLE=%s could not run: %s", val, tr.Detail)
		}
	}
	if tr := info.RMA["maybe"]; tr.Worked || !strings.Contains(tr.Detail, "PROTO_ENABLE") {
		t.Errorf("UCX_PROTO_ENABLE=maybe: %+v, want a refusal naming the variable", tr)
	}
	// The CUDA answer of the child is the link's: built with CUDA exactly when this test binary
	// is; without CUDA the driver is never asked.
	if info.CUDA == nil {
		t.Fatalf("the probe child gave no CUDA answer")
	}
	t.Logf("CUDA: %+v", *info.CUDA)
	if info.CUDA.Built != ucx.CUDAEnabled() {
		t.Errorf("CUDA built %v in the child, %v in this process", info.CUDA.Built, ucx.CUDAEnabled())
	}
	if !info.CUDA.Built && (info.CUDA.Devices != 0 || info.CUDA.DevicesErr != "") {
		t.Errorf("a build without CUDA counted devices: %+v", *info.CUDA)
	}
	if info.CUDA.Built && info.CUDA.DevicesErr == "" && info.CUDA.Devices == 0 {
		t.Errorf("the driver answered no error and no device: %+v", *info.CUDA)
	}
	// What this project found out about UCX 1.13 (Debian 12), checked on every run against it:
	// protocol v1 is the default, it carries RMA, and there is no UCX_MAX_RMA_RAILS.
	if v.Major == 1 && v.Minor == 13 {
		if info.Defaults["PROTO_ENABLE"] != "n" {
			t.Errorf("UCX 1.13: PROTO_ENABLE default %q, want n", info.Defaults["PROTO_ENABLE"])
		}
		if !info.RMA["n"].Worked {
			t.Errorf("UCX 1.13: a GET with UCX_PROTO_ENABLE=n failed: %s", info.RMA["n"].Detail)
		}
		if _, ok := info.Defaults["MAX_RMA_RAILS"]; ok {
			t.Errorf("UCX 1.13 reports a MAX_RMA_RAILS setting: %v", info.Defaults)
		}
	}
}

// TestUCXProbeIgnoresOperatorEnvironment: the probe children answer for the linked UCX's
// defaults even when the operator's UCX_* variables would break a context.
func TestUCXProbeIgnoresOperatorEnvironment(t *testing.T) {
	if !check.Live().CGO {
		t.Skip("no UCX in a CGO_ENABLED=0 build")
	}
	t.Setenv("UCX_TLS", "rc_mlx5")
	t.Setenv("UCX_PROTO_ENABLE", "y")
	t.Setenv("UCX_NET_DEVICES", "mlx5_9:1")
	info := check.ProbeUCX(context.Background(), []string{"n"}, false)
	if info.Err != nil || !info.RMA["n"].Worked && info.RMA["n"].Inconclusive {
		t.Fatalf("probe with a hostile environment: %v %+v", info.Err, info.RMA)
	}
	if info.Version.Major == 1 && info.Version.Minor == 13 && info.Defaults["PROTO_ENABLE"] != "n" {
		t.Errorf("the operator's UCX_PROTO_ENABLE leaked into the default: %v", info.Defaults)
	}
}

// builtBinaries caches the binaries buildIbcheck made, by kind; binDir holds them until TestMain
// removes it.
var (
	buildMu       sync.Mutex
	builtBinaries = map[bool]string{}
	binDir        string
)

// buildIbcheck builds the command once per test binary, with cgo or as a static binary.
func buildIbcheck(t *testing.T, static bool) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if bin, ok := builtBinaries[static]; ok {
		return bin
	}
	if binDir == "" {
		dir, err := os.MkdirTemp("", "ibcheck-test-")
		if err != nil {
			t.Fatal(err)
		}
		binDir = dir
	}
	name := "ibcheck"
	if static {
		name = "ibcheck-static"
	}
	bin := filepath.Join(binDir, name)
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("building ibcheck needs the go command on PATH: %v", err)
	}
	cmd := exec.Command(goTool, "build", "-o", bin, ".")
	cmd.Env = os.Environ()
	if static {
		cmd.Env = append(cmd.Env, "CGO_ENABLED=0")
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build (static=%v): %v\n%s", static, err, out)
	}
	builtBinaries[static] = bin
	return bin
}

// cleanEnv is this process's environment without UCX_* and velo variables, as an operator with
// nothing set would have it.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "UCX_") && !strings.HasPrefix(kv, "VELO_") {
			env = append(env, kv)
		}
	}
	return env
}

func runBinary(t *testing.T, bin string, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatalf("running %s %v: %v", bin, args, err)
	}
	return out.String(), errOut.String(), code
}

func liveHasRDMA() bool {
	entries, err := os.ReadDir("/sys/class/infiniband")
	return err == nil && len(entries) > 0
}

// TestRealBinaryOnThisMachine runs the built ibcheck on this machine as an operator would. With no
// RDMA device here it must exit 1 with a clear "no RDMA devices" FAIL, not crash.
func TestRealBinaryOnThisMachine(t *testing.T) {
	if liveHasRDMA() {
		t.Skip("this machine has RDMA devices; the no-device verdict needs a node without (set VELO_TEST_RDMA_DEVICE for the hardware checks)")
	}
	bin := buildIbcheck(t, false)
	out, errOut, code := runBinary(t, bin, cleanEnv())
	if code != check.ExitFail {
		t.Errorf("exit %d, want 1\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "devices            FAIL  no RDMA devices") || strings.Contains(out+errOut, "panic") {
		t.Errorf("want a devices FAIL saying \"no RDMA devices\" and no crash:\n%s\n%s", out, errOut)
	}
	js, _, code := runBinary(t, bin, cleanEnv(), "--json")
	var rep jsonReport
	if err := json.Unmarshal([]byte(js), &rep); err != nil || code != 1 || rep.Schema != SchemaVersion || rep.Verdict != "fail" {
		t.Fatalf("--json: exit %d, %v\n%s", code, err, js)
	}
	if rep.Checks[0].ID != "devices" || rep.Checks[0].Status != "fail" || rep.Checks[0].Probe != "not_available" {
		t.Errorf("first check %+v", rep.Checks[0])
	}
	// No GPU here either: one "no GPU" row, and no GPU check warns or fails.
	if !strings.Contains(out, "gpu                SKIP  no GPU") {
		t.Errorf("want the gpu row to say no GPU:\n%s", out)
	}
	for _, c := range rep.Checks {
		if c.Group == check.GroupGPU && c.Status != "skip" {
			t.Errorf("GPU check %s on a machine without a GPU: %s (%s)", c.ID, c.Status, c.Finding)
		}
	}
	// --ucx lists the linked UCX's resources (the self transport exists on every machine).
	out, _, _ = runBinary(t, bin, cleanEnv(), "--ucx")
	if check.Live().CGO && !strings.Contains(out, "component self") {
		t.Errorf("--ucx lists no self component:\n%s", out)
	}
}

// TestRealBinaryOnGPUTrees runs the built ibcheck over the GPU node trees: the GPU rows come
// from sysfs alone, so the real binary gives the goldens' verdicts, except the dma-buf one, which
// needs the kernel release that a copied tree does not hold.
func TestRealBinaryOnGPUTrees(t *testing.T) {
	bin := buildIbcheck(t, false)
	env := append(cleanEnv(), "VELO_UCX_TRUST_NETWORK=1", "UCX_NET_DEVICES=mlx5_0:1")
	for name, want := range map[string]map[string]string{
		"dgx-h100-gpudirect":    {"gpu": "pass", "gpudirect": "pass", "gpu_nic_path": "pass", "gpu_acs": "pass", "gpu_iommu": "pass"},
		"dgx-h100-no-peermem":   {"gpu": "pass", "gpudirect": "warn", "gpu_nic_path": "pass", "gpu_acs": "warn", "gpu_iommu": "warn"},
		"l40s-dmabuf-user-copy": {"gpu": "pass", "gpudirect": "warn", "gpu_nic_path": "pass", "gpu_acs": "skip", "gpu_iommu": "pass"},
	} {
		out, errOut, _ := runBinary(t, bin, env, "--sysfs", filepath.Join(gpuFixturesDir, "sysfs", name), "--json", "--need-memlock", smallNeed)
		var rep jsonReport
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("%s: %v\n%s\n%s", name, err, out, errOut)
		}
		for _, c := range rep.Checks {
			if w, ok := want[c.ID]; ok && c.Status != w {
				t.Errorf("%s: %s is %s, want %s (%s)", name, c.ID, c.Status, w, c.Finding)
			}
			if name == "l40s-dmabuf-user-copy" && c.ID == "gpudirect" && !strings.Contains(c.Finding, "could not tell") {
				t.Errorf("%s: gpudirect on a copied tree should not know the kernel: %s", name, c.Finding)
			}
		}
	}
}

// smallNeed keeps the real binaries' memlock verdict independent of the machine's limit (a
// non-root box may have 64 KiB): the memlock check itself has its own tests.
const smallNeed = "4K"

// TestRealBinaryOnFixtures is the acceptance test: ibcheck --sysfs <fixture> gives each tree's
// verdict. The linked UCX is real here; no fixture's verdict depends on it. ucx_rma_guard would
// (a binary on Debian's shared UCX fails it), so the operator's opt-in makes that one at worst a
// warning; TestRMAGuardReal judges it.
func TestRealBinaryOnFixtures(t *testing.T) {
	bin := buildIbcheck(t, false)
	env := append(cleanEnv(), "VELO_UCX_TRUST_NETWORK=1")
	for _, name := range fixtureNames(t) {
		want := fixtureExpectations[name]
		out, errOut, code := runBinary(t, bin, env, "--sysfs", fixtureSysfs(name), "--json", "--need-memlock", smallNeed)
		var rep jsonReport
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("%s: %v\n%s\n%s", name, err, out, errOut)
		}
		if code != want.exit {
			t.Errorf("%s: exit %d, want %d", name, code, want.exit)
		}
		for _, c := range rep.Checks {
			if !rep.CGO && (c.ID == "registration" || c.ID == "devx") {
				continue // a CGO_ENABLED=0 test run builds the static binary: those say not compiled in
			}
			if st, ok := want.want[c.ID]; ok && c.Status != st.JSON() {
				t.Errorf("%s: %s is %s, want %s: %s", name, c.ID, c.Status, st.JSON(), c.Finding)
			}
		}
	}
}

// TestStaticBinary builds ibcheck with CGO_ENABLED=0, as make ibcheck-static does: a static
// executable that runs the pure-Go checks and marks the rest not compiled in.
func TestStaticBinary(t *testing.T) {
	bin := buildIbcheck(t, true)
	if ldd, err := exec.LookPath("ldd"); err == nil {
		out, _ := exec.Command(ldd, bin).CombinedOutput()
		if !strings.Contains(string(out), "not a dynamic executable") && !strings.Contains(string(out), "statically linked") {
			t.Errorf("ldd %s: %s (want a static executable)", bin, out)
		}
	} else {
		t.Logf("no ldd here: static linking not checked (%v)", err)
	}
	out, errOut, code := runBinary(t, bin, cleanEnv(), "--sysfs", fixtureSysfs("cx7-ib-active"), "--json", "--need-memlock", smallNeed)
	var rep jsonReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s\n%s", err, out, errOut)
	}
	if code != 0 || rep.CGO {
		t.Errorf("exit %d (want 0), cgo %v (want false)", code, rep.CGO)
	}
	status := map[string]string{}
	for _, c := range rep.Checks {
		status[c.ID] = c.Status
	}
	for _, id := range []string{"registration", "devx", "ucx_version", "ucx_build", "ucx_rma_guard"} {
		if status[id] != "not_compiled_in" {
			t.Errorf("%s: %s, want not_compiled_in", id, status[id])
		}
	}
	for _, id := range []string{"devices", "port", "uverbs", "pkey"} {
		if status[id] != "pass" {
			t.Errorf("%s: %s, want pass (pure Go)", id, status[id])
		}
	}
	// --ip works without librdmacm, from sysfs.
	out, _, code = runBinary(t, bin, cleanEnv(), "--sysfs", fixtureSysfs("cx7-roce-active"), "--ip", "192.168.60.11", "--need-memlock", smallNeed)
	if code != 0 || !strings.Contains(out, "192.168.60.11 is on mlx5_0:1") {
		t.Errorf("static --ip: exit %d\n%s", code, out)
	}
	table, _, _ := runBinary(t, bin, cleanEnv(), "--sysfs", fixtureSysfs("cx7-ib-active"))
	if !strings.Contains(table, "N/C   not compiled in") {
		t.Errorf("the table does not mark not-compiled-in checks:\n%s", table)
	}
	// --strict counts them.
	if _, _, code := runBinary(t, bin, cleanEnv(), "--strict", "--need-memlock", smallNeed, "--sysfs", fixtureSysfs("cx7-ib-active")); code != 1 {
		t.Errorf("static --strict: exit %d, want 1", code)
	}
}

// TestMemlockFailInChild lowers RLIMIT_MEMLOCK to 8 MiB in a child without CAP_IPC_LOCK and reads
// it for real: the memlock check fails and names `ulimit -l`. The child is this test re-run by
// verbstest; the rest of the system is the golden tests' fixed one, so the output is golden too.
func TestMemlockFailInChild(t *testing.T) {
	const updateEnv = "IBCHECK_TEST_UPDATE_GOLDEN" // carries -update into the child
	if !verbstest.InChild() {
		if *update {
			t.Setenv(updateEnv, "1")
		}
		verbstest.RunTest(t, verbstest.Constraints{MemlockSoft: 8 << 20})
		return
	}
	*update = *update || os.Getenv(updateEnv) == "1"
	m, err := verbs.ReadMemlock()
	if err != nil || m.CapIPCLock || m.Soft != 8<<20 {
		t.Fatalf("the child is not constrained as asked: %+v %v", m, err)
	}
	sc := scenario{
		name: "memlock-child-8MiB", args: []string{"--sysfs", fixtureSysfs("cx7-ib-active")}, env: pinnedEnv, exit: 1,
		sys:     func(s *check.System) { s.Memlock = verbs.ReadMemlock },
		want:    map[string]check.Status{"memlock": check.Fail},
		mention: map[string]string{"memlock": "ulimit -l"},
	}
	runGolden(t, sc)
}

// TestRealBinaryMemlockFail runs the built binary itself under an 8 MiB limit without
// CAP_IPC_LOCK: exit 1, memlock FAIL naming ulimit -l.
func TestRealBinaryMemlockFail(t *testing.T) {
	bin := buildIbcheck(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd, err := verbstest.Command(ctx, verbstest.Constraints{MemlockSoft: 8 << 20}, bin, "--sysfs", fixtureSysfs("cx7-ib-active"), "--json")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Env = cleanEnv()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	runErr := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(runErr, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("want exit 1, got %v\n%s\n%s", runErr, out.String(), errOut.String())
	}
	var rep jsonReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	for _, c := range rep.Checks {
		if c.ID == "memlock" {
			if c.Status != "fail" || !strings.Contains(c.Fix, "ulimit -l") || c.Facts["cap_ipc_lock"] != "false" || c.Facts["soft"] != "8388608" {
				t.Errorf("memlock: %+v", c)
			}
			return
		}
	}
	t.Fatal("no memlock check in the report")
}
