package messenger

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/transport"
)

// Request claiming runs end to end in package velo (a chunked push over the TCP transport reads
// every chunk through it, and test/pushfaults stops a writer in the middle of one). These cover
// the decisions Claim makes on its own: what it hands to a claimer, what it leaves to the handler,
// and how it answers. The transport below is a recorder of what the messenger sends: the seam the
// TCP transport fills for real in those suites.

type sentFrame struct {
	peer  transport.InstanceID
	frame []byte
}

type recorder struct {
	mu   sync.Mutex
	sent []sentFrame
}

func (r *recorder) Name() string                                         { return "recorder" }
func (r *recorder) Start(transport.Host) error                           { return nil }
func (r *recorder) Address() []byte                                      { return nil }
func (r *recorder) AddPeer(context.Context, transport.PeerAddress) error { return nil }
func (r *recorder) RemovePeer(transport.InstanceID)                      {}
func (r *recorder) Reaches(transport.InstanceID) bool                    { return true }
func (r *recorder) MaxFrameSize() int                                    { return 1 << 20 }
func (r *recorder) Close() error                                         { return nil }
func (r *recorder) Send(_ context.Context, peer transport.InstanceID, parts ...[]byte) error {
	var f []byte
	for _, p := range parts {
		f = append(f, p...)
	}
	r.mu.Lock()
	r.sent = append(r.sent, sentFrame{peer, f})
	r.mu.Unlock()
	return nil
}

func (r *recorder) frames() []sentFrame {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]sentFrame(nil), r.sent...)
}

func newClaimMessenger(t *testing.T) (*Messenger, *recorder, int) {
	t.Helper()
	m, err := metrics.New(prometheus.NewRegistry())
	require.NoError(t, err)
	g := New(Config{Metrics: m})
	rec := &recorder{}
	return g, rec, g.AddTransport(rec)
}

// requestFrame is a request frame for name with payload, as a sender's messenger writes it.
func requestFrame(t *testing.T, id uint64, name string, payload []byte) []byte {
	t.Helper()
	f, err := wire.AppendCallHeader(nil, wire.Header{Kind: wire.KindRequest, ID: id}, name)
	require.NoError(t, err)
	return append(f, payload...)
}

func TestClaimedRequestLandsAndIsAnswered(t *testing.T) {
	g, rec, idx := newClaimMessenger(t)
	const name = InternalPrefix + "test.bulk"
	dst := make([]byte, 64)
	var heads [][]byte
	var readErr error
	done := make(chan struct{})
	g.ClaimRequests(name, 4, func(from transport.InstanceID, head []byte, size int) ([]byte, func(error) error) {
		heads = append(heads, append([]byte(nil), head...))
		require.Equal(t, 4+len(dst), size)
		copy(dst, head[4:])
		return dst[len(head)-4:], func(err error) error { readErr = err; close(done); return nil }
	})
	want := wire.HeaderLen + 1 + len(name) + 4
	require.Equal(t, want, g.ClaimPrefix(), "the prefix covers the header, the name and the claimer's own")

	body := []byte("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")
	frame := requestFrame(t, 7, name, append([]byte("HDR!"), body...))
	prefix := frame[:g.ClaimPrefix()+3] // a transport may read a little more than asked
	rest := g.ClaimOn(idx, 9, prefix, len(frame))
	require.NotNil(t, rest, "the request was not claimed")
	require.Len(t, rest, len(frame)-len(prefix))
	copy(rest, frame[len(prefix):]) // what the transport reads into it
	g.Claimed(9, prefix, nil)
	<-done
	require.NoError(t, readErr)
	assert.Equal(t, "HDR!", string(heads[0][:4]))
	assert.Equal(t, body, dst, "the payload landed where the claimer said, in full")

	sent := rec.frames()
	require.Len(t, sent, 1, "one answer")
	msg, err := wire.DecodeMessage(sent[0].frame)
	require.NoError(t, err)
	assert.Equal(t, transport.InstanceID(9), sent[0].peer)
	assert.Equal(t, wire.KindResponse, msg.Kind)
	assert.Equal(t, uint64(7), msg.ID)
	assert.Empty(t, msg.Payload)
}

