package main

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"testing"

	"github.com/velo-go/velo/mlx5dv"
	"github.com/velo-go/velo/rdmacm"
	"github.com/velo-go/velo/tools/ibcheck/internal/check"
	"github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/verbs"
	"github.com/velo-go/velo/verbs/ibv"
	"github.com/velo-go/velo/verbs/verbstest"
)

// TestMain lets the test binary stand in for ibcheck where ibcheck runs itself: as the UCX probe
// child (check.ProbeUCX re-executes os.Executable) and, through verbstest's trampoline, as the
// constrained child of the memlock test.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == check.UCXProbeArg {
		os.Exit(check.UCXProbeMain(os.Args[2:], os.Stdout))
	}
	if os.Getenv(lanesChildEnv) != "" {
		os.Exit(lanesChild())
	}
	_ = verbstest.InChild // the trampoline runs from verbstest's init
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// fixturesDir holds the verbs module's sysfs and device trees.
var fixturesDir = filepath.Join("..", "..", "verbs", "testdata")

func fixtureSysfs(name string) string { return filepath.Join(fixturesDir, "sysfs", name) }

// fixtureNames lists every sysfs fixture tree, so that a tree added to verbs/testdata cannot go
// unchecked here.
func fixtureNames(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(fixturesDir, "sysfs"))
	if err != nil {
		t.Fatalf("listing fixtures: %v", err)
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names
}

// Linked-UCX answers for the golden tests. The real answer depends on the machine's UCX, so the
// golden files use these; TestUCXProbeReal checks the real one.
var (
	// ucx113 is Debian 12's UCX release as ibcheck finds it: protocol v1 by default, and v1
	// carries RMA. It is the static build of that release (make ucx-static with UCX_SOURCE=debian),
	// so it carries velo's software RMA guard; ucx113Shared is Debian's shared library, without.
	ucx113 = check.UCXInfo{
		Version:  ucx.VersionInfo{Major: 1, Minor: 13, Release: 1, String: "1.13.1", APIMajor: 1, APIMinor: 13},
		Support:  ucx.BuildSupport{Verbs: true, MLX5: true, DEVX: true, RDMACM: true},
		Defaults: map[string]string{"PROTO_ENABLE": "n", "MAX_RNDV_RAILS": "2"},
		RMA: map[string]check.RMATrial{
			"n": {Worked: true}, "y": {Worked: true},
		},
		Guard: &ucx.RMAGuard{Enforced: true, Version: "velo-ucx-guard/2", UCX: "1.13.1"},
	}
	ucx113Shared = func() check.UCXInfo {
		info := ucx113
		info.Guard = &ucx.RMAGuard{UCX: "1.13.1"}
		return info
	}()
	// ucxV2Only is a UCX whose RMA needs protocol v2 (protocol v1's RMA removed), as newer
	// releases are: a GET under UCX_PROTO_ENABLE=n fails.
	ucxV2Only = check.UCXInfo{
		Version:  ucx.VersionInfo{Major: 1, Minor: 22, Release: 0, String: "1.22.0", APIMajor: 1, APIMinor: 22},
		Support:  ucx.BuildSupport{Verbs: true, MLX5: true, DEVX: true, RDMACM: true},
		Defaults: map[string]string{"PROTO_ENABLE": "y", "MAX_RMA_RAILS": "1", "MAX_RNDV_RAILS": "2"},
		RMA: map[string]check.RMATrial{
			"n": {Detail: "ucp_get_nbx: UCS_ERR_UNSUPPORTED: unsupported operation"}, "y": {Worked: true},
		},
		Guard: &ucx.RMAGuard{Enforced: true, Version: "velo-ucx-guard/2", UCX: "1.22.0"},
	}
	// ucxV2Guarded is velo's static UCX 1.22 on a node whose GET probe runs over the self
	// transport: protocol v1 has no RMA, and under v2 the GET reaches the target, whose software
	// RMA guard refuses it (the self transport has no hardware RMA).
	ucxV2Guarded = func() check.UCXInfo {
		info := ucxV2Only
		info.RMA = map[string]check.RMATrial{
			"n": {Detail: "ucp_get_nbx: UCS_ERR_UNSUPPORTED: unsupported operation"},
			"y": {Worked: true, Refused: true, Detail: "the GET reached the target, whose software RMA guard (velo-ucx-guard/2) refused it, as it refuses every GET over a lane without hardware RMA"},
		}
		return info
	}()
	// ucxTCPOnly is a UCX built without the rdma-core headers.
	ucxTCPOnly = check.UCXInfo{
		Version:  ucx113.Version,
		Support:  ucx.BuildSupport{},
		Defaults: ucx113.Defaults,
		RMA:      ucx113.RMA,
		Guard:    ucx113.Guard,
	}
)

