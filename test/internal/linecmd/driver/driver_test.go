package driver

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/test/internal/linecmd"
)

// childEnv names what the test binary does when it runs as the driven program: the tests start
// this very binary again, a real process speaking the protocol on its standard input and output.
const childEnv = "VELO_DRIVER_TEST_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		child(mode)
		return
	}
	os.Exit(m.Run())
}

// child is the driven program. mode "serve" says it is ready and answers commands; "mute" says
// nothing; "hello" starts with a line that is not the ready line; "crash" exits at once.
func child(mode string) {
	out := json.NewEncoder(os.Stdout)
	switch mode {
	case "mute":
		time.Sleep(time.Minute)
		os.Exit(0)
	case "hello":
		_ = out.Encode(map[string]any{"hello": true})
	case "crash":
		fmt.Fprintln(os.Stderr, "cannot open the device: permission denied")
		os.Exit(2)
	default:
		_ = out.Encode(map[string]any{"ready": true, "at": 42})
	}
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		cmd, arg, _ := strings.Cut(sc.Text(), " ")
		switch cmd {
		case "echo":
			_ = out.Encode(map[string]any{"echo": arg})
		case "tls":
			_ = out.Encode(map[string]any{"tls": os.Getenv("UCX_TLS")})
		case "getenv":
			v, ok := os.LookupEnv(arg)
			_ = out.Encode(map[string]any{"value": v, "set": ok})
		case "noise":
			fmt.Println("[1.2] [vm:1:0] sock.c:355 UCX ERROR connect failed")
			_ = out.Encode(map[string]any{"echo": arg})
		case "slow":
			d, _ := time.ParseDuration(arg)
			time.Sleep(d)
			_ = out.Encode(map[string]any{"slow": arg})
		case "fail":
			_ = out.Encode(map[string]any{"error": "no such handle", "handle": arg})
		case "flood":
			for i := range 1000 {
				_ = out.Encode(map[string]any{"flood": i})
			}
		case "die":
			fmt.Fprintln(os.Stderr, "fatal: the owner's region went away")
			os.Exit(7)
		case "quit":
			_ = out.Encode(map[string]any{"closed": true})
			os.Exit(0)
		}
	}
}

func command(mode string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+mode)
	return cmd
}

func serve(t *testing.T) *Proc {
	t.Helper()
	p, err := Start("child", command("serve"), 30*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { p.Close(5 * time.Second) })
	return p
}

// TestCommandsGetTheirAnswers: the ready line is kept, each command gets its own answer, a line
// that is not JSON goes to Stderr marked, and an error answer is an error from OK and Decode
// (Decode still fills its struct).
func TestCommandsGetTheirAnswers(t *testing.T) {
	p := serve(t)
	assert.Equal(t, true, p.Ready["ready"])
	assert.Equal(t, 42.0, p.Ready["at"])
	for _, w := range []string{"one", "two", "three"} {
		r, err := p.Do("noise "+w, 10*time.Second)
		require.NoError(t, err)
		assert.Equal(t, w, r["echo"])
	}
	assert.Contains(t, p.Stderr.String(), "(stdout, not an answer) [1.2] [vm:1:0] sock.c:355 UCX ERROR connect failed")

	r, err := p.OK("fail h1", 10*time.Second)
	require.EqualError(t, err, "child: fail: no such handle")
	assert.Equal(t, "h1", r["handle"])
	var a struct{ Handle string }
	require.EqualError(t, p.Decode("fail h2", 10*time.Second, &a), "child: fail: no such handle")
	assert.Equal(t, "h2", a.Handle)
	var e struct{ Echo string }
	require.NoError(t, p.Decode("echo four", 10*time.Second, &e))
	assert.Equal(t, "four", e.Echo)
}

// TestUCXTLS: a driven program gets UCX_TLS=tcp unless its command's environment names
// transports (UCX_TLS=sm,self stays sm,self) or this process does (inherited as it is).
func TestUCXTLS(t *testing.T) {
	tlsOf := func(cmd *exec.Cmd) string {
		p, err := Start("child", cmd, 30*time.Second)
		require.NoError(t, err)
		defer p.Close(5 * time.Second)
		r, err := p.Do("tls", 10*time.Second)
		require.NoError(t, err)
		return r["tls"].(string)
	}
	t.Setenv("UCX_TLS", "")
	require.NoError(t, os.Unsetenv("UCX_TLS"))
	assert.Equal(t, "tcp", tlsOf(command("serve")), "no UCX_TLS anywhere")
	own := command("serve")
	own.Env = append(own.Env, "UCX_TLS=sm,self")
	assert.Equal(t, "sm,self", tlsOf(own), "the command's own UCX_TLS")
	t.Setenv("UCX_TLS", "rc,self")
	assert.Equal(t, "rc,self", tlsOf(command("serve")), "this process's UCX_TLS")
}

