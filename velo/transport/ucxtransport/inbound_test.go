package ucxtransport

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// simEpoch describes one endpoint of a simulated sender.
type simEpoch struct {
	frames int  // data frames sent on it
	fin    bool // retired cleanly (a fin after its frames)
	drop   int  // frames lost off its tail with the endpoint (only without fin)
}

// simSender builds what a sender puts on each of its endpoints, with epochs numbered the way a
// transport numbers them (increasing, not consecutive: epochs to other peers come in between).
// lost counts the dropped frames a receiver can know of: those of every endpoint but the last.
func simSender(epochs []simEpoch) (lanes [][]inFrame, want []string, lost uint64) {
	prevEpoch, prevLast := uint32(0), uint64(0)
	for i, e := range epochs {
		epoch := uint32(10 + 7*i)
		lane := []inFrame{{kind: kindHello, epoch: epoch, seq: prevLast, prevEpoch: prevEpoch}}
		for s := 1; s <= e.frames; s++ {
			p := fmt.Sprintf("%d/%d", epoch, s)
			if s > e.frames-e.drop && !e.fin {
				if i < len(epochs)-1 {
					lost++ // the next endpoint's hello gives the count away
				}
				continue // sent, then lost with the endpoint
			}
			lane = append(lane, inFrame{kind: kindData, epoch: epoch, seq: uint64(s), payload: []byte(p)})
			want = append(want, p)
		}
		if e.fin {
			lane = append(lane, inFrame{kind: kindFin, epoch: epoch, seq: uint64(e.frames)})
		}
		lanes = append(lanes, lane)
		prevEpoch, prevLast = epoch, uint64(e.frames)
	}
	return lanes, want, lost
}

// run feeds the lanes' frames to an inbound, lanes interleaved as pick says, then expires
// whatever is still held. Within a lane frames go in the order sent, or, when within is not nil,
// in the order it picks among the lane's frames not yet fed (UCX may deliver a short message
// ahead of a long one sent before it on the same endpoint). The first frame is always the first
// lane's hello. It returns the delivered payloads and the counts.
func run(t testing.TB, lanes [][]inFrame, pick, within func(n int) int) (got []string, lost, stale uint64) {
	var in inbound
	now := time.Unix(1000, 0)
	collect := func(r inResult) {
		for _, b := range r.deliver {
			got = append(got, string(b))
		}
		lost += r.lost
		stale += r.stale
	}
	left := make([][]inFrame, len(lanes))
	for i, l := range lanes {
		left[i] = append([]inFrame(nil), l...)
	}
	first := true
	for {
		var live []int
		for i, l := range left {
			if len(l) > 0 {
				live = append(live, i)
			}
		}
		if len(live) == 0 {
			break
		}
		i, j := live[pick(len(live))], 0
		if first {
			// The receiver hears the sender's first endpoint first: a later one opens only after
			// it was retired (idle for the reaper's timeout) or failed (its frames lost).
			i, first = 0, false
		} else if within != nil {
			j = within(len(left[i]))
		}
		collect(in.accept(left[i][j], now))
		left[i] = append(left[i][:j], left[i][j+1:]...)
		now = now.Add(time.Millisecond)
	}
	collect(in.expire(now.Add(time.Hour), time.Minute))
	if len(in.held) != 0 {
		t.Fatalf("%d frames still held after expiry", len(in.held))
	}
	return got, lost, stale
}

func sameOrder(t testing.TB, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("delivered %d frames %v, want %d %v", len(got), got, len(want), want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("frame %d is %s, want %s (all: %v)", i, got[i], want[i], got)
		}
	}
}