// withUCXValue adds the outcome of a GET under an operator-chosen UCX_PROTO_ENABLE value.
func withUCXValue(info check.UCXInfo, value string, t check.RMATrial) check.UCXInfo {
	rma := map[string]check.RMATrial{}
	for k, v := range info.RMA {
		rma[k] = v
	}
	rma[value] = t
	info.RMA = rma
	return info
}

// testKernel is the kernel release the golden tests' fixture trees run (Ubuntu 24.04's).
const testKernel = "6.8.0-45-generic"

// memlockRoomy is a limit that covers velo's need without any capability.
var memlockRoomy = verbs.Memlock{Soft: verbs.Unlimited, Hard: verbs.Unlimited, InitUserNS: true}

// testSystem is the system the golden tests run against: a fixed linked UCX, a memlock limit that
// does not depend on the box, and hardware probes that must not be reached unless a scenario
// pairs a fixture with hardware answers.
func testSystem(t *testing.T) check.System {
	return check.System{
		CGO:     true,
		Memlock: func() (verbs.Memlock, error) { return memlockRoomy, nil },
		RegisterArena: func(ctx context.Context, device string, size uint64) error {
			t.Errorf("RegisterArena(%s) called on a fixture tree", device)
			return errors.New("unexpected")
		},
		ProbeDEVX: func(device string) error {
			t.Errorf("ProbeDEVX(%s) called on a fixture tree", device)
			return errors.New("unexpected")
		},
		UCX: func(ctx context.Context, protoValues []string, withResources bool) check.UCXInfo {
			info := ucx113
			if withResources {
				info.Resources = fakeResources
			}
			return info
		},
		KernelRelease: func(verbs.Paths) (string, error) { return testKernel, nil },
		Interfaces: func() ([]rdmacm.Interface, error) {
			return []rdmacm.Interface{
				{Name: "lo", Addrs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/8")}},
				{Name: "eth0", Addrs: []netip.Prefix{netip.MustParsePrefix("10.0.0.5/24")}},
				{Name: "ibp23s0", Addrs: []netip.Prefix{netip.MustParsePrefix("192.168.50.11/24")}},
				{Name: "ibp23s0f1", Addrs: []netip.Prefix{netip.MustParsePrefix("192.168.51.12/24")}},
			}, nil
		},
	}
}

// fakeResources is a small resource list in the shape the linked UCX reports on an IB node.
var fakeResources = &check.UCXResources{Components: []check.UCXComponent{
	{Name: "self", MemoryDomains: []check.UCXMemoryDomain{{Name: "self", CanRegister: true, Transports: []check.UCXTransport{
		{Name: "self", Device: "memory0", DeviceType: "loopback", Get: true, Put: true, AMMaxShort: 8192, AMMaxBcopy: 8192, BandwidthMBs: 7247},
	}}}},
	{Name: "ib", MemoryDomains: []check.UCXMemoryDomain{{Name: "mlx5_0", CanRegister: true, RemoteKeySize: 19, Transports: []check.UCXTransport{
		{Name: "rc_mlx5", Device: "mlx5_0:1", DeviceType: "network", Get: true, Put: true, AMMaxShort: 2046, AMMaxBcopy: 8256, PeerFailure: true, Keepalive: true, LatencyNs: 600, BandwidthMBs: 48000},
		{Name: "ud_mlx5", Device: "mlx5_0:1", DeviceType: "network", AMMaxShort: 180, AMMaxBcopy: 4088, PeerFailure: true, LatencyNs: 630, BandwidthMBs: 48000},
	}}}},
	{Name: "rdmacm", ConnectionManager: true},
}}

// devxMissingFirmware is what mlx5dv.ProbeDEVX says on an adapter whose firmware lacks UCTX.
func devxMissingFirmware(device string) error {
	return &mlx5dv.DEVXError{Device: device, Missing: mlx5dv.ComponentFirmware, Detail: "the adapter's firmware (firmware 28.39.1002) reports no user-context (UCTX) support: update it with mlxfwmanager / mstflint"}
}

// errRegMemlock is ibv_reg_mr's ENOMEM as package ibv explains it when the memlock limit is the
// cause.
var errRegMemlock error = &ibv.Error{Op: "ibv_reg_mr", Device: "mlx5_0", Errno: syscall.ENOMEM, Kind: verbs.ErrMemlock,
	Detail: "the memlock limit is the cause: pinning 64 MiB needs more than RLIMIT_MEMLOCK allows: soft limit 8 MiB (hard 8 MiB), 0 B already locked or pinned, 8 MiB left"}

// ucxNotCompiled is what the ucx module's twin answers in a CGO_ENABLED=0 build.
var ucxNotCompiled = ucx.ErrNotCompiled
