package velo

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/push"
	"github.com/velo-go/velo/velo/transport/tcp"
)

// Push tests that need no RDMA: every put takes the chunked path over the TCP control plane. The
// same behaviours over the real UCX transport are in push_ucx_test.go.

// pushGuard is how many bytes on each side of a granted range no put may touch.
const pushGuard = 4096

// pushFixture is a receiver with a region whose middle is granted to the writer, and guard bytes
// around the grant that the tests check after every step.
type pushFixture struct {
	recv, writer *Velo
	region       *Region
	grant        *WriteGrant
	h            GrantHandle
	span         GrantRange // the granted range
	guard        []byte     // the region's bytes as the tests expect them
}

func newPushFixture(t *testing.T, recv, writer *Velo, size int, opts GrantOptions) *pushFixture {
	t.Helper()
	ctx := tctx(t)
	g, err := recv.NewRegion(size + 2*pushGuard)
	require.NoError(t, err)
	t.Cleanup(g.Free)
	copy(g.Bytes(), payload(len(g.Bytes()), 999))
	f := &pushFixture{recv: recv, writer: writer, region: g, span: GrantRange{Offset: pushGuard, Length: uint64(size)},
		guard: append([]byte(nil), g.Bytes()...)}
	if len(opts.Ranges) == 0 {
		opts.Ranges = []GrantRange{f.span}
	}
	f.grant, err = recv.GrantWrite(ctx, writer.ID(), g, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.grant.Revoke(context.Background()) })
	f.h = f.grant.Handle()
	// The handle travels as text, as an application would send it.
	text, err := f.h.MarshalText()
	require.NoError(t, err)
	var back GrantHandle
	require.NoError(t, back.UnmarshalText(text))
	require.Equal(t, f.h, back)
	return f
}

// put writes src at off (in the grant's terms) and records what the region should hold.
func (f *pushFixture) put(t *testing.T, off int, src []byte, opts *PutOptions) error {
	t.Helper()
	err := f.writer.Put(tctx(t), f.h, f.span.Offset+uint64(off), src, opts)
	if err == nil {
		copy(f.guard[f.span.Offset+uint64(off):], src)
	}
	return err
}

// check compares the whole region, guard bytes included, with what the tests wrote.
func (f *pushFixture) check(t *testing.T, what string) {
	t.Helper()
	got := f.region.Bytes()
	if bytes.Equal(got, f.guard) {
		return
	}
	for i := range got {
		if got[i] != f.guard[i] {
			where := "inside the grant"
			if uint64(i) < f.span.Offset || uint64(i) >= f.span.End() {
				where = "OUTSIDE the grant"
			}
			t.Fatalf("%s: byte %d (%s) is %#x, want %#x", what, i, where, got[i], f.guard[i])
		}
	}
}

// pushPair is a receiver and a writer that registered each other.
func pushPair(t *testing.T, opts ...Option) (recv, writer *Velo) {
	t.Helper()
	recv, writer = pair(t, opts...)
	require.NoError(t, writer.RegisterPeer(tctx(t), recv.PeerInfo()))
	return recv, writer
}

// checkGuards compares only the bytes outside the grant, which no put may ever write: a test may
// read them while puts are in flight (reading the granted bytes then would race with the
// receiver's copies, which the race detector cannot see ordered by the network).
func (f *pushFixture) checkGuards(t *testing.T, what string) {
	t.Helper()
	got := f.region.Bytes()
	for _, r := range [][2]uint64{{0, f.span.Offset}, {f.span.End(), uint64(len(got))}} {
		if !bytes.Equal(got[r[0]:r[1]], f.guard[r[0]:r[1]]) {
			t.Fatalf("%s: the bytes in [%d, %d), outside the grant, changed", what, r[0], r[1])
		}
	}
}

func pushPath(t *testing.T, v *Velo, side string, p metrics.Path, r metrics.Reason) float64 {
	t.Helper()
	return metric(t, v, push.PathTotal, map[string]string{"side": side, "path": string(p), "reason": string(r)})
}

