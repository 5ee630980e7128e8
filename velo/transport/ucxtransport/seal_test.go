//go:build cgo && linux

package ucxtransport

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/velo/auth"
	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/transport"
)

// The proofs that a UCX frame counts only when it comes from the session its endpoint's hello
// proved: a third process without the session key, on its own UCX worker, sends frames in an
// authenticated peer's name straight to the receiver's worker while that peer keeps sending.

// sealedPair is two transports whose runtimes require authenticated peers and share a control
// plane session key, registered with each other.
func sealedPair(t *testing.T, modA, modB func(*Config)) (a, b node, session []byte) {
	t.Helper()
	session = make([]byte, 32)
	_, _ = rand.Read(session)
	mk := func(mod func(*Config)) (node, *gatedHost) {
		h := newGatedHost()
		cfg := Config{TLS: testTLS, Logger: h.log}
		if mod != nil {
			mod(&cfg)
		}
		tr, err := New(cfg)
		require.NoError(t, err)
		require.NoError(t, tr.Start(h))
		t.Cleanup(func() {
			assert.NoError(t, tr.Close())
			if t.Failed() {
				t.Logf("log of node %016x:\n%s", uint64(h.id), h.logBuf.String())
			}
		})
		return node{tr, h.testHost}, h
	}
	a, ga := mk(modA)
	b, gb := mk(modB)
	ga.trust(b.h, session)
	gb.trust(a.h, session)
	link(t, a, b)
	return a, b, session
}

func dropped(n node, reason string) float64 {
	return testutil.ToFloat64(n.m.dropped.WithLabelValues(reason))
}

// liveFrom is what receiver knows of sender's endpoints: the epoch it delivers and the last seq
// it delivered there.
func liveFrom(receiver node, sender transport.InstanceID) (epoch uint32, seq uint64) {
	receiver.recvMu.Lock()
	defer receiver.recvMu.Unlock()
	if st := receiver.inbound[sender]; st != nil {
		return st.cur, st.delivered
	}
	return 0, 0
}

// rawAttacker is a process on the fabric without the session key: its own UCX context and
// worker, an endpoint to the target's worker (whose address anyone reads in the target's
// published blob), and active messages with headers it writes itself. It runs on the calling
// goroutine's OS thread, which it locks.
type rawAttacker struct {
	t   testing.TB
	w   *ucx.Worker
	ep  *ucx.Endpoint
	buf *ucx.Memory // UCX reads a message from here until its send completed
}

func newRawAttacker(t testing.TB, target node) *rawAttacker {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread) // runs last: the cleanups below need the thread
	ctx, err := ucx.NewContext(ucx.ContextConfig{TLS: testTLS})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ctx.Close() })
	w, err := ctx.NewWorker()
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	blob, err := decodeBlob(target.Address())
	require.NoError(t, err)
	ep, err := w.Connect(blob.Worker, ucx.EndpointOptions{})
	require.NoError(t, err)
	buf, err := ucx.AllocMemory(128<<10, ucx.MemoryOptions{})
	require.NoError(t, err)
	a := &rawAttacker{t: t, w: w, ep: ep, buf: buf}
	t.Cleanup(func() {
		if r, _ := ep.Close(ucx.CloseForce); r != nil {
			a.wait(r)
		}
		_ = buf.Free()
	})
	return a
}

// send sends one active message with the transport's id, hdr and payload, and waits until UCX
// is done with it.
func (a *rawAttacker) send(hdr, payload []byte) {
	a.t.Helper()
	b := a.buf.Bytes()
	n := copy(b, hdr)
	m := copy(b[n:], payload)
	req, err := a.ep.SendAM(amID, b[:n], b[n:n+m], ucx.AMEager)
	require.NoError(a.t, err)
	a.wait(req)
	if req != nil {
		require.NoError(a.t, req.Err())
	}
}

func (a *rawAttacker) wait(req *ucx.Request) {
	a.t.Helper()
	deadline := time.Now().Add(wait)
	for req != nil && !req.Done() {
		require.True(a.t, time.Now().Before(deadline), "the attacker's send did not complete")
		a.w.Progress()
		a.w.Poll(func(*ucx.Event) {})
	}
}

