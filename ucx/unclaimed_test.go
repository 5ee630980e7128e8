//go:build cgo && linux

package ucx

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sendLow sends one active message from the low pair's worker a over ep and progresses the
// pair until UCX is done with it (a rendezvous send: until the receiver answered).
func sendLow(t *testing.T, p *lowPair, ep *Endpoint, id uint16, n int, flags AMFlags, fn func(*Worker, *Event)) {
	t.Helper()
	payload := allocFilled(t, n, uint64(n)).Bytes()[:n]
	req, err := ep.SendAM(id, []byte("hdr"), payload, flags)
	require.NoError(t, err)
	if req != nil {
		p.until(t, req.Done, fn)
		require.NoError(t, req.Err())
	}
}

// TestWorkerDropsIDsWithoutHandler: a worker that registered nothing, and one that registered
// and removed an id, drops messages for ids without a handler and counts them, eager and
// rendezvous alike, instead of reaching into a handler table UCX 1.13 leaves uninitialised
// where it grew (a jump through stale memory, seen as SIGSEGV at a small address).
func TestWorkerDropsIDsWithoutHandler(t *testing.T) {
	p := newLowPair(t)
	events := 0
	count := func(w *Worker, ev *Event) {
		if w == p.b && ev.Kind == EventAM {
			events++
		}
	}
	send := func(id uint16, n int, flags AMFlags) { sendLow(t, p, p.ab, id, n, flags, count) }
	dropped := func(want uint64) {
		t.Helper()
		p.until(t, func() bool { return p.b.Unclaimed() >= want }, count)
		assert.Equal(t, want, p.b.Unclaimed())
	}

	send(7, 16, AMEager)
	send(0xFEFF, 256<<10, AMRendezvous)
	send(0xFFFF, 16, AMEager)
	dropped(3)
	assert.Zero(t, events, "a message without a handler reached the event ring")

	require.NoError(t, p.b.SetAMHandler(7))
	send(7, 16, AMEager)
	p.until(t, func() bool { return events == 1 }, count)
	require.NoError(t, p.b.RemoveAMHandler(7))
	send(7, 16, AMEager)
	dropped(4)
	assert.Equal(t, 1, events)
}

// TestEngineCountsIDsWithoutHandler: messages to ids the engine never handled (user ids and
// ids of its reserved range) are counted as no_handler and leave the engine serving the ids
// it handles.
func TestEngineCountsIDsWithoutHandler(t *testing.T) {
	ctx := testContext(t)
	b := newTestEngine(t, "b", nil)
	got := make(chan AMMessage, 1)
	require.NoError(t, b.HandleAM(4, func(m AMMessage) { got <- m }))
	p := newLowPair(t) // the sender's own context and worker, on this locked thread
	ep, err := p.a.Connect(b.Address(), EndpointOptions{})
	require.NoError(t, err)

	dropped := b.metrics.amDropped.WithLabelValues("no_handler")
	before := testutil.ToFloat64(dropped)
	sendLow(t, p, ep, 7, 16, AMEager, nil)
	sendLow(t, p, ep, 0xFEFF, 256<<10, AMRendezvous, nil)
	sendLow(t, p, ep, ReservedAMIDs+0x0F, 16, AMEager, nil)
	require.Eventually(t, func() bool { return testutil.ToFloat64(dropped)-before >= 3 }, testTimeout, time.Millisecond)
	assert.Equal(t, 3.0, testutil.ToFloat64(dropped)-before)

	sendLow(t, p, ep, 4, 16, AMEager, nil)
	select {
	case m := <-got:
		assert.Equal(t, "hdr", string(m.Header))
		assert.Len(t, m.Payload, 16)
	case <-ctx.Done():
		t.Fatal("the handled id was not delivered after the unhandled ones")
	}
}