// TestPushChunked: without RDMA every put goes by chunks over the control plane, sizes across the
// chunk boundary are written byte for byte, the guard bytes stay, and the path metric says chunked
// with the pull path's reason on both sides.
func TestPushChunked(t *testing.T) {
	recv, writer := pushPair(t)
	f := newPushFixture(t, recv, writer, 20<<20, GrantOptions{})
	// The ranges overlap: each put rewrites part of the one before. The receiver reads the region
	// once the last notification came (reading it while the writer writes would be a race).
	sizes := []int{1, 1 << 10, push.DefaultChunkSize - 1, push.DefaultChunkSize, push.DefaultChunkSize + 1, 16 << 20}
	for i, n := range sizes {
		require.NoError(t, f.put(t, i*7, payload(n, uint64(i)), &PutOptions{Notify: true}), "%d bytes", n)
	}
	for i, n := range sizes {
		nt := <-f.grant.Notifications()
		require.Equal(t, []GrantRange{{Offset: f.span.Offset + uint64(i*7), Length: uint64(n)}}, nt.Ranges, "notifications come in order")
	}
	f.check(t, "after the puts")
	assert.Equal(t, 6.0, pushPath(t, writer, "writer", metrics.PathChunked, metrics.ReasonNotConfigured))
	assert.Equal(t, 1.0, pushPath(t, recv, "receiver", metrics.PathChunked, metrics.ReasonNotConfigured))
}

// TestPushChunkedToASmallFrameReceiver: a receiver whose control plane reads frames of at most
// 300 KiB answers the grant with pieces that fit them, so a writer with the default 16 MiB frames
// still lands a 2 MiB put (each piece is one frame, read straight into the region).
func TestPushChunkedToASmallFrameReceiver(t *testing.T) {
	ctl, err := tcp.New(tcp.Config{ListenAddress: "127.0.0.1:0", MaxFrameSize: 300 << 10})
	require.NoError(t, err)
	recv, writer := newInstance(t, WithTransport(ctl)), newInstance(t)
	require.NoError(t, recv.RegisterPeer(tctx(t), writer.PeerInfo()))
	require.NoError(t, writer.RegisterPeer(tctx(t), recv.PeerInfo()))
	f := newPushFixture(t, recv, writer, 4<<20, GrantOptions{})
	require.NoError(t, f.put(t, 3, payload(2<<20+5, 7), &PutOptions{Notify: true}))
	<-f.grant.Notifications()
	f.check(t, "after the put")
	assert.Equal(t, 1.0, pushPath(t, writer, "writer", metrics.PathChunked, metrics.ReasonNotConfigured))
}

// TestPushNotificationsAfterData: a batch of 1,000 puts of 64 KiB into a 64 MiB region with a
// notification each; the receiver checks every notified range the moment its notification arrives
// and never finds it incomplete; every notification arrives once, and in the writer's order for
// puts of one notifier message. Wait sees the ranges covered.
// At 1 KiB the puts travel inside their notifications (push.DefaultInlineMax); the rule is the
// same.
func TestPushNotificationsAfterData(t *testing.T) {
	for _, size := range []int{64 << 10, 1 << 10} {
		t.Run(sizeName(size), func(t *testing.T) {
			recv, writer := pushPair(t)
			testPushNotifications(t, recv, writer, metrics.PathChunked, size)
		})
	}
}

func sizeName(n int) string {
	if n >= 1<<10 && n%(1<<10) == 0 {
		return strconv.Itoa(n>>10) + "KiB"
	}
	return strconv.Itoa(n) + "B"
}

