// Package driver is the suite's side of the linecmd protocol: it starts a driven program
// (test/faults/cmd/faultnode, test/attack/cmd/victim and ucxattacker, test/pushfaults/cmd/pushpeer,
// test/multirail/cmd/railnode), waits for its ready line, writes it one command a line and reads
// its answers, one JSON object a line. Every failure is an error that names the program and
// carries the last lines it wrote to standard error, so a suite can say why a program went; the
// soak command uses it as the tests do.
package driver

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// maxLine bounds one answer line (a railnode's rail table or a victim's registrations are the
// longest).
const maxLine = 16 << 20

// sameHostEnv is linecmd.SameHostEnv, the suites' same-host switch (the driver sits beside
// linecmd, so it names the variable itself; its test checks the two agree).
const sameHostEnv = "VELO_TEST_SAME_HOST"

// ErrNoAnswer is wrapped by the error of a Read or Do whose answer did not come in time. The
// answer may still come: the next Do drops it before it reads its own.
var ErrNoAnswer = errors.New("no answer in time")

// Proc is one driven program. Commands from several goroutines take turns.
type Proc struct {
	Name   string
	Cmd    *exec.Cmd
	Stderr *Buffer
	// Ready is the program's first line, {"ready": true, ...}.
	Ready map[string]any

	stdin   io.WriteCloser
	lines   chan []byte
	exited  chan struct{}
	closing chan struct{} // closed by Close and Kill: the reader drops what comes after
	endOnce sync.Once
	readErr atomic.Pointer[error] // why standard output ended early

	mu   sync.Mutex // one command at a time
	owed int        // answers of commands that gave up waiting (under mu)
}

// Buffer collects a process's standard error; safe for concurrent use.
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Start starts cmd as the program name and waits up to within for its first line, which must
// have "ready": true. The environment defaults to this process's; the driven programs are velo
// instances, so UCX_TLS=tcp is added unless this process names transports (an InfiniBand run) or
// cmd.Env does (a test of UCX's shared-memory transports, UCX_TLS=sm,self), and so is this
// process's VELO_TEST_SAME_HOST (linecmd.SameHostEnv). cmd's standard input,
// output and error must be unset. On an error the process is gone.
func Start(name string, cmd *exec.Cmd, within time.Duration) (*Proc, error) {
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	named := slices.ContainsFunc(cmd.Env, func(kv string) bool { return strings.HasPrefix(kv, "UCX_TLS=") && kv != "UCX_TLS=" })
	if !named && os.Getenv("UCX_TLS") == "" {
		cmd.Env = append(cmd.Env, "UCX_TLS=tcp")
	}
	// The same-host switch goes to every program, also one whose environment a test built from
	// scratch; a value the test set itself wins (it comes later). The program reads it, and
	// refuses a value that is not a boolean (linecmd.SameHost).
	if v, ok := os.LookupEnv(sameHostEnv); ok {
		cmd.Env = append([]string{sameHostEnv + "=" + v}, cmd.Env...)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	// A pipe of our own rather than StdoutPipe: Wait closes StdoutPipe's end when the process
	// exits, and the reader would lose the answer the process wrote last (quit's).
	out, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	cmd.Stdout = w
	p := &Proc{Name: name, Cmd: cmd, Stderr: &Buffer{}, stdin: stdin, lines: make(chan []byte, 16),
		exited: make(chan struct{}), closing: make(chan struct{})}
	cmd.Stderr = p.Stderr
	err = cmd.Start()
	w.Close() // the child holds its copy; ours would keep the reader from its end of file
	if err != nil {
		out.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go p.readLines(out)
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	r, err := p.Read(within)
	if err == nil && r["ready"] != true {
		err = fmt.Errorf("%s: first line %v, want {\"ready\": true}", name, r)
	}
	if err != nil {
		p.Kill()
		if errors.Is(err, ErrNoAnswer) || r != nil { // gone's errors carry the last words already
			err = fmt.Errorf("%w; its last words:\n%s", err, LastLines(p.Stderr.String(), 20))
		}
		return nil, err
	}
	p.Ready = r
	return p, nil
}

// readLines hands each line of the program's standard output to Read until the output ends.
// Once the Proc is closed nobody reads any more: the lines are dropped, so that neither this
// goroutine nor a program still writing blocks.
func (p *Proc) readLines(out *os.File) {
	defer out.Close()
	s := bufio.NewScanner(out)
	s.Buffer(make([]byte, 64<<10), maxLine)
	for s.Scan() {
		select {
		case p.lines <- append([]byte(nil), s.Bytes()...):
		case <-p.closing:
		}
	}
	if err := s.Err(); err != nil {
		p.readErr.Store(&err)
		_, _ = io.Copy(io.Discard, out)
	}
	close(p.lines)
}

// Read returns the next answer. A line on the program's standard output that is not a JSON
// object is not an answer (a library the program links may print there): it goes to Stderr,
// marked, and Read waits on. Taking it for the answer would leave the real answer queued, and
// every later command would read the answer of the one before it.
func (p *Proc) Read(timeout time.Duration) (map[string]any, error) {
	line, err := p.next(timeout)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		return nil, fmt.Errorf("%s said %q: %w", p.Name, line, err)
	}
	return m, nil
}

// next is the next line that is a JSON object, undecoded.
func (p *Proc) next(timeout time.Duration) ([]byte, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				return nil, p.gone("without answering")
			}
			if len(line) == 0 || line[0] != '{' {
				fmt.Fprintf(p.Stderr, "(stdout, not an answer) %s\n", line)
				continue
			}
			return line, nil
		case <-deadline.C:
			return nil, noAnswer{p.Name, timeout}
		}
	}
}

// noAnswer is the error of an answer that did not come in time; it is ErrNoAnswer.
type noAnswer struct {
	name    string
	timeout time.Duration
}

