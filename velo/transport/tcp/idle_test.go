package tcp

import (
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/transport"
)

// seqHost checks what it is delivered: every sender numbers its frames 1, 2, 3 …, and each must
// arrive once and in order. It records peer-down reports.
type seqHost struct {
	id  transport.InstanceID
	inc uint64

	mu    sync.Mutex
	next  map[transport.InstanceID]uint32
	bad   []string
	downs []transport.InstanceID
}

func newSeqHost() *seqHost {
	return &seqHost{id: transport.InstanceID(rand.Uint64() | 1), inc: rand.Uint64(), next: map[transport.InstanceID]uint32{}}
}

func (h *seqHost) LocalID() transport.InstanceID { return h.id }
func (h *seqHost) Incarnation() uint64           { return h.inc }
func (h *seqHost) Logger() *slog.Logger          { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
func (h *seqHost) Deliver(from transport.InstanceID, frame []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := binary.BigEndian.Uint32(frame)
	if want := h.next[from] + 1; n != want {
		h.bad = append(h.bad, fmt.Sprintf("from %v: frame %d, want %d", from, n, want))
	}
	h.next[from] = n
}
func (h *seqHost) PeerDown(p transport.InstanceID, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.downs = append(h.downs, p)
}

func (h *seqHost) received(from transport.InstanceID) uint32 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.next[from]
}

func (h *seqHost) check(t *testing.T) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	assert.Empty(t, h.bad, "frames lost, duplicated or reordered")
	assert.Empty(t, h.downs, "peers reported down")
}

func closes(tr *Transport, reason string) float64 {
	return testutil.ToFloat64(tr.am.closes.WithLabelValues(reason))
}

func openConns(tr *Transport) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.open
}

