//go:build cgo && linux

package ucxtransport

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/velo-go/velo/velo/transport"
)

// TestReaperLosesNothing: endpoints are reaped over and over while frames flow both ways, each
// burst starting the moment a reap was seen (so bursts race with the fin exchange); every frame
// arrives exactly once and in order, nothing is counted lost or dropped, and no peer is reported
// down. Run with the reaper on both sides and on one side only (the other side then learns of
// each reap only from the fin).
func TestReaperLosesNothing(t *testing.T) {
	const idle = 40 * time.Millisecond
	for _, c := range []struct {
		name         string
		idleA, idleB time.Duration
	}{{"both reap", idle, idle}, {"one side reaps", idle, 0}} {
		t.Run(c.name, func(t *testing.T) {
			a := newNode(t, func(cfg *Config) { cfg.EPIdleTimeout = c.idleA })
			b := newNode(t, func(cfg *Config) { cfg.EPIdleTimeout = c.idleB })
			link(t, a, b)
			reaped := func() float64 {
				return testutil.ToFloat64(a.m.endpoints.WithLabelValues("reaped")) + testutil.ToFloat64(b.m.endpoints.WithLabelValues("reaped"))
			}
			const rounds, burst = 25, 20
			pad := make([]byte, 64<<10)
			var sentA, sentB uint32
			for round := 0; round < rounds; round++ {
				var wg sync.WaitGroup
				for _, d := range []struct {
					from, to node
					n        *uint32
				}{{a, b, &sentA}, {b, a, &sentB}} {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := 0; i < burst; i++ {
							*d.n++
							// Odd frames are large (many fragments): those are the ones a
							// closed peer endpoint swallows without an error.
							if err := d.from.Send(testCtx(t), d.to.h.id, binary.BigEndian.AppendUint32(nil, *d.n), pad[:int(*d.n%2)*len(pad)]); err != nil {
								t.Errorf("round %d: send %d: %v", round, *d.n, err)
								return
							}
						}
					}()
				}
				wg.Wait()
				if t.Failed() {
					return
				}
				// Every side holds an endpoint after its burst; go on the moment one of them is
				// retired, so the next burst races with the fin exchange.
				eventually(t, fmt.Sprintf("a reap after round %d", round), func() bool {
					return !a.hasOpenEndpoint(b.h.id) || !b.hasOpenEndpoint(a.h.id)
				})
			}
			for _, c := range []struct {
				h    *testHost
				sent uint32
			}{{b.h, sentA}, {a.h, sentB}} {
				got := c.h.waitFrames(t, int(c.sent))
				for i, f := range got {
					if n := binary.BigEndian.Uint32(f.frame); n != uint32(i+1) {
						t.Fatalf("frame %d carries %d: lost, duplicated or reordered", i+1, n)
					}
				}
				if len(got) != int(c.sent) {
					t.Fatalf("%d frames delivered, %d sent", len(got), c.sent)
				}
			}
			for _, n := range []node{a, b} {
				if lost := testutil.ToFloat64(n.m.lost); lost != 0 {
					t.Errorf("frames_lost_total %v", lost)
				}
				for _, r := range dropReasons {
					if v := testutil.ToFloat64(n.m.dropped.WithLabelValues(r)); v != 0 {
						t.Errorf("frames dropped (%s): %v", r, v)
					}
				}
				select {
				case d := <-n.h.downs:
					t.Errorf("PeerDown(%016x) during reaps: %v", uint64(d.peer), d.err)
				default:
				}
			}
			// The reaps were real: endpoints were reopened, the peer of a reaped endpoint learned
			// of it, and every retired endpoint gets closed.
			opened := testutil.ToFloat64(a.m.endpoints.WithLabelValues("opened")) + testutil.ToFloat64(b.m.endpoints.WithLabelValues("opened"))
			byPeer := testutil.ToFloat64(a.m.endpoints.WithLabelValues("retired_by_peer")) + testutil.ToFloat64(b.m.endpoints.WithLabelValues("retired_by_peer"))
			t.Logf("%d rounds: %v reaps, %v endpoints opened, %v retired on the peer's fin", rounds, reaped(), opened, byPeer)
			if opened < rounds || byPeer == 0 {
				t.Fatalf("opened %v endpoints, %v retired by peer: the reaper did not cycle endpoints", opened, byPeer)
			}
			eventually(t, "every endpoint closed after the last reap", func() bool {
				return testutil.ToFloat64(a.m.open)+testutil.ToFloat64(b.m.open) == 0
			})
		})
	}
}