func testPushNotifications(t *testing.T, recv, writer *Velo, want metrics.Path, size int) {
	const n = 1000
	src := payload(n*size, 77)
	sums := make([][32]byte, n)
	for i := range sums {
		sums[i] = sha256.Sum256(src[i*size : (i+1)*size])
	}
	var early, seen atomic.Int64
	var mu sync.Mutex
	count := map[uint32]int{}
	var f *pushFixture
	f = newPushFixture(t, recv, writer, n*size, GrantOptions{OnNotify: func(nt Notification) {
		seen.Add(1)
		if string(nt.Payload) == "batch done" {
			if len(nt.Ranges) != n {
				early.Add(1000000) // the batch notification covers every entry's range
			}
			return
		}
		i := binary.BigEndian.Uint32(nt.Payload)
		r := nt.Ranges[0]
		got := f.region.Bytes()[r.Offset : r.Offset+r.Length]
		if sha256.Sum256(got) != sums[i] {
			early.Add(1)
		}
		mu.Lock()
		count[i]++
		mu.Unlock()
	}})
	reqs := make([]PutRequest, n)
	for i := range reqs {
		slot := i * 7 % n // neighbours in the batch are not neighbours in memory
		reqs[i] = PutRequest{Offset: f.span.Offset + uint64(slot*size), Src: src[i*size : (i+1)*size], Notify: true,
			Payload: binary.BigEndian.AppendUint32(nil, uint32(i))}
	}
	errs, nerr := writer.PutBatch(tctx(t), f.h, reqs, &PutBatchOptions{Notify: true, Payload: []byte("batch done")})
	for i, err := range errs {
		require.NoError(t, err, "entry %d", i)
		copy(f.guard[reqs[i].Offset:], reqs[i].Src)
	}
	require.NoError(t, nerr)
	require.NoError(t, f.grant.Wait(tctx(t)), "the whole grant is covered")
	require.EqualValues(t, n+1, seen.Load())
	require.Zero(t, early.Load(), "notifications arrived before their data")
	for i := range n {
		require.Equal(t, 1, count[uint32(i)], "notification %d", i)
	}
	f.check(t, "after the batch")
	if want == metrics.PathRDMA {
		assert.Equal(t, float64(n), pushPath(t, writer, "writer", metrics.PathRDMA, metrics.ReasonOK))
	}
	inline := 0.0
	if size <= push.DefaultInlineMax {
		inline = n
	}
	assert.Equal(t, inline, metric(t, recv, push.InlineWritesTotal, map[string]string{"side": "receiver"}), "puts that came inside their notifications")
}

// testPushInline: a notified put of up to push.DefaultInlineMax bytes travels inside its
// notification (one message: the receiver copies the bytes in, then delivers), byte for byte and
// in order, counted on the grant's path and as inline on both sides; a larger one goes as a write;
// a handle stretched over the guard bytes is refused by the receiver's own ranges with nothing
// written or delivered; and a receiver without the message (an earlier release) still gets the
// puts, as writes and notifications.
// inlineSizes are testPushInline's notified puts that travel inside their notifications.
var inlineSizes = []int{1, 64, 1000, push.DefaultInlineMax}

func testPushInline(t *testing.T, recv, writer *Velo, path metrics.Path, reason metrics.Reason) *pushFixture {
	t.Helper()
	ctx := tctx(t)
	f := newPushFixture(t, recv, writer, 1<<20, GrantOptions{})
	inline := func(v *Velo, side string) float64 {
		return metric(t, v, push.InlineWritesTotal, map[string]string{"side": side})
	}
	sizes := inlineSizes
	for i, n := range sizes {
		require.NoError(t, f.put(t, i*8192, payload(n, uint64(i+1)), &PutOptions{Notify: true, Payload: []byte{byte(i)}}), "%d bytes", n)
		nt := <-f.grant.Notifications()
		require.Equal(t, []GrantRange{{Offset: f.span.Offset + uint64(i*8192), Length: uint64(n)}}, nt.Ranges)
		require.Equal(t, []byte{byte(i)}, nt.Payload)
	}
	assert.Equal(t, float64(len(sizes)), inline(writer, "writer"))
	assert.Equal(t, float64(len(sizes)), inline(recv, "receiver"))

	require.NoError(t, f.put(t, 64<<10, payload(push.DefaultInlineMax+1, 9), &PutOptions{Notify: true}))
	<-f.grant.Notifications()
	assert.Equal(t, float64(len(sizes)), inline(writer, "writer"), "a put above the limit goes as a write")
	require.NoError(t, f.put(t, 128<<10, payload(100, 10), nil))
	assert.Equal(t, float64(len(sizes)), inline(writer, "writer"), "a put without a notification goes as a write")
	assert.Equal(t, float64(len(sizes)+2), pushPath(t, writer, "writer", path, reason))

	wider := f.h
	wider.Ranges = []GrantRange{{Offset: 0, Length: uint64(len(f.region.Bytes()))}}
	err := writer.Put(ctx, wider, 0, payload(100, 11), &PutOptions{Notify: true})
	require.ErrorIs(t, err, ErrOutOfGrant, "a stretched handle: the receiver checks its own ranges")
	t.Logf("%v", err)
	f.checkGuards(t, "after the stretched handle")
	select {
	case nt := <-f.grant.Notifications():
		t.Fatalf("a refused put was notified: %+v", nt)
	default:
	}

	// The receiver as an earlier release would be: no handler for the message. The writer learns
	// it from the first put and writes every later one the grant's way.
	recv.msgr.HandleInternal("velo.push.notewrite", nil)
	for i := range 2 {
		require.NoError(t, f.put(t, 256<<10+i*4096, payload(200, uint64(20+i)), &PutOptions{Notify: true, Payload: []byte("old")}))
		nt := <-f.grant.Notifications()
		require.Equal(t, []GrantRange{{Offset: f.span.Offset + 256<<10 + uint64(i*4096), Length: 200}}, nt.Ranges)
	}
	// Read once, at the end: each put's bytes are ordered before a later notification's delivery,
	// which the race detector sees; a read between puts would race with the next chunked write.
	f.check(t, "after every put")
	assert.Equal(t, float64(len(sizes)), inline(writer, "writer"))
	assert.Equal(t, float64(len(sizes)+4), pushPath(t, writer, "writer", path, reason))
	return f
}

