package rdmapath_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/velo-go/velo/velo"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/rendezvous/rdma/rdmatest"
	"github.com/velo-go/velo/velo/transport/ucxtransport"
)

// TestRollingUpgradeKeepsTheControlPlane: during a rolling upgrade an old node publishes a UCX
// address of wire version 1. The new node refuses it — RegisterPeer's error wraps
// ErrInvalidEndpoint and the UCX transport logs the guide's warning — yet keeps the peer over TCP:
// messages flow both ways, and a rendezvous payload moves by chunks (no_offer on both sides).
func TestRollingUpgradeKeepsTheControlPlane(t *testing.T) {
	owner := startNode(t, true)
	cons := startNode(t, true)
	ctx := tctx(t)
	old := owner.PeerInfo()
	blob := append([]byte(nil), old.Addresses["ucx"]...)
	blob[0] = 1 // what a version-1 node publishes first
	old.Addresses["ucx"] = blob

	err := cons.RegisterPeer(ctx, old)
	var partial *velo.PartialPeerError
	if !errors.Is(err, velo.ErrInvalidEndpoint) || !errors.As(err, &partial) || strings.Join(partial.Registered, ",") != "tcp" {
		t.Fatalf("RegisterPeer of a version-1 UCX address: %v, want a *velo.PartialPeerError (registered over tcp) wrapping ErrInvalidEndpoint", err)
	}
	warning := fmt.Sprintf("ucx: rejecting peer blob: unsupported ucx blob version 1 (expected %d)", ucxtransport.BlobVersion)
	if !strings.Contains(cons.logs.String(), warning) {
		t.Errorf("the refusing node did not log %q:\n%s", warning, cons.logs.String())
	}
	if strings.Count(err.Error(), fmt.Sprintf("%016x", uint64(old.ID))) > 1 {
		t.Errorf("the error names the peer more than once: %v", err)
	}

	owner.RegisterHandler("echo", func(ctx context.Context, m *velo.Message) ([]byte, error) { return m.Payload, nil })
	cons.RegisterHandler("echo", func(ctx context.Context, m *velo.Message) ([]byte, error) { return m.Payload, nil })
	if resp, err := cons.Request(ctx, owner.ID(), "echo", []byte("new to old")); err != nil || string(resp) != "new to old" {
		t.Fatalf("new to old over TCP: %q %v", resp, err)
	}
	if resp, err := owner.Request(ctx, cons.ID(), "echo", []byte("old to new")); err != nil || string(resp) != "old to new" {
		t.Fatalf("old to new over TCP: %q %v", resp, err)
	}
	data := randomBytes(2<<20, 11)
	h, err := owner.StageDataPinned(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	l, err := cons.Get(ctx, h)
	if err != nil || !bytes.Equal(l.Bytes(), data) {
		t.Fatalf("get across the upgrade: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	noOffer := map[rdmatest.Pair]float64{pr(metrics.PathChunked, metrics.ReasonNoOffer): 1}
	rdmatest.ExpectPaths(t, "owner", owner.Metrics(), noOffer)
	rdmatest.ExpectPaths(t, "consumer", cons.Metrics(), noOffer)
}
