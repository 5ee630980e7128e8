package twoproc

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo"
	"github.com/velo-go/velo/velo/transport/tcp"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// member starts an instance of the two-proc cluster in dir under the given options.
func member(t *testing.T, dir string, opts func(velo.Discovery) []velo.Option) *velo.Velo {
	t.Helper()
	d, err := Discovery(dir, quiet)
	require.NoError(t, err)
	ctl, err := tcp.New(tcp.Config{})
	require.NoError(t, err)
	v, err := velo.New(context.Background(), append(opts(d), velo.WithLogger(quiet), velo.WithTransport(ctl))...)
	require.NoError(t, err)
	t.Cleanup(func() { v.Close() })
	return v
}

type testOffer struct {
	Note string `json:"note"`
}

// TestJoinPassesOverADeadOwner: the member file of an owner that died without withdrawing it
// (its heartbeat still fresh) names an instance that does not answer; the consumer is not sent to
// it, joins the owner that replaces it, and the owner learns who joined and from where.
func TestJoinPassesOverADeadOwner(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	// A dead owner: its file copied aside while it ran, and put back after it closed, as a killed
	// process leaves it.
	deadJoins := NewJoins()
	dead := member(t, dir, deadJoins.Options)
	require.NoError(t, deadJoins.Offer(testOffer{Note: "dead"}))
	file := filepath.Join(dir, Cluster, Owner+".json")
	var stale []byte
	require.Eventually(t, func() bool { b, err := os.ReadFile(file); stale = b; return err == nil }, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, dead.Close())
	require.NoError(t, os.WriteFile(file, stale, 0o644))

	cons := member(t, dir, func(d velo.Discovery) []velo.Option { return []velo.Option{velo.WithDiscovery(d, Consumer)} })
	type result struct {
		id  velo.InstanceID
		f   testOffer
		err error
	}
	done := make(chan result, 1)
	go func() {
		var f testOffer
		id, err := JoinOwner(ctx, "consumer", cons, "127.0.0.1:1", &f)
		done <- result{id, f, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("the consumer joined before a live owner existed: %+v", r)
	case <-time.After(500 * time.Millisecond):
	}

	liveJoins := NewJoins()
	live := member(t, dir, liveJoins.Options)
	require.NoError(t, liveJoins.Offer(testOffer{Note: "live"}))
	r := <-done
	require.NoError(t, r.err)
	assert.Equal(t, live.ID(), r.id)
	assert.Equal(t, "live", r.f.Note)
	j, err := liveJoins.Wait(ctx)
	require.NoError(t, err)
	assert.Equal(t, cons.ID(), j.Peer)
	assert.Equal(t, "127.0.0.1:1", j.TCP)
	// Both ways: discovery registered the consumer with the owner too.
	require.NoError(t, cons.RegisterHandler("ping", func(context.Context, *velo.Message) ([]byte, error) { return []byte("pong"), nil }))
	resp, err := live.Request(ctx, cons.ID(), "ping", nil)
	require.NoError(t, err)
	assert.Equal(t, "pong", string(resp))
}

// TestJoinWaitsForTheOffer: a consumer that finds the owner before it staged anything waits for
// the offer instead of failing.
func TestJoinWaitsForTheOffer(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	js := NewJoins()
	member(t, dir, js.Options)
	cons := member(t, dir, func(d velo.Discovery) []velo.Option { return []velo.Option{velo.WithDiscovery(d, Consumer)} })
	done := make(chan error, 1)
	var f testOffer
	go func() { _, err := JoinOwner(ctx, "consumer", cons, "", &f); done <- err }()
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, js.Offer(testOffer{Note: "late"}))
	require.NoError(t, <-done)
	assert.Equal(t, "late", f.Note)
}

// TestOwnerWithdrawsOnClose: an owner that closes removes its member file.
func TestOwnerWithdrawsOnClose(t *testing.T) {
	dir := t.TempDir()
	js := NewJoins()
	v := member(t, dir, js.Options)
	file := filepath.Join(dir, Cluster, Owner+".json")
	_, err := os.Stat(file)
	require.NoError(t, err)
	require.NoError(t, v.Close())
	_, err = os.Stat(file)
	assert.True(t, os.IsNotExist(err), "the member file outlived its owner: %v", err)
}