// TestPushInlineLimit: WithPushInlineMax(0) writes even a small notified put and notifies after
// it; a raised limit carries larger ones; a limit out of bounds is refused at New, naming the range.
func TestPushInlineLimit(t *testing.T) {
	inline := func(v *Velo) float64 {
		return metric(t, v, push.InlineWritesTotal, map[string]string{"side": "writer"})
	}
	for _, c := range []struct {
		limit, size int
		inline      float64
	}{{0, 64, 0}, {16 << 10, 16 << 10, 1}, {16 << 10, 16<<10 + 1, 0}} {
		recv, writer := pushPair(t, WithPushInlineMax(c.limit))
		f := newPushFixture(t, recv, writer, 64<<10, GrantOptions{})
		require.NoError(t, f.put(t, 0, payload(c.size, 3), &PutOptions{Notify: true}))
		<-f.grant.Notifications()
		f.check(t, "after the put")
		assert.Equal(t, c.inline, inline(writer), "limit %d, a put of %d bytes", c.limit, c.size)
	}
	for _, bad := range []int{-1, 64<<10 + 1} {
		_, err := New(tctx(t), WithPushInlineMax(bad))
		require.ErrorContains(t, err, "want 0 (off) to 65536 bytes")
	}
}

// noteWriteBytes encodes one notified write by hand (velo/internal/wire/push.go's layout,
// big-endian): the grant's id and nonce, one entry, its offset, payload and bytes.
func noteWriteBytes(h GrantHandle, off uint64, payload, data []byte) []byte {
	b := binary.BigEndian.AppendUint64(nil, h.ID)
	b = append(b, h.Nonce[:]...)
	b = binary.BigEndian.AppendUint16(b, 1)
	b = binary.BigEndian.AppendUint64(b, off)
	b = binary.BigEndian.AppendUint32(b, uint32(len(payload)))
	b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
	return append(append(b, payload...), data...)
}