func (e noAnswer) Error() string {
	return fmt.Sprintf("%s did not answer within %v", e.name, e.timeout)
}
func (e noAnswer) Is(target error) bool { return target == ErrNoAnswer }

// gone is the error of a program whose standard output ended: how it exited and its last words.
func (p *Proc) gone(what string) error {
	if err := p.readErr.Load(); err != nil {
		return fmt.Errorf("%s: reading its standard output: %w", p.Name, *err)
	}
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second): // it closed its output but lives on
		return fmt.Errorf("%s closed its standard output %s", p.Name, what)
	}
	return fmt.Errorf("%s exited (%v) %s; its last words:\n%s", p.Name, p.Cmd.ProcessState, what, LastLines(p.Stderr.String(), 20))
}

// Send writes one command line without waiting for its answer (Read takes it).
func (p *Proc) Send(cmd string) error {
	if !p.Alive() {
		return p.gone("before " + firstWord(cmd))
	}
	if _, err := fmt.Fprintln(p.stdin, cmd); err != nil {
		return fmt.Errorf("%s: %s: %w", p.Name, firstWord(cmd), err)
	}
	return nil
}

// Do sends cmd and returns its answer. The answer of a command whose Do gave up waiting is still
// owed: the next Do reads and drops it first, so no command takes the answer of an earlier one.
func (p *Proc) Do(cmd string, timeout time.Duration) (map[string]any, error) {
	line, err := p.call(cmd, timeout)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		return nil, fmt.Errorf("%s: %s: answer %q: %w", p.Name, firstWord(cmd), line, err)
	}
	return m, nil
}

func (p *Proc) call(cmd string, timeout time.Duration) ([]byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.owed > 0 {
		if _, err := p.next(timeout); err != nil {
			return nil, fmt.Errorf("%s: %s: an earlier command's answer never came: %w", p.Name, firstWord(cmd), err)
		}
		p.owed--
	}
	if err := p.Send(cmd); err != nil {
		return nil, err
	}
	line, err := p.next(timeout)
	if errors.Is(err, ErrNoAnswer) {
		p.owed++
	}
	return line, err
}

// OK is Do, with an error answer ({"error": "..."}) turned into an error.
func (p *Proc) OK(cmd string, timeout time.Duration) (map[string]any, error) {
	r, err := p.Do(cmd, timeout)
	if err != nil {
		return nil, err
	}
	if e, _ := r["error"].(string); e != "" {
		return r, fmt.Errorf("%s: %s: %s", p.Name, firstWord(cmd), e)
	}
	return r, nil
}

// Decode is OK decoding the answer into v (a pointer to a struct with JSON tags); v is filled
// on an error answer too.
func (p *Proc) Decode(cmd string, timeout time.Duration, v any) error {
	line, err := p.call(cmd, timeout)
	if err != nil {
		return err
	}
	var e struct {
		Error any `json:"error"`
	}
	if err := errors.Join(json.Unmarshal(line, v), json.Unmarshal(line, &e)); err != nil {
		return fmt.Errorf("%s: %s: answer %q: %w", p.Name, firstWord(cmd), line, err)
	}
	if s, _ := e.Error.(string); s != "" {
		return fmt.Errorf("%s: %s: %s", p.Name, firstWord(cmd), s)
	}
	return nil
}

func firstWord(s string) string {
	w, _, _ := strings.Cut(s, " ")
	return w
}

// Signal sends s to the process.
func (p *Proc) Signal(s syscall.Signal) { _ = p.Cmd.Process.Signal(s) }

// Stop stops the process (SIGSTOP); Resume lets it go on (SIGCONT).
func (p *Proc) Stop()   { p.Signal(syscall.SIGSTOP) }
func (p *Proc) Resume() { p.Signal(syscall.SIGCONT) }

// Kill kills the process and waits for it.
func (p *Proc) Kill() {
	p.end()
	p.Signal(syscall.SIGKILL)
	<-p.exited
}

// Exited is closed when the process has exited.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// Alive reports that the process has not exited.
func (p *Proc) Alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Close ends the process however it is: resumed, its standard input closed (a linecmd program
// then exits), killed when it has not exited after grace. It may be called more than once.
func (p *Proc) Close(grace time.Duration) {
	p.end()
	p.Resume()
	_ = p.stdin.Close()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
		p.Kill()
	}
}

// end stops the handing of lines to Read: nobody will read them.
func (p *Proc) end() { p.endOnce.Do(func() { close(p.closing) }) }

// Cleanup closes the process (Close(grace)) when t ends, and logs its standard error when t
// failed or VELO_TEST_LOG is set.
func (p *Proc) Cleanup(t testing.TB, grace time.Duration) {
	t.Cleanup(func() {
		p.Close(grace)
		if t.Failed() || os.Getenv("VELO_TEST_LOG") != "" {
			t.Logf("%s (pid %d, %v) standard error:\n%s", p.Name, p.Cmd.Process.Pid, p.Cmd.ProcessState, HeadTail(p.Stderr.String(), 8000, 8000))
		}
	})
}

// StartT is Start for a test: it waits a minute for the program's ready line, fails t when it
// does not come, and ends the program when t ends (Cleanup, with 20 s of grace).
func StartT(t testing.TB, name string, cmd *exec.Cmd) *Proc {
	t.Helper()
	p, err := Start(name, cmd, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	p.Cleanup(t, 20*time.Second)
	return p
}

// LastLines is the last n lines of s.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// HeadTail keeps the start of a long text (where a crash says what it was) and its end.
func HeadTail(s string, head, tail int) string {
	if len(s) <= head+tail {
		return s
	}
	return s[:head] + "\n…\n" + s[len(s)-tail:]
}
