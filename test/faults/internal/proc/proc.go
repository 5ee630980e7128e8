// Package proc drives faultnode processes (test/faults/cmd/faultnode) for the fault suite and the
// soak: it starts them, sends them commands one line at a time, reads their JSON answers, and
// stops, resumes and kills them. It returns errors rather than failing a test, so the soak command
// uses it as the tests do.
package proc

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/velo-go/velo/test/internal/gobuild"
)

// Build compiles faultnode into a new temporary folder and returns the binary's path; remove its
// folder when done. It links the UCX the go command's flags pick (GOFLAGS=-tags=ucx_static: velo's
// static UCX).
func Build() (string, error) { return build(nil) }

// BuildStock is Build linking the system's UCX instead of the static one (gobuild.StockUCX); it
// fails when the suite links the system's UCX itself.
func BuildStock() (string, error) {
	env, err := gobuild.StockUCX()
	if err != nil {
		return "", err
	}
	return build(append(os.Environ(), env...))
}

func build(env []string) (string, error) {
	dir, err := os.MkdirTemp("", "velo-faultnode-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "faultnode")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/velo-go/velo/test/faults/cmd/faultnode")
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("go build faultnode: %v\n%s", err, out)
	}
	return bin, nil
}

// Node is one faultnode process.
type Node struct {
	Name   string
	Cmd    *exec.Cmd
	Stderr *Buffer
	// ReadyAt is when the instance was up, as its ready line says (zero when it does not): a
	// member found through discovery has published its record by then.
	ReadyAt time.Time

	stdin  io.WriteCloser
	lines  chan string
	exited chan struct{}
	mu     sync.Mutex // one command at a time
	owed   int        // answers of commands that gave up waiting (under mu)
}

// Buffer collects a process's standard error; safe for concurrent use.
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Start starts cmd (a faultnode) and waits until it says it is ready. The environment defaults to
// this process's, with UCX_TLS=tcp unless it (cmd.Env) names transports already.
func Start(name string, cmd *exec.Cmd) (*Node, error) {
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	if !slices.ContainsFunc(cmd.Env, func(kv string) bool { return strings.HasPrefix(kv, "UCX_TLS=") && kv != "UCX_TLS=" }) {
		cmd.Env = append(cmd.Env, "UCX_TLS=tcp")
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	n := &Node{Name: name, Cmd: cmd, Stderr: &Buffer{}, stdin: stdin, lines: make(chan string, 16), exited: make(chan struct{})}
	cmd.Stderr = n.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		s := bufio.NewScanner(stdout)
		s.Buffer(make([]byte, 1<<20), 1<<20)
		for s.Scan() {
			n.lines <- s.Text()
		}
		close(n.lines)
	}()
	go func() {
		_ = cmd.Wait()
		close(n.exited)
	}()
	r, err := n.Read(60 * time.Second)
	if err != nil {
		n.Kill()
		// What it printed before it went is why: the caller has no node to read it from.
		return nil, fmt.Errorf("%w; its last words: %s", err, lastLines(n.Stderr.String(), 5))
	}
	if r["ready"] != true {
		n.Kill()
		return nil, fmt.Errorf("%s: first line %v, want ready", name, r)
	}
	if at, ok := r["at"].(float64); ok {
		n.ReadyAt = time.Unix(0, int64(at))
	}
	return n, nil
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Read returns the next answer. A line on the node's standard output that is not a JSON object
// is not an answer (a library the node links may print there): it goes to Stderr, marked, and
// Read waits on. Taking it for the answer would leave the real answer queued, and every later
// command would read the answer of the one before it.
func (n *Node) Read(timeout time.Duration) (map[string]any, error) {
	deadline := time.After(timeout)
	for {
		select {
		case line, ok := <-n.lines:
			if !ok {
				<-n.exited
				return nil, fmt.Errorf("%s exited (%v) without answering", n.Name, n.Cmd.ProcessState)
			}
			var m map[string]any
			if !strings.HasPrefix(line, "{") {
				fmt.Fprintf(n.Stderr, "(stdout, not an answer) %s\n", line)
				continue
			}
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				return nil, fmt.Errorf("%s said %q: %w", n.Name, line, err)
			}
			return m, nil
		case <-deadline:
			return nil, noAnswer{n.Name, timeout}
		}
	}
}

// Send writes one command line without waiting for its answer.
func (n *Node) Send(cmd string) error {
	_, err := fmt.Fprintln(n.stdin, cmd)
	if err != nil {
		return fmt.Errorf("%s: %s: %w", n.Name, cmd, err)
	}
	return nil
}

// Do sends cmd and returns its answer. Commands from several goroutines take turns. The answer
// of a command whose Do gave up waiting is still owed: the next Do reads and drops it first, so
// no command takes the answer of an earlier one.
func (n *Node) Do(cmd string, timeout time.Duration) (map[string]any, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for n.owed > 0 {
		if _, err := n.Read(timeout); err != nil {
			return nil, fmt.Errorf("%s: %s: an earlier command's answer never came: %w", n.Name, firstWord(cmd), err)
		}
		n.owed--
	}
	if err := n.Send(cmd); err != nil {
		return nil, err
	}
	m, err := n.Read(timeout)
	if errors.As(err, new(noAnswer)) {
		n.owed++
	}
	return m, err
}

// noAnswer is Read's error when the answer did not come in time; it may still come.
type noAnswer struct {
	name    string
	timeout time.Duration
}