// TestPushNotifiedWritesByHand: notified writes sent straight on the messenger, as a peer that
// skips the writer's own checks would send them — from an instance the grant does not name, with
// a forged nonce, outside the grant, over the guard bytes, malformed — are each refused by the
// receiver with its reason; nothing outside the grant is written and nothing is delivered. The same
// message from the grantee lands and is delivered.
func TestPushNotifiedWritesByHand(t *testing.T) {
	recv, writer := pushPair(t)
	third := newInstance(t)
	ctx := tctx(t)
	require.NoError(t, third.RegisterPeer(ctx, recv.PeerInfo()))
	require.NoError(t, recv.RegisterPeer(ctx, third.PeerInfo()))
	f := newPushFixture(t, recv, writer, 64<<10, GrantOptions{})
	const op = "velo.push.notewrite"
	data := payload(512, 5)
	send := func(from *Velo, b []byte) ([]byte, error) { return from.msgr.Request(ctx, recv.ID(), op, b) }

	_, err := send(third, noteWriteBytes(f.h, f.span.Offset, nil, data))
	require.ErrorContains(t, err, "write grant belongs to another writer", "another instance")
	forged := f.h
	forged.Nonce[3] ^= 0x40
	_, err = send(writer, noteWriteBytes(forged, f.span.Offset, nil, data))
	require.ErrorContains(t, err, "nonce does not match", "a forged nonce")
	for _, off := range []uint64{0, f.span.End() - 100, f.span.End(), 1 << 62} {
		ans, err := send(writer, noteWriteBytes(f.h, off, []byte("x"), data))
		require.NoError(t, err)
		require.Equal(t, []byte{2}, ans, "offset %d: answered out of the grant (code 2)", off)
	}
	b := noteWriteBytes(f.h, f.span.Offset, nil, data)
	for _, bad := range [][]byte{b[:len(b)-1], append(bytes.Clone(b), 0), b[:30]} {
		_, err = send(writer, bad)
		require.ErrorContains(t, err, "notified write", "a malformed message")
	}
	select {
	case nt := <-f.grant.Notifications():
		t.Fatalf("a refused write was delivered: %+v", nt)
	default:
	}

	ans, err := send(writer, noteWriteBytes(f.h, f.span.Offset+8, []byte("by hand"), data))
	require.NoError(t, err)
	require.Equal(t, []byte{0}, ans)
	nt := <-f.grant.Notifications()
	require.Equal(t, []GrantRange{{Offset: f.span.Offset + 8, Length: uint64(len(data))}}, nt.Ranges)
	require.Equal(t, []byte("by hand"), nt.Payload)
	copy(f.guard[f.span.Offset+8:], data)
	f.check(t, "after the messages by hand")
}

// TestPushSmallNotifiedPutsTravelInline is testPushInline on the chunked path.
func TestPushSmallNotifiedPutsTravelInline(t *testing.T) {
	recv, writer := pushPair(t)
	testPushInline(t, recv, writer, metrics.PathChunked, metrics.ReasonNotConfigured)
}

