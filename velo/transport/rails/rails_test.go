package rails_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/rendezvous/rdma/rdmatest"
	"github.com/velo-go/velo/velo/transport"
	"github.com/velo-go/velo/velo/transport/rails"
)

// The rail set over the in-process RMA of rdmatest: one fabric per rail, so each rail's reads are
// counted and can be made to fail on their own. The same behaviour runs over real UCX rails in
// two network namespaces in module test (test/rails).

const wait = 60 * time.Second

func logger() *slog.Logger {
	if os.Getenv("VELO_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func tctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}

// node is one instance with n rails, each an rdmatest transport on fabrics[i].
type node struct {
	v     *velo.Velo
	rails *rails.Transport
	rt    []*rdmatest.Transport
}

func newNode(t *testing.T, fabrics []*rdmatest.Fabric, cfg rails.Config) node {
	t.Helper()
	var members []transport.Transport
	var rts []*rdmatest.Transport
	for _, f := range fabrics {
		m, err := f.New("ucx")
		require.NoError(t, err)
		members = append(members, m)
		rts = append(rts, m)
	}
	var ut transport.Transport
	var rs *rails.Transport
	if len(members) == 1 {
		ut = members[0]
	} else {
		var err error
		rs, err = rails.New(cfg, members...)
		require.NoError(t, err)
		ut = rs
	}
	v, err := velo.New(context.Background(), velo.WithLogger(logger()), velo.WithUCXTransport(ut))
	require.NoError(t, err)
	t.Cleanup(func() { v.Close() })
	return node{v: v, rails: rs, rt: rts}
}

func fabrics(n int) []*rdmatest.Fabric {
	out := make([]*rdmatest.Fabric, n)
	for i := range out {
		out[i] = rdmatest.NewFabric()
	}
	return out
}

// link registers each with the other.
func link(t *testing.T, a, b node) {
	t.Helper()
	require.NoError(t, a.v.RegisterPeer(tctx(t), b.v.PeerInfo()))
	require.NoError(t, b.v.RegisterPeer(tctx(t), a.v.PeerInfo()))
}

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed+1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func pathCount(t *testing.T, v *velo.Velo, path, reason string) float64 {
	t.Helper()
	x, err := metrics.Value(v.Metrics(), metrics.RDMAPathTotal, map[string]string{"path": path, "reason": reason})
	require.NoError(t, err)
	return x
}

// getOver stages payload on owner and gets it on consumer, checking the bytes.
func getOver(t *testing.T, owner, consumer node, payload []byte) {
	t.Helper()
	h, err := owner.v.StageDataPinned(tctx(t), payload)
	require.NoError(t, err)
	l, err := consumer.v.Get(tctx(t), h)
	require.NoError(t, err)
	require.Equal(t, sha256.Sum256(payload), sha256.Sum256(l.Bytes()), "the bytes differ")
	require.NoError(t, l.Release(tctx(t)))
}

func status(n node) []rails.RailStatus { return n.rails.Status() }

func TestLargeGetUsesEveryRail(t *testing.T) {
	fs := fabrics(2)
	owner, consumer := newNode(t, fs, rails.Config{SliceSize: 64 << 10}), newNode(t, fs, rails.Config{SliceSize: 64 << 10})
	link(t, owner, consumer)
	assert.Contains(t, owner.v.PeerInfo().Addresses, "ucx.rail1")
	assert.Equal(t, []string{"rail0", "rail1"}, consumer.rails.RailsTo(owner.v.ID()))

	payload := randomBytes(8<<20, 1)
	getOver(t, owner, consumer, payload)
	assert.Equal(t, 1.0, pathCount(t, consumer.v, "rdma", "ok"))
	st := status(consumer)
	assert.Equal(t, uint64(len(payload)), st[0].Bytes+st[1].Bytes)
	assert.Equal(t, uint64(len(payload)/(64<<10)), st[0].Slices+st[1].Slices)
	for _, s := range st {
		assert.Positive(t, s.Bytes, "rail %d carried nothing", s.Index)
		assert.Equal(t, rails.StateUp, s.State)
	}
	assert.Positive(t, owner.rt[0].Registrations.Load())
	assert.Positive(t, owner.rt[1].Registrations.Load(), "the owner registered the lease on one rail only")
	// Every key died with the lease, on each rail.
	rdmatest.Eventually(t, wait, "the rails' registrations to be revoked", func() bool {
		return owner.rt[0].LiveRegistrations() == 0 && owner.rt[1].LiveRegistrations() == 0
	})

	// The peer table and the introspection page name the rails.
	var found bool
	for _, p := range consumer.v.Peers() {
		if p.ID == owner.v.ID() {
			found = true
			assert.Equal(t, []string{"rail0", "rail1"}, p.Rails)
		}
	}
	assert.True(t, found)
	in := consumer.v.Introspect()
	assert.Equal(t, "2", in.Transports[len(in.Transports)-1].Settings["rails"])
}

func TestSmallGetStaysOnOneRail(t *testing.T) {
	fs := fabrics(2)
	owner, consumer := newNode(t, fs, rails.Config{}), newNode(t, fs, rails.Config{})
	link(t, owner, consumer)
	getOver(t, owner, consumer, randomBytes(256<<10, 2))
	st := status(consumer)
	assert.Equal(t, uint64(1), st[0].Slices+st[1].Slices)
}

func TestBatchAndRangesSpreadOverRails(t *testing.T) {
	fs := fabrics(3)
	cfg := rails.Config{SliceSize: 64 << 10, SplitAbove: 128 << 10}
	owner, consumer := newNode(t, fs, cfg), newNode(t, fs, cfg)
	link(t, owner, consumer)
	var reqs []velo.GetRequest
	var payloads [][]byte
	for i := range 12 {
		p := randomBytes(1<<20+i*4096, uint64(10+i))
		payloads = append(payloads, p)
		h, err := owner.v.StageDataPinned(tctx(t), p)
		require.NoError(t, err)
		reqs = append(reqs, velo.GetRequest{Handle: h})
	}
	res := consumer.v.GetBatch(tctx(t), reqs, nil)
	for i, r := range res {
		require.NoError(t, r.Err)
		assert.True(t, bytes.Equal(payloads[i], r.Lease.Bytes()), "entry %d", i)
		require.NoError(t, r.Lease.Release(tctx(t)))
	}
	for _, s := range status(consumer) {
		assert.Positive(t, s.Slices, "rail %d read nothing of the batch", s.Index)
	}
	// The twelve payloads were staged one after another: the owner registered them as one run,
	// once on each rail, and each lease's rail-set key named its own payload on every rail.
	for i, rt := range owner.rt {
		assert.Equal(t, int64(1), rt.Registrations.Load(), "rail %d: registrations of the batch", i)
	}

	// Ranged reads of one large payload: one lease, one rail-set key, many reads.
	big := randomBytes(4<<20, 99)
	h, err := owner.v.StageDataPinned(tctx(t), big)
	require.NoError(t, err)
	dst := make([]byte, 3<<20)
	ranges := []velo.Range{{Offset: 0, Length: 1 << 20, Dst: dst[:1<<20]}, {Offset: 3 << 20, Length: 1 << 20, Dst: dst[1<<20 : 2<<20]}, {Offset: 1<<20 + 7, Length: 1 << 20, Dst: dst[2<<20:]}}
	require.NoError(t, consumer.v.ReadRanges(tctx(t), h, ranges))
	assert.Equal(t, big[:1<<20], dst[:1<<20])
	assert.Equal(t, big[3<<20:], dst[1<<20:2<<20])
	assert.Equal(t, big[1<<20+7:2<<20+7], dst[2<<20:])
}

func TestFailedRailIsPausedAndItsSlicesReadElsewhere(t *testing.T) {
	fs := fabrics(2)
	cfg := rails.Config{SliceSize: 64 << 10, CoolDown: time.Hour}
	owner, consumer := newNode(t, fs, cfg), newNode(t, fs, cfg)
	link(t, owner, consumer)
	consumer.rt[1].FailGets.Store(1 << 30)
	payload := randomBytes(4<<20, 3)
	getOver(t, owner, consumer, payload)
	assert.Equal(t, 1.0, pathCount(t, consumer.v, "rdma", "ok"), "the get fell back although one rail was left")
	st := status(consumer)
	assert.Equal(t, uint64(len(payload)), st[0].Bytes)
	assert.Zero(t, st[1].Bytes)
	assert.Equal(t, rails.StatePaused, st[1].State)
	assert.Positive(t, st[1].Failures)
	assert.Contains(t, st[1].LastError, "succeeded on rail 0")
	h := consumer.v.Health()
	assert.Contains(t, h.Reasons[len(h.Reasons)-1], "rail 1 (rail1) is paused")
	x, err := metrics.Value(consumer.v.Metrics(), rails.MetricState, map[string]string{"rail": "1", "device": "rail1"})
	require.NoError(t, err)
	assert.Equal(t, 1.0, x)

	// A paused rail takes nothing: the next get goes over rail 0 alone, without a failure.
	failures := st[1].Failures
	getOver(t, owner, consumer, randomBytes(2<<20, 4))
	assert.Equal(t, failures, status(consumer)[1].Failures)
}

func TestStalledRailTimesOut(t *testing.T) {
	fs := fabrics(2)
	cfg := rails.Config{SliceSize: 64 << 10, SliceTimeout: 200 * time.Millisecond, CoolDown: time.Hour}
	owner, consumer := newNode(t, fs, cfg), newNode(t, fs, cfg)
	link(t, owner, consumer)
	// Rail 1's reads hang until their context ends, as a read over a link that went down does.
	consumer.rt[1].BeforeGet = func(ctx context.Context) { <-ctx.Done() }
	payload := randomBytes(4<<20, 5)
	getOver(t, owner, consumer, payload)
	st := status(consumer)
	assert.Equal(t, rails.StatePaused, st[1].State)
	assert.Contains(t, st[1].LastError, "timed out")
	assert.Equal(t, uint64(len(payload)), st[0].Bytes)
}

func TestPausedRailIsProbedAfterItsCoolDown(t *testing.T) {
	fs := fabrics(2)
	cfg := rails.Config{SliceSize: 64 << 10, CoolDown: 50 * time.Millisecond}
	owner, consumer := newNode(t, fs, cfg), newNode(t, fs, cfg)
	link(t, owner, consumer)
	consumer.rt[1].FailGets.Store(1)
	getOver(t, owner, consumer, randomBytes(2<<20, 6))
	require.Equal(t, uint64(1), status(consumer)[1].Failures)
	time.Sleep(60 * time.Millisecond) // the cool-down passes: what is tested is the state after it
	assert.Equal(t, rails.StateProbing, status(consumer)[1].State)
	before := status(consumer)[1].Slices
	getOver(t, owner, consumer, randomBytes(2<<20, 7))
	st := status(consumer)
	assert.Equal(t, rails.StateUp, st[1].State)
	assert.Greater(t, st[1].Slices, before, "the probed rail carried nothing")
}

func TestEveryRailFailingFallsBackToChunks(t *testing.T) {
	fs := fabrics(2)
	cfg := rails.Config{SliceSize: 64 << 10, CoolDown: time.Hour}
	owner, consumer := newNode(t, fs, cfg), newNode(t, fs, cfg)
	link(t, owner, consumer)
	consumer.rt[0].FailGets.Store(1 << 30)
	consumer.rt[1].FailGets.Store(1 << 30)
	payload := randomBytes(2<<20, 8)
	getOver(t, owner, consumer, payload)
	assert.Equal(t, 1.0, pathCount(t, consumer.v, "chunked", "get_failed"))
}

// A key the owner no longer serves fails on every rail: the read fails, and no rail is paused
// for it.
func TestRevokedKeyPausesNoRail(t *testing.T) {
	fs := fabrics(2)
	owner, consumer := newNode(t, fs, rails.Config{SliceSize: 64 << 10}), newNode(t, fs, rails.Config{SliceSize: 64 << 10})
	link(t, owner, consumer)
	h, err := owner.v.StageDataPinned(tctx(t), randomBytes(2<<20, 9))
	require.NoError(t, err)
	l, err := consumer.v.Get(tctx(t), h)
	require.NoError(t, err)
	last := consumer.rt[0].LastGet()
	require.NotNil(t, last)
	require.NoError(t, l.Release(tctx(t)))
	// Replay a rail-set key of the ended lease: rebuild it from each rail's last key.
	k1 := consumer.rt[1].LastGet()
	require.NotNil(t, k1)
	key := railKey(t, last.Key, k1.Key)
	err = consumer.rails.Get(tctx(t), owner.v.ID(), key, 0, make([]byte, 2<<20))
	require.ErrorIs(t, err, rdmatest.ErrRevoked)
	for _, s := range status(consumer) {
		assert.Equal(t, rails.StateUp, s.State, "rail %d", s.Index)
	}
}

func TestMixedReleases(t *testing.T) {
	fs := fabrics(2)
	// An owner of one rail (an earlier release, or a node with one NIC) and a consumer of two:
	// the consumer reads the plain key over its first rail.
	plain, multi := newNode(t, fs[:1], rails.Config{}), newNode(t, fs, rails.Config{SliceSize: 64 << 10})
	link(t, plain, multi)
	assert.Equal(t, []string{"rail0"}, multi.rails.RailsTo(plain.v.ID()))
	getOver(t, plain, multi, randomBytes(3<<20, 11))
	assert.Equal(t, 1.0, pathCount(t, multi.v, "rdma", "ok"))
	assert.Zero(t, status(multi)[1].Bytes)
	// The other way: the owner of two rails hands the plain consumer its first rail's plain key.
	getOver(t, multi, plain, randomBytes(3<<20, 12))
	assert.Equal(t, 2.0, pathCount(t, plain.v, "rdma", "ok"), "one get served, one read, both on the RDMA path")
}

func TestConfigRefusals(t *testing.T) {
	f := rdmatest.NewFabric()
	a, _ := f.New("ucx")
	b, _ := f.New("ucx")
	for _, tc := range []struct {
		cfg     rails.Config
		members []transport.Transport
		want    string
	}{
		{rails.Config{}, []transport.Transport{a}, "2 to 8"},
		{rails.Config{SliceSize: 1000}, []transport.Transport{a, b}, "SliceSize"},
		{rails.Config{SliceSize: 1 << 20, SplitAbove: 64 << 10}, []transport.Transport{a, b}, "SplitAbove"},
		{rails.Config{Window: 100}, []transport.Transport{a, b}, "Window"},
		{rails.Config{CoolDown: time.Minute, MaxCoolDown: time.Second}, []transport.Transport{a, b}, "CoolDown"},
		{rails.Config{SliceTimeout: -1}, []transport.Transport{a, b}, "SliceTimeout"},
		{rails.Config{Devices: []string{"x"}}, []transport.Transport{a, b}, "Devices"},
		{rails.Config{}, []transport.Transport{a, nil}, "nil"},
	} {
		_, err := rails.New(tc.cfg, tc.members...)
		require.Error(t, err, "%+v", tc.cfg)
		assert.Contains(t, err.Error(), tc.want)
	}
}

// slowRail is a member whose reads are counted and slowed, to see the rails share work by what
// each finishes.
type slowRail struct {
	*rdmatest.Transport
	delay time.Duration
	n     atomic.Int64
}

func (s *slowRail) Get(ctx context.Context, peer transport.InstanceID, key []byte, off uint64, dst []byte) error {
	s.n.Add(1)
	time.Sleep(s.delay)
	return s.Transport.Get(ctx, peer, key, off, dst)
}

// TestSlowRailTakesFewerSlices: a rail four times slower than the other reads a smaller share.
func TestSlowRailTakesFewerSlices(t *testing.T) {
	fs := fabrics(2)
	cfg := rails.Config{SliceSize: 64 << 10, Window: 2}
	owner := newNode(t, fs, cfg)
	var members []transport.Transport
	var slow []*slowRail
	for i, f := range fs {
		m, err := f.New("ucx")
		require.NoError(t, err)
		s := &slowRail{Transport: m, delay: time.Millisecond * time.Duration(1+3*i)}
		slow = append(slow, s)
		members = append(members, s)
	}
	rs, err := rails.New(cfg, members...)
	require.NoError(t, err)
	v, err := velo.New(context.Background(), velo.WithLogger(logger()), velo.WithUCXTransport(rs))
	require.NoError(t, err)
	defer v.Close()
	consumer := node{v: v, rails: rs}
	link(t, owner, consumer)
	getOver(t, owner, consumer, randomBytes(8<<20, 13))
	fast, slowN := slow[0].n.Load(), slow[1].n.Load()
	t.Logf("fast rail %d reads, slow rail %d", fast, slowN)
	assert.Greater(t, fast, slowN, "the slow rail took as many slices as the fast one")
	assert.Positive(t, slowN)
}

func railKey(t *testing.T, keys ...[]byte) []byte {
	t.Helper()
	k, err := rails.AppendRailKey(nil, keys)
	require.NoError(t, err)
	return k
}

// stuckRail is a member whose reads ignore their context, as a UCX read whose bytes were arriving
// when the link went down does: they return only once the rail's endpoints to the peer are closed.
type stuckRail struct {
	*rdmatest.Transport
	stuck  chan struct{}
	closes atomic.Int32
}

func (s *stuckRail) Get(ctx context.Context, peer transport.InstanceID, key []byte, off uint64, dst []byte) error {
	<-s.stuck
	return errors.New("endpoint closed")
}

func (s *stuckRail) ForceClosePeer(peer transport.InstanceID) error {
	if s.closes.Add(1) == 1 {
		close(s.stuck)
	}
	return nil
}

// TestStalledReadIsEndedByClosingTheRail: reads that outlive their timeout and do not return are
// ended by closing the rail's endpoints to the peer, and their slices are read over the other
// rail; the loss that close reports on the first rail does not reach the runtime.
func TestStalledReadIsEndedByClosingTheRail(t *testing.T) {
	fs := fabrics(2)
	cfg := rails.Config{SliceSize: 64 << 10, SliceTimeout: 200 * time.Millisecond, CoolDown: time.Hour}
	owner := newNode(t, fs, cfg)
	m0, err := fs[0].New("ucx")
	require.NoError(t, err)
	m1, err := fs[1].New("ucx")
	require.NoError(t, err)
	stuck := &stuckRail{Transport: m1, stuck: make(chan struct{})}
	rs, err := rails.New(cfg, m0, stuck)
	require.NoError(t, err)
	v, err := velo.New(context.Background(), velo.WithLogger(logger()), velo.WithUCXTransport(rs))
	require.NoError(t, err)
	defer v.Close()
	consumer := node{v: v, rails: rs}
	link(t, owner, consumer)
	start := time.Now()
	payload := randomBytes(4<<20, 14)
	getOver(t, owner, consumer, payload)
	assert.Less(t, time.Since(start), 10*time.Second)
	assert.Equal(t, int32(1), stuck.closes.Load(), "the stalled rail's endpoints were not closed once")
	st := status(consumer)
	assert.Equal(t, uint64(len(payload)), st[0].Bytes)
	assert.Equal(t, rails.StatePaused, st[1].State)
	assert.Equal(t, 1.0, pathCount(t, consumer.v, "rdma", "ok"))
}
