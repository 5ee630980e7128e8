//go:build cgo && linux

package ucxtransport

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/velo-go/velo/velo/auth"
	"github.com/velo-go/velo/velo/transport"
	"github.com/velo-go/velo/velo/transport/tcp"
)

// echoHost answers every frame with the same bytes over its own transport and hands frames it
// gets back to the benchmark.
type echoHost struct {
	id   transport.InstanceID
	inc  uint64
	tr   transport.Transport
	back chan []byte
}

func (h *echoHost) LocalID() transport.InstanceID        { return h.id }
func (h *echoHost) Incarnation() uint64                  { return h.inc }
func (h *echoHost) Logger() *slog.Logger                 { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
func (h *echoHost) PeerDown(transport.InstanceID, error) {}
func (h *echoHost) Deliver(from transport.InstanceID, frame []byte) {
	if h.back != nil {
		h.back <- frame
		return
	}
	_ = h.tr.Send(context.Background(), from, frame)
}

// gatedEcho is an echoHost whose runtime requires authenticated peers and has authenticated
// exactly one, with one session key: the transport then seals every frame, and the benchmark
// measures the seal without a control plane.
type gatedEcho struct {
	*echoHost
	peer    transport.InstanceID
	peerInc uint64
	session []byte
}

func (g *gatedEcho) AuthRequired() bool { return true }
func (g *gatedEcho) Authenticated(p transport.InstanceID, inc uint64) bool {
	return p == g.peer && inc == g.peerInc
}
func (g *gatedEcho) Authenticate(_ context.Context, p transport.InstanceID) error {
	if p != g.peer {
		return fmt.Errorf("peer %016x is not authenticated", uint64(p))
	}
	return nil
}
func (g *gatedEcho) HelloProof(_ transport.InstanceID, msg []byte) ([]byte, error) {
	return auth.HelloProof(g.session, msg), nil
}
func (g *gatedEcho) HelloKey(p transport.InstanceID, inc uint64, msg, proof []byte) ([]byte, bool) {
	if !g.Authenticated(p, inc) {
		return nil, false
	}
	return auth.HelloKey([][]byte{g.session}, msg, proof)
}

// benchPair starts a client and an echo server on transports made by mk and links them. With
// sealed, both runtimes require authenticated peers and share a session key, so every frame is
// sealed and checked.
func benchPair(b *testing.B, mk func() transport.Transport, sealed bool) (client transport.Transport, server transport.InstanceID, back chan []byte) {
	b.Helper()
	ch, sh := &echoHost{id: transport.InstanceID(rand.Uint64() | 1), inc: rand.Uint64(), back: make(chan []byte, 1)},
		&echoHost{id: transport.InstanceID(rand.Uint64() | 1), inc: rand.Uint64()}
	ch.tr, sh.tr = mk(), mk()
	hosts := map[*echoHost]transport.Host{ch: ch, sh: sh}
	if sealed {
		session := bytes.Repeat([]byte{0x5e}, 32)
		hosts[ch] = &gatedEcho{echoHost: ch, peer: sh.id, peerInc: sh.inc, session: session}
		hosts[sh] = &gatedEcho{echoHost: sh, peer: ch.id, peerInc: ch.inc, session: session}
	}
	for h, host := range hosts {
		if err := h.tr.Start(host); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { h.tr.Close() })
	}
	ctx := testCtx(b)
	if err := ch.tr.AddPeer(ctx, transport.PeerAddress{ID: sh.id, Incarnation: sh.inc, Blob: sh.tr.Address()}); err != nil {
		b.Fatal(err)
	}
	if err := sh.tr.AddPeer(ctx, transport.PeerAddress{ID: ch.id, Incarnation: ch.inc, Blob: ch.tr.Address()}); err != nil {
		b.Fatal(err)
	}
	return ch.tr, sh.id, ch.back
}