// TestInboundKeepsOrderAcrossEndpoints: whatever the interleaving of a sender's endpoints, frames
// come out in the order sent, none twice, none lost when none was lost.
func TestInboundKeepsOrderAcrossEndpoints(t *testing.T) {
	cases := map[string][]simEpoch{
		"one endpoint":                  {{frames: 5}},
		"reaped twice":                  {{frames: 3, fin: true}, {frames: 4, fin: true}, {frames: 2}},
		"failed without fin, no loss":   {{frames: 3}, {frames: 3}},
		"empty endpoints":               {{frames: 0, fin: true}, {frames: 0}, {frames: 1, fin: true}, {frames: 0}},
		"new endpoint overtakes old":    {{frames: 6, fin: true}, {frames: 6, fin: true}, {frames: 6}},
		"fin only, then another sender": {{frames: 0, fin: true}, {frames: 2}},
	}
	first, last := func(n int) int { return 0 }, func(n int) int { return n - 1 }
	orders := map[string]struct{ pick, within func(n int) int }{
		"in order":                        {first, nil},
		"newest first":                    {last, nil},
		"each endpoint's frames reversed": {first, last},
		"newest first, reversed":          {last, last},
	}
	for name, epochs := range cases {
		for oname, o := range orders {
			t.Run(name+"/"+oname, func(t *testing.T) {
				lanes, want, _ := simSender(epochs)
				got, lost, stale := run(t, lanes, o.pick, o.within)
				sameOrder(t, got, want)
				if lost != 0 || stale != 0 {
					t.Fatalf("lost %d stale %d", lost, stale)
				}
			})
		}
	}
}

// TestInboundCountsLoss: frames lost with a failed endpoint are counted, and the next endpoint's
// frames are delivered after the hold (not before the old endpoint's surviving frames).
func TestInboundCountsLoss(t *testing.T) {
	lanes, want, wantLost := simSender([]simEpoch{{frames: 5, drop: 2}, {frames: 3, fin: true}, {frames: 2}})
	got, lost, _ := run(t, lanes, func(n int) int { return n - 1 }, nil)
	sameOrder(t, got, want)
	if lost != wantLost || lost != 2 {
		t.Fatalf("lost %d, want %d", lost, wantLost)
	}
}

// TestInboundHoldsUntilExpiry: a newer endpoint's frames wait for the older one's tail, and go out
// when the hold times out without it.
func TestInboundHoldsUntilExpiry(t *testing.T) {
	var in inbound
	t0 := time.Unix(0, 0)
	in.accept(inFrame{kind: kindHello, epoch: 1}, t0)
	if r := in.accept(inFrame{kind: kindData, epoch: 1, seq: 1, payload: []byte("a")}, t0); len(r.deliver) != 1 {
		t.Fatal("first frame not delivered")
	}
	// Endpoint 1 sent 3 frames; 2 and 3 are still on their way when endpoint 2 says hello.
	in.accept(inFrame{kind: kindHello, epoch: 5, prevEpoch: 1, seq: 3}, t0)
	if r := in.accept(inFrame{kind: kindData, epoch: 5, seq: 1, payload: []byte("d")}, t0); len(r.deliver) != 0 {
		t.Fatal("a frame of the new endpoint overtook the old one")
	}
	if in.view().finishedThrough(5) || !in.view().finishedThrough(0) {
		t.Fatal("endpoints 1 and 5 count as finished with frames held")
	}
	if r := in.expire(t0.Add(time.Second), 2*time.Second); len(r.deliver) != 0 {
		t.Fatal("released before the hold timeout")
	}
	r := in.accept(inFrame{kind: kindData, epoch: 1, seq: 2, payload: []byte("b")}, t0)
	if len(r.deliver) != 1 || string(r.deliver[0]) != "b" {
		t.Fatalf("late frame of the old endpoint: %q", r.deliver)
	}
	r = in.expire(t0.Add(3*time.Second), 2*time.Second)
	if len(r.deliver) != 1 || string(r.deliver[0]) != "d" || r.lost != 1 {
		t.Fatalf("expiry delivered %q, lost %d; want d and 1 lost", r.deliver, r.lost)
	}
	// Frame 3 of the old endpoint turns up after all: stale, dropped.
	if r := in.accept(inFrame{kind: kindData, epoch: 1, seq: 3, payload: []byte("c")}, t0); len(r.deliver) != 0 || r.stale != 1 {
		t.Fatalf("stale frame: %+v", r)
	}
}

