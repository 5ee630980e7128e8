//go:build cgo && linux

package ucx

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// unknownUCXSetting is a UCX_ variable no release knows: UCX warns about it when the first
// worker is created, which gives the test a UCX log line on demand.
const unknownUCXSetting = "UCX_VELO_TEST_NO_SUCH_SETTING"

// childLogLines creates a context and a worker, so UCX logs its warning about the unknown
// variable, and prints one line of its own on standard output.
func childLogLines() error {
	c, err := NewContext(ContextConfig{TLS: testTLS})
	if err != nil {
		return err
	}
	defer c.Close()
	w, err := c.NewWorker()
	if err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	fmt.Println("child output")
	return nil
}

// runLogLines runs the child with env and returns its standard output and error apart.
func runLogLines(t *testing.T, env ...string) (stdout, stderr string) {
	t.Helper()
	cmd := childCommand(t, "log-lines", append([]string{unknownUCXSetting + "=1", "-UCX_LOG_FILE", "-UCX_WARN_UNUSED_ENV_VARS"}, env...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	require.NoError(t, cmd.Run(), "stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	return out.String(), errOut.String()
}

// TestUCXLogLinesGoToStandardError: UCX prints its log lines on standard output by default, in
// the middle of whatever the program prints there (a peer that went away makes it print
// "connect(...) failed" lines; a harness reading JSON answers from a worker's standard output
// read one of those instead of its answer and fell out of step). The engine sends them to
// standard error unless the user chose a place with UCX_LOG_FILE.
func TestUCXLogLinesGoToStandardError(t *testing.T) {
	stdout, stderr := runLogLines(t)
	assert.Equal(t, "child output\n", stdout, "only the program's own output on standard output")
	assert.Equal(t, 1, strings.Count(stderr, unknownUCXSetting), "UCX's warning is on standard error, once:\n%s", stderr)
	assert.Contains(t, stderr, "UCX WARN", "in UCX's form, with its level")

	t.Run("UCX_LOG_FILE is the user's choice", func(t *testing.T) {
		// UCX's own handler prints it there (no stdout here: C's buffered stdout is not flushed
		// when a Go program exits, so the line would not be seen).
		stdout, stderr := runLogLines(t, "UCX_LOG_FILE=stderr")
		assert.Equal(t, "child output\n", stdout)
		assert.Equal(t, 1, strings.Count(stderr, unknownUCXSetting), "printed once, by UCX:\n%s", stderr)
		assert.NotContains(t, stderr, "UCX WARN", "UCX's own form pads the level:\n%s", stderr)
	})
	t.Run("UCX_LOG_LEVEL=error hides the warning", func(t *testing.T) {
		stdout, stderr := runLogLines(t, "UCX_LOG_LEVEL=error")
		assert.Equal(t, "child output\n", stdout)
		assert.NotContains(t, stderr, unknownUCXSetting, "a level UCX would not print is not printed")
	})
}

// childRemovedHandler sends active messages to a handler, removes it, sends more, and prints
// how many of the later ones the receiving engine counted as dropped.
func childRemovedHandler() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	a, err := NewEngine(ctx, EngineConfig{Name: "a", Logger: quiet, Context: ContextConfig{TLS: testTLS}})
	if err != nil {
		return err
	}
	defer a.Close(ctx)
	b, err := NewEngine(ctx, EngineConfig{Name: "b", Logger: quiet, Context: ContextConfig{TLS: testTLS}})
	if err != nil {
		return err
	}
	defer b.Close(ctx)
	got := make(chan struct{}, 1)
	if err := b.HandleAM(5, func(AMMessage) { got <- struct{}{} }); err != nil {
		return err
	}
	ab, err := a.Connect(ctx, b.Address(), ConnectOptions{})
	if err != nil {
		return err
	}
	if err := ab.SendAM(ctx, 5, []byte("first")); err != nil {
		return err
	}
	<-got
	if err := b.HandleAM(5, nil); err != nil {
		return err
	}
	const later = 3
	for range later {
		if err := ab.SendAM(ctx, 5, []byte("after removal")); err != nil {
			return err
		}
	}
	dropped := b.metrics.amDropped.WithLabelValues("no_handler")
	for testutil.ToFloat64(dropped) < later {
		if ctx.Err() != nil {
			return fmt.Errorf("%v of %d messages to the removed handler counted as dropped", testutil.ToFloat64(dropped), later)
		}
		time.Sleep(time.Millisecond) // polling a counter under a deadline
	}
	select {
	case <-got:
		return errors.New("a removed handler ran")
	default:
	}
	fmt.Printf("dropped %v\n", testutil.ToFloat64(dropped))
	return nil
}

// TestRemovedHandlerDropsQuietly: messages that arrive for a removed handler (a peer's last
// frames while a transport closes) are dropped and counted by the engine; UCX does not warn
// about each ("no registered callback for that id"), as it did when the engine took UCX's
// callback away too.
func TestRemovedHandlerDropsQuietly(t *testing.T) {
	cmd := childCommand(t, "removed-handler", "-UCX_LOG_FILE", "-UCX_LOG_LEVEL")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	require.NoError(t, cmd.Run(), "stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	assert.Equal(t, "dropped 3\n", out.String())
	assert.NotContains(t, errOut.String(), "no registered callback")
}