// BenchmarkRoundTrip: a frame to an echo server and back over this transport, over this
// transport with every frame sealed (both runtimes require authenticated peers), and over velo's
// TCP transport on loopback as the baseline, alternating in blocks in the same run. It reports
// the three round trips and their ratios: ucx/tcp and sealed/tcp (below 1 is faster than TCP),
// and sealed/ucx, what the seal costs. Run it with
//
//	cd velo && go test -run '^$' -bench RoundTrip ./transport/ucxtransport
func BenchmarkRoundTrip(b *testing.B) {
	mkUCX := func() transport.Transport {
		t, err := New(Config{TLS: testTLS, EagerEndpoints: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			b.Fatal(err)
		}
		return t
	}
	for _, size := range []int{64, 1 << 10, 64 << 10} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			u, uPeer, uBack := benchPair(b, mkUCX, false)
			s, sPeer, sBack := benchPair(b, mkUCX, true)
			c, cPeer, cBack := benchPair(b, func() transport.Transport {
				t, err := tcp.New(tcp.Config{})
				if err != nil {
					b.Fatal(err)
				}
				return t
			}, false)
			frame := make([]byte, size)
			ctx := context.Background()
			rt := func(tr transport.Transport, peer transport.InstanceID, back chan []byte) time.Duration {
				start := time.Now()
				if err := tr.Send(ctx, peer, frame); err != nil {
					b.Fatal(err)
				}
				if got := <-back; len(got) != size {
					b.Fatalf("echo of %d bytes", len(got))
				}
				return time.Since(start)
			}
			for i := 0; i < 20; i++ { // warm every path: endpoints, buffers
				rt(u, uPeer, uBack)
				rt(s, sPeer, sBack)
				rt(c, cPeer, cBack)
			}
			// Blocks of round trips alternate, with a pause between them longer than the engines'
			// SpinFor: a UCX engine still spinning after its block must not slow the block that
			// follows (or the reverse), so each block runs as it would on its own.
			var ucxTotal, sealedTotal, tcpTotal time.Duration
			b.ResetTimer()
			for done := 0; done < b.N; {
				n := min(100, b.N-done)
				for i := 0; i < n; i++ {
					ucxTotal += rt(u, uPeer, uBack)
				}
				time.Sleep(2 * time.Millisecond)
				for i := 0; i < n; i++ {
					sealedTotal += rt(s, sPeer, sBack)
				}
				time.Sleep(2 * time.Millisecond)
				for i := 0; i < n; i++ {
					tcpTotal += rt(c, cPeer, cBack)
				}
				time.Sleep(2 * time.Millisecond)
				done += n
			}
			b.ReportMetric(float64(ucxTotal.Nanoseconds())/float64(b.N), "ucx-ns/rt")
			b.ReportMetric(float64(sealedTotal.Nanoseconds())/float64(b.N), "sealed-ns/rt")
			b.ReportMetric(float64(tcpTotal.Nanoseconds())/float64(b.N), "tcp-ns/rt")
			b.ReportMetric(float64(ucxTotal)/float64(tcpTotal), "ucx/tcp")
			b.ReportMetric(float64(sealedTotal)/float64(tcpTotal), "sealed/tcp")
			b.ReportMetric(float64(sealedTotal)/float64(ucxTotal), "sealed/ucx")
		})
	}
}

// BenchmarkSealPair: the UCX round trip without and with the seal, each on its own, so that
// -benchmem shows what the seal adds per round trip in allocations (nothing: each endpoint
// keeps its cipher state) as well as in time. BenchmarkRoundTrip puts the two side by side with
// TCP in one run for the ratios.
func BenchmarkSealPair(b *testing.B) {
	mkUCX := func() transport.Transport {
		t, err := New(Config{TLS: testTLS, EagerEndpoints: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			b.Fatal(err)
		}
		return t
	}
	for _, size := range []int{64, 1 << 10, 64 << 10} {
		for _, sealed := range []bool{false, true} {
			name := "plain"
			if sealed {
				name = "sealed"
			}
			b.Run(fmt.Sprintf("%s/%dB", name, size), func(b *testing.B) {
				tr, peer, back := benchPair(b, mkUCX, sealed)
				frame := make([]byte, size)
				ctx := context.Background()
				for i := 0; i < 20; i++ {
					if err := tr.Send(ctx, peer, frame); err != nil {
						b.Fatal(err)
					}
					<-back
				}
				b.SetBytes(int64(size))
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if err := tr.Send(ctx, peer, frame); err != nil {
						b.Fatal(err)
					}
					if got := <-back; len(got) != size {
						b.Fatalf("echo of %d bytes", len(got))
					}
				}
			})
		}
	}
}
