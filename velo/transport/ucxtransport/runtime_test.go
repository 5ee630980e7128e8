//go:build cgo && linux

package ucxtransport_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo"
	"github.com/velo-go/velo/velo/transport/ucxtransport"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// testLog is quiet unless UCXT_TEST_LOG is set.
func testLog() *slog.Logger {
	if os.Getenv("UCXT_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return quiet
}

// instance starts a velo instance whose only transport is UCX over tcp.
func instance(t testing.TB, cfg ucxtransport.Config) *velo.Velo {
	t.Helper()
	cfg.TLS = "tcp"
	cfg.Logger = testLog()
	u, err := ucxtransport.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	v, err := velo.New(context.Background(), velo.WithTransport(u), velo.WithLogger(cfg.Logger))
	if err != nil {
		u.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	return v
}

// TestRuntimeOverUCX: the velo runtime on the UCX transport alone. A request whose handler
// outlives the idle timeout still gets its answer (both endpoints were reaped meanwhile, and the
// answer opens a new one); a payload above the eager limit travels as a rendezvous handle and is
// pulled in chunks that fit the limit.
func TestRuntimeOverUCX(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cfg := ucxtransport.Config{EagerMax: 256 << 10, EPIdleTimeout: 20 * time.Millisecond}
	server, client := instance(t, cfg), instance(t, cfg)
	if err := server.RegisterHandler("slow-echo", func(ctx context.Context, m *velo.Message) ([]byte, error) {
		time.Sleep(150 * time.Millisecond) // several idle timeouts with nothing on the wire
		return m.Payload, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := client.RegisterPeer(ctx, server.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		resp, err := client.Request(ctx, server.ID(), "slow-echo", []byte(fmt.Sprint("ping ", i)))
		if err != nil || string(resp) != fmt.Sprint("ping ", i) {
			t.Fatalf("request %d: %q, %v", i, resp, err)
		}
	}

	payload := bytes.Repeat([]byte("0123456789abcdef"), (4<<20)/16)
	h, err := server.StageData(ctx, payload)
	if err != nil {
		t.Fatal(err)
	}
	lease, err := client.Get(ctx, h)
	if err != nil {
		t.Fatalf("Get of %d bytes over UCX: %v", len(payload), err)
	}
	if sha256.Sum256(lease.Bytes()) != sha256.Sum256(payload) {
		t.Fatal("the pulled payload differs")
	}
	if err := lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// The UCX transport under the velo runtime. In a deployment add a TCP transport first (the
// control plane) and this one with velo.WithUCXTransport, which also creates the RDMA registry;
// here UCX carries everything.
func ExampleNew() {
	ctx := context.Background()
	start := func() *velo.Velo {
		// TLS applies only when UCX_TLS is unset: the environment wins.
		u, err := ucxtransport.New(ucxtransport.Config{TLS: "tcp", EagerEndpoints: true, Logger: quiet})
		if err != nil {
			panic(err)
		}
		v, err := velo.New(ctx, velo.WithTransport(u), velo.WithLogger(quiet))
		if err != nil {
			panic(err)
		}
		return v
	}
	server, client := start(), start()
	defer server.Close()
	defer client.Close()

	server.RegisterHandler("greet", func(ctx context.Context, m *velo.Message) ([]byte, error) {
		return []byte("hello, " + string(m.Payload)), nil
	})
	if err := client.RegisterPeer(ctx, server.PeerInfo()); err != nil {
		panic(err)
	}
	resp, err := client.Request(ctx, server.ID(), "greet", []byte("ucx"))
	fmt.Println(string(resp), err)
	// Output: hello, ucx <nil>
}

// syncBuffer is a bytes.Buffer safe for the concurrent writes of several loggers.
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

// TestInstanceLoggerReachesTheTransport: a UCX transport given no Config.Logger logs through the
// logger of the velo instance it is added to (velo.WithLogger), its UCX engine included; a
// Config.Logger of its own still wins.
func TestInstanceLoggerReachesTheTransport(t *testing.T) {
	var instLog, ownLog syncBuffer
	inst := slog.New(slog.NewTextHandler(&instLog, &slog.HandlerOptions{Level: slog.LevelDebug}))
	u, err := ucxtransport.New(ucxtransport.Config{TLS: "tcp"})
	require.NoError(t, err)
	v, err := velo.New(context.Background(), velo.WithTransport(u), velo.WithLogger(inst))
	require.NoError(t, err)
	require.NoError(t, v.Close())
	assert.Contains(t, instLog.String(), "ucx: UCX_TLS", "the transport's settings line went elsewhere")
	assert.Contains(t, instLog.String(), "ucx: engine closed", "the engine's lines went elsewhere")

	instLog = syncBuffer{}
	own := slog.New(slog.NewTextHandler(&ownLog, &slog.HandlerOptions{Level: slog.LevelDebug}))
	u, err = ucxtransport.New(ucxtransport.Config{TLS: "tcp", Logger: own})
	require.NoError(t, err)
	v, err = velo.New(context.Background(), velo.WithTransport(u), velo.WithLogger(inst))
	require.NoError(t, err)
	require.NoError(t, v.Close())
	assert.Contains(t, ownLog.String(), "ucx: UCX_TLS")
	assert.NotContains(t, instLog.String(), "ucx: UCX_TLS", "Config.Logger did not win")
}
