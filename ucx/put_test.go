//go:build cgo && linux

package ucx

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// putPair is a writer engine a and a target engine b with a writable registration of n bytes
// between two guard areas that no write may touch.
type putPair struct {
	a, b  *Engine
	ab    *Conn
	mem   []byte // guard, region, guard
	reg   *Registration
	key   *RegionKey
	area  []byte // the registered region
	guard int
}

func newPutPair(t *testing.T, n int, mod func(*EngineConfig)) *putPair {
	t.Helper()
	a, b, ab := enginePair(t, mod)
	skipIfReplyBroken(t, a)
	const guard = 4096
	m := allocFilled(t, n+2*guard, 5)
	p := &putPair{a: a, b: b, ab: ab, mem: m.Bytes(), area: m.Bytes()[guard : guard+n], guard: guard}
	var err error
	p.reg, err = b.RegisterWith(testContext(t), p.area, RegisterOptions{Access: AccessWrite})
	require.NoError(t, err)
	p.key, err = ParseRegionKey(p.reg.RemoteKey())
	require.NoError(t, err)
	require.Equal(t, AccessWrite, p.key.Access())
	return p
}

// guardsIntact checks the bytes on either side of the region against the fill pattern.
func (p *putPair) guardsIntact(t *testing.T) {
	t.Helper()
	want := make([]byte, len(p.mem))
	fill(want, 5)
	require.True(t, bytes.Equal(want[:p.guard], p.mem[:p.guard]), "the guard bytes before the region changed")
	require.True(t, bytes.Equal(want[len(want)-p.guard:], p.mem[len(p.mem)-p.guard:]), "the guard bytes after the region changed")
}

// TestPutKeySizes writes sizes across the piece boundary and up to 64 MiB into the middle of a
// region and checks every byte of it, the bytes around the range inside the region, and the guard
// bytes outside it.
func TestPutKeySizes(t *testing.T) {
	ctx := testContext(t)
	const region = 64<<20 + 8192
	p := newPutPair(t, region, nil)
	mode, err := p.ab.RMAMode(ctx)
	require.NoError(t, err)
	if mode == RMADirect && softwareRMARefused(t, p.ab) {
		t.Skip("direct RMA over software lanes on a guarded UCX writes nothing")
	}
	for i, n := range []int{1, 1 << 10, putChunkMax - 1, putChunkMax, putChunkMax + 1, 3<<20 + 17, 64 << 20} {
		src := allocFilled(t, n, uint64(100+i)).Bytes()[:n]
		off := 4096 - i // a different alignment each time
		before := append([]byte(nil), p.area...)
		require.NoError(t, p.ab.PutKey(ctx, src, p.key, uint64(off)), "%d bytes", n)
		require.True(t, bytes.Equal(src, p.area[off:off+n]), "%d bytes: the range holds other bytes (%x, want %x)", n, p.area[off:off+min(n, 8)], src[:min(n, 8)])
		require.True(t, bytes.Equal(before[:off], p.area[:off]), "%d bytes: bytes before the range changed", n)
		require.True(t, bytes.Equal(before[off+n:], p.area[off+n:]), "%d bytes: bytes after the range changed", n)
		p.guardsIntact(t)
	}
	// A write of no bytes at the region's end is accepted and writes nothing.
	require.NoError(t, p.ab.PutKey(ctx, nil, p.key, region))
	p.guardsIntact(t)
	t.Logf("path: %v", mode)
}

