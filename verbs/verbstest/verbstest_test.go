//go:build linux

package verbstest_test

import (
	"bufio"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/velo-go/velo/verbs"
	"github.com/velo-go/velo/verbs/verbstest"
)

// capSets reads the five capability sets from a /proc/<pid>/status text.
func capSets(t *testing.T, status string) map[string]uint64 {
	t.Helper()
	sets := map[string]uint64{}
	sc := bufio.NewScanner(strings.NewReader(status))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.HasPrefix(k, "Cap") {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatalf("bad %s line %q", k, sc.Text())
			}
			sets[k] = n
		}
	}
	for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
		if _, ok := sets[k]; !ok {
			t.Fatalf("no %s in child status:\n%s", k, status)
		}
	}
	return sets
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

func TestCommandDropsCapabilitiesAndSetsLimit(t *testing.T) {
	cmd, err := verbstest.Command(ctx(t), verbstest.Constraints{MemlockSoft: 1 << 20, MemlockHard: 2 << 20}, "cat", "/proc/self/status", "/proc/self/limits")
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child failed: %v\n%s", err, out)
	}
	text := string(out)
	for name, set := range capSets(t, text) {
		for _, c := range []int{verbstest.CapIPCLock, verbstest.CapSysResource} {
			if set&(1<<c) != 0 {
				t.Errorf("child still has capability %d in %s (%016x)", c, name, set)
			}
		}
	}
	if !strings.Contains(text, "Max locked memory         1048576              2097152              bytes") {
		t.Errorf("child limits do not show memlock 1 MiB soft / 2 MiB hard:\n%s", text)
	}
}

func TestCommandKeepsOtherCapabilities(t *testing.T) {
	var parent unix.CapUserData
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		t.Fatal(err)
	}
	parent = data[0]
	if parent.Effective&(1<<unix.CAP_NET_ADMIN) == 0 {
		t.Skip("the test process does not hold CAP_NET_ADMIN, so there is nothing to see kept")
	}
	cmd, err := verbstest.Command(ctx(t), verbstest.Constraints{}, "cat", "/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child failed: %v\n%s", err, out)
	}
	eff := capSets(t, string(out))["CapEff"]
	if eff&(1<<unix.CAP_NET_ADMIN) == 0 {
		t.Errorf("child lost CAP_NET_ADMIN, which it was not asked to drop (CapEff %016x)", eff)
	}
	if eff&(1<<verbstest.CapIPCLock) != 0 {
		t.Errorf("child kept CAP_IPC_LOCK (CapEff %016x)", eff)
	}
}

func TestCommandRejectsBadConstraints(t *testing.T) {
	if _, err := verbstest.Command(ctx(t), verbstest.Constraints{MemlockSoft: 2 << 20, MemlockHard: 1 << 20}, "true"); err == nil {
		t.Error("soft above hard was accepted")
	}
	if _, err := verbstest.Command(ctx(t), verbstest.Constraints{Drop: []int{64}}, "true"); err == nil {
		t.Error("capability 64 was accepted")
	}
	if _, err := verbstest.Command(ctx(t), verbstest.Constraints{}, "no-such-program-velo"); err == nil {
		t.Error("a program that is not on PATH was accepted")
	}
}

// TestRunTestChildCannotBypassTheLimit proves the capability is really gone, not just absent from
// a report: in the child, mlock above the limit fails with ENOMEM, as it does for an unprivileged
// user, and verbs.CheckMemlock predicts exactly that.
func TestRunTestChildCannotBypassTheLimit(t *testing.T) {
	const limit = 1 << 20
	if verbstest.InChild() {
		m, err := verbs.ReadMemlock()
		if err != nil {
			t.Fatal(err)
		}
		if m.CapIPCLock || m.Soft != limit || m.Hard != limit {
			t.Fatalf("child memlock state %+v, want no CAP_IPC_LOCK and 1 MiB limits", m)
		}
		small, big := mmap(t, limit/2), mmap(t, 4*limit)
		if err := verbs.CheckMemlock(uint64(len(small))); err != nil {
			t.Errorf("CheckMemlock(512 KiB) under a 1 MiB limit: %v", err)
		}
		if err := unix.Mlock(small); err != nil {
			t.Errorf("mlock(512 KiB) under a 1 MiB limit: %v", err)
		}
		unix.Munlock(small)
		if err := verbs.CheckMemlock(uint64(len(big))); !errors.Is(err, verbs.ErrMemlock) {
			t.Errorf("CheckMemlock(4 MiB) under a 1 MiB limit = %v, want ErrMemlock", err)
		}
		if err := unix.Mlock(big); !errors.Is(err, unix.ENOMEM) {
			t.Errorf("mlock(4 MiB) under a 1 MiB limit without CAP_IPC_LOCK = %v, want ENOMEM", err)
		}
		return
	}
	out := verbstest.RunTest(t, verbstest.Constraints{MemlockSoft: limit})
	if !strings.Contains(out, "TestRunTestChildCannotBypassTheLimit") {
		t.Errorf("child output does not name the test:\n%s", out)
	}
}

// TestParentBypassesTheLimit is the control for the test above: with CAP_IPC_LOCK the same mlock
// above the soft limit succeeds.
func TestParentBypassesTheLimit(t *testing.T) {
	m, err := verbs.ReadMemlock()
	if err != nil {
		t.Fatal(err)
	}
	if !m.Bypassed() {
		t.Skip("this process does not hold CAP_IPC_LOCK in the initial user namespace; nothing to compare against")
	}
	if m.Soft == verbs.Unlimited || m.Soft > 256<<20 {
		t.Skipf("the memlock limit (%s) is too high to exceed cheaply", verbs.FormatBytes(m.Soft))
	}
	buf := mmap(t, int(m.Soft)+4<<20)
	if err := unix.Mlock(buf); err != nil {
		t.Fatalf("mlock above the soft limit with CAP_IPC_LOCK: %v", err)
	}
	unix.Munlock(buf)
}

func TestRunTestSubtest(t *testing.T) {
	t.Run("child sees the limit", func(t *testing.T) {
		if verbstest.InChild() {
			var lim unix.Rlimit
			if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim); err != nil {
				t.Fatal(err)
			}
			if lim.Cur != 64<<10 {
				t.Fatalf("child soft limit %d, want %d", lim.Cur, 64<<10)
			}
			return
		}
		verbstest.RunTest(t, verbstest.Constraints{MemlockSoft: 64 << 10})
	})
}

func mmap(t *testing.T, n int) []byte {
	t.Helper()
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(b) })
	return b
}
