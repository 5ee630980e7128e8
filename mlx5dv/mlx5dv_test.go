package mlx5dv

import (
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/velo-go/velo/verbs"
)

// The fixture trees of package verbs (in this repository's checkout).
func fixture(name string) verbs.Paths {
	return verbs.Paths{Sysfs: filepath.Join("..", "verbs", "testdata", "sysfs", name), Dev: filepath.Join("..", "verbs", "testdata", "dev", name)}
}

func TestIsMLX5(t *testing.T) {
	cases := []struct {
		fixture, device string
		want            bool
	}{
		{"cx7-ib-active", "mlx5_0", true},
		{"cx7-roce-active", "mlx5_0", true},
		{"cx7-dual-port-one-active", "mlx5_1", true},
		{"cx3-vpi-two-port", "mlx4_0", false},
	}
	for _, c := range cases {
		got, err := IsMLX5(fixture(c.fixture), c.device)
		if err != nil || got != c.want {
			t.Errorf("%s %s: IsMLX5 = %v, %v; want %v", c.fixture, c.device, got, err, c.want)
		}
	}
	if _, err := IsMLX5(fixture("no-devices"), "mlx5_0"); !errors.Is(err, verbs.ErrNoDevice) {
		t.Errorf("no devices: %v", err)
	}
}

func TestDEVXErrorNamesTheMissingPart(t *testing.T) {
	cases := []struct {
		errno    syscall.Errno
		missing  Component
		definite bool // wraps verbs.ErrNotSupported
		mention  []string
	}{
		{syscall.EINVAL, ComponentFirmware, true, []string{"firmware missing DEVX support", "28.39.1002", "mlxfwmanager"}},
		{syscall.EOPNOTSUPP, ComponentKernel, true, []string{"kernel missing DEVX support", "4.18", "CONFIG_INFINIBAND_USER_ACCESS"}},
		{syscall.EPERM, ComponentPermission, false, []string{"CAP_NET_RAW"}},
		{syscall.ENOMEM, ComponentUnknown, false, []string{"out of memory"}},
		{syscall.EIO, ComponentUnknown, false, []string{"UCX_LOG_LEVEL=debug"}},
	}
	for _, c := range cases {
		err := devxError("mlx5_0", c.errno, "28.39.1002")
		if err.Missing != c.missing {
			t.Errorf("%v: missing %v, want %v", c.errno, err.Missing, c.missing)
		}
		if errors.Is(err, verbs.ErrNotSupported) != c.definite {
			t.Errorf("%v: definite answer = %v, want %v", c.errno, !c.definite, c.definite)
		}
		if !errors.Is(err, c.errno) {
			t.Errorf("%v: errno not wrapped", c.errno)
		}
		if c.missing == ComponentPermission && !errors.Is(err, verbs.ErrPermission) {
			t.Errorf("%v: not ErrPermission", c.errno)
		}
		for _, m := range append(c.mention, "DEVX does not open on mlx5_0") {
			if !strings.Contains(err.Error(), m) {
				t.Errorf("%v: %q does not mention %q", c.errno, err, m)
			}
		}
	}
	e := &DEVXError{Device: "mlx4_0", Missing: ComponentNotMLX5, Detail: "x"}
	if !errors.Is(e, verbs.ErrNotSupported) || !strings.Contains(e.Error(), "device missing") {
		t.Errorf("not-mlx5 error: %v", e)
	}
	for c, s := range map[Component]string{ComponentRDMACore: "rdma-core", ComponentKernel: "kernel", ComponentFirmware: "firmware", ComponentUnknown: "unknown"} {
		if c.String() != s {
			t.Errorf("%d prints %q", c, c.String())
		}
	}
}

func TestContextFlags(t *testing.T) {
	if s := (FlagCQEv1 | FlagEnhancedMPW).String(); s != "CQE_V1|ENHANCED_MPW" {
		t.Errorf("flags print %q", s)
	}
	if s := ContextFlags(0).String(); s != "0" {
		t.Errorf("no flags print %q", s)
	}
	if s := (FlagRealTimeTS | 1<<40).String(); s != "REAL_TIME_TS|0x10000000000" {
		t.Errorf("unknown flag prints %q", s)
	}
}
