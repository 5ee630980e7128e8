package velo

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestErrorTexts pins the exact text of the errors a newcomer meets first: each says the cause
// once, names no internal handler, and names the fix where there is one; each still matches its
// sentinel. The owner's answer reads the same whether it came over the wire or from this
// instance's own store.
func TestErrorTexts(t *testing.T) {
	owner, cons := pair(t)
	require.NoError(t, cons.RegisterPeer(tctx(t), owner.PeerInfo()))
	h, err := owner.StageData(tctx(t), payload(1024, 1))
	require.NoError(t, err)
	l, err := cons.Get(tctx(t), h)
	require.NoError(t, err)
	require.NoError(t, l.Release(tctx(t)))
	// The owner ends the lease after Release returns; until then a Get names the ending lease
	// rather than the freed slot, so wait for the slot to go.
	require.Eventually(t, func() bool { s, l := owner.StagedCounts(); return s == 0 && l == 0 }, 5*time.Second, time.Millisecond)
	ownerID := fmt.Sprintf("%016x", uint64(owner.ID()))
	released := "rendezvous handle already released: handle{owner " + ownerID + ", slot 1, 1024 bytes}: its slot was freed" +
		" (a handle is staged with one reference and Get then Release spends it: Ref it once per further Get, or end the lease with Detach to fetch again)"

	h2, err := owner.StageData(tctx(t), payload(1024, 2))
	require.NoError(t, err)
	forged := h2
	forged.Nonce ^= 5
	stranger := newInstance(t)
	h3, err := stranger.StageData(tctx(t), payload(10, 3))
	require.NoError(t, err)
	require.NoError(t, owner.RegisterHandler("fail", func(ctx context.Context, m *Message) ([]byte, error) {
		return nil, errors.New("disk full")
	}))

	get := func(v *Velo, h Handle) error { _, err := v.Get(tctx(t), h); return err }
	request := func(name string) error { _, err := cons.Request(tctx(t), owner.ID(), name, nil); return err }
	for _, c := range []struct {
		name     string
		err      error
		sentinel error
		text     string
	}{
		{"get after the last release", get(cons, h), ErrReleased, "rendezvous: get: " + released},
		{"the same on the owner itself", get(owner, h), ErrReleased, "rendezvous: get: " + released},
		{"unref after the last release", cons.Unref(tctx(t), h), ErrReleased, "rendezvous: unref: " + released},
		{"forged nonce", get(cons, forged), ErrBadHandle,
			"rendezvous: get: bad rendezvous handle: handle{owner " + ownerID + ", slot 2, 1024 bytes} does not match its slot" +
				" (the handle was not issued by this owner, or was damaged on its way; handles are only valid as the owner's MarshalText or MarshalBinary wrote them)"},
		{"owner never registered", get(cons, h3), ErrUnknownPeer,
			fmt.Sprintf("rendezvous: get: messenger: no transport reaches the peer: %016x is an unknown peer: register it with RegisterPeer first", uint64(stranger.ID()))},
		{"unknown handler", request("nope"), ErrUnknownHandler,
			`peer ` + ownerID + `, handler "nope": unknown handler: no handler "nope" is registered on the receiver: register it with RegisterHandler before peers call it`},
		{"handler error", request("fail"), ErrHandlerFailed, `peer ` + ownerID + `, handler "fail": remote handler failed: disk full`},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.Error(t, c.err)
			assert.ErrorIs(t, c.err, c.sentinel)
			assert.Equal(t, c.text, c.err.Error())
			assert.NotContains(t, c.err.Error(), "velo.rv.", "an internal handler name leaked into the text")
		})
	}
	// A remote answer still carries its peer for errors.As.
	var re *RemoteError
	require.ErrorAs(t, get(cons, h), &re)
	assert.Equal(t, owner.ID(), re.Peer)
}