// TestIdleCloseUnderTraffic: an instance with a budget of two connections exchanges numbered
// frames with six peers, both ways and all at once, round after round, with pauses of a few
// milliseconds, so that connections are closed for the budget while frames to and from their
// peers start, cross the goodbyes, and reopen them. Every frame arrives once and in order on both
// sides, no side reports a peer down, the budget closed connections (counted as such, and as
// the peer's close on the other side), and once the traffic stops the instance holds no more
// than its budget, with velo_tcp_connections equal to what is open.
func TestIdleCloseUnderTraffic(t *testing.T) {
	const budget, peers, rounds, burst = 2, 6, 15, 20
	ha := newSeqHost()
	a := start(t, ha, Config{MaxConnections: budget})
	hs := make([]*seqHost, peers)
	bs := make([]*Transport, peers)
	for i := range bs {
		hs[i] = newSeqHost()
		bs[i] = start(t, hs[i], Config{})
		require.NoError(t, a.AddPeer(ctx(t), transport.PeerAddress{ID: hs[i].id, Incarnation: hs[i].inc, Blob: bs[i].Address()}))
		require.NoError(t, bs[i].AddPeer(ctx(t), transport.PeerAddress{ID: ha.id, Incarnation: ha.inc, Blob: a.Address()}))
	}
	toB := make([]uint32, peers)
	toA := make([]uint32, peers)
	for round := range rounds {
		var wg sync.WaitGroup
		for i := range bs {
			wg.Add(2)
			go func() { // a to b_i
				defer wg.Done()
				for range burst {
					toB[i]++
					if err := a.Send(ctx(t), hs[i].id, binary.BigEndian.AppendUint32(nil, toB[i])); err != nil {
						t.Errorf("round %d: a to peer %d, frame %d: %v", round, i, toB[i], err)
						return
					}
				}
			}()
			go func() { // b_i to a
				defer wg.Done()
				for range burst {
					toA[i]++
					if err := bs[i].Send(ctx(t), ha.id, binary.BigEndian.AppendUint32(nil, toA[i])); err != nil {
						t.Errorf("round %d: peer %d to a, frame %d: %v", round, i, toA[i], err)
						return
					}
				}
			}()
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		time.Sleep(time.Duration(rand.IntN(5)) * time.Millisecond)
	}
	for i := range bs {
		require.Eventually(t, func() bool { return hs[i].received(ha.id) == toB[i] && ha.received(hs[i].id) == toA[i] }, wait, time.Millisecond,
			"peer %d: a sent %d and it read %d; it sent %d and a read %d", i, toB[i], hs[i].received(ha.id), toA[i], ha.received(hs[i].id))
		hs[i].check(t)
	}
	ha.check(t)
	assert.Positive(t, closes(a, closeBudget), "the budget closed no connection")
	peerCloses := 0.0
	for _, b := range bs {
		peerCloses += closes(b, closePeer)
		assert.Zero(t, closes(b, closeLost), "a peer lost a connection")
	}
	assert.Positive(t, peerCloses, "no peer counted a's idle close")
	assert.Zero(t, closes(a, closeLost), "a lost a connection")
	require.Eventually(t, func() bool { return openConns(a) <= budget }, wait, 5*time.Millisecond, "a keeps %d connections open", openConns(a))
	assert.Equal(t, float64(openConns(a)), testutil.ToFloat64(a.am.conns), "velo_tcp_connections disagrees with what is open")
}

// TestIdleConnectionClosesQuietly: a connection that carried nothing for IdleTimeout is closed on
// both sides without a peer-down report (the peer stays known and reachable), each side counts
// it (idle here, peer there), and the next frame either way opens a new connection, the
// accepting side dialing back to the address the hello gave it.
func TestIdleConnectionClosesQuietly(t *testing.T) {
	ha, hb := newSeqHost(), newSeqHost()
	a := start(t, ha, Config{IdleTimeout: 100 * time.Millisecond})
	b := start(t, hb, Config{IdleTimeout: time.Hour})
	require.NoError(t, a.AddPeer(ctx(t), transport.PeerAddress{ID: hb.id, Incarnation: hb.inc, Blob: b.Address()}))
	require.NoError(t, a.Send(ctx(t), hb.id, binary.BigEndian.AppendUint32(nil, 1)))
	require.NoError(t, b.Send(ctx(t), ha.id, binary.BigEndian.AppendUint32(nil, 1)))

	require.Eventually(t, func() bool { return !a.Connected(hb.id) && !b.Connected(ha.id) }, wait, 5*time.Millisecond, "the idle connection stays open")
	assert.Equal(t, 1.0, closes(a, closeIdle))
	assert.Equal(t, 1.0, closes(b, closePeer))
	assert.Zero(t, testutil.ToFloat64(a.am.conns))
	assert.Zero(t, testutil.ToFloat64(b.am.conns))
	assert.True(t, b.Reaches(ha.id), "b forgot how to reach a")

	// b never registered a: it dials the address a's hello named.
	require.NoError(t, b.Send(ctx(t), ha.id, binary.BigEndian.AppendUint32(nil, 2)))
	require.NoError(t, a.Send(ctx(t), hb.id, binary.BigEndian.AppendUint32(nil, 2)))
	require.Eventually(t, func() bool { return ha.received(hb.id) == 2 && hb.received(ha.id) == 2 }, wait, time.Millisecond)
	ha.check(t)
	hb.check(t)
	assert.Zero(t, closes(a, closeLost)+closes(b, closeLost))
}

// TestBothSidesCloseAtOnce: two sides with the same short idle timeout ask their goodbyes at
// about the same moment, over and over, with a frame each way in between; nothing is lost and
// neither side takes the other for lost.
func TestBothSidesCloseAtOnce(t *testing.T) {
	ha, hb := newSeqHost(), newSeqHost()
	cfg := Config{IdleTimeout: 20 * time.Millisecond}
	a, b := start(t, ha, cfg), start(t, hb, cfg)
	require.NoError(t, a.AddPeer(ctx(t), transport.PeerAddress{ID: hb.id, Incarnation: hb.inc, Blob: b.Address()}))
	var n uint32
	for range 25 {
		n++
		require.NoError(t, a.Send(ctx(t), hb.id, binary.BigEndian.AppendUint32(nil, n)))
		require.NoError(t, b.Send(ctx(t), ha.id, binary.BigEndian.AppendUint32(nil, n)))
		time.Sleep(time.Duration(15+rand.IntN(20)) * time.Millisecond)
	}
	require.Eventually(t, func() bool { return ha.received(hb.id) == n && hb.received(ha.id) == n }, wait, time.Millisecond)
	require.Eventually(t, func() bool { return openConns(a) == 0 && openConns(b) == 0 }, wait, 5*time.Millisecond)
	ha.check(t)
	hb.check(t)
	assert.Positive(t, closes(a, closeIdle)+closes(b, closeIdle))
	assert.Zero(t, closes(a, closeLost)+closes(b, closeLost))
}

// TestCallWaitingKeepsItsConnection: a call waiting for its answer keeps its connection open past
// the idle timeout on both sides (the caller does not ask, and answers keep when the peer asks):
// when the answer goes out, eight idle timeouts later, nothing was closed, and the call
// completes.
func TestCallWaitingKeepsItsConnection(t *testing.T) {
	ha, hb := newCallerHost(), &slowAnswerer{answeringHost: answeringHost{testHost: newHost()}, delay: 400 * time.Millisecond}
	cfg := Config{IdleTimeout: 50 * time.Millisecond}
	a, b := start(t, ha, cfg), start(t, hb, cfg)
	hb.tr = b
	closedBefore := make(chan float64, 1)
	hb.atAnswer = func() {
		closedBefore <- closes(a, closeIdle) + closes(b, closeIdle) + closes(a, closePeer) + closes(b, closePeer)
	}
	addPeer(t, a, b, hb.testHost)
	require.NoError(t, ha.call(ctx(t), t, a, hb.id, 1))
	assert.Zero(t, <-closedBefore, "a connection with a call waiting was closed")
	assert.Zero(t, closes(a, closeLost)+closes(b, closeLost))
	require.Eventually(t, func() bool { return openConns(a) == 0 && openConns(b) == 0 }, wait, 5*time.Millisecond, "the connection stays open once idle")
}

// slowAnswerer answers each call after delay, on the connection the call came on.
type slowAnswerer struct {
	answeringHost
	delay    time.Duration
	atAnswer func() // runs just before each answer goes out
}

func (h *slowAnswerer) DeliverInline(from transport.InstanceID, frame []byte, handOff func()) bool {
	h.Deliver(from, frame)
	return true
}

func (h *slowAnswerer) Deliver(from transport.InstanceID, frame []byte) {
	go func() {
		time.Sleep(h.delay)
		if h.atAnswer != nil {
			h.atAnswer()
		}
		h.answeringHost.Deliver(from, frame)
	}()
}

// TestMalformedControlFrameDropsTheConnection: a control frame longer than any the transport sends
// is refused before it is read, and an ack of a goodbye never asked is refused too: the connection
// is dropped (the peer reported down) and nothing is delivered.
func TestMalformedControlFrameDropsTheConnection(t *testing.T) {
	for name, frame := range map[string][]byte{
		"too long":  binary.BigEndian.AppendUint32(nil, wire.TCPControlBit|(wire.TCPControlMaxLen+1)),
		"stray ack": wire.AppendTCPControl(nil, wire.TCPControl{Kind: wire.TCPGoodbyeAck}),
		"bad kind":  append(binary.BigEndian.AppendUint32(nil, wire.TCPControlBit|9), 9, 0, 0, 0, 0, 0, 0, 0, 0),
	} {
		t.Run(name, func(t *testing.T) {
			hb := newHost()
			b := start(t, hb, Config{})
			nc, id := rawPeer(t, b)
			_, err := nc.Write(frame)
			require.NoError(t, err)
			hb.waitDown(t, id)
			assert.Empty(t, hb.frames)
		})
	}
}

// TestUnansweredGoodbye: a peer that never answers a goodbye (here a raw socket that spoke the
// hello and sent one frame) sees the goodbye on the wire, naming the one frame read from it; a
// Send made meanwhile waits for the answer, and when IOTimeout passes without one the connection
// is dropped as a stalled one: the peer is reported down and the Send returns instead of hanging.
func TestUnansweredGoodbye(t *testing.T) {
	hb := newHost()
	b := start(t, hb, Config{IdleTimeout: 50 * time.Millisecond, IOTimeout: 500 * time.Millisecond})
	nc, id := rawPeer(t, b)
	_, err := nc.Write(binary.BigEndian.AppendUint32(nil, 1))
	require.NoError(t, err)
	_, err = nc.Write([]byte{'x'})
	require.NoError(t, err)
	hb.next(t)

	got := make([]byte, 4+9)
	require.NoError(t, nc.SetReadDeadline(time.Now().Add(wait)))
	_, err = io.ReadFull(nc, got)
	require.NoError(t, err)
	word := binary.BigEndian.Uint32(got)
	require.NotZero(t, word&wire.TCPControlBit, "not a control frame: %x", got)
	ctl, err := wire.DecodeTCPControl(got[4:])
	require.NoError(t, err)
	assert.Equal(t, wire.TCPControl{Kind: wire.TCPGoodbye, Frames: 1}, ctl)

	sent := make(chan error, 1)
	go func() { sent <- b.Send(ctx(t), id, []byte("late")) }()
	hb.waitDown(t, id)
	select {
	case err := <-sent:
		assert.Error(t, err, "a frame to a peer that stalled and cannot be dialed went somewhere")
	case <-time.After(wait):
		t.Fatal("a Send waiting for an unanswered goodbye hangs")
	}
	assert.Equal(t, 1.0, closes(b, closeLost))
}
