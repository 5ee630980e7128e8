package discovery

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func fsBackend(t *testing.T, dir string) *Filesystem {
	t.Helper()
	f, err := NewFilesystem(FilesystemConfig{Dir: dir, Cluster: "c", TTL: 300 * time.Millisecond, Poll: 20 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	return f
}

func next(t *testing.T, ch <-chan Event) Event {
	t.Helper()
	select {
	case ev, ok := <-ch:
		require.True(t, ok, "the watch ended")
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5 s")
		return Event{}
	}
}

// TestFilesystemJoinUpdateRestartLeave: a watcher sees a member join, drain, restart under the
// same name with a new instance, and leave when it closes; its own record is never delivered.
func TestFilesystemJoinUpdateRestartLeave(t *testing.T) {
	dir := t.TempDir()
	w := fsBackend(t, dir)
	require.NoError(t, w.Publish(context.Background(), Record{Name: "watcher", ID: 1, Incarnation: 1}))
	events, err := w.Watch(context.Background())
	require.NoError(t, err)

	m := fsBackend(t, dir)
	require.NoError(t, m.Publish(context.Background(), Record{Name: "node-a", ID: 2, Incarnation: 7, Info: []byte(`{"x":1}`)}))
	ev := next(t, events)
	assert.Equal(t, Joined, ev.Kind)
	assert.Equal(t, "node-a", ev.Record.Name)
	assert.Equal(t, uint64(2), ev.Record.ID)

	require.NoError(t, m.Publish(context.Background(), Record{Name: "node-a", ID: 2, Incarnation: 7, Info: []byte(`{"x":1}`), Draining: true}))
	ev = next(t, events)
	assert.Equal(t, Updated, ev.Kind)
	assert.True(t, ev.Record.Draining)

	require.NoError(t, m.Close())
	ev = next(t, events)
	assert.Equal(t, Left, ev.Kind)

	again := fsBackend(t, dir)
	require.NoError(t, again.Publish(context.Background(), Record{Name: "node-a", ID: 3, Incarnation: 8}))
	ev = next(t, events)
	assert.Equal(t, Joined, ev.Kind, "after a clean leave the name comes back as a join")
	// A restart without a clean leave: the same name, another instance, before the TTL passed.
	fresh := fsBackend(t, dir)
	require.NoError(t, fresh.Publish(context.Background(), Record{Name: "node-a", ID: 4, Incarnation: 9}))
	ev = next(t, events)
	assert.Equal(t, Restarted, ev.Kind)
	assert.Equal(t, uint64(3), ev.Previous.ID)
	assert.Equal(t, uint64(4), ev.Record.ID)
}

// TestFilesystemStaleFileIsGone: a file whose heartbeat is older than its TTL (its owner was
// killed) counts as gone, and a watcher that started after it never sees it.
func TestFilesystemStaleFileIsGone(t *testing.T) {
	dir := t.TempDir()
	w := fsBackend(t, dir)
	events, err := w.Watch(context.Background())
	require.NoError(t, err)
	m := fsBackend(t, dir)
	require.NoError(t, m.Publish(context.Background(), Record{Name: "killed", ID: 5, Incarnation: 1}))
	assert.Equal(t, Joined, next(t, events).Kind)
	// Stop its heartbeat the way SIGKILL would: no Close, no removal.
	close(m.stop)
	m.wg.Wait()
	m.closed = true
	begun := time.Now()
	ev := next(t, events)
	assert.Equal(t, Left, ev.Kind)
	assert.Less(t, time.Since(begun), 2*time.Second)
	_, err = os.Stat(filepath.Join(dir, "c", "killed.json"))
	require.NoError(t, err, "the stale file is still there, and ignored")

	late := fsBackend(t, dir)
	lateEvents, err := late.Watch(context.Background())
	require.NoError(t, err)
	select {
	case ev := <-lateEvents:
		t.Fatalf("a stale file was delivered: %+v", ev)
	case <-time.After(200 * time.Millisecond):
	}
}

func TestFilesystemRefusals(t *testing.T) {
	_, err := NewFilesystem(FilesystemConfig{})
	assert.ErrorContains(t, err, "Dir is empty")
	_, err = NewFilesystem(FilesystemConfig{Dir: t.TempDir(), Cluster: "a/b"})
	assert.ErrorContains(t, err, "no slashes")
	f := fsBackend(t, t.TempDir())
	require.NoError(t, f.Close())
	assert.ErrorIs(t, f.Publish(context.Background(), Record{ID: 1}), ErrClosed)
}
