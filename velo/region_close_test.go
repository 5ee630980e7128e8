package velo

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/rendezvous/rdma/rdmatest"
)

// logBuffer is a log sink tests read while the instance writes it.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

const regionsLeftLog = "velo: closing with pinned regions still allocated"

// A region is the application's memory, not a staged payload: StagedCounts leaves it out, and a
// Shutdown that finds one still allocated says so by name, before the registry reports the
// pinned memory it cannot unmap yet. Freed after Close, the region gives its memory back.
func TestShutdownNamesTheRegionsLeftToFree(t *testing.T) {
	var logs logBuffer
	owner := rdmaNode(t, rdmatest.NewFabric(), true, WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	g, err := owner.NewRegion(1 << 20)
	require.NoError(t, err)
	require.True(t, g.Pinned(), "the region is plain memory: %s", g.Reason())
	h, err := owner.StageRegion(tctx(t), g)
	require.NoError(t, err)
	slots, _ := owner.StagedCounts()
	assert.Equal(t, 1, slots, "a staging of a region is a staged payload")
	require.NoError(t, owner.Unref(tctx(t), h))
	slots, leases := owner.StagedCounts()
	assert.Zero(t, slots, "the region itself is not a staged payload")
	assert.Zero(t, leases)

	require.NoError(t, owner.Shutdown(tctx(t)))
	out := logs.String()
	require.Contains(t, out, regionsLeftLog)
	line := out[strings.Index(out, regionsLeftLog):]
	line = line[:strings.IndexByte(line, '\n')]
	assert.Contains(t, line, "Region.Free")
	assert.Contains(t, line, "application's")
	assert.Contains(t, line, "regions=1")
	assert.Contains(t, line, "bytes=1048576")
	if i := strings.Index(out, "pinned memory still in use"); i >= 0 {
		assert.Less(t, strings.Index(out, regionsLeftLog), i, "the registry's warning comes after the line that explains it")
	}

	g.Free()
	select {
	case <-g.Done():
	case <-time.After(testWait):
		t.Fatal("a region freed after Close never finished")
	}
	// rdmaNode's cleanup checks that the registry holds nothing any more.
}

// A Shutdown after every region was freed has nothing to say about regions.
func TestShutdownAfterTheRegionsWereFreedSaysNothingOfThem(t *testing.T) {
	var logs logBuffer
	owner := rdmaNode(t, rdmatest.NewFabric(), true, WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	for range 40 { // more than a sweep of the finished regions
		g, err := owner.NewRegion(64 << 10)
		require.NoError(t, err)
		_, err = owner.StageRegion(tctx(t), g)
		require.NoError(t, err)
		g.Free()
	}
	require.NoError(t, owner.Shutdown(tctx(t)))
	assert.NotContains(t, logs.String(), regionsLeftLog)
	assert.NotContains(t, logs.String(), "pinned memory still in use")
}
