//go:build cgo && linux

package ucx

import (
	"context"
	"crypto/sha256"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"
)

// testTLS is pinned in code; UCX_TLS in the environment wins (the suites run unchanged
// on InfiniBand when UCX_TLS and UCX_NET_DEVICES are set).
const testTLS = "tcp"

// testTimeout bounds every wait in a test: generous for a loaded 2-core machine.
const testTimeout = 60 * time.Second

func testContext(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

func newTestEngine(t testing.TB, name string, mod func(*EngineConfig)) *Engine {
	t.Helper()
	cfg := EngineConfig{Name: name, Context: ContextConfig{TLS: testTLS}}
	if mod != nil {
		mod(&cfg)
	}
	e, err := NewEngine(testContext(t), cfg)
	if err != nil {
		t.Fatalf("NewEngine %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := e.Close(context.Background()); err != nil {
			t.Errorf("Close %s: %v", name, err)
		}
	})
	return e
}

// enginePair returns two engines and a connection from a to b.
func enginePair(t testing.TB, mod func(*EngineConfig)) (a, b *Engine, ab *Conn) {
	t.Helper()
	a = newTestEngine(t, "a", mod)
	b = newTestEngine(t, "b", mod)
	ab, err := a.Connect(testContext(t), b.Address(), ConnectOptions{})
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	return a, b, ab
}

// allocFilled maps n bytes and fills them with a reproducible pattern.
func allocFilled(t testing.TB, n int, seed uint64) *Memory {
	t.Helper()
	m, err := AllocMemory(n, MemoryOptions{})
	if err != nil {
		t.Fatalf("AllocMemory(%d): %v", n, err)
	}
	t.Cleanup(func() { m.Free() })
	fill(m.Bytes(), seed)
	return m
}

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := 0; i+8 <= len(b); i += 8 {
		v := r.Uint64()
		for j := 0; j < 8; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	for i := len(b) &^ 7; i < len(b); i++ {
		b[i] = byte(r.Uint32())
	}
}

func digest(b []byte) [32]byte { return sha256.Sum256(b) }

// lowPair is two workers of one context on the test's locked thread.
type lowPair struct {
	ctx  *Context
	a, b *Worker
	ab   *Endpoint
}

func newLowPair(t testing.TB) *lowPair {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	ctx, err := NewContext(ContextConfig{TLS: testTLS})
	if err != nil {
		t.Fatal(err)
	}
	p := &lowPair{ctx: ctx}
	if p.a, err = ctx.NewWorker(); err != nil {
		t.Fatal(err)
	}
	if p.b, err = ctx.NewWorker(); err != nil {
		t.Fatal(err)
	}
	addr, err := p.b.Address()
	if err != nil {
		t.Fatal(err)
	}
	if p.ab, err = p.a.Connect(addr, EndpointOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if r, _ := p.ab.Close(CloseForce); r != nil {
			p.until(t, func() bool { return r.Done() }, nil)
		}
		p.a.Close()
		p.b.Close()
		ctx.Close()
	})
	return p
}

// until progresses both workers until cond holds, delivering events to fn.
func (p *lowPair) until(t testing.TB, cond func() bool, fn func(w *Worker, ev *Event)) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not reached within %v", testTimeout)
		}
		for _, w := range []*Worker{p.a, p.b} {
			w.Progress()
			w.Poll(func(ev *Event) {
				if fn != nil {
					fn(w, ev)
				}
			})
		}
	}
}

// Child processes: the test binary re-executes itself with ucxTestChild set to a role.
const childEnv = "UCX_TEST_CHILD"

// childCommand builds the child's command. env entries "NAME=value" are added; "-NAME"
// removes NAME from the inherited environment.
func childCommand(t testing.TB, role string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildProcess$", "-test.v=false")
	drop := map[string]bool{}
	for _, e := range env {
		if strings.HasPrefix(e, "-") {
			drop[e[1:]] = true
		}
	}
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !drop[name] {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, childEnv+"="+role)
	for _, e := range env {
		if !strings.HasPrefix(e, "-") {
			cmd.Env = append(cmd.Env, e)
		}
	}
	return cmd
}

// guardEnforced reports whether the linked UCX carries velo's guard patch set (the static build of
// make ucx-static; Debian's UCX does not). There software-emulated RMA (ucp_get/put/atomics over
// tcp) is refused by the target: a GET or a fetching atomic completes with UCS_ERR_REJECTED, a PUT
// or a posted atomic completes and writes nothing, and the process-wide counters move. The tests
// that record what a stock UCX does there assert that refusal instead.
func guardEnforced(t testing.TB) bool {
	t.Helper()
	g, err := SoftwareRMAGuard()
	if err != nil {
		t.Fatalf("SoftwareRMAGuard: %v", err)
	}
	return g.Enforced
}

// guardRefused returns the guard's refusal counters of this process (zero without the guard).
func guardRefused(t testing.TB) GuardRefusals {
	t.Helper()
	g, err := SoftwareRMAGuard()
	if err != nil {
		t.Fatalf("SoftwareRMAGuard: %v", err)
	}
	return g.Refused
}

// softwareRMARefused reports whether RMA over c is software-emulated (no hardware-keyed lanes,
// as over tcp) on a UCX whose guard refuses it: then a direct GET or PUT over c cannot move a
// byte, and a test of the direct path asserts the refusal instead of the data.
func softwareRMARefused(t testing.TB, c *Conn) bool {
	t.Helper()
	if !guardEnforced(t) {
		return false
	}
	info, err := c.Info(testContext(t))
	if err != nil {
		t.Fatalf("Conn.Info: %v", err)
	}
	return !rmaLanesKeyed(info)
}

// skipIfReplyBroken skips tests that need reply-flagged active messages (the guarded GET)
// where this UCX would abort on them (protocol v2 on UCX 1.13, see NewContext).
func skipIfReplyBroken(t testing.TB, e *Engine) {
	t.Helper()
	if e.ctx.replyBroken {
		t.Skip("protocol v2 on UCX 1.13: reply-flagged AMs are refused, so the guarded GET is unavailable (docs/ucx.md)")
	}
}