// TestSameHostSwitch: this process's VELO_TEST_SAME_HOST reaches a driven program even when
// its command's environment was built without it, and a value the command sets itself wins.
func TestSameHostSwitch(t *testing.T) {
	switchOf := func(cmd *exec.Cmd) (string, bool) {
		p, err := Start("child", cmd, 30*time.Second)
		require.NoError(t, err)
		defer p.Close(5 * time.Second)
		r, err := p.Do("getenv "+linecmd.SameHostEnv, 10*time.Second)
		require.NoError(t, err)
		return r["value"].(string), r["set"].(bool)
	}
	scratch := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = []string{childEnv + "=serve"}
		return cmd
	}
	t.Setenv(linecmd.SameHostEnv, "")
	require.NoError(t, os.Unsetenv(linecmd.SameHostEnv))
	_, set := switchOf(scratch())
	assert.False(t, set, "the switch appeared from nowhere")

	t.Setenv(linecmd.SameHostEnv, "1")
	v, set := switchOf(scratch())
	assert.True(t, set, "the switch did not reach a program whose environment was built from scratch")
	assert.Equal(t, "1", v)
	own := scratch()
	own.Env = append(own.Env, linecmd.SameHostEnv+"=0")
	v, _ = switchOf(own)
	assert.Equal(t, "0", v, "the command's own value must win")
	assert.Equal(t, linecmd.SameHostEnv, sameHostEnv, "the driver passes another variable than the programs read")
}

// TestLateAnswerIsNotTakenByTheNextCommand: a command that gave up waiting still owes its
// answer; the next command drops it and reads its own.
func TestLateAnswerIsNotTakenByTheNextCommand(t *testing.T) {
	p := serve(t)
	_, err := p.Do("slow 1s", 100*time.Millisecond)
	require.ErrorIs(t, err, ErrNoAnswer)
	assert.EqualError(t, err, "child did not answer within 100ms")
	r, err := p.Do("echo next", 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, "next", r["echo"], "the late answer of slow was taken for next's")
}

// TestDeathMidCommand: a program that exits instead of answering gives an error that says so,
// with its exit status and its last words, at once rather than at the timeout; so does every
// command after it.
func TestDeathMidCommand(t *testing.T) {
	p := serve(t)
	start := time.Now()
	_, err := p.Do("die", time.Minute)
	require.Error(t, err)
	assert.Less(t, time.Since(start), 30*time.Second, "the error waited for the timeout")
	assert.Contains(t, err.Error(), "child exited (exit status 7) without answering")
	assert.Contains(t, err.Error(), "fatal: the owner's region went away")
	assert.False(t, p.Alive())

	_, err = p.Do("echo after", time.Minute)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "child exited (exit status 7) before echo")
}

// TestLastAnswerBeforeExit: the answer a program writes just before it exits (quit's) is read,
// not lost with its pipe.
func TestLastAnswerBeforeExit(t *testing.T) {
	for range 20 {
		p := serve(t)
		r, err := p.Do("quit", 10*time.Second)
		require.NoError(t, err)
		assert.Equal(t, true, r["closed"])
		<-p.Exited()
		assert.Equal(t, 0, p.Cmd.ProcessState.ExitCode())
	}
}

// TestStartFailures: a program that never says it is ready, says something else first, or exits
// first gives an error naming it and why, and leaves no process behind.
func TestStartFailures(t *testing.T) {
	for _, c := range []struct{ mode, want string }{
		{"mute", "child did not answer within 500ms"},
		{"hello", `child: first line map[hello:true], want {"ready": true}`},
		{"crash", "child exited (exit status 2) without answering; its last words:\ncannot open the device: permission denied"},
	} {
		t.Run(c.mode, func(t *testing.T) {
			cmd := command(c.mode)
			p, err := Start("child", cmd, 500*time.Millisecond)
			require.Error(t, err)
			assert.Nil(t, p)
			assert.Contains(t, err.Error(), c.want)
			require.NotNil(t, cmd.ProcessState, "the process was not waited for")
		})
	}
	_, err := Start("nothing", exec.Command("/nonexistent/program"), time.Second)
	assert.ErrorContains(t, err, "starting nothing: fork/exec /nonexistent/program")
}

// TestNoGoroutineLeft: programs closed with answers nobody read (more than the reader holds),
// killed, stopped and closed, or exited on their own leave no goroutine of the driver behind.
func TestNoGoroutineLeft(t *testing.T) {
	before := runtime.NumGoroutine()
	for range 5 {
		p, err := Start("child", command("serve"), 30*time.Second)
		require.NoError(t, err)
		require.NoError(t, p.Send("flood"))
		p.Close(5 * time.Second)

		p, err = Start("child", command("serve"), 30*time.Second)
		require.NoError(t, err)
		require.NoError(t, p.Send("flood"))
		p.Kill()

		p, err = Start("child", command("serve"), 30*time.Second)
		require.NoError(t, err)
		p.Stop()
		p.Close(5 * time.Second) // resumed, then its standard input closed
		assert.Equal(t, 0, p.Cmd.ProcessState.ExitCode(), "a stopped program is resumed and exits")

		p, err = Start("child", command("serve"), 30*time.Second)
		require.NoError(t, err)
		_, _ = p.Do("die", 10*time.Second)
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		require.Failf(t, "goroutines left", "%d before, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}

// TestCommandsTakeTurns: commands from several goroutines each get their own answer.
func TestCommandsTakeTurns(t *testing.T) {
	p := serve(t)
	errs := make(chan error, 8)
	for i := range 8 {
		go func() {
			w := fmt.Sprint(i)
			r, err := p.Do("echo "+w, 10*time.Second)
			if err == nil && r["echo"] != w {
				err = fmt.Errorf("echo %s answered %v", w, r)
			}
			errs <- err
		}()
	}
	for range 8 {
		assert.NoError(t, <-errs)
	}
}