// TestPushBadInput: each bad input gets its own error naming what to do, nothing outside the
// grant is written, and the grant serves on for the good puts.
func TestPushBadInput(t *testing.T) {
	recv, writer := pushPair(t)
	third := newInstance(t)
	ctx := tctx(t)
	require.NoError(t, recv.RegisterPeer(ctx, third.PeerInfo()))
	require.NoError(t, third.RegisterPeer(ctx, recv.PeerInfo()))
	f := newPushFixture(t, recv, writer, 1<<20, GrantOptions{})
	src := payload(4096, 1)

	// Refused before anything is sent.
	require.ErrorIs(t, f.put(t, 0, nil, nil), ErrEmptyPut)
	require.ErrorIs(t, f.put(t, 1<<20-10, src, nil), ErrOutOfGrant)
	require.ErrorIs(t, writer.Put(ctx, f.h, 0, src, nil), ErrOutOfGrant, "the guard bytes before the grant")
	require.ErrorIs(t, f.put(t, 0, src, &PutOptions{Notify: true, Payload: make([]byte, push.DefaultMaxNotify+1)}), ErrNotifyTooLarge)
	err := third.Put(ctx, f.h, f.span.Offset, src, nil)
	require.ErrorIs(t, err, ErrNotGrantee, "another instance holding the handle")
	t.Logf("%v", err)

	// Refused by the receiver.
	forged := f.h
	forged.Nonce[0] ^= 1
	require.ErrorIs(t, writer.Put(ctx, forged, f.span.Offset, src, nil), ErrBadGrant)
	stolen := f.h
	stolen.Writer = third.ID() // a handle rewritten to name the thief: the receiver still knows
	require.ErrorIs(t, third.Put(ctx, stolen, f.span.Offset, src, nil), ErrNotGrantee)
	wider := f.h
	wider.Ranges = []GrantRange{{Offset: 0, Length: uint64(len(f.region.Bytes()))}}
	err = writer.Put(ctx, wider, 0, src, nil)
	require.ErrorIs(t, err, ErrOutOfGrant, "a handle stretched over the guard bytes: the receiver checks its own ranges")
	t.Logf("%v", err)
	f.checkGuards(t, "after the refused puts")

	// Grants the receiver refuses to make.
	_, err = recv.GrantWrite(ctx, third.ID(), f.region, GrantOptions{Ranges: []GrantRange{{Offset: f.span.Offset + 100, Length: 10}}})
	require.ErrorIs(t, err, ErrOverlap)
	_, err = recv.GrantWrite(ctx, third.ID(), f.region, GrantOptions{Ranges: []GrantRange{{Offset: uint64(len(f.region.Bytes())) - 10, Length: 100}}})
	require.ErrorIs(t, err, ErrOutOfGrant)
	_, err = recv.GrantWrite(ctx, InstanceID(12345), f.region, GrantOptions{Ranges: []GrantRange{{Offset: 0, Length: 10}}})
	require.ErrorIs(t, err, ErrUnknownPeer)

	// A good put still lands.
	require.NoError(t, f.put(t, 10, src, &PutOptions{Notify: true, Payload: []byte("ok")}))
	n := <-f.grant.Notifications()
	require.Equal(t, []GrantRange{{Offset: f.span.Offset + 10, Length: 4096}}, n.Ranges)
	require.Equal(t, writer.ID(), n.Writer)
	require.Equal(t, []byte("ok"), n.Payload)
	require.Equal(t, src, f.region.Bytes()[n.Ranges[0].Offset:n.Ranges[0].End()], "the notified range holds the put")
	f.checkGuards(t, "after a good put")

	// A context cancelled in the middle of a batch: every entry reports, none hangs.
	cctx, cancel := context.WithCancel(ctx)
	// The batch writes the upper half of the grant: the bytes the test read above stay untouched
	// (the race detector cannot see the network order those reads and later copies have).
	const batchAt = 512 << 10
	reqs := make([]PutRequest, 64)
	for i := range reqs {
		reqs[i] = PutRequest{Offset: f.span.Offset + batchAt + uint64(i*4096), Src: src}
	}
	go cancel()
	errs, _ := writer.PutBatch(cctx, f.h, reqs, nil)
	require.Len(t, errs, 64)
	for i, err := range errs {
		if err == nil {
			copy(f.guard[reqs[i].Offset:], src)
		} else {
			require.ErrorIs(t, err, context.Canceled, "entry %d", i)
		}
	}

	// Revoked: the key is dead and the next put says so. Once Done, nothing lands any more.
	require.NoError(t, f.grant.Revoke(ctx))
	err = f.put(t, 0, src, nil)
	require.ErrorIs(t, err, ErrGrantEnded)
	t.Logf("%v", err)
	<-f.grant.Done()
	// A cancelled chunk may have landed without its answer: inside the grant, the writer's anyway.
	copy(f.guard[f.span.Offset+batchAt:f.span.Offset+batchAt+64*4096], f.region.Bytes()[f.span.Offset+batchAt:])
	f.check(t, "after the revocation")
	require.Zero(t, recv.PushGrants())
}

// TestPushGrantEnds: a grant ends at its TTL, when its writer goes away, and when the receiver
// drains; each time Done closes and later puts fail with ErrGrantEnded.
func TestPushGrantEnds(t *testing.T) {
	ctx := tctx(t)
	t.Run("ttl", func(t *testing.T) {
		recv, writer := pushPair(t)
		f := newPushFixture(t, recv, writer, 64<<10, GrantOptions{TTL: 100 * time.Millisecond})
		require.NoError(t, f.put(t, 0, payload(100, 1), nil))
		<-f.grant.Done()
		require.ErrorIs(t, f.grant.Err(), ErrGrantEnded)
		require.ErrorIs(t, f.put(t, 0, payload(100, 2), nil), ErrGrantEnded)
		f.check(t, "after the expiry")
	})
	t.Run("writer_gone", func(t *testing.T) {
		recv, writer := pushPair(t)
		f := newPushFixture(t, recv, writer, 64<<10, GrantOptions{})
		require.NoError(t, f.put(t, 0, payload(100, 1), nil))
		require.NoError(t, writer.Close())
		select {
		case <-f.grant.Done():
		case <-time.After(testWait):
			t.Fatal("the grant outlived its writer")
		}
		require.ErrorIs(t, f.grant.Err(), ErrGrantEnded)
		assert.Contains(t, f.grant.Err().Error(), "writer")
	})
	t.Run("drain", func(t *testing.T) {
		recv, writer := pushPair(t)
		f := newPushFixture(t, recv, writer, 64<<10, GrantOptions{})
		recv.BeginDrain()
		<-f.grant.Done()
		err := f.put(t, 0, payload(100, 1), nil)
		require.True(t, errors.Is(err, ErrGrantEnded) || errors.Is(err, ErrDraining), "%v", err)
		_, err = recv.GrantWrite(ctx, writer.ID(), f.region, GrantOptions{})
		require.ErrorIs(t, err, ErrDraining)
	})
	t.Run("receiver_closes", func(t *testing.T) {
		recv, writer := pushPair(t)
		f := newPushFixture(t, recv, writer, 64<<10, GrantOptions{})
		require.NoError(t, recv.Close())
		<-f.grant.Done()
		require.Error(t, f.put(t, 0, payload(100, 1), nil))
	})
}

