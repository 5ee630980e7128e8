//go:build cgo && linux

package ucxtransport

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/velo-go/velo/velo/transport"
)

// childEnv makes the test binary run as a peer process instead of the tests.
const childEnv = "UCXT_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "peer" {
		os.Exit(childPeer())
	}
	os.Exit(m.Run())
}

// childPeer is a UCX transport in its own process. It prints its peer address, reads the
// parent's from stdin, registers it (eager endpoint), says "ready" over UCX and then waits to be
// killed (or for stdin to close).
func childPeer() int {
	h := newHost()
	tr, err := New(Config{TLS: testTLS, EagerEndpoints: true, Logger: h.log})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	defer tr.Close()
	if err := tr.Start(h); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	fmt.Println(formatAddr(transport.PeerAddress{ID: h.id, Incarnation: h.inc, Blob: tr.Address()}))
	in := bufio.NewReader(os.Stdin)
	line, err := in.ReadString('\n')
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: reading the parent's address:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	parent, err := parseAddr(strings.TrimSpace(line))
	if err == nil {
		err = tr.AddPeer(ctx, parent)
	}
	if err == nil {
		err = tr.Send(ctx, parent.ID, []byte("ready"))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	_, _ = io.Copy(io.Discard, in)
	return 0
}

func formatAddr(a transport.PeerAddress) string {
	return fmt.Sprintf("%016x %016x %s", uint64(a.ID), a.Incarnation, hex.EncodeToString(a.Blob))
}

func parseAddr(s string) (transport.PeerAddress, error) {
	f := strings.Fields(s)
	if len(f) != 3 {
		return transport.PeerAddress{}, fmt.Errorf("address line %q", s)
	}
	id, err1 := strconv.ParseUint(f[0], 16, 64)
	inc, err2 := strconv.ParseUint(f[1], 16, 64)
	blob, err3 := hex.DecodeString(f[2])
	if err := errors.Join(err1, err2, err3); err != nil {
		return transport.PeerAddress{}, err
	}
	return transport.PeerAddress{ID: transport.InstanceID(id), Incarnation: inc, Blob: blob}, nil
}

// childProc is a peer transport in a child process (childPeer).
type childProc struct {
	addr   transport.PeerAddress
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *strings.Builder
	exited chan struct{}
}

// startChild starts a child peer, registers it on a (eager) and hands it a's address; it returns
// once the child's "ready" frame arrived at a.
func startChild(t *testing.T, a node) *childProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=peer")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &childProc{cmd: cmd, stdin: stdin, stderr: &strings.Builder{}, exited: make(chan struct{})}
	cmd.Stderr = c.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); close(c.exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-c.exited
	})
	lines := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(stdout).ReadString('\n')
		lines <- l
	}()
	var line string
	select {
	case line = <-lines:
	case <-time.After(wait):
		t.Fatalf("the child printed no address; stderr:\n%s", c.stderr.String())
	}
	if c.addr, err = parseAddr(strings.TrimSpace(line)); err != nil {
		t.Fatalf("child said %q: %v; stderr:\n%s", line, err, c.stderr.String())
	}
	if err := a.AddPeer(testCtx(t), c.addr); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintln(stdin, formatAddr(a.addr())); err != nil {
		t.Fatal(err)
	}
	if f := a.h.waitFrames(t, 1)[0]; f.from != c.addr.ID || string(f.frame) != "ready" {
		t.Fatalf("from the child: %q from %016x", f.frame, uint64(f.from))
	}
	return c
}