// TestInboundFinBeforeItsFrames: a fin that overtook frames of its own endpoint (UCX sent it
// while a longer frame before it waited for the endpoint's wireup) does not make them lost: they
// are delivered when they come, and the endpoint counts as finished only then. If they never
// come, they are counted lost once the fin has waited the hold timeout.
func TestInboundFinBeforeItsFrames(t *testing.T) {
	t0 := time.Unix(0, 0)
	t.Run("late frames delivered", func(t *testing.T) {
		var in inbound
		in.accept(inFrame{kind: kindHello, epoch: 3}, t0)
		r := in.accept(inFrame{kind: kindFin, epoch: 3, seq: 2}, t0)
		require.Zero(t, r.lost)
		require.False(t, in.view().finishedThrough(3), "finished with two frames its fin counts missing")
		r = in.accept(inFrame{kind: kindData, epoch: 3, seq: 2, payload: []byte("b")}, t0)
		require.Empty(t, r.deliver, "frame 2 overtook frame 1")
		require.Empty(t, in.expire(t0.Add(time.Second), 2*time.Second).deliver, "released before the hold timeout")
		r = in.accept(inFrame{kind: kindData, epoch: 3, seq: 1, payload: []byte("a")}, t0.Add(time.Second))
		require.Equal(t, [][]byte{[]byte("a"), []byte("b")}, r.deliver)
		require.Zero(t, r.lost+r.stale)
		require.True(t, in.view().finishedThrough(3))
		require.Equal(t, inResult{}, in.expire(t0.Add(time.Hour), 2*time.Second), "nothing left to give up on")
	})
	t.Run("frames that never come", func(t *testing.T) {
		var in inbound
		in.accept(inFrame{kind: kindHello, epoch: 3}, t0)
		in.accept(inFrame{kind: kindData, epoch: 3, seq: 1, payload: []byte("a")}, t0)
		in.accept(inFrame{kind: kindFin, epoch: 3, seq: 3}, t0)
		require.Equal(t, inResult{}, in.expire(t0.Add(time.Second), 2*time.Second))
		r := in.expire(t0.Add(2*time.Second), 2*time.Second)
		require.Equal(t, uint64(2), r.lost)
		require.True(t, in.view().finishedThrough(3))
		r = in.accept(inFrame{kind: kindData, epoch: 3, seq: 2, payload: []byte("b")}, t0)
		require.Equal(t, uint64(1), r.stale, "a frame given up on is stale when it turns up")
		require.Empty(t, r.deliver)
	})
	t.Run("a gap inside an endpoint", func(t *testing.T) {
		var in inbound
		in.accept(inFrame{kind: kindHello, epoch: 3}, t0)
		in.accept(inFrame{kind: kindData, epoch: 3, seq: 3, payload: []byte("c")}, t0)
		in.accept(inFrame{kind: kindData, epoch: 3, seq: 1, payload: []byte("a")}, t0)
		r := in.accept(inFrame{kind: kindData, epoch: 3, seq: 3, payload: []byte("c")}, t0)
		require.Equal(t, uint64(1), r.stale, "a duplicate of a held frame")
		r = in.expire(t0.Add(2*time.Second), 2*time.Second)
		require.Equal(t, [][]byte{[]byte("c")}, r.deliver)
		require.Equal(t, uint64(1), r.lost)
		require.False(t, in.view().finishedThrough(3), "the endpoint is still open")
	})
}

// TestInboundFreshState: state that starts mid-stream (the receiver forgot the sender) takes the
// first frame as the start and counts nothing as lost; a sender that forgot us (hello without a
// predecessor) follows a finished endpoint at once.
func TestInboundFreshState(t *testing.T) {
	var in inbound
	t0 := time.Unix(0, 0)
	if r := in.accept(inFrame{kind: kindData, epoch: 4, seq: 9, payload: []byte("x")}, t0); len(r.deliver) != 1 || r.lost != 0 {
		t.Fatalf("mid-stream start: %+v", r)
	}
	in.accept(inFrame{kind: kindFin, epoch: 4, seq: 9}, t0)
	if v := in.view(); !v.finishedThrough(4) || v.latest != 4 {
		t.Fatalf("endpoint 4 unfinished after its fin: %+v", v)
	}
	in.accept(inFrame{kind: kindHello, epoch: 6}, t0)
	if r := in.accept(inFrame{kind: kindData, epoch: 6, seq: 1, payload: []byte("y")}, t0); len(r.deliver) != 1 {
		t.Fatal("a hello without a predecessor waited behind a finished endpoint")
	}
	if v := in.view(); v.finishedThrough(6) || !v.finishedThrough(4) || v.latest != 6 {
		t.Fatalf("view with endpoint 6 open: %+v", v)
	}
}