// TestChunkedGetAfterPushStarted: an instance that receives pushes (its push service claims bulk
// write requests, which makes its TCP reads look further into every frame) still fetches chunked
// payloads into its own buffers, whole and with the owner still up.
func TestChunkedGetAfterPushStarted(t *testing.T) {
	cons, owner := pair(t)
	_, err := cons.pushService()
	require.NoError(t, err)
	ctx := tctx(t)
	for i, n := range []int{10, 3 << 20} { // inside the longer prefix, and two 2 MiB pulls
		data := payload(n, uint64(i))
		dst := make([]byte, n)
		l, err := cons.GetInto(ctx, stage(t, owner, data, false), dst)
		require.NoError(t, err, "%d bytes", n)
		require.Equal(t, metrics.PathChunked, l.Path)
		require.Equal(t, sum(data), sum(dst), "%d bytes", n)
		require.NoError(t, l.Release(ctx))
	}
	for _, p := range cons.Peers() {
		assert.Equal(t, StateUp, p.State, "peer %v was taken for down: %s", p.ID, p.Err)
	}
}

// TestPushServiceFollowsItsInstance: each instance's push service is its own, drained by its
// drain even when the drain came before the service was made, and ended with no delay by its
// Close, which leaves another instance's grants alone.
func TestPushServiceFollowsItsInstance(t *testing.T) {
	ctx := tctx(t)
	t.Run("drain_before_first_grant", func(t *testing.T) {
		recv, writer := pushPair(t)
		recv.BeginDrain()
		g, err := recv.NewRegion(4 << 10)
		require.NoError(t, err)
		defer g.Free()
		_, err = recv.GrantWrite(ctx, writer.ID(), g, GrantOptions{})
		require.ErrorIs(t, err, ErrDraining)
		assert.Zero(t, recv.PushGrants())
	})
	t.Run("close", func(t *testing.T) {
		recv, writer := pushPair(t)
		other, _ := pushPair(t)
		require.NoError(t, other.RegisterPeer(ctx, writer.PeerInfo()))
		require.NoError(t, writer.RegisterPeer(ctx, other.PeerInfo()))
		f := newPushFixture(t, recv, writer, 64<<10, GrantOptions{})
		kept := newPushFixture(t, other, writer, 64<<10, GrantOptions{})
		require.Equal(t, 1, recv.PushGrants())
		require.NoError(t, recv.Close())
		// Close ended the grant before it returned (nothing polls for the close); Done follows
		// once its keys are dead.
		require.ErrorIs(t, f.grant.Err(), ErrClosed)
		select {
		case <-f.grant.Done():
		case <-time.After(testWait):
			t.Fatal("the grant's keys outlived its receiver")
		}
		assert.Zero(t, recv.PushGrants())
		_, err := recv.GrantWrite(ctx, writer.ID(), f.region, GrantOptions{})
		require.ErrorIs(t, err, ErrClosed)

		require.Equal(t, 1, other.PushGrants(), "closing one instance ended another's grant")
		require.NoError(t, kept.put(t, 0, payload(100, 1), nil))
		require.NoError(t, kept.grant.Revoke(ctx))
		<-kept.grant.Done() // no write lands after it: the region may be read
		kept.check(t, "after the other receiver closed")
	})
}
