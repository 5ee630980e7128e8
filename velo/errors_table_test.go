package velo

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/velo/messenger"
	"github.com/velo-go/velo/velo/rendezvous"
	"github.com/velo-go/velo/velo/rendezvous/rdma"
	"github.com/velo-go/velo/velo/transport"
	"github.com/velo-go/velo/verbs"
)

// TestPublicErrorsMatchTheirSentinels drives the public API into each failure a user can cause
// and checks that the error matches the velo sentinel the docs promise (errors.Is), whichever
// layer produced it: the transport, the messenger, the rendezvous service or the registry.
func TestPublicErrorsMatchTheirSentinels(t *testing.T) {
	ctx := tctx(t)
	a, b := pair(t)
	require.NoError(t, b.RegisterHandler("echo", func(_ context.Context, m *Message) ([]byte, error) { return nil, nil }))
	h, err := b.StageData(ctx, []byte("sixteen bytes!!!"))
	require.NoError(t, err)
	released, err := b.StageData(ctx, []byte("gone"))
	require.NoError(t, err)
	require.NoError(t, b.Unref(ctx, released))
	forged := h
	forged.Nonce ^= 1
	closed := newInstance(t)
	require.NoError(t, closed.Close())

	cases := []struct {
		name string
		want error
		call func() error
	}{
		{"request to a handler the peer lacks", ErrUnknownHandler, func() error {
			_, err := a.Request(ctx, b.ID(), "no-such-handler", nil)
			return err
		}},
		{"handler name in the reserved space", ErrInvalidName, func() error {
			return a.RegisterHandler("velo.mine", func(context.Context, *Message) ([]byte, error) { return nil, nil })
		}},
		{"send to a peer never registered", ErrUnknownPeer, func() error {
			return a.Send(ctx, closed.ID()+12345, "echo", nil)
		}},
		{"peer info that is not one", ErrInvalidEndpoint, func() error {
			return a.RegisterPeer(ctx, PeerInfo{ID: 7})
		}},
		{"get of a forged handle", ErrBadHandle, func() error {
			_, err := a.Get(ctx, forged)
			return err
		}},
		{"get of a released handle", ErrReleased, func() error {
			_, err := a.Get(ctx, released)
			return err
		}},
		{"get into a buffer of another size", ErrBufferSize, func() error {
			_, err := a.GetInto(ctx, h, make([]byte, 3))
			return err
		}},
		{"pinned get without an RDMA registry", ErrNoPinnedMemory, func() error {
			_, err := a.GetPinned(ctx, h)
			return err
		}},
		{"send from a closed instance", ErrClosed, func() error {
			return closed.Send(ctx, a.ID(), "echo", nil)
		}},
		{"stage on a closed instance", ErrClosed, func() error {
			_, err := closed.StageData(ctx, []byte("x"))
			return err
		}},
		{"register a peer on a closed instance", ErrClosed, func() error {
			return closed.RegisterPeer(ctx, a.PeerInfo())
		}},
		{"register this instance as its own peer", ErrInvalidEndpoint, func() error {
			return a.RegisterPeer(ctx, a.PeerInfo())
		}},
		{"a batch that names one handle twice", ErrDuplicateHandle, func() error {
			res := a.GetBatch(ctx, []GetRequest{{Handle: h}, {Handle: h}}, nil)
			if res[0].Err == nil {
				_ = res[0].Lease.Detach(ctx)
			}
			return res[1].Err
		}},
		{"a batch entry of a released handle", ErrReleased, func() error {
			return a.GetBatch(ctx, []GetRequest{{Handle: released}}, nil)[0].Err
		}},
		{"a range past the payload", ErrRange, func() error {
			return a.ReadRanges(ctx, h, []Range{{Offset: 10, Length: 10, Dst: make([]byte, 10)}})
		}},
		{"a range into a short buffer", ErrBufferSize, func() error {
			return a.ReadRanges(ctx, h, []Range{{Offset: 0, Length: 10, Dst: make([]byte, 3)}})
		}},
		{"staging a freed region", ErrRegionFreed, func() error {
			g, err := a.NewRegion(100)
			if err != nil {
				return err
			}
			g.Free()
			_, err = a.StageRegion(ctx, g)
			return err
		}},
		{"CUDA memory on an instance without the UCX transport", ErrUnsupportedMemory, func() error {
			_, err := a.GetIntoMemory(ctx, h, CUDAMemory(0x7f0000000000, int(h.Size), 0))
			return err
		}},
		{"memory of no bytes", ErrBadMemory, func() error {
			_, err := a.WrapRegionMemory(CUDAMemory(0x7f0000000000, 0, 0))
			return err
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
			require.Error(t, err)
			require.ErrorIs(t, err, c.want, "error text: %v", err)
			t.Logf("%v", err)
		})
	}
}

// The families: every closed error of velo's packages is velo.ErrClosed, every protocol error
// is velo.ErrProtocol, and each "not on this build or platform" error answers the standard
// library's errors.ErrUnsupported.
func TestErrorFamiliesHaveOneRoot(t *testing.T) {
	for name, err := range map[string]error{
		"transport": transport.ErrClosed, "messenger": messenger.ErrClosed,
		"rendezvous": rendezvous.ErrClosed, "rdma registry": rdma.ErrClosed,
	} {
		require.ErrorIs(t, fmt.Errorf("wrapped: %w", err), ErrClosed, "%s's ErrClosed", name)
	}
	for name, err := range map[string]error{"messenger": messenger.ErrProtocol, "rendezvous": rendezvous.ErrProtocol} {
		require.ErrorIs(t, err, ErrProtocol, "%s's ErrProtocol", name)
	}
	for name, err := range map[string]error{
		"ucx not compiled": ucx.ErrNotCompiled, "ucx platform": ucx.ErrUnsupported,
		"pinned arenas": rdma.ErrUnsupported, "verbs": verbs.ErrNotSupported, "verbs memlock": verbs.ErrMemlock,
		"memory types": ErrUnsupportedMemory, "rdma memory types": rdma.ErrUnsupportedMemory, "ucx without CUDA": ucx.ErrCUDANotBuilt,
	} {
		require.ErrorIs(t, err, errors.ErrUnsupported, name)
	}
	require.ErrorIs(t, rdma.ErrMemlock, verbs.ErrMemlock)
	require.ErrorIs(t, rdma.ErrMemlock, rdma.ErrArenaMap)
	require.NotErrorIs(t, rdma.ErrClosed, messenger.ErrClosed, "siblings stay apart: only the root is shared")
}