// TestPutKeyRefusals: a read-only key, a key with a forged token, a key stretched past its
// registration, a key that claims write access the registration does not grant, a revoked key and
// no key all fail with their own error, and nothing outside a served write changes; the target
// counts each refusal under its reason, logs them at most once per interval, and serves on.
func TestPutKeyRefusals(t *testing.T) {
	ctx := testContext(t)
	var logs syncBuffer
	reg := prometheus.NewRegistry()
	p := newPutPair(t, 1<<20, func(c *EngineConfig) {
		c.RMA = RMAGuarded
		c.Metrics = reg
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	ro := allocFilled(t, 8192, 9)
	roReg, err := p.b.Register(ctx, ro.Bytes())
	require.NoError(t, err)
	roKey, err := ParseRegionKey(roReg.RemoteKey())
	require.NoError(t, err)
	require.Equal(t, AccessRead, roKey.Access())
	roBefore := append([]byte(nil), ro.Bytes()...)
	areaBefore := append([]byte(nil), p.area...)
	src := bytes.Repeat([]byte("no-write!"), 100)

	forge := func(k *RegionKey, f func(*SealedKey)) *RegionKey {
		s := k.k
		f(&s)
		out, err := ParseRegionKey(AppendSealedKey(nil, s))
		require.NoError(t, err)
		return out
	}
	refused := func(outcome string) float64 {
		return testutil.ToFloat64(p.b.metrics.guardPuts.WithLabelValues(outcome))
	}
	cases := []struct {
		name    string
		key     *RegionKey
		off     uint64
		want    error
		outcome string // the target's refusal, "" for one refused before sending
	}{
		{"read-only key", roKey, 0, ErrAccessDenied, ""},
		{"past the region", p.key, 1<<20 - 100, ErrOutOfRange, ""},
		{"no key", nil, 0, ErrInvalidRemoteKey, ""},
		{"zero key", &RegionKey{}, 0, ErrInvalidRemoteKey, ""},
		{"forged token", forge(p.key, func(s *SealedKey) { s.Token ^= 0x5555 }), 0, ErrRemoteKeyRevoked, "revoked"},
		{"unknown slot", forge(p.key, func(s *SealedKey) { s.Slot += 1000 }), 0, ErrRemoteKeyRevoked, "revoked"},
		{"write claimed on a read-only registration", forge(roKey, func(s *SealedKey) { s.Access = AccessRead | AccessWrite }), 0, ErrAccessDenied, "read_only"},
		{"wider than the registration", forge(p.key, func(s *SealedKey) { s.Length *= 2 }), 1 << 20, ErrOutOfRange, "out_of_range"},
		{"wider and across the end", forge(p.key, func(s *SealedKey) { s.Length *= 2 }), 1<<20 - 10, ErrOutOfRange, "out_of_range"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var before float64
			if c.outcome != "" {
				before = refused(c.outcome)
			}
			err := p.ab.PutKey(ctx, src, c.key, c.off)
			require.ErrorIs(t, err, c.want)
			t.Logf("%v", err)
			require.True(t, bytes.Equal(roBefore, ro.Bytes()), "the read-only registration changed")
			require.True(t, bytes.Equal(areaBefore, p.area), "the writable registration changed")
			p.guardsIntact(t)
			if c.outcome != "" {
				require.Eventually(t, func() bool { return refused(c.outcome) > before }, 5*time.Second, time.Millisecond,
					"the target did not count the refusal as %s", c.outcome)
			}
		})
	}

	// The genuine key writes, then dies with its registration.
	require.NoError(t, p.ab.PutKey(ctx, src, p.key, 10))
	require.Equal(t, src, p.area[10:10+len(src)])
	require.NoError(t, p.reg.Unregister(ctx))
	snapshot := append([]byte(nil), p.area...)
	require.ErrorIs(t, p.ab.PutKey(ctx, bytes.Repeat([]byte{0xEE}, 64), p.key, 0), ErrRemoteKeyRevoked)
	require.True(t, bytes.Equal(snapshot, p.area), "a revoked key wrote")
	assert.Equal(t, 1.0, testutil.ToFloat64(p.b.metrics.guardPuts.WithLabelValues("served")))
	assert.GreaterOrEqual(t, testutil.ToFloat64(p.b.metrics.guardPutBytes), float64(len(src)))

	// Six refusals reached the target; its log has one line for them (the interval is 10 s).
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "refused guarded PUT") }, 5*time.Second, 10*time.Millisecond)
	assert.Equal(t, 1, strings.Count(logs.String(), "refused guarded PUT"), "refusals were logged more than once per interval:\n%s", logs.String())
	t.Logf("target log: %s", strings.TrimSpace(logs.String()))

	// The target serves on: a read through the read-only key, and a new writable registration.
	got := make([]byte, 100)
	require.NoError(t, p.ab.GetKey(ctx, got, roKey, 0))
	require.Equal(t, ro.Bytes()[:100], got)
	q := allocFilled(t, 4096, 3)
	qReg, err := p.b.RegisterWith(ctx, q.Bytes(), RegisterOptions{Access: AccessWrite | AccessRead})
	require.NoError(t, err)
	qKey, err := ParseRegionKey(qReg.RemoteKey())
	require.NoError(t, err)
	require.NoError(t, p.ab.PutKey(ctx, src[:50], qKey, 1))
	require.NoError(t, p.ab.GetKey(ctx, got[:50], qKey, 1))
	require.Equal(t, src[:50], got[:50])
}

