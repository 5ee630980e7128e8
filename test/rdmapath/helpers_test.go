package rdmapath_test

import (
	"bytes"
	"context"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/velo-go/velo/velo"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/rendezvous/rdma/rdmatest"
	"github.com/velo-go/velo/velo/transport"
	"github.com/velo-go/velo/velo/transport/tcp"
	"github.com/velo-go/velo/velo/transport/ucxtransport"
)

// Generous bounds: the suite runs on a loaded 2-core machine.
const testWait = 90 * time.Second

func tctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	t.Cleanup(cancel)
	return ctx
}

// logBuffer keeps what an instance logs, for tests that assert a log line.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if os.Getenv("VELO_TEST_LOG") != "" {
		os.Stderr.Write(p)
	}
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// spy stands in front of the UCX transport's RMA to record the last GET (so a test can replay a
// descriptor after its lease ended) and, when asked, to run a hook before a GET or to hand UCX a
// forged key. The GET itself is always the real UCX one.
type spy struct {
	transport.Transport
	rma transport.RMA

	mu     sync.Mutex
	last   *getArgs
	before func()
	forge  bool
}

type getArgs struct {
	peer   transport.InstanceID
	key    []byte
	offset uint64
	n      int
}

func (s *spy) RMABackend() string                 { return s.rma.RMABackend() }
func (s *spy) CanGet(p transport.InstanceID) bool { return s.rma.CanGet(p) }
func (s *spy) ForceClosePeer(p transport.InstanceID) error {
	return s.rma.ForceClosePeer(p)
}
func (s *spy) RegisterMemory(m []byte) (transport.Registration, error) {
	return s.rma.RegisterMemory(m)
}
func (s *spy) Get(ctx context.Context, peer transport.InstanceID, key []byte, offset uint64, dst []byte) error {
	s.mu.Lock()
	s.last = &getArgs{peer: peer, offset: offset, key: append([]byte(nil), key...), n: len(dst)}
	before, forge := s.before, s.forge
	s.before, s.forge = nil, false
	s.mu.Unlock()
	if before != nil {
		before()
	}
	if forge {
		key = append([]byte(nil), key...)
		for i := range key {
			key[i] ^= byte(rand.Uint32()) | 1 // every byte different: nothing of the real key is left
		}
	}
	return s.rma.Get(ctx, peer, key, offset, dst)
}

// ReadMany passes many reads to the UCX transport's own (the engine's GetMany), unrecorded.
func (s *spy) ReadMany(ctx context.Context, peer transport.InstanceID, reads []transport.Read, window int, done func(int, error)) {
	s.rma.(transport.ManyReader).ReadMany(ctx, peer, reads, window, done)
}

func (s *spy) lastGet() *getArgs {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

func (s *spy) setBefore(f func()) { s.mu.Lock(); s.before = f; s.mu.Unlock() }
func (s *spy) setForge()          { s.mu.Lock(); s.forge = true; s.mu.Unlock() }

type node struct {
	*velo.Velo
	ucx  *spy
	logs *logBuffer
}

// startNode starts an instance with a TCP control plane and the real UCX transport beside it:
// added with WithUCXTransport when registry is true, with WithTransport otherwise. When the test
// ends it closes the instance and checks that nothing stays pinned or registered.
func startNode(t testing.TB, registry bool, opts ...velo.Option) node {
	t.Helper()
	return startNodeWith(t, ucxtransport.Config{}, registry, opts...)
}

// startNodeWith is startNode with the UCX transport configured by cfg (its logger, eager endpoints
// and the tcp default are filled in by newUCXWith).
func startNodeWith(t testing.TB, cfg ucxtransport.Config, registry bool, opts ...velo.Option) node {
	t.Helper()
	logs := &logBuffer{}
	ctl, err := tcp.New(tcp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = logs.logger()
	u := newUCXWith(t, cfg)
	s := &spy{Transport: u, rma: u}
	add := velo.WithTransport(s)
	if registry {
		add = velo.WithUCXTransport(s)
	}
	v, err := velo.New(context.Background(), append([]velo.Option{velo.WithLogger(logs.logger()), velo.WithTransport(ctl), add}, opts...)...)
	if err != nil {
		ctl.Close()
		u.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		v.Close()
		if st := v.RDMAStats(); st.PinnedBytes != 0 || st.Arenas != 0 || st.Slots != 0 || st.LeaseRegistrations != 0 {
			t.Errorf("after Close the registry still holds %+v", st)
		}
	})
	return node{Velo: v, ucx: s, logs: logs}
}

// link registers each node with the other; without ucx, b learns a's TCP address only.
func link(t testing.TB, a, b node, ucx bool) {
	t.Helper()
	ctx := tctx(t)
	if err := a.RegisterPeer(ctx, b.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	info := a.PeerInfo()
	if !ucx {
		delete(info.Addresses, "ucx")
	}
	if err := b.RegisterPeer(ctx, info); err != nil {
		t.Fatal(err)
	}
}

func pathCount(t testing.TB, v *velo.Velo, p metrics.Path, r metrics.Reason) float64 {
	t.Helper()
	return rdmatest.PathCount(t, v.Metrics(), rdmatest.Pair{Path: p, Reason: r})
}

func pr(p metrics.Path, r metrics.Reason) rdmatest.Pair { return rdmatest.Pair{Path: p, Reason: r} }

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	rdmatest.Eventually(t, testWait, what, cond)
}

// newUCXWith starts a UCX transport configured by cfg, with eager endpoints and tcp unless
// UCX_TLS says otherwise.
func newUCXWith(t testing.TB, cfg ucxtransport.Config) *ucxtransport.Transport {
	t.Helper()
	// The suite exercises the RDMA path without RDMA hardware: over tcp it takes the opt-in.
	cfg.EagerEndpoints, cfg.TLS, cfg.RMAOverSoftwareLanes = true, "tcp", true
	u, err := ucxtransport.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