// FuzzInboundOrder: random endpoint histories and interleavings; delivered frames are exactly the
// ones that arrived, in the order sent, and lost counts exactly the ones that did not.
func FuzzInboundOrder(f *testing.F) {
	f.Add([]byte{3, 5, 1, 0, 4, 1, 0, 2, 0, 0, 1, 2, 3, 0, 1})
	f.Add([]byte{4, 0, 1, 0, 0, 0, 0, 7, 1, 0, 3, 0, 2, 255, 128, 7})
	f.Add([]byte{2, 9, 0, 4, 9, 0, 0, 1, 1, 1, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		next := func() int {
			if len(b) == 0 {
				return 0
			}
			v := int(b[0])
			b = b[1:]
			return v
		}
		n := 1 + next()%4
		epochs := make([]simEpoch, n)
		for i := range epochs {
			e := &epochs[i]
			e.frames = next() % 10
			e.fin = next()%2 == 1
			if !e.fin && e.frames > 0 {
				e.drop = next() % (e.frames + 1)
			}
		}
		lanes, want, wantLost := simSender(epochs)
		var within func(n int) int
		if next()%2 == 1 {
			within = func(n int) int { return next() % n }
		}
		got, lost, stale := run(t, lanes, func(n int) int { return next() % n }, within)
		sameOrder(t, got, want)
		if lost != wantLost || stale != 0 {
			t.Fatalf("lost %d (want %d), stale %d", lost, wantLost, stale)
		}
	})
}

// The layouts themselves are fuzzed where they live (velo/internal/wire: FuzzDecodeUCXBlob,
// FuzzDecodeUCXHeader, FuzzDecodeUCXHelloBody); this one runs the transport's view of a hello.

// FuzzDecodeHelloBody: arbitrary hello payloads never panic.
func FuzzDecodeHelloBody(f *testing.F) {
	blob := appendBlob(nil, peerBlob{MaxFrame: MinEagerMax, Incarnation: 3, Worker: []byte{9}})
	f.Add(appendHelloBody(nil, 5, blob))
	f.Add(binary.BigEndian.AppendUint32(nil, 1))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _, _ = decodeHelloBody(b)
	})
}

// TestNotHeardFromIsNotFinished: before anything of a sender arrived, none of its endpoints counts
// as finished (its hello and first frames may still be on their way on the pairing that closing
// ours would tear); only epoch 0 is.
func TestNotHeardFromIsNotFinished(t *testing.T) {
	var v peerView
	require.True(t, v.finishedThrough(0))
	require.False(t, v.finishedThrough(1), "a sender not heard from yet finished epoch 1")
}

// TestInboundCountsFinsPlayedAgain: a second fin for a finished endpoint, and a fin for an
// endpoint older than the current one, change nothing and are counted as played again.
func TestInboundCountsFinsPlayedAgain(t *testing.T) {
	var in inbound
	now := time.Now()
	r := in.accept(inFrame{kind: kindHello, epoch: 10}, now)
	r = in.accept(inFrame{kind: kindData, epoch: 10, seq: 1, payload: []byte("a")}, now)
	require.Len(t, r.deliver, 1)
	r = in.accept(inFrame{kind: kindFin, epoch: 10, seq: 1}, now)
	require.Zero(t, r.finsAgain, "the first fin is the endpoint's own")
	r = in.accept(inFrame{kind: kindFin, epoch: 10, seq: 1}, now)
	require.EqualValues(t, 1, r.finsAgain, "the same fin again")
	r = in.accept(inFrame{kind: kindHello, epoch: 17, seq: 1, prevEpoch: 10}, now)
	r = in.accept(inFrame{kind: kindData, epoch: 17, seq: 1, payload: []byte("b")}, now)
	require.Len(t, r.deliver, 1, "the next endpoint's frames still arrive")
	r = in.accept(inFrame{kind: kindFin, epoch: 10, seq: 1}, now)
	require.EqualValues(t, 1, r.finsAgain, "a fin for an endpoint before the current one")
	r = in.accept(inFrame{kind: kindData, epoch: 17, seq: 2, payload: []byte("c")}, now)
	require.Len(t, r.deliver, 1, "a played fin does not end the current endpoint")
}
