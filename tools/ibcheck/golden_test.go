package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/velo-go/velo/tools/ibcheck/internal/check"
	"github.com/velo-go/velo/verbs"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden from the current output")

// checkGolden compares got with testdata/golden/name, or rewrites the file with -update.
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update to create it)", err, t.Name())
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (go test -run '%s' -update rewrites it after review)\n--- got ---\n%s\n--- want ---\n%s", path, t.Name(), got, want)
	}
}

func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

// scenario is one golden run: a command line, an environment, and what the system answers.
type scenario struct {
	name string
	args []string
	env  map[string]string
	sys  func(*check.System) // changes to testSystem, if any
	exit int
	// want pins the verdict of the checks the scenario is about, so that a golden file cannot be
	// rewritten into a wrong answer unnoticed; mention pins a phrase of their finding or fix.
	want    map[string]check.Status
	mention map[string]string
}

// runScenario runs the scenario twice (table, then --json) and returns both outputs and the
// parsed JSON report.
func runScenario(t *testing.T, sc scenario) (table, js []byte, rep jsonReport) {
	t.Helper()
	sys := testSystem(t)
	if sc.sys != nil {
		sc.sys(&sys)
	}
	ctx := context.Background()
	var out, errOut bytes.Buffer
	code := run(ctx, sc.args, envOf(sc.env), &out, &errOut, sys)
	if code != sc.exit {
		t.Errorf("exit code %d, want %d; stderr: %s\n%s", code, sc.exit, errOut.String(), out.String())
	}
	table = append([]byte(nil), out.Bytes()...)
	out.Reset()
	errOut.Reset()
	if code := run(ctx, append(append([]string(nil), sc.args...), "--json"), envOf(sc.env), &out, &errOut, sys); code != sc.exit {
		t.Errorf("--json: exit code %d, want %d; stderr: %s", code, sc.exit, errOut.String())
	}
	js = append([]byte(nil), out.Bytes()...)
	if err := json.Unmarshal(js, &rep); err != nil {
		t.Fatalf("--json output does not parse: %v\n%s", err, js)
	}
	if rep.ExitCode != sc.exit {
		t.Errorf("JSON exit_code %d, want %d", rep.ExitCode, sc.exit)
	}
	if len(rep.Checks) != len(check.Checks) {
		t.Errorf("JSON has %d checks, want all %d", len(rep.Checks), len(check.Checks))
	}
	byID := map[string]jsonCheck{}
	for _, c := range rep.Checks {
		byID[c.ID] = c
	}
	for id, st := range sc.want {
		c, ok := byID[id]
		switch {
		case !ok:
			t.Errorf("no check %q in the report", id)
		case c.Status != st.JSON():
			t.Errorf("check %s: status %s, want %s (%s)", id, c.Status, st.JSON(), c.Finding)
		}
	}
	for id, phrase := range sc.mention {
		if c := byID[id]; !strings.Contains(c.Finding+" fix: "+c.Fix, phrase) {
			t.Errorf("check %s does not mention %q: %s / fix: %s", id, phrase, c.Finding, c.Fix)
		}
	}
	return table, js, rep
}

func runGolden(t *testing.T, sc scenario) {
	t.Helper()
	table, js, _ := runScenario(t, sc)
	checkGolden(t, sc.name+".txt", table)
	checkGolden(t, sc.name+".json", js)
}