// TestReaperSendsAroundTheTimeout: both sides send single frames spaced around the idle timeout,
// so reaps fire just before, during and just after sends in either direction. Nothing is lost,
// duplicated or reordered.
func TestReaperSendsAroundTheTimeout(t *testing.T) {
	const idle = 30 * time.Millisecond
	a := newNode(t, func(c *Config) { c.EPIdleTimeout = idle })
	b := newNode(t, func(c *Config) { c.EPIdleTimeout = idle })
	link(t, a, b)
	const frames = 40
	pad := make([]byte, 64<<10) // odd frames are multi-fragment
	var wg sync.WaitGroup
	for _, d := range []struct{ from, to node }{{a, b}, {b, a}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(d.from.h.id), 1))
			for i := uint32(1); i <= frames; i++ {
				time.Sleep(idle/2 + time.Duration(r.Int64N(int64(3*idle/2)))) // spacing, not synchronisation
				if err := d.from.Send(testCtx(t), d.to.h.id, binary.BigEndian.AppendUint32(nil, i), pad[:int(i%2)*len(pad)]); err != nil {
					t.Errorf("send %d: %v", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, n := range []node{a, b} {
		got := n.h.waitFrames(t, frames)
		for i, f := range got {
			if v := binary.BigEndian.Uint32(f.frame); v != uint32(i+1) {
				t.Fatalf("frame %d carries %d", i+1, v)
			}
		}
		if lost := testutil.ToFloat64(n.m.lost); lost != 0 {
			t.Fatalf("frames_lost_total %v", lost)
		}
	}
	reaps := testutil.ToFloat64(a.m.endpoints.WithLabelValues("reaped")) + testutil.ToFloat64(b.m.endpoints.WithLabelValues("reaped"))
	t.Logf("%v reaps during %d frames each way", reaps, frames)
	if reaps == 0 {
		t.Fatal("no reap happened: the test exercised nothing")
	}
}

// TestReaperSparesBusyEndpoints: an endpoint with a GET in flight is not reaped however long the
// GET takes, and the GET completes.
func TestReaperSparesBusyEndpoints(t *testing.T) {
	owner := newNode(t, nil)
	consumer := newNode(t, func(c *Config) { c.EPIdleTimeout = 10 * time.Millisecond })
	link(t, owner, consumer)
	mem := mapped(t, 64<<20)
	reg, err := owner.RegisterMemory(mem)
	if err != nil {
		t.Fatal(err)
	}
	defer deregister(t, reg)
	dst := make([]byte, len(mem))
	for i := 0; i < 3; i++ {
		if err := consumer.Get(testCtx(t), owner.h.id, reg.Key(), 0, dst); err != nil {
			t.Fatalf("GET %d: %v", i, err)
		}
		if !bytes.Equal(dst, mem) {
			t.Fatalf("GET %d returned other bytes", i)
		}
		// Let the reaper retire the idle endpoint between GETs, so the next GET opens a new one.
		eventually(t, "the idle endpoint reaped", func() bool { return !consumer.hasOpenEndpoint(owner.h.id) })
	}
	if f := testutil.ToFloat64(consumer.m.endpoints.WithLabelValues("failed")); f != 0 {
		t.Fatalf("%v endpoints failed", f)
	}
	if r := testutil.ToFloat64(consumer.m.endpoints.WithLabelValues("reaped")); r != 3 {
		t.Fatalf("%v reaps for 3 GETs separated by idle time", r)
	}
}

// hasOpenEndpoint reports whether n has an endpoint to peer that frames would go on now.
func (n node) hasOpenEndpoint(peer transport.InstanceID) bool {
	n.mu.Lock()
	p := n.peers[peer]
	n.mu.Unlock()
	if p == nil {
		return false
	}
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	return p.conn != nil
}

// TestReaperWithALaggingPeer: one side talks and reaps; the other only answers later, spread over
// longer than a retired endpoint may wait for its peer. UCX pairs the n-th endpoint of each side,
// so the quiet side's first endpoint after a reap would share a connection with the talker's
// retired one, and die with it, unless the quiet side keeps its endpoint count in step (it joins
// the talker's slot on its hello, and so learns of the retirement). No frame is lost.
func TestReaperWithALaggingPeer(t *testing.T) {
	a := newNode(t, func(c *Config) { c.EPIdleTimeout = 20 * time.Millisecond })
	b := newNode(t, nil)
	a.timings.finWait = 150 * time.Millisecond
	b.timings.finWait = 150 * time.Millisecond
	link(t, a, b)
	pad := make([]byte, 64<<10) // multi-fragment frames: the ones a broken pairing swallows
	const rounds, answers = 5, 5
	for round := 0; round < rounds; round++ {
		if err := a.Send(testCtx(t), b.h.id, []byte("ping"), pad); err != nil {
			t.Fatal(err)
		}
		b.h.waitFrames(t, round+1)
		eventually(t, "a reaps its endpoint", func() bool { return !a.hasOpenEndpoint(b.h.id) })
		for i := 0; i < answers; i++ {
			if err := b.Send(testCtx(t), a.h.id, binary.BigEndian.AppendUint32(nil, uint32(round*answers+i)), pad); err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond) // spread the answers past a's finWait
		}
	}
	got := a.h.waitFrames(t, rounds*answers)
	for i, f := range got {
		if v := binary.BigEndian.Uint32(f.frame); v != uint32(i) {
			t.Fatalf("answer %d carries %d", i, v)
		}
	}
	if lost := testutil.ToFloat64(a.m.lost); lost != 0 {
		t.Fatalf("frames_lost_total %v", lost)
	}
}