// TestWriteOnlyKeyCannotRead: a registration made for writing only is not read through its key,
// neither refused locally (the key says so) nor by the owner (a key forged to say otherwise).
func TestWriteOnlyKeyCannotRead(t *testing.T) {
	ctx := testContext(t)
	p := newPutPair(t, 8192, func(c *EngineConfig) { c.RMA = RMAGuarded })
	dst := bytes.Repeat([]byte{0xA5}, 64)
	require.ErrorIs(t, p.ab.GetKey(ctx, dst, p.key, 0), ErrAccessDenied)
	s := p.key.k
	s.Access = AccessRead | AccessWrite
	forged, err := ParseRegionKey(AppendSealedKey(nil, s))
	require.NoError(t, err)
	require.ErrorIs(t, p.ab.GetKey(ctx, dst, forged, 0), ErrRemoteKeyRevoked)
	require.Equal(t, bytes.Repeat([]byte{0xA5}, 64), dst, "a refused read wrote into dst")
	var errs []error
	p.ab.GetMany(ctx, []KeyRead{{Key: p.key, Dst: dst}}, 4, func(_ int, err error) { errs = append(errs, err) })
	require.Len(t, errs, 1)
	require.ErrorIs(t, errs[0], ErrAccessDenied)
	_, err = p.b.RegisterWith(ctx, make([]byte, 64), RegisterOptions{Access: 4})
	require.ErrorIs(t, err, StatusInvalidParam)
}

// TestPutManyBatch: 1,000 writes of 64 KiB fill a 64 MiB region; each write is reported once, and
// every byte is where it belongs.
func TestPutManyBatch(t *testing.T) {
	ctx := testContext(t)
	const n, size = 1000, 64 << 10
	p := newPutPair(t, 64<<20, nil)
	if m, _ := p.ab.RMAMode(ctx); m == RMADirect && softwareRMARefused(t, p.ab) {
		t.Skip("direct RMA over software lanes on a guarded UCX writes nothing")
	}
	src := allocFilled(t, n*size, 77).Bytes()
	writes := make([]KeyWrite, n)
	for i := range writes {
		// Write i goes to slot (i*7)%n, so neighbours in the batch are not neighbours in memory.
		writes[i] = KeyWrite{Key: p.key, Offset: uint64((i * 7 % n) * size), Src: src[i*size : (i+1)*size]}
	}
	seen := make([]int, n)
	p.ab.PutMany(ctx, writes, 32, func(i int, err error) {
		seen[i]++
		require.NoError(t, err, "write %d", i)
	})
	for i, w := range writes {
		require.Equal(t, 1, seen[i], "write %d reported %d times", i, seen[i])
		require.True(t, bytes.Equal(w.Src, p.area[w.Offset:w.Offset+size]), "write %d", i)
	}
	p.guardsIntact(t)
}