// fixtureExpectations says what each fixture tree must yield with an empty environment.
var fixtureExpectations = map[string]scenario{
	"cx7-ib-active": {exit: 0, want: map[string]check.Status{
		"devices": check.Pass, "port": check.Pass, "uverbs": check.Pass, "pkey": check.Pass,
		"registration": check.Skip, "devx": check.Skip, "ucx_net_devices": check.Warn, "ucx_tls": check.Warn,
	}, mention: map[string]string{"ucx_net_devices": "export UCX_NET_DEVICES=mlx5_0:1", "ucx_tls": "rc_mlx5,ud_mlx5,self"}},
	"cx7-roce-active": {exit: 0, want: map[string]check.Status{"port": check.Warn, "pkey": check.Skip},
		mention: map[string]string{"port": "RoCE, which looks like success"}},
	"cx7-ib-port-down": {exit: 1, want: map[string]check.Status{"port": check.Fail},
		mention: map[string]string{"port": "PORT_DOWN (physical state Polling)"}},
	"cx7-ib-partial-pkey": {exit: 1, want: map[string]check.Status{"port": check.Pass, "pkey": check.Fail},
		mention: map[string]string{"pkey": "export UCX_IB_PKEY=0x7fff"}},
	"cx7-dual-port-one-active": {exit: 0, want: map[string]check.Status{"port": check.Pass},
		mention: map[string]string{"port": "mlx5_0:1 is PORT_ACTIVE"}},
	"cx3-vpi-two-port": {exit: 0, want: map[string]check.Status{"port": check.Pass, "devx": check.Skip},
		mention: map[string]string{"devx": "not an mlx5 device", "ucx_tls": "rc_verbs,ud_verbs,self"}},
	"no-devices": {exit: 1, want: map[string]check.Status{"devices": check.Fail, "port": check.Skip},
		mention: map[string]string{"devices": "no RDMA devices"}},
}

// TestGoldenFixtures runs ibcheck over every fixture tree of verbs/testdata with an empty
// environment.
func TestGoldenFixtures(t *testing.T) {
	for _, name := range fixtureNames(t) {
		t.Run(name, func(t *testing.T) {
			sc, ok := fixtureExpectations[name]
			if !ok {
				t.Fatalf("fixture %s has no expectation in fixtureExpectations: add one (and its golden files)", name)
			}
			sc.name = "fixture-" + name
			sc.args = []string{"--sysfs", fixtureSysfs(name)}
			runGolden(t, sc)
		})
	}
}

func setUCX(info check.UCXInfo) func(*check.System) {
	return func(s *check.System) {
		s.UCX = func(context.Context, []string, bool) check.UCXInfo { return info }
	}
}

func setMemlock(m verbs.Memlock) func(*check.System) {
	return func(s *check.System) {
		s.Memlock = func() (verbs.Memlock, error) { return m, nil }
	}
}

// hardware pairs the fixture with answers from the hardware probes.
func hardware(reg func(string) error, devx func(string) error) func(*check.System) {
	return func(s *check.System) {
		s.HardwareMatchesSysfs = true
		s.RegisterArena = func(_ context.Context, device string, _ uint64) error { return reg(device) }
		s.ProbeDEVX = devx
	}
}

var pinnedEnv = map[string]string{"UCX_NET_DEVICES": "mlx5_0:1", "UCX_TLS": "rc_mlx5,ud_mlx5,self"}

