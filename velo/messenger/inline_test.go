package messenger

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/velo-go/velo/velo/metrics"
)

const testWait = 60 * time.Second // generous: a loaded 2-core machine under -race

// Whatever the interleaving of a handler returning and hand-offs from other goroutines, reading
// moves at most once, and the reader learns that it moved exactly when it did.
func TestInlineRunHandsOffAtMostOnce(t *testing.T) {
	for i := 0; i < 2000; i++ {
		var calls atomic.Int32
		r := &inlineRun{Context: context.Background(), handOff: func() { calls.Add(1) }}
		var wg sync.WaitGroup
		for k := 0; k < 2; k++ {
			wg.Add(1)
			go func() { defer wg.Done(); r.release() }()
		}
		still := r.finish()
		wg.Wait()
		r.release() // after the handler returned: no effect
		if n := calls.Load(); n > 1 || still != (n == 0) {
			t.Fatalf("handOff called %d times, finish reported stillReading=%v", n, still)
		}
	}
}

func TestInlineRunIsTheHandlersContext(t *testing.T) {
	g := New(Config{})
	r := &inlineRun{Context: g.ctx, handOff: func() {}}
	ctx, cancel := context.WithTimeout(r, testWait) // what a handler typically derives
	defer cancel()
	if inlineRunOf(ctx) != r {
		t.Fatal("a context derived from the handler's does not find its run")
	}
	if inlineRunOf(context.Background()) != nil || inlineRunOf(g.ctx) != nil {
		t.Fatal("a run found where there is none")
	}
	g.Close(context.Background())
	select {
	case <-ctx.Done():
	case <-time.After(testWait):
		t.Fatal("the handler's context does not end when the messenger closes")
	}
}

// A handler that never returns has its connection handed off by the rescuer, and the rescuer
// goroutine ends once no inline run is left.
func TestRescuerHandsOffALongRun(t *testing.T) {
	g := New(Config{})
	handed := make(chan struct{})
	r := g.startInline(func() { close(handed) })
	select {
	case <-handed:
	case <-time.After(testWait):
		t.Fatal("a run that does not return was never handed off")
	}
	if g.endInline(r) {
		t.Fatal("finish reports the goroutine still reading after the hand-off")
	}
	deadline := time.Now().Add(testWait)
	for {
		g.rescue.mu.Lock()
		active := g.rescue.active
		g.rescue.mu.Unlock()
		if !active {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the rescuer goroutine outlives the inline runs")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Close hands off every inline run before it returns, and runs that start after it at once:
// closing a transport waits for its readers, so none may be left holding one.
func TestCloseHandsOffInlineRuns(t *testing.T) {
	g := New(Config{})
	var before, after atomic.Int32
	r1 := g.startInline(func() { before.Add(1) })
	if err := g.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if before.Load() != 1 {
		t.Fatal("Close returned with a run still holding its reader")
	}
	r2 := g.startInline(func() { after.Add(1) })
	if after.Load() != 1 {
		t.Fatal("a run started after Close holds its reader")
	}
	if g.endInline(r1) || g.endInline(r2) {
		t.Fatal("a handed-off run reports still reading")
	}
}

// A request made with the handler's context hands reading off before it waits (its answer may come
// on the connection the handler's goroutine was reading), here before it even finds a route.
func TestRequestFromAnInlineHandlerHandsOff(t *testing.T) {
	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	g := New(Config{Metrics: m})
	defer g.Close(context.Background())
	var handed atomic.Int32
	r := &inlineRun{Context: g.ctx, handOff: func() { handed.Add(1) }}
	ctx, cancel := context.WithTimeout(r, testWait)
	defer cancel()
	if _, err := g.Request(ctx, 7, "x", nil); !errors.Is(err, ErrNoRoute) {
		t.Fatalf("got %v", err)
	}
	if handed.Load() != 1 || r.finish() {
		t.Fatal("the request did not hand reading off")
	}
}