// TestPutManyMixed: in one batch, writes that cannot be sent, writes the target refuses and good
// ones each get their own outcome, and a large write's pieces after a refused one are not sent.
func TestPutManyMixed(t *testing.T) {
	ctx := testContext(t)
	p := newPutPair(t, 4<<20, func(c *EngineConfig) { c.RMA = RMAGuarded })
	before := append([]byte(nil), p.area...)
	s := p.key.k
	s.Token++
	bad, err := ParseRegionKey(AppendSealedKey(nil, s))
	require.NoError(t, err)
	big := allocFilled(t, 2<<20, 8).Bytes()
	small := bytes.Repeat([]byte{0x42}, 1000)
	writes := []KeyWrite{
		{Key: p.key, Offset: 0, Src: small},
		{Key: bad, Offset: 0, Src: big},           // refused by the target, piece by piece
		{Key: p.key, Offset: 4 << 20, Src: small}, // past the end: refused before sending
		{Key: p.key, Offset: 1 << 20, Src: big},
		{Key: nil, Src: small},
	}
	errs := make([]error, len(writes))
	calls := 0
	p.ab.PutMany(ctx, writes, 4, func(i int, err error) { errs[i] = err; calls++ })
	require.Equal(t, len(writes), calls)
	require.NoError(t, errs[0])
	require.ErrorIs(t, errs[1], ErrRemoteKeyRevoked)
	require.ErrorIs(t, errs[2], ErrOutOfRange)
	require.NoError(t, errs[3])
	require.ErrorIs(t, errs[4], ErrInvalidRemoteKey)
	require.Equal(t, small, p.area[:1000])
	require.True(t, bytes.Equal(big, p.area[1<<20:3<<20]))
	require.True(t, bytes.Equal(before[1000:1<<20], p.area[1000:1<<20]))
	require.True(t, bytes.Equal(before[3<<20:], p.area[3<<20:]))
	// The refused write's later pieces were never sent: one refusal per piece posted, not eight.
	refusedPieces := testutil.ToFloat64(p.b.metrics.guardPuts.WithLabelValues("revoked"))
	assert.Less(t, refusedPieces, float64(len(big)/putChunkMax), "every piece of a refused write was sent")
	p.guardsIntact(t)
}