func (e noAnswer) Error() string {
	return fmt.Sprintf("%s did not answer within %v", e.name, e.timeout)
}

// OK is Do, with an error answer turned into an error.
func (n *Node) OK(cmd string, timeout time.Duration) (map[string]any, error) {
	r, err := n.Do(cmd, timeout)
	if err != nil {
		return nil, err
	}
	if e, _ := r["error"].(string); e != "" {
		return r, fmt.Errorf("%s: %s: %s", n.Name, firstWord(cmd), e)
	}
	return r, nil
}

func firstWord(s string) string {
	w, _, _ := strings.Cut(s, " ")
	return w
}

// Info is the node's PeerInfo as JSON.
func (n *Node) Info() (string, error) {
	r, err := n.OK("info", time.Minute)
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(r["info"])
	return string(b), err
}

// Pair registers a and b with each other.
func Pair(a, b *Node) error {
	for _, x := range [][2]*Node{{a, b}, {b, a}} {
		info, err := x[1].Info()
		if err != nil {
			return err
		}
		if _, err := x[0].OK("peer "+info, time.Minute); err != nil {
			return err
		}
	}
	return nil
}

// Stats is a node's RDMA registry and staging state.
type Stats struct {
	Arenas, Slots, LeaseRegistrations, Quarantined, HeldSlots, StagedSlots, OpenLeases int
	ArenaBytes, LeaseBytes, QuarantinedBytes, PinnedBytes                              int64
}

func statsOf(v any) (Stats, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return Stats{}, fmt.Errorf("stats: %v is not an object", v)
	}
	i := func(k string) int {
		f, _ := m[k].(float64)
		return int(f)
	}
	return Stats{Arenas: i("arenas"), Slots: i("slots"), LeaseRegistrations: i("lease_registrations"), Quarantined: i("quarantined"),
		HeldSlots: i("held_slots"), StagedSlots: i("staged_slots"), OpenLeases: i("open_leases"),
		ArenaBytes: int64(i("arena_bytes")), LeaseBytes: int64(i("lease_bytes")), QuarantinedBytes: int64(i("quarantined_bytes")),
		PinnedBytes: int64(i("pinned_bytes"))}, nil
}

// Stats reads the node's state.
func (n *Node) Stats() (Stats, error) {
	r, err := n.OK("stats", time.Minute)
	if err != nil {
		return Stats{}, err
	}
	return statsOf(r["stats"])
}

// WaitStats polls the node's stats until cond holds or timeout passes.
func (n *Node) WaitStats(timeout time.Duration, cond func(Stats) bool) (Stats, error) {
	deadline := time.Now().Add(timeout)
	for {
		st, err := n.Stats()
		if err != nil {
			return st, err
		}
		if cond(st) {
			return st, nil
		}
		if time.Now().After(deadline) {
			return st, fmt.Errorf("%s: not reached within %v: %+v", n.Name, timeout, st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Staged is a payload an owner staged.
type Staged struct {
	Handle, SHA256 string
}

// Stage has the node stage a deterministic payload of size bytes (pinned or plain).
func (n *Node) Stage(size int, seed uint64, pinned bool) (Staged, error) {
	cmd := "stage"
	if !pinned {
		cmd = "stage-plain"
	}
	r, err := n.OK(fmt.Sprintf("%s %d %d", cmd, size, seed), 5*time.Minute)
	if err != nil {
		return Staged{}, err
	}
	h, _ := r["handle"].(string)
	sum, _ := r["sha256"].(string)
	return Staged{Handle: h, SHA256: sum}, nil
}

func (n *Node) signal(s syscall.Signal) { _ = n.Cmd.Process.Signal(s) }

// Stop stops the process (SIGSTOP); Resume lets it go on (SIGCONT).
func (n *Node) Stop()   { n.signal(syscall.SIGSTOP) }
func (n *Node) Resume() { n.signal(syscall.SIGCONT) }

// Kill kills the process and waits for it.
func (n *Node) Kill() {
	n.signal(syscall.SIGKILL)
	<-n.exited
}

// Exited is closed when the process has exited.
func (n *Node) Exited() <-chan struct{} { return n.exited }

// Alive reports that the process has not exited.
func (n *Node) Alive() bool {
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

// Quit closes the instance and returns its final stats; the process must exit 0 within.
func (n *Node) Quit(within time.Duration) (Stats, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.Send("quit"); err != nil {
		return Stats{}, err
	}
	r, err := n.Read(within)
	if err != nil {
		return Stats{}, err
	}
	if r["closed"] != true {
		return Stats{}, fmt.Errorf("%s: quit answered %v", n.Name, r)
	}
	if e, _ := r["err"].(string); e != "" {
		return Stats{}, fmt.Errorf("%s: Close: %s", n.Name, e)
	}
	select {
	case <-n.exited:
	case <-time.After(within):
		return Stats{}, fmt.Errorf("%s did not exit within %v of quit", n.Name, within)
	}
	if code := n.Cmd.ProcessState.ExitCode(); code != 0 {
		return Stats{}, fmt.Errorf("%s exited with status %d", n.Name, code)
	}
	return statsOf(r["stats"])
}

// Close ends the process however it is: resumed, its standard input closed, killed after grace.
func (n *Node) Close(grace time.Duration) {
	n.Resume()
	n.stdin.Close()
	select {
	case <-n.exited:
	case <-time.After(grace):
		n.Kill()
	}
}

// ErrLoss marks a payload reported delivered with other bytes than were staged.
var ErrLoss = errors.New("payload delivered with other bytes")
