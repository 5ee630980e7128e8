package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/ucx"
)

// The test binary is velobench too: started with asMainEnv=1 it runs Main on its arguments, so
// the tests run real processes (velobench local starts its target the same way, through
// os.Executable) without building the command first. testVersionEnv makes such a process claim
// another version, for the refusal test.
const (
	asMainEnv      = "VELOBENCH_TEST_AS_MAIN"
	testVersionEnv = "VELOBENCH_TEST_VERSION"
	healthEnv      = "VELOBENCH_TEST_ETCD_HEALTH" // netns_test.go
)

func TestMain(m *testing.M) {
	if url := os.Getenv(healthEnv); url != "" {
		os.Exit(healthCheck(url))
	}
	if os.Getenv(asMainEnv) == "1" {
		if v := os.Getenv(testVersionEnv); v != "" {
			version = v
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// childEnv is the environment of a velobench process of the tests: UCX over tcp unless the
// environment chose, the network trusted where the linked UCX has no guard (the system's: the
// processes talk over loopback or a veth of the test's own), and no kill switch inherited.
func childEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "VELO_RDMA_RENDEZVOUS_DISABLE=") && !strings.HasPrefix(kv, testVersionEnv+"=") {
			env = append(env, kv)
		}
	}
	env = append(env, asMainEnv+"=1")
	if os.Getenv("UCX_TLS") == "" {
		env = append(env, "UCX_TLS=tcp")
	}
	if g, err := ucx.SoftwareRMAGuard(); err != nil || !g.Enforced {
		env = append(env, "VELO_UCX_TRUST_NETWORK=1")
	}
	return append(env, extra...)
}

// inProcessEnv sets childEnv's variables in this process, for a Main run here.
func inProcessEnv(t *testing.T) {
	for _, kv := range childEnv() {
		if k, v, ok := strings.Cut(kv, "="); ok && k != asMainEnv {
			t.Setenv(k, v)
		}
	}
	t.Setenv("VELO_RDMA_RENDEZVOUS_DISABLE", "")
}

// proc is a velobench process of a test: its output is kept, and lines are watched as they come.
type proc struct {
	t      *testing.T
	name   string
	cmd    *exec.Cmd
	mu     sync.Mutex
	stdout bytes.Buffer
	stderr bytes.Buffer
	lines  chan string
	done   chan struct{}
	err    error
}

// start runs the test binary as velobench with args; wrap, when set, prefixes the command (ip
// netns exec NAME).
func start(t *testing.T, name string, env []string, wrap []string, args ...string) *proc {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	argv := append(append(append([]string(nil), wrap...), exe), args...)
	p := &proc{t: t, name: name, cmd: exec.Command(argv[0], argv[1:]...), lines: make(chan string, 1024), done: make(chan struct{})}
	p.cmd.Env = env
	out, err := p.cmd.StdoutPipe()
	require.NoError(t, err)
	p.cmd.Stderr = &lockedWriter{mu: &p.mu, w: &p.stderr}
	require.NoError(t, p.cmd.Start())
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.mu.Lock()
			p.stdout.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s stdout:\n%s\n%s stderr:\n%s", name, p.out(), name, p.errOut())
		}
	})
	return p
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func (p *proc) out() string    { p.mu.Lock(); defer p.mu.Unlock(); return p.stdout.String() }
func (p *proc) errOut() string { p.mu.Lock(); defer p.mu.Unlock(); return p.stderr.String() }

// waitLine waits for a stdout line containing s.
func (p *proc) waitLine(s string, within time.Duration) {
	p.t.Helper()
	deadline := time.After(within)
	for {
		select {
		case l := <-p.lines:
			if strings.Contains(l, s) {
				return
			}
		case <-p.done:
			p.t.Fatalf("%s exited (%v) before printing %q", p.name, p.err, s)
		case <-deadline:
			p.t.Fatalf("%s printed no line with %q within %s", p.name, s, within)
		}
	}
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(within time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(within):
		p.t.Fatalf("%s did not exit within %s", p.name, within)
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	require.NoError(p.t, p.err)
	return 0
}

// readJSONReport decodes a report file as a generic document (to check the schema's field
// names) and as a Report.
func readJSONReport(t *testing.T, name string) (map[string]any, *Report) {
	t.Helper()
	b, err := os.ReadFile(name)
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(b, &doc))
	r, err := readReport(name)
	require.NoError(t, err)
	return doc, r
}

// quickSweep are flags that keep a sweep to a few seconds here (perftest's runs included).
func quickSweep(extra ...string) []string {
	return append([]string{"--bytes", "512K", "--min-iters", "4", "--max-iters", "40", "--point-time", "1s", "--perftest-bytes", "2M"}, extra...)
}

func mustMain(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Main(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func fileLines(t *testing.T, name string) []string {
	t.Helper()
	b, err := os.ReadFile(name)
	require.NoError(t, err)
	return strings.Split(strings.TrimRight(string(b), "\n"), "\n")
}
