//go:build cgo && linux

package ucx

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// childInfo is what a child process reports on its first stdout line.
type childInfo struct {
	Address []byte       `json:"address"`
	Key     []byte       `json:"key"`
	RawKey  []byte       `json:"raw_key"`
	Base    uint64       `json:"base"`
	Length  int          `json:"length"`
	Env     []EnvDefault `json:"env"`
	Setting []Setting    `json:"settings"`
	Log     string       `json:"log"`
	Events  bool         `json:"mem_events"`
}

// TestChildProcess is the entry point of the child processes other tests start; run on
// its own it does nothing.
func TestChildProcess(t *testing.T) {
	role := os.Getenv(childEnv)
	if role == "" {
		t.Skip("helper process for the killed-peer, environment and raw-UCX tests")
	}
	var err error
	switch role {
	case "engine-peer":
		err = childEnginePeer()
	case "env-report":
		err = childEnvReport()
	case "raw-owner":
		err = childRawOwner()
	case "shared-process":
		err = childSharedProcess()
	case "two-engines":
		err = childTwoEngines()
	case "log-lines":
		err = childLogLines()
	case "removed-handler":
		err = childRemovedHandler()
	default:
		err = fmt.Errorf("unknown child role %q", role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	os.Exit(0)
}

func report(info childInfo) error {
	b, err := json.Marshal(info)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(os.Stdout, "%s\n", b)
	return err
}

// childEnginePeer runs an engine that serves one registration and echoes AM id 1 back
// on id 2, until stdin closes.
func childEnginePeer() error {
	ctx := context.Background()
	e, err := NewEngine(ctx, EngineConfig{Name: "child", Context: ContextConfig{TLS: testTLS}})
	if err != nil {
		return err
	}
	mem, err := AllocMemory(1<<20, MemoryOptions{})
	if err != nil {
		return err
	}
	fill(mem.Bytes(), 42)
	reg, err := e.Register(ctx, mem.Bytes())
	if err != nil {
		return err
	}
	if err := report(childInfo{Address: e.Address(), Key: reg.RemoteKey(), Base: reg.Addr(), Length: reg.Len()}); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	return e.Close(ctx)
}

// childEnvReport creates a context (TLS "tcp" in code) and reports the environment
// defaults, the effective settings and what was logged.
func childEnvReport() error {
	var logbuf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logbuf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := NewContext(ContextConfig{TLS: testTLS, Logger: log})
	if err != nil {
		return err
	}
	defer c.Close()
	env := ApplyEnvDefaults()
	return report(childInfo{Env: env, Setting: c.Settings(), Log: logbuf.String(), Events: memEventsEnabled()})
}

// childRawOwner maps memory with the low layer, reports its address and raw key, and
// progresses its worker; on "munmap" from stdin it deregisters the memory and makes it
// inaccessible, as an owner that freed it would, and keeps progressing; on "guard" it prints
// its guard's refusal counters (GuardRefusals as JSON).
func childRawOwner() error {
	runtime.LockOSThread()
	c, err := NewContext(ContextConfig{TLS: testTLS})
	if err != nil {
		return err
	}
	w, err := c.NewWorker()
	if err != nil {
		return err
	}
	addr, err := w.Address()
	if err != nil {
		return err
	}
	mem, err := unix.Mmap(-1, 0, 1<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return err
	}
	fill(mem, 7)
	mh, err := c.MapMemory(mem)
	if err != nil {
		return err
	}
	key, err := mh.PackRemoteKey()
	if err != nil {
		return err
	}
	if err := report(childInfo{Address: addr, RawKey: key, Base: mh.Addr(), Length: len(mem)}); err != nil {
		return err
	}
	cmds := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(os.Stdin)
		for s.Scan() {
			cmds <- s.Text()
		}
		close(cmds)
	}()
	for {
		w.Progress()
		w.Poll(func(*Event) {})
		select {
		case cmd, ok := <-cmds:
			if !ok {
				return nil
			}
			if cmd == "munmap" {
				if err := mh.Unmap(); err != nil {
					return err
				}
				// Make the pages inaccessible but keep the addresses reserved: after a
				// plain munmap a later mapping may reuse them, and the GET would then
				// return whatever lives there instead of faulting.
				if err := unix.Mprotect(mem, unix.PROT_NONE); err != nil {
					return err
				}
				fmt.Println("unmapped")
			}
			if cmd == "guard" {
				// The owner's own guard counters (the patch set counts at the target).
				g, err := SoftwareRMAGuard()
				if err != nil {
					return err
				}
				b, err := json.Marshal(g.Refused)
				if err != nil {
					return err
				}
				fmt.Println(string(b))
			}
		default:
			time.Sleep(10 * time.Microsecond)
		}
	}
}

// startChild starts a child with role and returns its report and the command. The child
// is killed at cleanup if still running.
func startChild(t *testing.T, role string, env ...string) (childInfo, *childProc) {
	t.Helper()
	cmd := childCommand(t, role, env...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	// Not cmd.StdoutPipe: Wait, which runs beside the reads (p.exited), closes that pipe as soon
	// as the child exits, and a child that reports and exits at once (env-report, whose settings
	// run past 4 KiB on UCX 1.22) then lost the rest of its line. A pipe of our own stays
	// readable until the test ends.
	stdout, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdout.Close() })
	cmd.Stdout = w
	p := &childProc{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout), exited: make(chan struct{})}
	cmd.Stderr = &p.stderr
	err = cmd.Start()
	w.Close() // the child holds the write end now; EOF comes when it exits
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		stdin.Close()
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() && p.stderr.Len() > 0 {
			t.Logf("child %s stderr:\n%s", role, p.stderr.String())
		}
	})
	lines := make(chan string, 1)
	go func() {
		line, _ := p.out.ReadString('\n')
		lines <- line
	}()
	var line string
	select {
	case line = <-lines:
	case <-time.After(testTimeout):
		cmd.Process.Kill()
		t.Fatalf("child %s reported nothing within %v", role, testTimeout)
	}
	if line == "" {
		<-p.exited
		t.Fatalf("child %s exited without a report: %v\n%s", role, p.err, p.stderr.String())
	}
	var info childInfo
	if err := json.Unmarshal([]byte(line), &info); err != nil {
		t.Fatalf("child %s report %q: %v", role, line, err)
	}
	return info, p
}