// TestPutManyVectored: to a peer that answers vectored guarded PUTs, consecutive small writes go
// several to a request. Writes of 4 KiB, 64 KiB, 200 KiB and 1 MiB in one batch each report once
// with every byte in place; in a mixed batch a write the target refuses, one refused before
// sending and one without a key each fail alone among good ones; and a peer that did not say it
// answers them is never sent one.
func TestPutManyVectored(t *testing.T) {
	ctx := testContext(t)
	p := newPutPair(t, 64<<20, func(c *EngineConfig) { c.RMA = RMAGuarded })
	ab, err := p.a.Connect(ctx, p.b.Address(), ConnectOptions{VectoredPut: true})
	require.NoError(t, err)
	vectors := func() float64 { return testutil.ToFloat64(p.a.metrics.ops.WithLabelValues("put_guarded_vector", "ok")) }

	var writes []KeyWrite
	off := 0
	src := allocFilled(t, 48<<20, 31).Bytes()
	for _, c := range []struct{ n, size int }{{1000, 4 << 10}, {300, 64 << 10}, {10, 200 << 10}, {8, 1 << 20}, {1000, 4 << 10}} {
		for range c.n {
			writes = append(writes, KeyWrite{Key: p.key, Offset: uint64(off), Src: src[off : off+c.size]})
			off += c.size
		}
	}
	// Neighbours in the batch are not neighbours in memory.
	for i := range writes {
		j := i * 7 % len(writes)
		writes[i].Src, writes[j].Src = writes[j].Src, writes[i].Src
		writes[i].Offset, writes[j].Offset = writes[j].Offset, writes[i].Offset
	}
	seen := make([]int, len(writes))
	ab.PutMany(ctx, writes, 16, func(i int, err error) {
		seen[i]++
		assert.NoError(t, err, "write %d", i)
	})
	for i, w := range writes {
		require.Equal(t, 1, seen[i], "write %d reported %d times", i, seen[i])
		require.True(t, bytes.Equal(w.Src, p.area[w.Offset:w.Offset+uint64(len(w.Src))]), "write %d", i)
	}
	p.guardsIntact(t)
	sent := vectors()
	// 2,318 writes; 2,000 of 4 KiB and 300 of 64 KiB fit several to a request.
	assert.Greater(t, sent, 50.0, "the small writes were not sent in vectored requests")
	assert.Less(t, sent, 1000.0, "the small writes were not sent in vectored requests")

	s := p.key.k
	s.Token++
	bad, err := ParseRegionKey(AppendSealedKey(nil, s))
	require.NoError(t, err)
	before := append([]byte(nil), p.area...)
	small := func(b byte) []byte { return bytes.Repeat([]byte{b}, 3000) }
	mixed := []KeyWrite{
		{Key: p.key, Offset: 0, Src: small(1)},
		{Key: bad, Offset: 8192, Src: small(2)},           // refused by the target, inside a request
		{Key: p.key, Offset: 64<<20 - 100, Src: small(3)}, // past the end: refused before sending
		{Key: p.key, Offset: 16384, Src: small(4)},
		{Key: nil, Src: small(5)}, // no key
		{Key: p.key, Offset: 24576, Src: small(6)},
	}
	errs := make([]error, len(mixed))
	calls := 0
	ab.PutMany(ctx, mixed, 4, func(i int, err error) { errs[i] = err; calls++ })
	require.Equal(t, len(mixed), calls)
	require.NoError(t, errs[0])
	require.ErrorIs(t, errs[1], ErrRemoteKeyRevoked)
	require.ErrorIs(t, errs[2], ErrOutOfRange)
	require.NoError(t, errs[3])
	require.ErrorIs(t, errs[4], ErrInvalidRemoteKey)
	require.NoError(t, errs[5])
	want := before
	for _, i := range []int{0, 3, 5} {
		copy(want[mixed[i].Offset:], mixed[i].Src)
	}
	require.True(t, bytes.Equal(want, p.area), "only the good writes landed")
	assert.Greater(t, vectors(), sent, "the mixed batch went in vectored requests")
	p.guardsIntact(t)

	// p.ab was connected without VectoredPut: its writes go one request each.
	sent = vectors()
	var failed error
	p.ab.PutMany(ctx, writes[:200], 16, func(i int, err error) {
		if err != nil && failed == nil {
			failed = err
		}
	})
	require.NoError(t, failed)
	assert.Equal(t, sent, vectors(), "a peer that did not say it answers vectored PUTs got one")
}

// TestPutNotifyNeverEarly: the receiver checks the bytes of each notified write the moment its
// notification arrives, over many writes; it never finds them missing. The writer reuses one
// source buffer and rewrites the same ranges, so a notification that overtook its data would see
// the previous round's bytes.
func TestPutNotifyNeverEarly(t *testing.T) {
	ctx := testContext(t)
	const size, ranges, rounds = 64 << 10, 16, 40
	p := newPutPair(t, ranges*size, nil)
	if m, _ := p.ab.RMAMode(ctx); m == RMADirect && softwareRMARefused(t, p.ab) {
		t.Skip("direct RMA over software lanes on a guarded UCX writes nothing")
	}
	var early atomic.Int64
	var got atomic.Int64
	arrived := make(chan struct{}, 1)
	require.NoError(t, p.b.HandleAM(9, func(m AMMessage) {
		idx := int(binary.LittleEndian.Uint32(m.Header[0:]))
		round := binary.LittleEndian.Uint32(m.Header[4:])
		r := p.area[idx*size : (idx+1)*size]
		for j := 0; j < size; j += 4096 {
			if binary.LittleEndian.Uint32(r[j:]) != round || r[j+8] != byte(idx) {
				early.Add(1)
				break
			}
		}
		got.Add(1)
		select {
		case arrived <- struct{}{}:
		default:
		}
	}))
	src := make([]byte, size)
	for round := uint32(1); round <= rounds; round++ {
		for idx := range ranges {
			for j := 0; j < size; j += 4096 {
				binary.LittleEndian.PutUint32(src[j:], round)
				src[j+8] = byte(idx)
			}
			hdr := binary.LittleEndian.AppendUint32(nil, uint32(idx))
			hdr = binary.LittleEndian.AppendUint32(hdr, round)
			require.NoError(t, p.ab.PutNotify(ctx, src, p.key, uint64(idx*size), 9, hdr))
		}
	}
	require.Eventually(t, func() bool { return got.Load() == rounds*ranges }, 10*time.Second, time.Millisecond)
	require.Zero(t, early.Load(), "notifications arrived before their data")

	// A notification the engine would refuse fails before anything is written; a refused write
	// sends no notification.
	before := got.Load()
	require.ErrorContains(t, p.ab.PutNotify(ctx, src, p.key, 0, ReservedAMIDs, nil), "reserved")
	require.ErrorIs(t, p.ab.PutNotify(ctx, src, p.key, 0, 9, nil, make([]byte, 2<<20)), ErrMessageTooLarge)
	require.ErrorIs(t, p.ab.PutNotify(ctx, src, p.key, ranges*size, 9, make([]byte, 8)), ErrOutOfRange)
	time.Sleep(50 * time.Millisecond)
	require.Equal(t, before, got.Load(), "a notification went out for a write that did not happen")
}

