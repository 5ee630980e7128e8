//go:build cgo && linux

package ucx

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestGetManyVectorAllRefused: a vectored request whose every read the owner refuses is answered
// with the statuses alone. The owner used to send that reply as an empty iov, on which UCX 1.13
// asserts and aborts the process: one request with stale keys (or, from anyone who reaches the
// worker, with made-up ones) killed the owner.
func TestGetManyVectorAllRefused(t *testing.T) {
	ctx := testContext(t)
	a, b, _ := enginePair(t, nil)
	skipIfReplyBroken(t, a)
	ab, err := a.Connect(ctx, b.Address(), ConnectOptions{VectoredGet: true})
	require.NoError(t, err)
	if m, _ := ab.RMAMode(ctx); m != RMAGuarded {
		t.Skipf("this endpoint resolves to %v: vectored requests are the guarded path's", m)
	}
	src, live, kl, kd := liveAndRevoked(t, b, 1<<20, 71)
	sentinel := bytes.Repeat([]byte{0x5A}, 4096)
	for round := range 2 {
		reads := make([]KeyRead, 8)
		for i := range reads {
			reads[i] = KeyRead{Key: kd, Offset: uint64(i) * 4096, Dst: append([]byte(nil), sentinel...)}
		}
		errs := make([]error, len(reads))
		ab.GetMany(ctx, reads, 64, func(i int, err error) { errs[i] = err })
		for i := range reads {
			require.ErrorIs(t, errs[i], ErrRemoteKeyRevoked, "round %d read %d", round, i)
			require.Equal(t, sentinel, reads[i].Dst, "round %d: refused read %d wrote into its destination", round, i)
		}
	}
	// The owner is alive and serves the live key.
	dst := make([]byte, 4096)
	var gerr error
	ab.GetMany(ctx, []KeyRead{{Key: kl, Offset: 0, Dst: dst}, {Key: kl, Offset: 4096, Dst: make([]byte, 4096)}}, 64, func(i int, err error) {
		if err != nil {
			gerr = err
		}
	})
	require.NoError(t, gerr)
	require.Equal(t, src.Bytes()[:4096], dst)
	require.NoError(t, live.Unregister(ctx))
}