// ask writes cmd to the child's stdin and returns its next line of output, failing the test
// when none comes within testTimeout.
func (p *childProc) ask(t *testing.T, cmd string) string {
	t.Helper()
	if _, err := fmt.Fprintln(p.stdin, cmd); err != nil {
		t.Fatalf("child: %s: %v", cmd, err)
	}
	lines := make(chan string, 1)
	go func() {
		line, _ := p.out.ReadString('\n')
		lines <- line
	}()
	select {
	case line := <-lines:
		return strings.TrimSpace(line)
	case <-time.After(testTimeout):
		t.Fatalf("child: no answer to %q within %v", cmd, testTimeout)
		return ""
	}
}

type childProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Reader
	exited chan struct{}
	err    error
	stderr bytes.Buffer // read only after exited is closed
}

// stop sends SIGSTOP and returns once every thread of the child is stopped. kill(2) returns
// before the signal is delivered: a child still running on the other core can answer one more
// request, which a test that relies on a silent owner must not see.
func (p *childProc) stop(t *testing.T) {
	t.Helper()
	pid := p.cmd.Process.Pid
	if err := unix.Kill(pid, unix.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP child %d: %v", pid, err)
	}
	deadline := time.Now().Add(testTimeout)
	for !allThreadsStopped(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("child %d not stopped %v after SIGSTOP", pid, testTimeout)
		}
		time.Sleep(time.Millisecond)
	}
}

// allThreadsStopped reads each thread's state from /proc/PID/task/TID/stat: 'T' is stopped
// by a signal (proc(5)).
func allThreadsStopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			return false
		}
		// The state follows the command name, which is in parentheses and may hold spaces.
		end := bytes.LastIndexByte(stat, ')')
		if end < 0 || end+2 >= len(stat) || stat[end+2] != 'T' {
			return false
		}
	}
	return true
}