// forged builds headers in a peer's name, as anyone who read its PeerInfo can.
type forged struct{ id, inc uint64 }

func (f forged) header(kind wire.UCXKind, flags byte, epoch uint32, seq uint64) []byte {
	return wire.AppendUCXHeader(nil, wire.UCXHeader{Incarnation: f.inc, Sender: f.id, Kind: kind, Flags: flags, Epoch: epoch, Seq: seq})
}

// guessed is the header marked sealed with a seal of random bytes.
func (f forged) guessed(kind wire.UCXKind, flags byte, epoch uint32, seq uint64) []byte {
	h := wire.AppendUCXHeader(nil, wire.UCXHeader{Incarnation: f.inc, Sender: f.id, Kind: kind, Flags: flags, Sealed: true, Epoch: epoch, Seq: seq})
	seal := make([]byte, wire.UCXSealLen)
	_, _ = rand.Read(seal)
	return append(h, seal...)
}

// TestForgedFramesChangeNothing: with credentials, a process without the session key sends, in
// an authenticated peer's name and straight to the receiver's UCX worker, data at the live
// epoch and at every epoch up to it (seqs live-1, live, live+1, live+1000), unsealed and with a
// guessed seal, fins with the goodbye and retire flags, a hello with a made-up proof, and a
// valid hello played again — while the real peer keeps sending. Nothing forged is delivered,
// the real peer stays up and every one of its frames arrives, in order, with Send returning nil;
// each forgery is counted under its reason, and the refusals are logged once per sender per
// interval, not once per frame.
func TestForgedFramesChangeNothing(t *testing.T) {
	a, b, session := sealedPair(t, func(c *Config) { c.EPIdleTimeout = 100 * time.Millisecond }, nil)
	// Walk the real peer through a few endpoints first (its idle reaper retires each), so there
	// are older epochs to forge at.
	for i := 0; i < 3; i++ {
		if i > 0 {
			reaped := testutil.ToFloat64(a.m.endpoints.WithLabelValues("reaped"))
			eventually(t, "a's endpoint is reaped", func() bool {
				return testutil.ToFloat64(a.m.endpoints.WithLabelValues("reaped")) > reaped && a.Endpoints(b.h.id) == 0
			})
		}
		require.NoError(t, a.Send(testCtx(t), b.h.id, []byte(fmt.Sprintf("warm-%d", i))))
		b.h.waitFrames(t, i+1)
	}
	firstLive, _ := liveFrom(b, a.h.id)
	require.GreaterOrEqual(t, firstLive, uint32(3), "the warm-up walked a through three endpoints")

	// The real peer sends until the attack is over, then a few more.
	stop := make(chan struct{})
	var sent int
	var sendErrs []error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		pad := make([]byte, 64<<10)
		send := func() {
			// Every seventh frame is large (many fragments).
			frame := append([]byte(fmt.Sprintf("m-%05d|", sent)), pad[:(sent%7/6)*len(pad)]...)
			if err := a.Send(testCtx(t), b.h.id, frame); err != nil {
				sendErrs = append(sendErrs, err)
			}
			sent++
		}
		for {
			select {
			case <-stop:
				for i := 0; i < 20; i++ {
					send()
				}
				return
			default:
			}
			send()
			if sent%10 == 0 {
				time.Sleep(time.Millisecond)
			}
		}
	}()

	x := newRawAttacker(t, b)
	as := forged{id: uint64(a.h.id), inc: a.h.inc}
	stranger := forged{id: uint64(a.h.id) ^ 0x5a5a, inc: 1} // an ID the control plane never authenticated
	want := map[string]float64{}
	start := time.Now()
	for round := 0; round < 3; round++ {
		eventually(t, "the real peer's frames flow", func() bool { _, seq := liveFrom(b, a.h.id); return seq >= 5 })
		live, seq := liveFrom(b, a.h.id)
		for _, s := range []uint64{seq - 1, seq, seq + 1, seq + 1000} {
			x.send(as.header(wire.UCXData, 0, live, s), []byte("forged"))
			x.send(as.guessed(wire.UCXData, 0, live, s), []byte("forged"))
			want["bad_seal"] += 2
		}
		for e := uint32(1); e <= live+2; e++ { // every epoch up to the live one, and two beyond
			x.send(as.guessed(wire.UCXData, 0, e, seq+1), []byte("forged"))
			x.send(as.header(wire.UCXData, 0, e, 1), []byte("forged"))
			want["bad_seal"] += 2
		}
		x.send(as.header(wire.UCXFin, wire.UCXFinAsk|wire.UCXFinBye, live, seq), nil)
		x.send(as.guessed(wire.UCXFin, wire.UCXFinAsk|wire.UCXFinBye, live, seq), nil)
		x.send(as.guessed(wire.UCXFin, wire.UCXFinBye, live, seq+1), nil)
		x.send(as.guessed(wire.UCXFin, wire.UCXFinAsk, live, 0), nil)
		want["bad_seal"] += 4

		// A hello for a new endpoint with a made-up proof.
		hello := as.header(wire.UCXHello, 0, live+1, seq)
		proof := make([]byte, wire.UCXHelloProofLen)
		_, _ = rand.Read(proof)
		x.send(hello, wire.InsertUCXHelloProof(wire.AppendUCXHelloBody(nil, live, a.Address()), proof))
		want["unauthenticated"]++

		// A hello with a valid proof for the live endpoint, as a recorder of the real one would
		// have: it must not open that endpoint again (nor reset its key or order).
		body := wire.AppendUCXHelloBody(nil, live-1, a.Address())
		replay := as.header(wire.UCXHello, 0, live, 0)
		x.send(replay, wire.InsertUCXHelloProof(body, auth.HelloProof(session, helloProofMsg(replay, body, b.h.id, b.h.inc))))
		want["replayed"]++

		// A sender nobody authenticated.
		x.send(stranger.header(wire.UCXData, 0, 1, 1), []byte("forged"))
		x.send(stranger.header(wire.UCXFin, wire.UCXFinBye, 1, 0), nil)
		want["unauthenticated"] += 2
	}
	attack := time.Since(start)
	close(stop)
	wg.Wait()
	require.Empty(t, sendErrs, "the real peer's sends")

	for reason, n := range want {
		eventually(t, reason+" drops counted", func() bool { return dropped(b, reason) >= n })
	}
	b.h.waitFrames(t, 3+sent)
	time.Sleep(200 * time.Millisecond) // room for anything forged that would be delivered late
	b.h.mu.Lock()
	frames := append([]frameFrom(nil), b.h.frames...)
	b.h.mu.Unlock()
	require.Len(t, frames, 3+sent, "exactly the real peer's frames are delivered")
	for i, f := range frames {
		assert.Equal(t, a.h.id, f.from)
		if i < 3 {
			assert.Equal(t, fmt.Sprintf("warm-%d", i), string(f.frame))
			continue
		}
		require.True(t, bytes.HasPrefix(f.frame, []byte(fmt.Sprintf("m-%05d|", i-3))), "frame %d is %.12q", i, f.frame)
	}
	for reason, n := range want {
		assert.Equal(t, n, dropped(b, reason), reason)
	}
	for _, reason := range []string{"stale", "unknown_sender", "malformed", "rejected_blob"} {
		assert.Zero(t, dropped(b, reason), reason)
	}
	assert.Zero(t, testutil.ToFloat64(b.m.lost), "frames lost")
	assert.Zero(t, testutil.ToFloat64(b.m.peerDown), "peers reported down")
	select {
	case d := <-b.h.downs:
		t.Fatalf("the receiver reported %016x down: %v", uint64(d.peer), d.err)
	default:
	}

	// The real peer is up both ways.
	assert.True(t, b.Reaches(a.h.id))
	require.NoError(t, b.Send(testCtx(t), a.h.id, []byte("still there?")))
	assert.Equal(t, "still there?", string(a.h.waitFrames(t, 1)[0].frame))
	require.NoError(t, a.Send(testCtx(t), b.h.id, []byte("yes")))
	assert.Equal(t, "yes", string(b.h.waitFrames(t, 4+sent)[3+sent].frame))

	// Logged, but not per frame: one line per sender per 10 s.
	lines := 0
	for _, l := range strings.Split(b.h.logBuf.String(), "\n") {
		if strings.Contains(l, "suppressed_since_last") && strings.Contains(l, fmt.Sprintf("peer=%016x", uint64(a.h.id))) {
			lines++
		}
	}
	var forgeries float64
	for _, n := range want {
		forgeries += n
	}
	assert.GreaterOrEqual(t, lines, 1, "the forgeries are logged")
	assert.LessOrEqual(t, lines, 1+int(attack/(10*time.Second)), "at most one line per sender per 10 s (%v forgeries)", forgeries)
}

