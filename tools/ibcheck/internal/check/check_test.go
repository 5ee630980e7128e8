package check

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/velo-go/velo/mlx5dv"
	"github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/verbs"
)

// TestMain lets the test binary act as the UCX probe child, as ibcheck does.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == UCXProbeArg {
		os.Exit(UCXProbeMain(os.Args[2:], os.Stdout))
	}
	os.Exit(m.Run())
}

func fixture(name string) verbs.Paths {
	root := filepath.Join("..", "..", "..", "..", "verbs", "testdata")
	return verbs.Paths{Sysfs: filepath.Join(root, "sysfs", name), Dev: filepath.Join(root, "dev", name)}
}

var testUCX = UCXInfo{
	Version:  ucx.VersionInfo{Major: 1, Minor: 13, Release: 1, String: "1.13.1", APIMajor: 1, APIMinor: 13},
	Support:  ucx.BuildSupport{Verbs: true, MLX5: true, DEVX: true, RDMACM: true},
	Defaults: map[string]string{"PROTO_ENABLE": "n", "MAX_RNDV_RAILS": "2"},
	RMA:      map[string]RMATrial{"n": {Worked: true}, "y": {Worked: true}},
	Guard:    &ucx.RMAGuard{Enforced: true, Version: "velo-ucx-guard/2", UCX: "1.13.1"},
}

// fakeSystem answers like a healthy node; hw is what the hardware probes return.
func fakeSystem(reg, devx error) System {
	return System{
		CGO: true,
		Memlock: func() (verbs.Memlock, error) {
			return verbs.Memlock{Soft: verbs.Unlimited, Hard: verbs.Unlimited, InitUserNS: true}, nil
		},
		RegisterArena:        func(context.Context, string, uint64) error { return reg },
		ProbeDEVX:            func(string) error { return devx },
		UCX:                  func(context.Context, []string, bool) UCXInfo { return testUCX },
		HardwareMatchesSysfs: true,
	}
}