func TestClaimedRequestFailureIsAnsweredAsTheHandlersError(t *testing.T) {
	g, rec, idx := newClaimMessenger(t)
	const name = InternalPrefix + "test.bulk"
	g.ClaimRequests(name, 0, func(transport.InstanceID, []byte, int) ([]byte, func(error) error) {
		return make([]byte, 8), func(error) error { return errors.New("the grant ended") }
	})
	frame := requestFrame(t, 3, name, make([]byte, 8))
	prefix := frame[:g.ClaimPrefix()]
	require.NotNil(t, g.ClaimOn(idx, 5, prefix, len(frame)))
	g.Claimed(5, prefix, nil)
	sent := rec.frames()
	require.Len(t, sent, 1)
	msg, err := wire.DecodeMessage(sent[0].frame)
	require.NoError(t, err)
	assert.Equal(t, wire.KindError, msg.Kind)
	assert.Equal(t, wire.CodeHandlerError, msg.Err.Code)
	assert.Contains(t, msg.Err.Text, "the grant ended")
}

func TestClaimLeavesToTheHandler(t *testing.T) {
	g, rec, idx := newClaimMessenger(t)
	const name = InternalPrefix + "test.bulk"
	calls := 0
	var doneErr error
	g.ClaimRequests(name, 8, func(_ transport.InstanceID, head []byte, size int) ([]byte, func(error) error) {
		calls++
		switch string(head[:3]) {
		case "no!":
			return nil, nil // declined: the handler answers
		case "bad":
			return make([]byte, 1), func(err error) error { doneErr = err; return nil } // the wrong size
		}
		return make([]byte, size-len(head)), func(error) error { return nil }
	})
	frame := func(head string) []byte { return requestFrame(t, 1, name, append([]byte(head), make([]byte, 32)...)) }
	full := g.ClaimPrefix()

	f := frame("no!.....")
	assert.Nil(t, g.ClaimOn(idx, 1, f[:full], len(f)), "declined")
	f = frame("bad.....")
	assert.Nil(t, g.ClaimOn(idx, 1, f[:full], len(f)), "a rest of the wrong size is not read into")
	assert.ErrorContains(t, doneErr, "returned 1 bytes", "the claimer hears of its mistake")
	calls = 0
	f = frame("ok......")
	assert.Nil(t, g.ClaimOn(idx, 1, f[:full-1], len(f)), "a prefix shorter than the claimer needs")
	assert.Nil(t, g.ClaimOn(-1, 1, f[:full], len(f)), "no transport to answer on")
	assert.Zero(t, calls, "the claimer was asked without what it needs")
	other := requestFrame(t, 1, InternalPrefix+"other", make([]byte, 40))
	assert.Nil(t, g.ClaimOn(idx, 1, other[:min(full, len(other))], len(other)), "another name")
	staged, err := wire.AppendCallHeader(nil, wire.Header{Kind: wire.KindRequest, ID: 1, Flags: wire.FlagStaged}, name)
	require.NoError(t, err)
	staged = append(staged, make([]byte, 40)...)
	assert.Nil(t, g.ClaimOn(idx, 1, staged[:full], len(staged)), "a staged payload (a token, not the bytes)")
	assert.Zero(t, calls)
	assert.Empty(t, rec.frames(), "nothing answered: the handler will")

	g.ClaimRequests(name, 0, nil)
	assert.Equal(t, wire.HeaderLen, g.ClaimPrefix(), "no claimer, the header only")
}

