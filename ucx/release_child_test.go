//go:build cgo && linux

package ucx

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sharedProcessRounds is how often the child closes a receiving engine under load.
const sharedProcessRounds = 5

// childSharedProcess runs two engines in one process and, in each round, closes the
// receiving one while the other has 50 MiB of large eager sends to it in flight: the
// shape that trips a wireup assertion on UCX 1.13. It prints the engine's warnings, then
// "rounds N".
func childSharedProcess() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	payload := make([]byte, 1<<20-16)
	for round := 0; round < sharedProcessRounds; round++ {
		a, err := NewEngine(ctx, EngineConfig{Name: "a", Logger: log, MaxEagerSize: 1 << 20, Context: ContextConfig{TLS: testTLS}})
		if err != nil {
			return err
		}
		b, err := NewEngine(ctx, EngineConfig{Name: "b", Logger: log, Context: ContextConfig{TLS: testTLS}})
		if err != nil {
			return err
		}
		if err := b.HandleAM(3, func(AMMessage) {}); err != nil {
			return err
		}
		ab, err := a.Connect(ctx, b.Address(), ConnectOptions{})
		if err != nil {
			return err
		}
		var ops []*Op
		for i := 0; i < 50; i++ {
			ops = append(ops, ab.SendAMAsync(ctx, 3, nil, [][]byte{payload}, SendOptions{}))
		}
		if err := b.Close(ctx); err != nil {
			return fmt.Errorf("round %d: closing the receiver: %w", round, err)
		}
		for i, o := range ops {
			if err := o.Wait(ctx); err != nil && errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("round %d: send %d never finished", round, i)
			}
		}
		if err := a.Close(ctx); err != nil {
			return fmt.Errorf("round %d: closing the sender: %w", round, err)
		}
	}
	fmt.Print(logs.String())
	fmt.Printf("rounds %d\n", sharedProcessRounds)
	return nil
}

// TestTwoEnginesOneProcess: on a release without 1.13's wireup fault, a process may hold
// several engines and close a receiving one under load, and no warning is logged; on 1.13
// the engine warns once when a second one starts (the load is not run there: it aborts
// about as often as not).
func TestTwoEnginesOneProcess(t *testing.T) {
	traits := traitsOf(Version())
	if traits.sharedProcessWireup {
		out := runSharedProcessWarning(t)
		assert.Contains(t, out, "2 UCX engines in one process on UCX 1.13")
		assert.Equal(t, 1, strings.Count(out, "engines in one process"), "one warning per process")
		t.Skipf("UCX %s: closing one of two engines in a process under load trips a wireup assertion (docs/ucx.md); the warning is checked", Version().String)
	}
	cmd := childCommand(t, "shared-process")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the child with two engines failed:\n%s", out)
	assert.Contains(t, string(out), fmt.Sprintf("rounds %d", sharedProcessRounds))
	assert.NotContains(t, string(out), "engines in one process", "no warning on a release without the fault")
}

// runSharedProcessWarning starts engines in a fresh child (the warning is once per process)
// and returns what it logged.
func runSharedProcessWarning(t *testing.T) string {
	t.Helper()
	cmd := childCommand(t, "two-engines")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	return strings.TrimSpace(string(out))
}

// childTwoEngines starts three engines, prints their warnings and closes them.
func childTwoEngines() error {
	ctx := context.Background()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var engines []*Engine
	for _, name := range []string{"a", "b", "c"} {
		e, err := NewEngine(ctx, EngineConfig{Name: name, Logger: log, Context: ContextConfig{TLS: testTLS}})
		if err != nil {
			return err
		}
		engines = append(engines, e)
	}
	for _, e := range engines {
		e.Close(ctx)
	}
	_, err := os.Stdout.Write(logs.Bytes())
	return err
}
