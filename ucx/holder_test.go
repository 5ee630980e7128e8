//go:build cgo && linux

package ucx

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestKeyBoundToHolder: a registration made for a holder (RegisterOptions.Holder) is served only
// to guarded GETs that arrive on an endpoint the owner connected for that holder. Before the
// owner connects back, the holder's read is answered StatusNotConnected (the reader's cue to try
// again); once it has, the same read is served. A third engine with the same key gets nothing,
// whether the owner has no endpoint of its own to it (StatusNotConnected) or one bound to
// another holder (ErrRemoteKeyRevoked), single or vectored, and its destination stays as it was.
// A key made without a holder still reads from anywhere.
func TestKeyBoundToHolder(t *testing.T) {
	ctx := testContext(t)
	owner := newTestEngine(t, "owner", nil)
	holder := newTestEngine(t, "holder", nil)
	other := newTestEngine(t, "other", nil)
	skipIfReplyBroken(t, owner)
	const holderID, otherID = 0x1111, 0x2222

	src := allocFilled(t, 16<<10, 91)
	reg, err := owner.RegisterWith(ctx, src.Bytes(), RegisterOptions{Holder: holderID})
	require.NoError(t, err)
	k, err := ParseRegionKey(reg.RemoteKey())
	require.NoError(t, err)
	open, err := owner.Register(ctx, src.Bytes())
	require.NoError(t, err)
	ko, err := ParseRegionKey(open.RemoteKey())
	require.NoError(t, err)

	hc, err := holder.Connect(ctx, owner.Address(), ConnectOptions{VectoredGet: true})
	require.NoError(t, err)
	if m, _ := hc.RMAMode(ctx); m != RMAGuarded {
		t.Skipf("this endpoint resolves to %v: the holder binding is the guarded path's (the HCA checks keys on %v)", m, m)
	}
	sentinel := bytes.Repeat([]byte{0xA5}, 4096)
	dst := append([]byte(nil), sentinel...)
	err = hc.GetKey(ctx, dst, k, 0)
	require.ErrorIs(t, err, StatusNotConnected, "the holder's read before the owner connected back")
	require.Equal(t, sentinel, dst, "a refused read wrote into its destination")

	// The owner connects back for the holder: UCX pairs this endpoint with the holder's.
	_, err = owner.Connect(ctx, holder.Address(), ConnectOptions{Holder: holderID})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return hc.GetKey(ctx, dst, k, 4096) == nil }, 10*time.Second, 5*time.Millisecond,
		"the holder's read is never served once the owner connected back")
	require.Equal(t, src.Bytes()[4096:8192], dst)

	// Another engine with the same key.
	oc, err := other.Connect(ctx, owner.Address(), ConnectOptions{VectoredGet: true})
	require.NoError(t, err)
	stolen := func() error {
		d := append([]byte(nil), sentinel...)
		err := oc.GetKey(ctx, d, k, 0)
		assert.Equal(t, sentinel, d, "a refused read wrote into its destination")
		return err
	}
	require.ErrorIs(t, stolen(), StatusNotConnected, "another engine's read, the owner not connected to it")
	_, err = owner.Connect(ctx, other.Address(), ConnectOptions{Holder: otherID})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		err := stolen()
		require.Error(t, err, "another holder's endpoint read the key")
		return !isNotConnected(err)
	}, 10*time.Second, 5*time.Millisecond, "the owner never connected back to the other engine")
	require.ErrorIs(t, stolen(), ErrRemoteKeyRevoked, "another holder's read")
	reads := make([]KeyRead, 4)
	for i := range reads {
		reads[i] = KeyRead{Key: k, Offset: uint64(i) * 4096, Dst: append([]byte(nil), sentinel...)}
	}
	errs := make([]error, len(reads))
	oc.GetMany(ctx, reads, 64, func(i int, err error) { errs[i] = err })
	for i := range reads {
		assert.ErrorIs(t, errs[i], ErrRemoteKeyRevoked, "vectored read %d by another holder", i)
		assert.Equal(t, sentinel, reads[i].Dst, "vectored read %d wrote into its destination", i)
	}

	// A key without a holder serves whoever presents it; the holder's own key still serves it.
	require.NoError(t, oc.GetKey(ctx, dst, ko, 0))
	require.Equal(t, src.Bytes()[:4096], dst)
	require.NoError(t, hc.GetKey(ctx, dst, k, 8192))
	require.Equal(t, src.Bytes()[8192:12288], dst)
	require.NoError(t, reg.Unregister(context.Background()))
	require.NoError(t, open.Unregister(context.Background()))

	// A write key bound to the holder: the guarded PUT writes through it from the holder's
	// endpoint alone.
	dstMem := allocFilled(t, 8192, 92)
	before := append([]byte(nil), dstMem.Bytes()...)
	wreg, err := owner.RegisterWith(ctx, dstMem.Bytes(), RegisterOptions{Access: AccessWrite, Holder: holderID})
	require.NoError(t, err)
	kw, err := ParseRegionKey(wreg.RemoteKey())
	require.NoError(t, err)
	if m, _ := oc.RMAMode(ctx); m == RMAGuarded {
		require.ErrorIs(t, oc.PutKey(ctx, sentinel[:64], kw, 0), ErrRemoteKeyRevoked, "another holder's write")
		require.Equal(t, before, dstMem.Bytes(), "a refused write changed the target")
		require.NoError(t, hc.PutKey(ctx, sentinel[:64], kw, 128), "the holder's own write")
		require.Equal(t, sentinel[:64], dstMem.Bytes()[128:192])
	}
	require.NoError(t, wreg.Unregister(context.Background()))
}

func isNotConnected(err error) bool { return errors.Is(err, StatusNotConnected) }
