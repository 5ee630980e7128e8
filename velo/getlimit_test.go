package velo

// A handle's Size is a claim made by whoever sent the handle. These tests send handles that claim
// far more memory than this machine has (1<<39 bytes: 512 GiB) and check that no receiver
// allocates for the claim: the limit (WithMaxGetSize) refuses it up front, and below the limit
// the owner is asked before any buffer exists, so a forged handle costs one round trip.

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/velo-go/velo/velo/rendezvous/rdma/rdmatest"
	"github.com/velo-go/velo/velo/transport"
)

const claimedHuge = 1 << 39

// forgedHandle names a slot the owner never staged, with a size no machine here can allocate.
func forgedHandle(owner InstanceID) Handle {
	return Handle{Owner: owner, Slot: 1 << 40, Nonce: 1, Size: claimedHuge}
}

func TestGetOfAHandleAboveTheLimitIsRefused(t *testing.T) {
	a, b := pair(t)
	ctx := tctx(t)
	_, err := b.Get(ctx, forgedHandle(a.ID()))
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "WithMaxGetSize") {
		t.Fatalf("a 512 GiB handle: %v, want ErrTooLarge naming WithMaxGetSize", err)
	}

	// Raised past the claim, the owner is asked first: it never issued the handle, so nothing is
	// allocated for it.
	c := newInstance(t, WithMaxGetSize(1<<40))
	if err := c.RegisterPeer(ctx, a.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, forgedHandle(a.ID())); !errors.Is(err, ErrBadHandle) {
		t.Fatalf("a forged 512 GiB handle below the limit: %v, want ErrBadHandle from the owner", err)
	}
	// Locally too: a forged handle of this instance's own is checked before any allocation.
	if _, err := a.Get(ctx, forgedHandle(c.ID())); err == nil {
		t.Fatal("a handle of another owner's was fetched")
	}
	if _, err := c.Get(ctx, forgedHandle(c.ID())); !errors.Is(err, ErrBadHandle) {
		t.Fatalf("a forged local handle: %v", err)
	}
}

func TestMaxGetSizeBoundsGetButNotGetInto(t *testing.T) {
	owner := newInstance(t)
	cons := newInstance(t, WithMaxGetSize(1<<20))
	ctx := tctx(t)
	if err := cons.RegisterPeer(ctx, owner.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	atLimit := payload(1<<20, 1)
	h, _ := owner.StageData(ctx, atLimit)
	l, err := cons.Get(ctx, h)
	if err != nil || !bytes.Equal(l.Bytes(), atLimit) {
		t.Fatalf("a payload at the limit: %v", err)
	}
	l.Release(ctx)

	above := payload(1<<20+1, 2)
	h, _ = owner.StageData(ctx, above)
	if _, err := cons.Get(ctx, h); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a payload one byte above the limit: %v", err)
	}
	if md, err := cons.Metadata(ctx, h); err != nil || md.Leases != 0 {
		t.Fatalf("a refused get took a lease: %+v %v", md, err)
	}
	// The caller's own buffer is its own limit.
	dst := make([]byte, len(above))
	if l, err = cons.GetInto(ctx, h, dst); err != nil || !bytes.Equal(dst, above) {
		t.Fatalf("GetInto above the limit: %v", err)
	}
	l.Release(ctx)

	for _, bad := range []uint64{0, 1<<63 + 1} {
		if _, err := New(ctx, WithMaxGetSize(bad)); err == nil {
			t.Errorf("WithMaxGetSize(%d) accepted", bad)
		}
	}
}

// lyingStager stands in a sender's place of the transparent stager: every large payload it is
// given goes out as the handle it was told to send, which its owner never issued.
type lyingStager struct {
	token []byte
}

func (s lyingStager) Stage(context.Context, transport.InstanceID, []byte) ([]byte, error) {
	return s.token, nil
}

func (lyingStager) Unstage([]byte) {}

func (s lyingStager) Resolve(ctx context.Context, from transport.InstanceID, token []byte) ([]byte, func(), error) {
	return nil, nil, errors.New("lyingStager does not receive")
}

func TestStagedMessageWithAHugeHandleIsRefused(t *testing.T) {
	for _, limit := range []uint64{DefaultMaxGetSize, 1 << 40} {
		sender := newInstance(t, WithStagingThreshold(1024))
		recv := newInstance(t, WithMaxGetSize(limit))
		ctx := tctx(t)
		if err := sender.RegisterPeer(ctx, recv.PeerInfo()); err != nil {
			t.Fatal(err)
		}
		var ran atomic.Int32
		recv.RegisterHandler("big", func(ctx context.Context, m *Message) ([]byte, error) {
			ran.Add(1)
			return []byte("ok"), nil
		})
		token, _ := forgedHandle(sender.ID()).MarshalBinary()
		honest := sender.rv.Stager()
		sender.msgr.SetStager(lyingStager{token: token})
		_, err := sender.Request(ctx, recv.ID(), "big", payload(4096, 3))
		if !errors.Is(err, ErrBadRequest) {
			t.Fatalf("limit %d: a staged message claiming 512 GiB: %v, want ErrBadRequest", limit, err)
		}
		if limit == DefaultMaxGetSize && !strings.Contains(err.Error(), "WithMaxGetSize") {
			t.Errorf("the refusal does not name the option: %v", err)
		}
		if ran.Load() != 0 {
			t.Fatal("the handler ran on a payload that was never fetched")
		}
		// The receiver is unharmed: an honest staged message still arrives.
		sender.msgr.SetStager(honest)
		if resp, err := sender.Request(ctx, recv.ID(), "big", payload(4096, 4)); err != nil || string(resp) != "ok" {
			t.Fatalf("an honest message after the forged one: %q %v", resp, err)
		}
	}
}

func TestGetPinnedOfAHugeHandleAllocatesNothing(t *testing.T) {
	f := rdmatest.NewFabric()
	owner := rdmaNode(t, f, true)
	cons := rdmaNode(t, f, true)
	link(t, owner, cons, true)
	ctx := tctx(t)
	if _, err := cons.GetPinned(ctx, forgedHandle(owner.ID())); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("GetPinned of a 512 GiB handle: %v, want ErrTooLarge", err)
	}
	// Within every limit but forged: the owner refuses it before any pinned memory is taken, so
	// no arena gets mapped for it.
	small := forgedHandle(owner.ID())
	small.Size = 8 << 20
	if _, err := cons.GetPinned(ctx, small); !errors.Is(err, ErrBadHandle) {
		t.Fatalf("GetPinned of a forged handle: %v, want ErrBadHandle", err)
	}
	if st := cons.RDMAStats(); st.Arenas != 0 || st.PinnedBytes != 0 {
		t.Fatalf("a refused GetPinned left pinned memory behind: %+v", st)
	}
}
