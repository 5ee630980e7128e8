//go:build cgo && linux

package ucx

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

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

// benchPair starts a client and an echo server on transports made by mk and links them.
func benchPair(b *testing.B, mk func() transport.Transport) (client transport.Transport, server transport.InstanceID, back chan []byte) {
	b.Helper()
	ch, sh := &echoHost{id: transport.InstanceID(rand.Uint64() | 1), inc: rand.Uint64(), back: make(chan []byte, 1)},
		&echoHost{id: transport.InstanceID(rand.Uint64() | 1), inc: rand.Uint64()}
	ch.tr, sh.tr = mk(), mk()
	for _, h := range []*echoHost{ch, sh} {
		if err := h.tr.Start(h); err != nil {
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

// BenchmarkRoundTrip: a frame to an echo server and back, over this transport and, alternating in
// blocks in the same run as the baseline, over velo's TCP transport on loopback. It reports both round trips
// and their ratio (ucx/tcp; below 1 is faster than TCP). Run it with
//
//	cd velo && go test -run '^$' -bench RoundTrip ./transport/ucx
func BenchmarkRoundTrip(b *testing.B) {
	for _, size := range []int{64, 1 << 10, 64 << 10} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			u, uPeer, uBack := benchPair(b, func() transport.Transport {
				t, err := New(Config{TLS: testTLS, EagerEndpoints: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
				if err != nil {
					b.Fatal(err)
				}
				return t
			})
			c, cPeer, cBack := benchPair(b, func() transport.Transport {
				t, err := tcp.New(tcp.Config{})
				if err != nil {
					b.Fatal(err)
				}
				return t
			})
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
			for i := 0; i < 20; i++ { // warm both paths: endpoints, buffers
				rt(u, uPeer, uBack)
				rt(c, cPeer, cBack)
			}
			// Blocks of round trips alternate, with a pause between them longer than the engines'
			// SpinFor: a UCX engine still spinning after its block must not slow the TCP block that
			// follows (or the reverse), so each block runs as it would on its own.
			var ucxTotal, tcpTotal time.Duration
			b.ResetTimer()
			for done := 0; done < b.N; {
				n := min(100, b.N-done)
				for i := 0; i < n; i++ {
					ucxTotal += rt(u, uPeer, uBack)
				}
				time.Sleep(2 * time.Millisecond)
				for i := 0; i < n; i++ {
					tcpTotal += rt(c, cPeer, cBack)
				}
				time.Sleep(2 * time.Millisecond)
				done += n
			}
			b.ReportMetric(float64(ucxTotal.Nanoseconds())/float64(b.N), "ucx-ns/rt")
			b.ReportMetric(float64(tcpTotal.Nanoseconds())/float64(b.N), "tcp-ns/rt")
			b.ReportMetric(float64(ucxTotal)/float64(tcpTotal), "ucx/tcp")
		})
	}
}