func envMap(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func resultOf(t *testing.T, rep *Report, id string) Result {
	t.Helper()
	r, ok := rep.Result(id)
	if !ok {
		t.Fatalf("no %s result", id)
	}
	return r
}

func TestVerdictAndExitCode(t *testing.T) {
	mk := func(st ...Status) *Report {
		rep := &Report{}
		for _, s := range st {
			rep.Results = append(rep.Results, Result{Status: s})
		}
		return rep
	}
	cases := []struct {
		st           []Status
		loose, strct Status
	}{
		{[]Status{Pass, Pass}, Pass, Pass},
		{[]Status{Pass, Skip}, Pass, Pass},
		{[]Status{Pass, NotCompiled}, Pass, Fail},
		{[]Status{Pass, Warn}, Warn, Fail},
		{[]Status{Warn, Fail}, Fail, Fail},
		{nil, Pass, Pass},
	}
	for _, c := range cases {
		rep := mk(c.st...)
		if got := rep.Verdict(false); got != c.loose {
			t.Errorf("%v: verdict %v, want %v", c.st, got, c.loose)
		}
		if got := rep.Verdict(true); got != c.strct {
			t.Errorf("%v: strict verdict %v, want %v", c.st, got, c.strct)
		}
		wantCode := map[Status]int{Pass: ExitOK, Warn: ExitOK, Fail: ExitFail}
		if rep.ExitCode(false) != wantCode[c.loose] || rep.ExitCode(true) != wantCode[c.strct] {
			t.Errorf("%v: exit codes %d/%d", c.st, rep.ExitCode(false), rep.ExitCode(true))
		}
	}
}

func TestEveryCheckRunsInOrder(t *testing.T) {
	rep := Run(context.Background(), Config{Paths: fixture("cx7-ib-active"), Env: envMap(nil)}, fakeSystem(nil, nil))
	if len(rep.Results) != len(Checks) {
		t.Fatalf("%d results, %d checks", len(rep.Results), len(Checks))
	}
	for i, r := range rep.Results {
		if r.ID != Checks[i].ID {
			t.Errorf("result %d is %s, want %s", i, r.ID, Checks[i].ID)
		}
	}
}

func TestTLSVerdicts(t *testing.T) {
	cases := []struct {
		tls  string
		want Status
		says string
	}{
		{"rc_mlx5,ud_mlx5,self", Pass, "UD transport RC needs"},
		{"rc_verbs,ud_verbs,self", Pass, ""},
		{"rc_mlx5,ud_verbs", Pass, ""},
		{"rc_mlx5,ud_mlx5:aux", Pass, ""},
		{"rc", Pass, ""},
		{"rc_v,self", Pass, ""},
		{"RC_X", Pass, ""},
		{"ib", Pass, ""},
		{"dc_mlx5,self", Pass, "DC connects"},
		{"ud_mlx5", Pass, ""},
		{"rc_mlx5", Fail, "no auxiliary transport"},
		{"rc_verbs,self,sm", Fail, "no auxiliary transport"},
		{"rc_verbs,self,tcp", Warn, "through tcp instead"},
		{" rc_mlx5 , self ", Fail, "no auxiliary transport"},
		{"tcp", Warn, "no RDMA transport"},
		{"sm,self", Warn, "no RDMA transport"},
		{"all", Warn, "chooses the transports itself"},
		{"", Warn, "chooses the transports itself"},
		{"^ud", Fail, "excludes the UD transports"},
		{"^tcp", Warn, "only excludes"},
	}
	for _, c := range cases {
		rep := Run(context.Background(), Config{Paths: fixture("cx7-ib-active"), Env: envMap(map[string]string{"UCX_TLS": c.tls})}, fakeSystem(nil, nil))
		r := resultOf(t, rep, "ucx_tls")
		if r.Status != c.want || !strings.Contains(r.Finding, c.says) {
			t.Errorf("UCX_TLS=%q: %v %q, want %v mentioning %q", c.tls, r.Status, r.Finding, c.want, c.says)
		}
	}
	// mlx5 transports on a device that is not mlx5, or with a UCX that lacks them.
	rep := Run(context.Background(), Config{Paths: fixture("cx3-vpi-two-port"), Env: envMap(map[string]string{"UCX_TLS": "rc_mlx5,ud_mlx5,self"})}, fakeSystem(nil, nil))
	if r := resultOf(t, rep, "ucx_tls"); r.Status != Warn || !strings.Contains(r.Finding, "not an mlx5 device") {
		t.Errorf("mlx5 transports on mlx4: %v %s", r.Status, r.Finding)
	}
	sys := fakeSystem(nil, nil)
	noMLX5 := testUCX
	noMLX5.Support.MLX5 = false
	sys.UCX = func(context.Context, []string, bool) UCXInfo { return noMLX5 }
	rep = Run(context.Background(), Config{Paths: fixture("cx7-ib-active"), Env: envMap(map[string]string{"UCX_TLS": "rc_x"})}, sys)
	if r := resultOf(t, rep, "ucx_tls"); r.Status != Warn || !strings.Contains(r.Finding, "no mlx5 transports compiled in") {
		t.Errorf("rc_x with a UCX without mlx5: %v %s", r.Status, r.Finding)
	}
}

func TestParsePKeySetting(t *testing.T) {
	good := map[string]uint16{"0x7fff": 0x7fff, "0X7FFF": 0x7fff, "0x1": 1, "0x0000": 0}
	for in, want := range good {
		p, auto, err := parsePKeySetting(in)
		if err != nil || auto || p != want {
			t.Errorf("%q: %#x %v %v", in, p, auto, err)
		}
	}
	if _, auto, err := parsePKeySetting("AUTO"); err != nil || !auto {
		t.Errorf("AUTO: %v %v", auto, err)
	}
	for _, bad := range []string{"32767", "0x8000", "0xffff", "0x", "7fff", "0xg", "", "auto2"} {
		if _, _, err := parsePKeySetting(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestUCXBool(t *testing.T) {
	for in, want := range map[string]bool{"y": true, "YES": true, "1": true, "n": false, "No": false, "0": false} {
		if v, ok := ucxBool(in); !ok || v != want {
			t.Errorf("%q: %v %v", in, v, ok)
		}
	}
	for _, bad := range []string{"", "true", "on", "off", "2", "maybe"} {
		if _, ok := ucxBool(bad); ok {
			t.Errorf("%q accepted (UCX's parser refuses it)", bad)
		}
	}
}

func TestBestPort(t *testing.T) {
	cases := map[string]string{
		"cx7-ib-active": "mlx5_0:1", "cx7-roce-active": "mlx5_0:1", "cx7-ib-port-down": "mlx5_0:1",
		"cx7-dual-port-one-active": "mlx5_0:1", "cx3-vpi-two-port": "mlx4_0:1", "cx7-ib-partial-pkey": "mlx5_0:1",
	}
	for name, want := range cases {
		devs, err := verbs.Devices(fixture(name))
		if err != nil {
			t.Fatal(err)
		}
		if p, ok := bestPort(devs); !ok || p.Spec() != want {
			t.Errorf("%s: %v %v, want %s", name, p.Spec(), ok, want)
		}
	}
	if _, ok := bestPort(nil); ok {
		t.Error("a port from no devices")
	}
}

// TestHardwareAnswers covers the registration and DEVX verdicts for each kind of answer.
func TestHardwareAnswers(t *testing.T) {
	permission := &mlx5dv.DEVXError{Device: "mlx5_0", Errno: syscall.EPERM, Missing: mlx5dv.ComponentPermission, Detail: "kernels before 5.x require CAP_NET_RAW"}
	kernel := &mlx5dv.DEVXError{Device: "mlx5_0", Errno: syscall.EOPNOTSUPP, Missing: mlx5dv.ComponentKernel, Detail: "the kernel's mlx5_ib refused the DEVX flag"}
	cases := []struct {
		reg, devx         error
		regWant, devxWant Status
		regProbe          Answer
		devxProbe         Answer
	}{
		{nil, nil, Pass, Pass, Available, Available},
		{errors.New("ibv_reg_mr: EIO"), permission, Warn, Warn, Inconclusive, Inconclusive},
		{&wrapped{verbs.ErrNoDevice}, kernel, Fail, Fail, NotAvailable, NotAvailable},
		{&wrapped{verbs.ErrMemlock}, nil, Fail, Pass, NotAvailable, Available},
	}
	for i, c := range cases {
		rep := Run(context.Background(), Config{Paths: fixture("cx7-ib-active"), Env: envMap(nil)}, fakeSystem(c.reg, c.devx))
		reg, devx := resultOf(t, rep, "registration"), resultOf(t, rep, "devx")
		if reg.Status != c.regWant || reg.Probe != c.regProbe {
			t.Errorf("case %d: registration %v/%v, want %v/%v: %s", i, reg.Status, reg.Probe, c.regWant, c.regProbe, reg.Finding)
		}
		if devx.Status != c.devxWant || devx.Probe != c.devxProbe {
			t.Errorf("case %d: devx %v/%v, want %v/%v: %s", i, devx.Status, devx.Probe, c.devxWant, c.devxProbe, devx.Finding)
		}
		if reg.Probe == Inconclusive && !strings.HasPrefix(reg.Finding, "could not tell") {
			t.Errorf("case %d: an inconclusive registration does not say so: %s", i, reg.Finding)
		}
	}
}

type wrapped struct{ sentinel error }

func (w *wrapped) Error() string { return "ibv: " + w.sentinel.Error() + ": details" }
func (w *wrapped) Unwrap() error { return w.sentinel }

// TestRegisterArenaReal calls the real registration on this machine. Without an adapter it must
// fail cleanly, saying there is no device (or, without cgo, that it is not compiled in).
func TestRegisterArenaReal(t *testing.T) {
	if spec := os.Getenv("VELO_TEST_RDMA_DEVICE"); spec != "" {
		dev, _, err := verbs.ParsePortSpec(spec)
		if err != nil {
			t.Fatal(err)
		}
		if err := registerArena(context.Background(), dev, ArenaSize()); err != nil {
			t.Fatalf("registering one arena on %s: %v", dev, err)
		}
		return
	}
	err := registerArena(context.Background(), "mlx5_0", ArenaSize())
	switch {
	case !cgoEnabled && errors.Is(err, verbs.ErrNotCompiled):
	case cgoEnabled && errors.Is(err, verbs.ErrNoDevice):
	default:
		t.Fatalf("registerArena on a machine without mlx5_0: %v (set VELO_TEST_RDMA_DEVICE on a node with an adapter)", err)
	}
	t.Logf("as expected: %v", err)
}

func TestProbeChildFailures(t *testing.T) {
	var out probeInfo
	err := runProbeChild(context.Background(), []string{"nonsense"}, &out)
	if err == nil || !strings.Contains(err.Error(), "exit status 2") {
		t.Errorf("a child that refuses its arguments: %v", err)
	}
}

func TestLastJSONLine(t *testing.T) {
	in := "[1.2] [vm:1:0] parser.c:1059 UCX ERROR Invalid value\n{\"Worked\":false}\n\n"
	if got := string(lastJSONLine([]byte(in))); got != `{"Worked":false}` {
		t.Errorf("got %q", got)
	}
	if lastJSONLine([]byte("no json here")) != nil {
		t.Error("found JSON in plain text")
	}
}

// FuzzRunEnvironment: whatever the operator's variables hold, every check runs, says what it
// found, and every failure comes with a fix.
func FuzzRunEnvironment(f *testing.F) {
	f.Add("cx7-ib-active", "rc_mlx5,ud_mlx5,self", "mlx5_0:1", "n", "0x7fff", "2", "y", "1")
	f.Add("cx7-dual-port-one-active", "^ud", "mlx5_0:1,mlx5_1:1,eth0", "maybe", "auto", "x", "try", "on")
	f.Add("cx7-ib-partial-pkey", "", "all", "", "", "", "", "")
	f.Add("cx3-vpi-two-port", "rc", ":1,mlx4_0:2,,", "YES", "0x", "-1", "n", "false")
	f.Add("cx7-roce-active", "dc", "mlx5_0:0", "0", "0x8000", "999999999999999999999", "0", " yes ")
	f.Fuzz(func(t *testing.T, tree, tls, netdevs, proto, pkey, rails, rcache, kill string) {
		switch tree {
		case "cx7-ib-active", "cx7-dual-port-one-active", "cx7-ib-partial-pkey", "cx3-vpi-two-port", "cx7-roce-active", "cx7-ib-port-down", "no-devices":
		default:
			tree = "cx7-ib-active"
		}
		env := map[string]string{"UCX_TLS": tls, "UCX_NET_DEVICES": netdevs, "UCX_PROTO_ENABLE": proto, "UCX_IB_PKEY": pkey,
			"UCX_MAX_RMA_RAILS": rails, "UCX_RCACHE_ENABLE": rcache, "VELO_RDMA_RENDEZVOUS_DISABLE": kill}
		sys := fakeSystem(nil, nil)
		sys.UCX = func(_ context.Context, vals []string, _ bool) UCXInfo {
			info := testUCX
			info.RMA = map[string]RMATrial{}
			for _, v := range vals {
				_, ok := ucxBool(v)
				info.RMA[v] = RMATrial{Worked: ok, Detail: map[bool]string{true: "", false: "UCS_ERR_INVALID_PARAM"}[ok]}
			}
			return info
		}
		rep := Run(context.Background(), Config{Paths: fixture(tree), Env: envMap(env)}, sys)
		if len(rep.Results) != len(Checks) {
			t.Fatalf("%d results", len(rep.Results))
		}
		for _, r := range rep.Results {
			if strings.TrimSpace(r.Finding) == "" {
				t.Errorf("%s: empty finding", r.ID)
			}
			if r.Status == Fail && r.Fix == "" {
				t.Errorf("%s: a failure without a fix: %s", r.ID, r.Finding)
			}
		}
	})
}