// TestPutCanceled: a batch whose context ends part way reports every write, returns, and leaves
// the engines working.
func TestPutCanceled(t *testing.T) {
	p := newPutPair(t, 16<<20, func(c *EngineConfig) { c.RMA = RMAGuarded })
	src := allocFilled(t, 16<<20, 4).Bytes()
	writes := make([]KeyWrite, 64)
	for i := range writes {
		writes[i] = KeyWrite{Key: p.key, Offset: uint64(i) << 18, Src: src[i<<18 : (i+1)<<18]}
	}
	ctx, cancel := context.WithCancel(testContext(t))
	var mu sync.Mutex
	outcomes := map[string]int{}
	calls := 0
	p.ab.PutMany(ctx, writes, 2, func(i int, err error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls == 3 {
			cancel()
		}
		outcomes[fmt.Sprint(err)]++
	})
	cancel()
	require.Equal(t, len(writes), calls)
	// Completions are reported in groups, so on a fast host every write may be done before the
	// cancellation is seen; each write either landed or failed with the cancellation, nothing else.
	for outcome := range outcomes {
		require.Contains(t, []string{fmt.Sprint(nil), context.Canceled.Error()}, outcome, "outcomes: %v", outcomes)
	}
	t.Logf("outcomes: %v", outcomes)
	require.NoError(t, p.ab.PutKey(testContext(t), src[:1000], p.key, 0))
	require.Equal(t, src[:1000], p.area[:1000])
	p.guardsIntact(t)
}

// TestPutDirect: with RMADirect the write is ucp_put_nbx and a flush. On a stock UCX over tcp
// the target's UCX writes it (unchecked: that is why the engine never picks this path on
// software lanes); on velo's UCX the target refuses it, writes nothing and counts it. Either
// way PutKey returns only after the flush.
func TestPutDirect(t *testing.T) {
	ctx := testContext(t)
	p := newPutPair(t, 1<<20, func(c *EngineConfig) { c.RMA = RMADirect })
	src := allocFilled(t, 300<<10, 12).Bytes()
	before := append([]byte(nil), p.area...)
	was := guardRefused(t).Put
	require.NoError(t, p.ab.PutKey(ctx, src, p.key, 100))
	if softwareRMARefused(t, p.ab) {
		require.True(t, bytes.Equal(before, p.area), "a software PUT on the guarded UCX wrote the target")
		require.Greater(t, guardRefused(t).Put, was)
	} else {
		require.True(t, bytes.Equal(src, p.area[100:100+len(src)]))
	}
	require.ErrorIs(t, p.ab.PutKey(ctx, src, p.key, 1<<20-10), ErrOutOfRange)
	p.guardsIntact(t)
}

// syncBuffer is a bytes.Buffer for a logger written from the progressor.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