// TestSealedEndpointsThroughReaping: with credentials, endpoints come and go under both idle
// reapers while frames (small and of many fragments) flow both ways: each new endpoint gets its
// own key, the fins are sealed too, and nothing is refused, lost or reordered.
func TestSealedEndpointsThroughReaping(t *testing.T) {
	const idle = 40 * time.Millisecond
	a, b, _ := sealedPair(t, func(c *Config) { c.EPIdleTimeout = idle }, func(c *Config) { c.EPIdleTimeout = idle })
	reaped := func() float64 {
		return testutil.ToFloat64(a.m.endpoints.WithLabelValues("reaped")) + testutil.ToFloat64(b.m.endpoints.WithLabelValues("reaped"))
	}
	pad := make([]byte, 64<<10)
	const rounds, burst = 6, 10
	for round := 0; round < rounds; round++ {
		before := reaped()
		var wg sync.WaitGroup
		for _, d := range []struct{ from, to node }{{a, b}, {b, a}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < burst; i++ {
					n := round*burst + i
					assert.NoError(t, d.from.Send(testCtx(t), d.to.h.id, binary.BigEndian.AppendUint32(nil, uint32(n)), pad[:(n%2)*len(pad)]))
				}
			}()
		}
		wg.Wait()
		a.h.waitFrames(t, (round+1)*burst)
		b.h.waitFrames(t, (round+1)*burst)
		eventually(t, "an endpoint is reaped", func() bool { return reaped() > before })
	}
	// Every endpoint a opened had its own key at b (and the reverse).
	for _, c := range []struct{ rx, tx node }{{b, a}, {a, b}} {
		c.rx.keysMu.Lock()
		rk := c.rx.rkeys[c.tx.h.id]
		keys := 0
		if rk != nil {
			keys = len(rk.keys)
		}
		c.rx.keysMu.Unlock()
		assert.GreaterOrEqual(t, keys, 2, "frame keys at %016x for %016x's endpoints", uint64(c.rx.h.id), uint64(c.tx.h.id))
	}
	for _, n := range []node{a, b} {
		frames := n.h.waitFrames(t, rounds*burst)
		require.Len(t, frames, rounds*burst)
		for i, f := range frames {
			require.Equal(t, uint32(i), binary.BigEndian.Uint32(f.frame), "frame %d", i)
		}
		for _, reason := range []string{"bad_seal", "unauthenticated", "replayed", "stale"} {
			assert.Zero(t, dropped(n, reason), reason)
		}
		assert.Zero(t, testutil.ToFloat64(n.m.lost))
	}
}

// TestUnauthenticatedFramesStayUnsealed: without credentials nothing is sealed; the header is
// the 32 bytes it always was.
func TestUnauthenticatedFramesStayUnsealed(t *testing.T) {
	a, b := newNode(t, nil), newNode(t, nil)
	link(t, a, b)
	require.NoError(t, a.Send(testCtx(t), b.h.id, []byte("plain")))
	assert.Equal(t, "plain", string(b.h.waitFrames(t, 1)[0].frame))
	a.Transport.mu.Lock()
	p := a.peers[b.h.id]
	a.Transport.mu.Unlock()
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	require.NotNil(t, p.conn)
	assert.Nil(t, p.conn.seal)
	assert.Len(t, p.conn.header(frameHeader{Incarnation: 1, Sender: 2, Kind: kindData, Epoch: 1, Seq: 1}, nil), frameHeaderLen)
}
