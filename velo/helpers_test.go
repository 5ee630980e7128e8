package velo

import (
	"context"
	"crypto/sha256"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/velo-go/velo/velo/metrics"
)

// Generous bounds: the suite runs on a loaded 2-core machine under -race.
const testWait = 60 * time.Second

func quietLogger() *slog.Logger {
	if os.Getenv("VELO_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func newInstance(t testing.TB, opts ...Option) *Velo {
	t.Helper()
	v, err := New(context.Background(), append([]Option{WithLogger(quietLogger())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	return v
}

// pair returns two instances where a has registered b (b learns a when a connects).
func pair(t testing.TB, opts ...Option) (a, b *Velo) {
	t.Helper()
	a, b = newInstance(t, opts...), newInstance(t, opts...)
	if err := a.RegisterPeer(context.Background(), b.PeerInfo()); err != nil {
		t.Fatal(err)
	}
	return a, b
}

func tctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	t.Cleanup(cancel)
	return ctx
}

func payload(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for k := 0; k < 8; k++ {
			b[i+k] = byte(v >> (8 * k))
		}
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

func sum(b []byte) [32]byte { return sha256.Sum256(b) }

func metric(t testing.TB, v *Velo, name string, labels map[string]string) float64 {
	t.Helper()
	x, err := metrics.Value(v.Metrics(), name, labels)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// eventually polls cond until it holds or the bound passes; it is a bounded wait on state that
// another goroutine or process changes, not a sleep that stands in for synchronisation.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testWait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
