//go:build linux

package verbs_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/velo-go/velo/verbs"
	"github.com/velo-go/velo/verbs/verbstest"
)

// These tests run their checks in a child process without CAP_IPC_LOCK and under a small
// memlock limit (package verbstest), so the limit really applies.

func TestCheckMemlockUnprivileged(t *testing.T) {
	if verbstest.InChild() {
		m, err := verbs.ReadMemlock()
		if err != nil {
			t.Fatal(err)
		}
		if m.CapIPCLock || m.Bypassed() {
			t.Fatalf("child still bypasses the limit: %+v", m)
		}
		if err := verbs.CheckMemlock(4 << 20); err != nil {
			t.Errorf("CheckMemlock(4 MiB) under 8 MiB: %v", err)
		}
		err = verbs.CheckMemlock(32 << 20)
		if !errors.Is(err, verbs.ErrMemlock) {
			t.Fatalf("CheckMemlock(32 MiB) under 8 MiB = %v, want ErrMemlock", err)
		}
		for _, s := range []string{"32 MiB", "8 MiB", "CAP_IPC_LOCK", "ulimit -l unlimited"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error %q does not mention %q", err, s)
			}
		}
		return
	}
	verbstest.RunTest(t, verbstest.Constraints{MemlockSoft: 8 << 20})
}

func TestRaiseMemlock(t *testing.T) {
	if verbstest.InChild() {
		if err := verbs.CheckMemlock(3 << 20); !errors.Is(err, verbs.ErrMemlock) || !strings.Contains(err.Error(), "RaiseMemlock") {
			t.Fatalf("before the raise: %v, want ErrMemlock suggesting RaiseMemlock", err)
		}
		m, err := verbs.RaiseMemlock()
		if err != nil {
			t.Fatal(err)
		}
		if m.Soft != 4<<20 || m.Hard != 4<<20 {
			t.Fatalf("after RaiseMemlock: soft %d hard %d, want both 4 MiB", m.Soft, m.Hard)
		}
		if err := verbs.CheckMemlock(3 << 20); err != nil {
			t.Errorf("after the raise: %v", err)
		}
		if m, err = verbs.RaiseMemlock(); err != nil || m.Soft != 4<<20 {
			t.Errorf("a second raise (nothing to do): %+v %v", m, err)
		}
		return
	}
	verbstest.RunTest(t, verbstest.Constraints{MemlockSoft: 1 << 20, MemlockHard: 4 << 20})
}

// TestUverbsPermissionDenied opens a uverbs node owned by another user, mode 0600, from a child
// that lacks the capabilities that let root ignore file modes.
func TestUverbsPermissionDenied(t *testing.T) {
	const envDev = "VELO_VERBS_TEST_DEVROOT"
	if verbstest.InChild() {
		p := fixture("cx7-ib-active")
		p.Dev = os.Getenv(envDev)
		d, err := verbs.LookupDevice(p, "mlx5_0")
		if err != nil {
			t.Fatal(err)
		}
		if d.Uverbs.Openable() || !errors.Is(d.Uverbs.Err, verbs.ErrPermission) || !strings.Contains(d.Uverbs.Err.Error(), "rdma") {
			t.Fatalf("uverbs access in the child: %v, want ErrPermission naming the fix", d.Uverbs.Err)
		}
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to give the node to another user")
	}
	dev := t.TempDir()
	node := filepath.Join(dev, "infiniband", "uverbs0")
	if err := os.MkdirAll(filepath.Dir(node), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(node, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(node, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dev, 0o755); err != nil { // t.TempDir is 0700; the child must see in
		t.Fatal(err)
	}
	t.Setenv(envDev, dev)
	verbstest.RunTest(t, verbstest.Constraints{Drop: []int{verbstest.CapIPCLock, verbstest.CapDACOverride, verbstest.CapDACReadSearch, verbstest.CapFowner}})
}
