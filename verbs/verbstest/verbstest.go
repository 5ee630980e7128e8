package verbstest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/velo-go/velo/verbs"
)

// Capability numbers (linux/capability.h) that callers may want to drop besides the defaults.
const (
	CapDACOverride   = 1
	CapDACReadSearch = 2
	CapFowner        = 3
	CapIPCLock       = 14
	CapSysResource   = 24
)

// Constraints describes the child's privileges and limits.
type Constraints struct {
	// MemlockSoft is the child's soft RLIMIT_MEMLOCK in bytes. Zero keeps the current limits.
	MemlockSoft uint64
	// MemlockHard is the child's hard RLIMIT_MEMLOCK in bytes; zero means equal to MemlockSoft.
	// It cannot exceed the parent's hard limit unless the parent holds CAP_SYS_RESOURCE.
	MemlockHard uint64
	// Drop lists the capabilities to remove. Nil means CAP_IPC_LOCK and CAP_SYS_RESOURCE; pass an
	// empty, non-nil slice to keep every capability and only change the limit.
	Drop []int
}

func (c Constraints) drop() []int {
	if c.Drop == nil {
		return []int{CapIPCLock, CapSysResource}
	}
	return c.Drop
}

// marker is the first argument that makes init act as the trampoline. It is not a flag any
// program would take, so a normal run never matches it.
const marker = "-velo-verbstest-exec"

// childEnv marks a process started by RunTest.
const childEnv = "VELO_VERBSTEST_CHILD"

// spec is what the parent hands the trampoline.
type spec struct {
	Path        string   `json:"path"`
	Args        []string `json:"args"` // argv, including argv[0]
	MemlockSoft uint64   `json:"memlock_soft"`
	MemlockHard uint64   `json:"memlock_hard"`
	Drop        []int    `json:"drop"`
}

// Command returns a command that runs name with arg under c: the same as exec.CommandContext,
// except that the process starts as a re-execution of the current program, which applies c and
// then execs name. The caller may set Env, Dir, Stdin, Stdout and Stderr as usual; Path and Args
// must stay as returned.
//
// Command is Linux-only; elsewhere it returns an error wrapping verbs.ErrUnsupported.
func Command(ctx context.Context, c Constraints, name string, arg ...string) (*exec.Cmd, error) {
	if runtime.GOOS != "linux" {
		return nil, fmt.Errorf("verbstest: %w", verbs.ErrUnsupported)
	}
	path := name
	if !strings.Contains(name, "/") {
		p, err := exec.LookPath(name)
		if err != nil {
			return nil, fmt.Errorf("verbstest: %w", err)
		}
		path = p
	}
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("verbstest: locating the current executable to re-run it: %w", err)
	}
	s := spec{Path: path, Args: append([]string{name}, arg...), MemlockSoft: c.MemlockSoft, MemlockHard: c.MemlockHard, Drop: c.drop()}
	if s.MemlockHard == 0 {
		s.MemlockHard = s.MemlockSoft
	}
	if s.MemlockSoft > s.MemlockHard {
		return nil, fmt.Errorf("verbstest: soft memlock limit %d exceeds the hard limit %d", s.MemlockSoft, s.MemlockHard)
	}
	for _, cp := range s.Drop {
		if cp < 0 || cp > 63 {
			return nil, fmt.Errorf("verbstest: capability %d out of range", cp)
		}
	}
	enc, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, self, marker, base64.StdEncoding.EncodeToString(enc))
	cmd.Args[0] = name
	return cmd, nil
}

// InChild reports whether this process is the child that RunTest started.
func InChild() bool { return os.Getenv(childEnv) == "1" }

// RunTest re-runs the calling test, and only it, in a child of the test binary under c, and
// returns the child's combined output. The test fails when the child fails or does not finish
// within two minutes (or before the test's deadline). The child sees InChild() == true.
func RunTest(t testing.TB, c Constraints) string {
	t.Helper()
	if InChild() {
		t.Fatal("verbstest.RunTest called in the child: guard the child's part of the test with verbstest.InChild()")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if dl, has := d.Deadline(); has {
			ctx, cancel = context.WithDeadline(context.Background(), dl.Add(-5*time.Second))
		}
	}
	defer cancel()
	self, err := os.Executable()
	if err != nil {
		t.Fatalf("verbstest: %v", err)
	}
	cmd, err := Command(ctx, c, self, "-test.run="+runPattern(t.Name()), "-test.count=1", "-test.v")
	if err != nil {
		t.Fatalf("verbstest: %v", err)
	}
	cmd.Env = append(os.Environ(), childEnv+"=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	if err != nil || !strings.Contains(out.String(), "--- PASS: "+t.Name()) {
		t.Fatalf("verbstest: the child run of %s failed (%v); its output:\n%s", t.Name(), err, out.String())
	}
	return out.String()
}

// runPattern turns a test name ("TestX/sub case") into a -test.run pattern that matches it alone.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}
