package velo

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/rendezvous/rdma/rdmatest"
)

// TestRDMAPeerWithARefusedAddressStaysReachable: when the RMA transport refuses the peer's
// address (a rolling upgrade: the UCX wire versions differ) the peer stays registered over TCP;
// RegisterPeer says which transports took it and why the other did not, messages flow, and
// payloads move by chunks.
func TestRDMAPeerWithARefusedAddressStaysReachable(t *testing.T) {
	f := rdmatest.NewFabric()
	owner := rdmaNode(t, f, true)
	cons := rdmaNode(t, f, true)
	ctx := tctx(t)
	info := owner.PeerInfo()
	info.Addresses["ucx"] = []byte{1, 0, 0} // not an address the "ucx" transport can use
	err := cons.RegisterPeer(ctx, info)
	var partial *PartialPeerError
	if !errors.Is(err, ErrInvalidEndpoint) || !errors.As(err, &partial) {
		t.Fatalf("RegisterPeer with a refused address: %v, want a *PartialPeerError wrapping ErrInvalidEndpoint", err)
	}
	if partial.Peer != owner.ID() || len(partial.Registered) != 1 || partial.Registered[0] != "tcp" {
		t.Fatalf("%+v: want the peer registered over tcp", partial)
	}
	owner.RegisterHandler("echo", func(ctx context.Context, m *Message) ([]byte, error) { return m.Payload, nil })
	if resp, err := cons.Request(ctx, owner.ID(), "echo", []byte("over tcp")); err != nil || string(resp) != "over tcp" {
		t.Fatalf("a request to the peer: %q %v", resp, err)
	}
	data := payload(2<<20, 9)
	h, err := owner.StageDataPinned(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	l, err := cons.Get(ctx, h)
	if err != nil || !bytes.Equal(l.Bytes(), data) {
		t.Fatalf("get: %v", err)
	}
	if l.Path != metrics.PathChunked || l.Reason != metrics.ReasonNoOffer {
		t.Errorf("get took %s/%s, want chunked/no_offer", l.Path, l.Reason)
	}
	l.Release(ctx)

	// Nothing accepted: nothing registered, and the error says so.
	stranger := rdmaNode(t, f, true)
	only := stranger.PeerInfo()
	only.Addresses["tcp"], only.Addresses["ucx"] = []byte{1, 0}, []byte{1, 0}
	if err := cons.RegisterPeer(ctx, only); !errors.Is(err, ErrInvalidEndpoint) || errors.As(err, &partial) {
		t.Fatalf("every address refused: %v", err)
	}
	if _, err := cons.Request(ctx, stranger.ID(), "echo", nil); !errors.Is(err, ErrUnknownPeer) {
		t.Fatalf("a request to a peer that was refused: %v", err)
	}
}
