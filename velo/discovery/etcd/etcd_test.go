package etcd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/discovery"
	"github.com/velo-go/velo/velo/discovery/etcd"
	"github.com/velo-go/velo/velo/discovery/etcd/etcdtest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func backend(t *testing.T, endpoints []string, cluster string) *etcd.Etcd {
	t.Helper()
	e, err := etcd.New(etcd.Config{Endpoints: endpoints, Cluster: cluster, TTL: 2 * time.Second, Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(func() { e.Close() })
	return e
}

func record(name string, id uint64) discovery.Record {
	return discovery.Record{Name: name, ID: id, Incarnation: id * 7, Info: json.RawMessage(`{"id":"1"}`), Started: time.Now()}
}

// next reads one event or fails after within.
func next(t *testing.T, ch <-chan discovery.Event, within time.Duration) discovery.Event {
	t.Helper()
	select {
	case ev, ok := <-ch:
		require.True(t, ok, "the watch ended")
		return ev
	case <-time.After(within):
		t.Fatalf("no membership event within %v", within)
	}
	return discovery.Event{}
}

// quietFor asserts no event arrives for d.
func quietFor(t *testing.T, ch <-chan discovery.Event, d time.Duration) {
	t.Helper()
	select {
	case ev := <-ch:
		t.Fatalf("unexpected event %s of %s", ev.Kind, ev.Record.Name)
	case <-time.After(d):
	}
}

func tctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestConfigErrorsNameTheFix(t *testing.T) {
	_, err := etcd.New(etcd.Config{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Endpoints")
	_, err = etcd.New(etcd.Config{Endpoints: []string{"http://127.0.0.1:1"}, Cluster: "a/b"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no slashes")
}

// TestPublishUnreachable: a first publish to an etcd nobody runs fails within its context and
// says what to check.
func TestPublishUnreachable(t *testing.T) {
	e := backend(t, []string{"http://127.0.0.1:1"}, "x")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	began := time.Now()
	err := e.Publish(ctx, record("a", 1))
	require.Error(t, err)
	assert.Less(t, time.Since(began), 5*time.Second)
	assert.Contains(t, err.Error(), "is etcd running and reachable")
}

// TestJoinUpdateRestartLeave: the whole life of a member as a watcher sees it, and the keys as
// an operator reads them with etcdctl.
func TestJoinUpdateRestartLeave(t *testing.T) {
	srv := etcdtest.Start(t)
	ep := []string{srv.Endpoint()}
	watcher := backend(t, ep, "life")
	require.NoError(t, watcher.Publish(tctx(t), record("watcher", 99)))
	events, err := watcher.Watch(tctx(t))
	require.NoError(t, err)

	a := backend(t, ep, "life")
	ra := record("a", 1)
	require.NoError(t, a.Publish(tctx(t), ra))
	ev := next(t, events, 5*time.Second)
	assert.Equal(t, discovery.Joined, ev.Kind)
	assert.Equal(t, uint64(1), ev.Record.ID)
	assert.WithinDuration(t, ra.Started, ev.Record.Started, time.Millisecond)

	out, err := srv.Ctl(tctx(t), "get", "--prefix", "/velo/clusters/life/members/")
	require.NoError(t, err, out)
	assert.Contains(t, out, "/velo/clusters/life/members/a")
	assert.Contains(t, out, "/velo/clusters/life/members/watcher")

	ra.Draining = true
	require.NoError(t, a.Publish(tctx(t), ra))
	ev = next(t, events, 5*time.Second)
	assert.Equal(t, discovery.Updated, ev.Kind)
	assert.True(t, ev.Record.Draining)

	// A new instance under the same name before the old one's lease ran out: a restart.
	a2 := backend(t, ep, "life")
	require.NoError(t, a2.Publish(tctx(t), record("a", 2)))
	ev = next(t, events, 5*time.Second)
	assert.Equal(t, discovery.Restarted, ev.Kind)
	assert.Equal(t, uint64(2), ev.Record.ID)
	assert.Equal(t, uint64(1), ev.Previous.ID)

	// The old instance closing revokes its own lease, which no longer holds the key.
	require.NoError(t, a.Close())
	quietFor(t, events, 500*time.Millisecond)

	// Close withdraws at once (the lease is revoked, not left to expire).
	began := time.Now()
	require.NoError(t, a2.Close())
	ev = next(t, events, 5*time.Second)
	assert.Equal(t, discovery.Left, ev.Kind)
	assert.Equal(t, "a", ev.Record.Name)
	assert.Less(t, time.Since(began), time.Second)
}

// TestLeaseExpiry: a member that stops keeping its lease alive (its process died) is seen to
// leave within the TTL; a late watcher sees only the members alive.
func TestLeaseExpiry(t *testing.T) {
	srv := etcdtest.Start(t)
	ep := []string{srv.Endpoint()}
	w := backend(t, ep, "expiry")
	events, err := w.Watch(tctx(t))
	require.NoError(t, err)
	// The dying member is a separate etcdctl lease: granted, attached, and never kept alive,
	// which is what etcd sees of a SIGKILLed member.
	out, err := srv.Ctl(tctx(t), "lease", "grant", "2")
	require.NoError(t, err, out)
	fields := strings.Fields(out) // "lease 694d... granted with TTL(2s)"
	require.GreaterOrEqual(t, len(fields), 2, out)
	value, _ := json.Marshal(record("dying", 5))
	out, err = srv.Ctl(tctx(t), "put", "--lease="+fields[1], "/velo/clusters/expiry/members/dying", string(value))
	require.NoError(t, err, out)
	ev := next(t, events, 5*time.Second)
	require.Equal(t, discovery.Joined, ev.Kind)
	began := time.Now()
	ev = next(t, events, 10*time.Second)
	assert.Equal(t, discovery.Left, ev.Kind)
	assert.Less(t, time.Since(began), 4*time.Second, "the member left %v after it stopped, TTL 2 s", time.Since(began))
}

// TestOutageKeepsMembers: etcd stopped for longer than the TTL and started again: the watcher
// reports nothing while it is away (no phantom departures), says it is lost in Status, and once
// etcd is back every member is still there exactly once, published again by its keeper.
func TestOutageKeepsMembers(t *testing.T) {
	srv := etcdtest.Start(t)
	ep := []string{srv.Endpoint()}
	w := backend(t, ep, "outage")
	require.NoError(t, w.Publish(tctx(t), record("w", 1)))
	events, err := w.Watch(tctx(t))
	require.NoError(t, err)
	m := backend(t, ep, "outage")
	require.NoError(t, m.Publish(tctx(t), record("m", 2)))
	require.Equal(t, discovery.Joined, next(t, events, 5*time.Second).Kind)

	srv.Stop()
	// No events while etcd is away, and both ends say they lost it.
	quietFor(t, events, 6*time.Second)
	assert.Error(t, w.Status().Err, "the watcher does not report the lost etcd")
	// The member learns it only when etcd's client gives up on the lease (TTL past the last
	// answer, checked every half second), which a loaded machine can push past the quiet period.
	assert.Eventually(t, func() bool { return m.Status().Err != nil }, 10*time.Second, 100*time.Millisecond,
		"the member does not report the lost etcd")
	assert.Equal(t, "etcd", m.Status().Backend)

	srv.Restart(t)
	require.Eventually(t, func() bool { return w.Status().Err == nil && m.Status().Err == nil }, 20*time.Second, 100*time.Millisecond,
		"the backends did not recover: %v / %v", w.Status().Err, m.Status().Err)
	require.Eventually(t, func() bool {
		out, err := srv.Ctl(context.Background(), "get", "--prefix", "--keys-only", "/velo/clusters/outage/members/")
		return err == nil && strings.Contains(out, "members/m") && strings.Contains(out, "members/w")
	}, 20*time.Second, 200*time.Millisecond, "the members were not published again")
	// Whatever the watcher saw meanwhile, nobody left for good and nobody came twice: a second
	// watcher and the first agree on one member, m.
	late := backend(t, ep, "outage")
	lateEvents, err := late.Watch(tctx(t))
	require.NoError(t, err)
	names := map[string]int{}
	for range 2 {
		ev := next(t, lateEvents, 5*time.Second)
		require.Equal(t, discovery.Joined, ev.Kind)
		names[ev.Record.Name]++
	}
	assert.Equal(t, map[string]int{"m": 1, "w": 1}, names)
	for {
		select {
		case ev := <-events:
			// A Left followed by a Joined would be a phantom departure.
			require.NotEqual(t, discovery.Left, ev.Kind, "a phantom departure of %s", ev.Record.Name)
			require.NotEqual(t, discovery.Joined, ev.Kind, "a duplicate arrival of %s", ev.Record.Name)
			continue
		case <-time.After(time.Second):
		}
		break
	}
	assert.Positive(t, w.Status().WatchErrors+m.Status().PublishErrors, "the outage left no trace in the error counters")
}

// TestClusterLosesOneMember: three etcd members, the one a backend talks to first is killed: the
// backend fails over to the others, nothing leaves, and a member joining afterwards is seen.
func TestClusterLosesOneMember(t *testing.T) {
	servers := etcdtest.StartCluster(t, etcdtest.Member{}, etcdtest.Member{}, etcdtest.Member{})
	var ep []string
	for _, s := range servers {
		ep = append(ep, s.Endpoint())
	}
	w := backend(t, ep, "three")
	events, err := w.Watch(tctx(t))
	require.NoError(t, err)
	m := backend(t, ep, "three")
	require.NoError(t, m.Publish(tctx(t), record("m", 1)))
	require.Equal(t, discovery.Joined, next(t, events, 5*time.Second).Kind)

	servers[0].Kill()
	quietFor(t, events, 5*time.Second)

	late := backend(t, ep, "three")
	require.NoError(t, late.Publish(tctx(t), record("late", 2)))
	ev := next(t, events, 10*time.Second)
	assert.Equal(t, discovery.Joined, ev.Kind)
	assert.Equal(t, "late", ev.Record.Name)
	out, err := servers[1].Ctl(tctx(t), "get", "--prefix", "--keys-only", "/velo/clusters/three/members/")
	require.NoError(t, err, out)
	assert.Contains(t, out, "members/m")
}

// TestForeignKeysIgnored: values under the prefix that are not member records are skipped.
func TestForeignKeysIgnored(t *testing.T) {
	srv := etcdtest.Start(t)
	out, err := srv.Ctl(tctx(t), "put", "/velo/clusters/foreign/members/junk", "not json")
	require.NoError(t, err, out)
	w := backend(t, []string{srv.Endpoint()}, "foreign")
	events, err := w.Watch(tctx(t))
	require.NoError(t, err)
	m := backend(t, []string{srv.Endpoint()}, "foreign")
	require.NoError(t, m.Publish(tctx(t), record("real", 3)))
	ev := next(t, events, 5*time.Second)
	assert.Equal(t, "real", ev.Record.Name, fmt.Sprintf("%+v", ev))
}