// TestKilledPeerReportedDown: a peer process killed with SIGKILL is reported through
// Host.PeerDown within a bounded time, with an error wrapping ErrPeerUnreachable; sends to it then
// fail instead of hanging, and the transport goes on serving other peers.
func TestKilledPeerReportedDown(t *testing.T) {
	a := newNode(t, func(c *Config) { c.EagerEndpoints = true })
	child := startChild(t, a)
	if err := a.Send(testCtx(t), child.addr.ID, []byte("still there?")); err != nil {
		t.Fatalf("send to the live child: %v", err)
	}
	if err := child.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	<-child.exited
	d := a.h.waitDown(t, child.addr.ID)
	t.Logf("PeerDown %v after SIGKILL: %v", time.Since(killed).Round(time.Millisecond), d.err)
	if !errors.Is(d.err, transport.ErrPeerUnreachable) {
		t.Fatalf("PeerDown error %v does not wrap ErrPeerUnreachable", d.err)
	}
	if err := a.Send(testCtx(t), child.addr.ID, []byte("anyone?")); err == nil {
		// The send may be taken by a fresh endpoint before UCX notices the peer is gone; the
		// failure must then surface as another PeerDown, not as a hang.
		a.h.waitDown(t, child.addr.ID)
	} else if !errors.Is(err, transport.ErrPeerUnreachable) {
		t.Fatalf("send to the dead child: %v", err)
	}
	// Other peers are unaffected.
	b := newNode(t, nil)
	link(t, a, b)
	if err := a.Send(testCtx(t), b.h.id, []byte("alive")); err != nil {
		t.Fatal(err)
	}
	b.h.waitFrames(t, 1)
}

// TestStoppedPeerSendTimesOut: sends to a peer process that stopped reading (SIGSTOP) end with the
// context's error once the kernel's and UCX's buffers are full — even for a caller without a
// deadline (SendTimeout) — instead of hanging; after SIGCONT the peer is still served.
func TestStoppedPeerSendTimesOut(t *testing.T) {
	a := newNode(t, func(c *Config) { c.EagerEndpoints = true; c.SendTimeout = 500 * time.Millisecond })
	child := startChild(t, a)
	if err := child.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer child.cmd.Process.Signal(syscall.SIGCONT)
	frame := make([]byte, 512<<10)
	var err error
	sent := 0
	for ; sent < 4096; sent++ { // 2 GiB: far beyond any socket buffer
		if err = a.Send(context.Background(), child.addr.ID, frame); err != nil {
			break
		}
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("after %d frames of %d bytes to a stopped peer: %v, want a deadline error", sent, len(frame), err)
	}
	t.Logf("frame %d to the stopped peer timed out: %v", sent+1, err)
	if err := child.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := a.Send(testCtx(t), child.addr.ID, []byte("awake?")); err != nil {
		t.Fatalf("send after SIGCONT: %v", err)
	}
	select {
	case d := <-a.h.downs:
		t.Fatalf("PeerDown for a peer that only paused: %v", d.err)
	default:
	}
}

// TestClosedPeerSaysGoodbye: a peer process that closes its transport and exits is reported
// through Host.PeerDown as departed (wrapping ErrPeerUnreachable, naming the close), with no
// warning about a failed endpoint; a send to it afterwards fails at once with ErrPeerUnreachable
// instead of dialling a worker that is gone.
func TestClosedPeerSaysGoodbye(t *testing.T) {
	a := newNode(t, func(c *Config) { c.EagerEndpoints = true })
	child := startChild(t, a)
	if err := a.Send(testCtx(t), child.addr.ID, []byte("before the goodbye")); err != nil {
		t.Fatal(err)
	}
	if err := child.stdin.Close(); err != nil { // the child returns and its deferred Close runs
		t.Fatal(err)
	}
	d := a.h.waitDown(t, child.addr.ID)
	if !errors.Is(d.err, transport.ErrPeerUnreachable) || !strings.Contains(d.err.Error(), "closed its transport") {
		t.Fatalf("PeerDown error %v: want a departure wrapping ErrPeerUnreachable", d.err)
	}
	select {
	case <-child.exited:
	case <-time.After(wait):
		t.Fatalf("the child did not exit after its Close; stderr:\n%s", child.stderr.String())
	}
	start := time.Now()
	err := a.Send(testCtx(t), child.addr.ID, []byte("anyone?"))
	if !errors.Is(err, transport.ErrPeerUnreachable) {
		t.Fatalf("send to the departed child: %v", err)
	}
	t.Logf("send to the departed child failed after %v: %v", time.Since(start).Round(time.Microsecond), err)
	// Give a late endpoint error time to arrive, then check it was not taken for a failure.
	time.Sleep(200 * time.Millisecond)
	logs := a.h.logBuf.String()
	if strings.Contains(logs, "level=WARN") {
		t.Fatalf("a peer that said goodbye left warnings:\n%s", logs)
	}
	select {
	case d := <-a.h.downs:
		t.Fatalf("a second PeerDown for the departed child: %v", d.err)
	default:
	}
}
