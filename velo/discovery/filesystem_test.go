package discovery

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
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

// writeRecord writes a member's file the way its heartbeat does, with the given heartbeat.
func writeRecord(t *testing.T, dir string, r Record, beat time.Time, ttl time.Duration) {
	t.Helper()
	b, err := json.Marshal(entry{Record: r, Heartbeat: beat, TTL: ttl})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, fileName(r.Name)), b, 0o644))
}

// TestFilesystemPollSkipsUnchangedFiles: a poll reads again only the files that changed since it
// last read them. Over 500 idle members, a poll after the first allocates under 1 KiB per member
// (the directory listing and a stat each) and under a third of a poll that reads and decodes every
// record, and still sees a member drain (a rewrite) and one leave (its file removed).
func TestFilesystemPollSkipsUnchangedFiles(t *testing.T) {
	const members = 500
	f := fsBackend(t, t.TempDir())
	now := time.Now()
	info := []byte(`{"id":"00000000000000ff","incarnation":"0000000000000001","addresses":{"tcp":"AQIDBAUGBwgJCgsMDQ4PEA==","ucx":"` + strings.Repeat("A", 160) + `"}}`)
	for i := range members {
		writeRecord(t, f.dir, Record{Name: fmt.Sprintf("m%d", i), ID: uint64(i + 1), Incarnation: 1, Info: info}, now, time.Hour)
	}
	known, files := map[string]entry{}, map[string]stamped{}
	require.Len(t, f.scan(known, files), members, "the first poll: every member joins")

	allocated := func(files map[string]stamped) float64 { // bytes per member of one poll
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		events := f.scan(known, files)
		runtime.ReadMemStats(&after)
		require.Empty(t, events)
		return float64(after.TotalAlloc-before.TotalAlloc) / members
	}
	skipping := allocated(files)
	reading := allocated(map[string]stamped{}) // every record read and decoded, as each poll did
	t.Logf("a poll of %d unchanged members allocated %.0f bytes per member (%.0f reading every record)", members, skipping, reading)
	assert.Less(t, skipping, 1024.0, "a poll read unchanged records again")
	assert.Less(t, skipping, reading/3, "a poll read unchanged records again")

	// A rewrite with other content and a removal are seen at the next poll. The rewrite's mtime
	// is moved on, as a rename's would be on any file system.
	writeRecord(t, f.dir, Record{Name: "m7", ID: 8, Incarnation: 1, Info: info, Draining: true}, now, time.Hour)
	require.NoError(t, os.Chtimes(filepath.Join(f.dir, "m7.json"), now, now.Add(time.Second)))
	require.NoError(t, os.Remove(filepath.Join(f.dir, "m9.json")))
	events := f.scan(known, files)
	require.Len(t, events, 2)
	kinds := map[string]EventKind{}
	for _, ev := range events {
		kinds[ev.Record.Name] = ev.Kind
	}
	assert.Equal(t, map[string]EventKind{"m7": Updated, "m9": Left}, kinds)
}

// TestFilesystemCoarseTimestampsKeepMembers: on a file system whose timestamps are too coarse to
// show a heartbeat's rewrite (same mtime, same size), a live member is not taken for stale: its
// cached record is read again once its heartbeat is half its TTL old, and the rewrite found.
func TestFilesystemCoarseTimestampsKeepMembers(t *testing.T) {
	const ttl = 400 * time.Millisecond
	f := fsBackend(t, t.TempDir())
	r := Record{Name: "live", ID: 2, Incarnation: 1}
	first := time.Now()
	writeRecord(t, f.dir, r, first, ttl)
	path := filepath.Join(f.dir, "live.json")
	fi, err := os.Stat(path)
	require.NoError(t, err)
	known, files := map[string]entry{}, map[string]stamped{}
	require.Len(t, f.scan(known, files), 1)
	// The member refreshes its file every TTL/3; the file system keeps the old mtime.
	for time.Since(first) < 2*ttl {
		time.Sleep(ttl / 4)
		writeRecord(t, f.dir, r, time.Now(), ttl)
		require.NoError(t, os.Chtimes(path, fi.ModTime(), fi.ModTime()))
		assert.Empty(t, f.scan(known, files), "a live member whose file's stamp did not move was reported")
	}
}