func envWith(extra map[string]string) map[string]string {
	m := map[string]string{}
	for k, v := range pinnedEnv {
		m[k] = v
	}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

// TestGoldenEnvironments runs ibcheck over combinations of environment, flags and system answers.
func TestGoldenEnvironments(t *testing.T) {
	ib := []string{"--sysfs", fixtureSysfs("cx7-ib-active")}
	dual := []string{"--sysfs", fixtureSysfs("cx7-dual-port-one-active")}
	scenarios := []scenario{
		{name: "env-pinned", args: ib, env: pinnedEnv, exit: 0,
			want: map[string]check.Status{"ucx_net_devices": check.Pass, "ucx_tls": check.Pass, "ucx_proto_enable": check.Pass, "memlock": check.Pass}},
		{name: "env-pinned-strict", args: append([]string{"--strict"}, ib...), env: pinnedEnv, exit: 0},
		{name: "env-unpinned-strict", args: append([]string{"--strict"}, ib...), exit: 1,
			want: map[string]check.Status{"ucx_net_devices": check.Warn}},
		{name: "env-rc-only", args: ib, env: envWith(map[string]string{"UCX_TLS": "rc_mlx5"}), exit: 1,
			want:    map[string]check.Status{"ucx_tls": check.Fail},
			mention: map[string]string{"ucx_tls": "no auxiliary transport ... Destination is unreachable"}},
		{name: "env-rc-alias", args: ib, env: envWith(map[string]string{"UCX_TLS": "rc_x,self"}), exit: 0,
			want: map[string]check.Status{"ucx_tls": check.Pass}},
		{name: "env-tcp-only", args: ib, env: envWith(map[string]string{"UCX_TLS": "tcp,self"}), exit: 0,
			want: map[string]check.Status{"ucx_tls": check.Warn}, mention: map[string]string{"ucx_tls": "names no RDMA transport"}},
		{name: "env-proto-n-ucx1.13", args: ib, env: envWith(map[string]string{"UCX_PROTO_ENABLE": "n"}), exit: 0,
			want:    map[string]check.Status{"ucx_proto_enable": check.Warn},
			mention: map[string]string{"ucx_proto_enable": "protocol v1 carries RMA here"}},
		{name: "env-proto-n-needs-v2", args: ib, env: envWith(map[string]string{"UCX_PROTO_ENABLE": "n"}), sys: setUCX(ucxV2Only), exit: 1,
			want:    map[string]check.Status{"ucx_proto_enable": check.Fail},
			mention: map[string]string{"ucx_proto_enable": "needs protocol v2 for RMA"}},
		{name: "env-proto-no-needs-v2", args: ib, env: envWith(map[string]string{"UCX_PROTO_ENABLE": "NO"}),
			sys: setUCX(withUCXValue(ucxV2Only, "NO", ucxV2Only.RMA["n"])), exit: 1,
			want: map[string]check.Status{"ucx_proto_enable": check.Fail}},
		{name: "env-proto-y", args: ib, env: envWith(map[string]string{"UCX_PROTO_ENABLE": "y"}), exit: 0,
			want: map[string]check.Status{"ucx_proto_enable": check.Pass}},
		{name: "env-proto-bogus", args: ib, env: envWith(map[string]string{"UCX_PROTO_ENABLE": "maybe"}),
			sys:  setUCX(withUCXValue(ucx113, "maybe", check.RMATrial{Detail: "UCX refused a context with UCX_PROTO_ENABLE=maybe: ucx: setting UCX_PROTO_ENABLE=\"maybe\": UCS_ERR_INVALID_PARAM: invalid parameter"})),
			exit: 1, want: map[string]check.Status{"ucx_proto_enable": check.Fail}},
		{name: "env-rcache-on", args: ib, env: envWith(map[string]string{"UCX_RCACHE_ENABLE": "y", "UCX_MEM_EVENTS": "yes"}), exit: 0,
			want: map[string]check.Status{"ucx_rcache": check.Warn}},
		{name: "env-rcache-off", args: ib, env: envWith(map[string]string{"UCX_RCACHE_ENABLE": "n", "UCX_MEM_EVENTS": "n"}), exit: 0,
			want: map[string]check.Status{"ucx_rcache": check.Pass}},
		{name: "env-kill-switch-on", args: ib, env: envWith(map[string]string{"VELO_RDMA_RENDEZVOUS_DISABLE": "TRUE"}), exit: 0,
			want: map[string]check.Status{"kill_switch": check.Warn}, mention: map[string]string{"kill_switch": "reason kill_switch"}},
		{name: "env-kill-switch-not-affirmative", args: ib, env: envWith(map[string]string{"VELO_RDMA_RENDEZVOUS_DISABLE": "0"}), exit: 0,
			want: map[string]check.Status{"kill_switch": check.Pass}},
		{name: "env-net-devices-down", args: dual, env: map[string]string{"UCX_NET_DEVICES": "mlx5_0:1,mlx5_1:1", "UCX_TLS": "rc_mlx5,ud_mlx5,self"}, exit: 1,
			want:    map[string]check.Status{"ucx_net_devices": check.Fail, "ucx_max_rma_rails": check.Warn},
			mention: map[string]string{"ucx_net_devices": "mlx5_1:1 (PORT_DOWN)", "ucx_max_rma_rails": "has no UCX_MAX_RMA_RAILS setting"}},
		{name: "env-rails-default-one", args: dual, env: map[string]string{"UCX_NET_DEVICES": "mlx5_0:1,mlx5_1:1"}, sys: setUCX(ucxV2Only), exit: 1,
			want: map[string]check.Status{"ucx_max_rma_rails": check.Warn}, mention: map[string]string{"ucx_max_rma_rails": "export UCX_MAX_RMA_RAILS=2"}},
		{name: "env-rails-two", args: dual, env: map[string]string{"UCX_NET_DEVICES": "mlx5_0:1,mlx5_1:1", "UCX_MAX_RMA_RAILS": "2"}, sys: setUCX(ucxV2Only), exit: 1,
			want: map[string]check.Status{"ucx_max_rma_rails": check.Pass}},
		{name: "env-net-devices-missing-device", args: ib, env: envWith(map[string]string{"UCX_NET_DEVICES": "mlx5_2:1"}), exit: 1,
			want: map[string]check.Status{"ucx_net_devices": check.Fail, "port": check.Fail}},
		{name: "env-net-devices-roce", args: []string{"--sysfs", fixtureSysfs("cx7-roce-active")}, env: pinnedEnv, exit: 0,
			want: map[string]check.Status{"ucx_net_devices": check.Warn, "port": check.Warn}},
		{name: "env-net-devices-tcp-only", args: ib, env: envWith(map[string]string{"UCX_NET_DEVICES": "eth0"}), exit: 0,
			want: map[string]check.Status{"ucx_net_devices": check.Warn}},
		{name: "env-pkey-explicit-partial", args: []string{"--sysfs", fixtureSysfs("cx7-ib-partial-pkey")}, env: envWith(map[string]string{"UCX_IB_PKEY": "0x7fff"}), exit: 0,
			want: map[string]check.Status{"pkey": check.Pass}},
		{name: "env-pkey-not-hex", args: ib, env: envWith(map[string]string{"UCX_IB_PKEY": "32767"}), exit: 1,
			want: map[string]check.Status{"pkey": check.Fail}},
		{name: "env-pkey-absent-partition", args: ib, env: envWith(map[string]string{"UCX_IB_PKEY": "0x0005"}), exit: 1,
			want: map[string]check.Status{"pkey": check.Fail}, mention: map[string]string{"pkey": "unable to find specified pkey"}},
		{name: "device-down", args: append([]string{"--device", "mlx5_1:1"}, dual...), exit: 1,
			want: map[string]check.Status{"port": check.Fail}},
		{name: "device-missing", args: append([]string{"--device", "mlx5_9:1"}, ib...), exit: 1,
			want: map[string]check.Status{"port": check.Fail}, mention: map[string]string{"port": "this node has mlx5_0"}},
		{name: "device-not-in-net-devices", args: append([]string{"--device", "mlx5_1:1"}, dual...), env: map[string]string{"UCX_NET_DEVICES": "mlx5_0:1"}, exit: 1,
			want: map[string]check.Status{"port": check.Fail, "ucx_net_devices": check.Warn}, mention: map[string]string{"ucx_net_devices": "does not include mlx5_1:1"}},
		{name: "ip-roce", args: []string{"--sysfs", fixtureSysfs("cx7-roce-active"), "--ip", "192.168.60.11"}, exit: 0,
			want: map[string]check.Status{"ip": check.Pass}, mention: map[string]string{"ip": "mlx5_0:1 via ens1f0np0, RoCE GID index 3"}},
		{name: "ip-ipoib", args: append([]string{"--ip", "192.168.50.11"}, ib...), env: pinnedEnv, exit: 0,
			want: map[string]check.Status{"ip": check.Pass}},
		{name: "ip-plain-nic", args: append([]string{"--ip", "10.0.0.5"}, ib...), exit: 1,
			want: map[string]check.Status{"ip": check.Fail}, mention: map[string]string{"ip": "no RDMA port carries"}},
		{name: "ip-chooses-port", args: append([]string{"--ip", "192.168.51.12"}, dual...), exit: 1,
			want: map[string]check.Status{"ip": check.Pass, "port": check.Fail}, mention: map[string]string{"port": "mlx5_1:1 is PORT_DOWN"}},
		{name: "ip-other-port", args: append([]string{"--ip", "192.168.51.12", "--device", "mlx5_0:1"}, dual...), exit: 0,
			want: map[string]check.Status{"ip": check.Warn, "port": check.Pass}, mention: map[string]string{"ip": "the port checked here is mlx5_0:1"}},
		{name: "memlock-bypassed", args: ib, env: pinnedEnv, sys: setMemlock(verbs.Memlock{Soft: 8 << 20, Hard: 8 << 20, CapIPCLock: true, InitUserNS: true}), exit: 0,
			want: map[string]check.Status{"memlock": check.Warn}, mention: map[string]string{"memlock": "CAP_IPC_LOCK"}},
		{name: "memlock-soft-below-hard", args: ib, env: pinnedEnv, sys: setMemlock(verbs.Memlock{Soft: 8 << 20, Hard: verbs.Unlimited, InitUserNS: true}), exit: 1,
			want: map[string]check.Status{"memlock": check.Fail}, mention: map[string]string{"memlock": "ulimit -l unlimited"}},
		{name: "memlock-need-flag", args: append([]string{"--need-memlock", "6M"}, ib...), env: pinnedEnv,
			sys: setMemlock(verbs.Memlock{Soft: 8 << 20, Hard: 8 << 20, InitUserNS: true}), exit: 0,
			want: map[string]check.Status{"memlock": check.Pass}},
		{name: "hardware-good", args: ib, env: pinnedEnv, sys: hardware(func(string) error { return nil }, func(string) error { return nil }), exit: 0,
			want: map[string]check.Status{"registration": check.Pass, "devx": check.Pass}},
		{name: "hardware-devx-firmware", args: ib, env: pinnedEnv, sys: hardware(func(string) error { return nil }, devxMissingFirmware), exit: 1,
			want: map[string]check.Status{"devx": check.Fail}, mention: map[string]string{"devx": "firmware"}},
		{name: "hardware-registration-memlock", args: ib, env: pinnedEnv, sys: hardware(func(string) error { return errRegMemlock }, func(string) error { return nil }), exit: 1,
			want: map[string]check.Status{"registration": check.Fail}, mention: map[string]string{"registration": "ulimit -l"}},
		{name: "ucx-tcp-only-build", args: ib, env: pinnedEnv, sys: setUCX(ucxTCPOnly), exit: 1,
			want: map[string]check.Status{"ucx_build": check.Fail}},
		{name: "ucx-resources", args: append([]string{"--ucx"}, ib...), env: pinnedEnv, exit: 0},
		{name: "ucx-guarded-proto-v2", args: ib, env: pinnedEnv, sys: setUCX(ucxV2Guarded), exit: 0,
			want:    map[string]check.Status{"ucx_proto_enable": check.Pass, "ucx_rma_guard": check.Pass},
			mention: map[string]string{"ucx_proto_enable": "software RMA guard refused it"}},
		{name: "ucx-guarded-proto-n", args: ib, env: envWith(map[string]string{"UCX_PROTO_ENABLE": "n"}), sys: setUCX(ucxV2Guarded), exit: 1,
			want: map[string]check.Status{"ucx_proto_enable": check.Fail}},
		{name: "ucx-unguarded", args: ib, env: pinnedEnv, sys: setUCX(ucx113Shared), exit: 1,
			want:    map[string]check.Status{"ucx_rma_guard": check.Fail},
			mention: map[string]string{"ucx_rma_guard": "-tags ucx_static"}},
		{name: "ucx-unguarded-trusted", args: ib, env: envWith(map[string]string{"VELO_UCX_TRUST_NETWORK": "1"}), sys: setUCX(ucx113Shared), exit: 0,
			want:    map[string]check.Status{"ucx_rma_guard": check.Warn},
			mention: map[string]string{"ucx_rma_guard": "trusts the network"}},
		{name: "ucx-unguarded-not-affirmative", args: ib, env: envWith(map[string]string{"VELO_UCX_TRUST_NETWORK": "0"}), sys: setUCX(ucx113Shared), exit: 1,
			want: map[string]check.Status{"ucx_rma_guard": check.Fail}},
		{name: "not-compiled-in", args: ib, env: pinnedEnv, sys: func(s *check.System) {
			s.CGO = false
			s.UCX = func(context.Context, []string, bool) check.UCXInfo { return check.UCXInfo{Err: ucxNotCompiled} }
		}, exit: 0, want: map[string]check.Status{"ucx_version": check.NotCompiled, "ucx_build": check.NotCompiled, "ucx_rma_guard": check.NotCompiled, "devx": check.NotCompiled, "registration": check.NotCompiled}},
		{name: "not-compiled-in-strict", args: append([]string{"--strict"}, ib...), env: pinnedEnv, sys: func(s *check.System) {
			s.CGO = false
			s.UCX = func(context.Context, []string, bool) check.UCXInfo { return check.UCXInfo{Err: ucxNotCompiled} }
		}, exit: 1},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) { runGolden(t, sc) })
	}
}