func TestClaimedReadFailureSendsNoAnswer(t *testing.T) {
	g, rec, idx := newClaimMessenger(t)
	const name = InternalPrefix + "test.bulk"
	var got error
	g.ClaimRequests(name, 0, func(transport.InstanceID, []byte, int) ([]byte, func(error) error) {
		return make([]byte, 16), func(err error) error { got = err; return err }
	})
	frame := requestFrame(t, 4, name, make([]byte, 16))
	prefix := frame[:g.ClaimPrefix()]
	require.NotNil(t, g.ClaimOn(idx, 2, prefix, len(frame)))
	g.Claimed(2, prefix, errors.New("truncated frame: EOF"))
	assert.ErrorContains(t, got, "EOF", "the claimer hears the read failed")
	assert.Empty(t, rec.frames(), "the connection is gone: no answer")
}

// TestAnswerClaimedBehindALongerPrefix: once a request claimer needs more than the header
// (ClaimRequests), a stream transport reads that many bytes of every frame before it asks, answers
// included: the answer's first bytes are then in the prefix, and a claimed answer must still land
// whole in its caller's buffer (RequestInto exactly, RequestBuffer up to its length; one larger
// than the buffer is delivered as a frame of its own). Before the claim took the prefix into
// account, the transport saw a buffer 48 bytes too long and dropped the connection.
func TestAnswerClaimedBehindALongerPrefix(t *testing.T) {
	g, rec, idx := newClaimMessenger(t)
	g.ClaimRequests(InternalPrefix+"test.bulk", 32, func(transport.InstanceID, []byte, int) ([]byte, func(error) error) {
		return nil, nil
	})
	require.Greater(t, g.ClaimPrefix(), wire.HeaderLen+32)
	const peer = transport.InstanceID(5)

	// answer plays the transport: the call's request went out, its answer comes back through
	// Claim when the messenger claims it, else through Deliver. It reports whether it was claimed.
	answer := func(body []byte) bool {
		var id uint64
		require.Eventually(t, func() bool {
			sent := rec.frames()
			if len(sent) == 0 {
				return false
			}
			h, err := wire.DecodeHeader(sent[len(sent)-1].frame)
			require.NoError(t, err)
			id = h.ID
			return true
		}, 5*time.Second, time.Millisecond)
		rec.mu.Lock()
		rec.sent = nil
		rec.mu.Unlock()
		frame := append(wire.AppendHeader(nil, wire.Header{Kind: wire.KindResponse, ID: id}), body...)
		prefix := frame[:min(g.ClaimPrefix(), len(frame))]
		rest := g.ClaimOn(idx, peer, prefix, len(frame))
		if rest == nil {
			g.Deliver(idx, peer, frame)
			return false
		}
		require.Len(t, rest, len(frame)-len(prefix), "what is left to read after the prefix")
		copy(rest, frame[len(prefix):])
		g.Claimed(peer, prefix, nil)
		return true
	}
	body := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i*7 + 1)
		}
		return b
	}
	ctx := context.Background()

	for _, n := range []int{0, 10, 100, 4096} { // inside the prefix, across it, well beyond it
		want := body(n)
		dst := make([]byte, n)
		errc := make(chan error, 1)
		go func() { errc <- g.RequestInto(ctx, peer, "into", nil, dst) }()
		claimed := answer(want)
		require.NoError(t, <-errc, "%d bytes", n)
		assert.True(t, claimed, "a %d-byte answer for RequestInto is claimed", n)
		assert.Equal(t, want, dst, "%d bytes in the caller's buffer", n)
	}

	buf := make([]byte, 1000)
	for _, n := range []int{20, 1000, 1001} {
		want := body(n)
		type result struct {
			b   []byte
			err error
		}
		res := make(chan result, 1)
		go func() {
			b, err := g.RequestBuffer(ctx, peer, "buffer", nil, buf)
			res <- result{b, err}
		}()
		claimed := answer(want)
		r := <-res
		require.NoError(t, r.err, "%d bytes", n)
		assert.Equal(t, want, r.b, "%d bytes", n)
		assert.Equal(t, n <= len(buf), claimed, "a %d-byte answer for a %d-byte buffer", n, len(buf))
		if n <= len(buf) {
			assert.Same(t, &buf[0], &r.b[0], "the answer is the caller's buffer")
		}
	}
}
