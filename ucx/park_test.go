//go:build cgo && linux

package ucx

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// wakeDeadline bounds each wait in the wake-up tests. The engines under test sleep for an
// hour unless woken, so a lost wake-up turns into a wait that reaches this deadline (a
// test failure) rather than a 250 ms delay nobody notices.
const wakeDeadline = 30 * time.Second

// sleepLong makes every sleep of e's progressor last up to an hour unless the event fd
// fires or a kick wakes it. At the end of the test the bound goes back to parkTimeout, with
// ucp_worker_signal as well as the parker's wake, so that a broken wake fails the test
// without also hanging its cleanup (Close).
func sleepLong(t *testing.T, e *Engine) {
	t.Helper()
	e.parkFor.Store(int64(time.Hour))
	t.Cleanup(func() {
		e.wmu.Lock()
		defer e.wmu.Unlock()
		e.parkFor.Store(int64(parkTimeout))
		if e.state != stateClosed {
			e.kick()
			_ = e.w.Signal()
		}
	})
}

// within runs fn in a goroutine and fails the test if it has not returned by the deadline.
func within(t *testing.T, what string, fn func() error) {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- fn() }()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(wakeDeadline):
		t.Fatalf("%s: did not return within %v (a lost wake-up)", what, wakeDeadline)
	}
}

// pause leaves a gap of a random kind before the next submission, so that submissions
// land in every phase of the progressor's way to sleep: still busy, spinning,
// announcing, checking the queue, arming, and asleep.
func pause(r *rand.Rand) {
	switch r.IntN(5) {
	case 0:
	case 1:
		runtime.Gosched()
	case 2:
		for end := time.Now().Add(time.Duration(r.IntN(20)) * time.Microsecond); time.Now().Before(end); {
		}
	default:
		time.Sleep(time.Duration(r.IntN(300)) * time.Microsecond)
	}
}

// TestParkerNoLostWakeups: the parker on a real worker's event fd, then inside real
// engines. Every wait in it would last an hour if a wake-up were lost.
//
// The level check matters because Go's poller reports an fd's readiness as edges while
// UCX's fd is level-triggered: an fd that became readable before the wait must still end
// it ("readable before wait" waits twice on the same readiness).
func TestParkerNoLostWakeups(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ctx, err := NewContext(ContextConfig{TLS: testTLS})
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	w, err := ctx.NewWorker()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	efd, err := w.EventFD()
	if err != nil {
		t.Fatal(err)
	}
	p, err := newParker(efd)
	if err != nil {
		t.Fatal(err)
	}
	// Closing the parker also ends a wait a failed check left behind.
	defer p.close()
	// arm drains the worker until ucp_worker_arm succeeds: the fd is then quiet until the
	// next event or signal.
	arm := func() {
		t.Helper()
		for {
			err := w.Arm()
			if err == nil {
				return
			}
			if !errors.Is(err, StatusBusy) {
				t.Fatalf("arm: %v", err)
			}
			w.Progress()
		}
	}

	// Wake before wait: the deadline is already in the past when the wait starts.
	arm()
	p.prepare(time.Hour)
	p.wake()
	within(t, "wait after wake", p.wait)
	p.done()

	// Readable before wait, three times over the same readiness: Go's poller saw one edge
	// at most, the level check ends every wait.
	arm()
	if err := w.Signal(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		p.prepare(time.Hour)
		within(t, fmt.Sprintf("wait %d on a readable fd", i+1), p.wait)
		p.done()
	}

	// Readable after arm and before the wait: the edge came while nobody waited, and a wait
	// begins by forgetting latched edges, so only the level check can end it.
	arm()
	p.prepare(time.Hour)
	if err := w.Signal(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Millisecond) // the edge reaches Go's poller before the wait starts
	within(t, "wait after a signal that followed the arm", p.wait)
	p.done()

	// The bound: a quiet fd and no wake.
	arm()
	p.prepare(time.Millisecond)
	within(t, "wait with a 1 ms bound", p.wait)
	p.done()

	// Racing wakes: the engine's protocol in miniature. The sleeper announces, looks at the
	// shared count under the mutex and waits only if it has not changed; the waker changes
	// the count and wakes under the same mutex.
	arm()
	const rounds = 3000
	var mu sync.Mutex
	count, stopped := 0, false
	seen := make(chan int, 1)
	var sleeperErr error
	sleeperDone := make(chan struct{})
	go func() {
		defer close(sleeperDone)
		last := 0
		for {
			p.prepare(time.Hour)
			mu.Lock()
			c, quit := count, stopped
			mu.Unlock()
			if quit {
				p.done()
				return
			}
			if c == last {
				if err := p.wait(); err != nil {
					p.done()
					sleeperErr = err
					return
				}
			}
			p.done()
			if c != last {
				last = c
				seen <- c
			}
		}
	}()
	stopSleeper := func() {
		mu.Lock()
		stopped = true
		p.wake()
		mu.Unlock()
		select {
		case <-sleeperDone:
			if sleeperErr != nil {
				t.Errorf("sleeper: %v", sleeperErr)
			}
		case <-time.After(wakeDeadline):
			t.Errorf("the sleeper did not stop within %v (a lost wake-up)", wakeDeadline)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := 1; i <= rounds; i++ {
		pause(r)
		mu.Lock()
		count = i
		p.wake()
		mu.Unlock()
		select {
		case got := <-seen:
			if got != i {
				stopSleeper()
				t.Fatalf("round %d: the sleeper saw %d", i, got)
			}
		case <-time.After(wakeDeadline):
			stopSleeper()
			t.Fatalf("round %d: the sleeper did not see the change within %v (a lost wake-up)", i, wakeDeadline)
		}
	}
	stopSleeper()

	t.Run("engines", func(t *testing.T) {
		testEngineNoLostWakeups(t)
	})
}

// testEngineNoLostWakeups: an engine pair that parks at once when idle (no spinning)
// and sleeps an hour unless woken. Operations that UCX cannot finish inside the posting
// call (closing a fresh endpoint: its flush needs progress) race with the progressor on
// its way to sleep (woken by a kick through the parker's deadline), and active messages
// arrive at a sleeping engine (woken by its event fd through Go's poller).
func testEngineNoLostWakeups(t *testing.T) {
	ctx := testContext(t)
	noSpin := func(c *EngineConfig) { c.SpinFor = -1 }
	a, b, ab := enginePair(t, noSpin)
	ba, err := b.Connect(ctx, a.Address(), ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pong := make(chan int, 1)
	if err := a.HandleAM(1, func(m AMMessage) { pong <- len(m.Payload) }); err != nil {
		t.Fatal(err)
	}
	if err := b.HandleAM(1, func(m AMMessage) {
		ba.SendAMAsync(ctx, 1, nil, [][]byte{m.Payload}, SendOptions{})
	}); err != nil {
		t.Fatal(err)
	}
	sleepLong(t, a)
	sleepLong(t, b)
	parksBefore := testutil.ToFloat64(a.metrics.parks) + testutil.ToFloat64(b.metrics.parks)
	r := rand.New(rand.NewPCG(3, 4))
	const rounds = 2000
	for i := 0; i < rounds; i++ {
		pause(r)
		if i%20 == 0 {
			closeCtx, cancel := context.WithTimeout(ctx, wakeDeadline)
			c, err := a.Connect(closeCtx, b.Address(), ConnectOptions{})
			if err == nil {
				pause(r)
				err = c.Close(closeCtx, CloseFlush)
			}
			cancel()
			if err != nil {
				t.Fatalf("round %d: connect and close: %v (a lost wake-up if the deadline passed)", i, err)
			}
		}
		pause(r)
		size := 1 + r.IntN(512)
		waitCtx, cancel := context.WithTimeout(ctx, wakeDeadline)
		err := ab.SendAM(waitCtx, 1, nil, make([]byte, size))
		if err == nil {
			select {
			case got := <-pong:
				if got != size {
					err = fmt.Errorf("echo of %d bytes, sent %d", got, size)
				}
			case <-waitCtx.Done():
				err = fmt.Errorf("no echo within %v (a lost wake-up)", wakeDeadline)
			}
		}
		cancel()
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
	}
	parks := testutil.ToFloat64(a.metrics.parks) + testutil.ToFloat64(b.metrics.parks) - parksBefore
	t.Logf("%d rounds; the two progressors slept %v times", rounds, parks)
	if parks == 0 {
		t.Fatal("the progressors never slept: the test exercised nothing")
	}
}

// TestEngineWakeStress: four engines, each connected to every other, with several
// goroutines per engine sending to random peers and waiting for the echo, registering
// memory, and installing handlers, all with random gaps, while the engines spin (the spin
// slots are contended) or sleep for up to an hour unless woken. Every operation must
// finish; the test's deadline turns a lost wake-up into a failure.
func TestEngineWakeStress(t *testing.T) {
	const (
		engines    = 4
		senders    = 3 // per engine
		perSender  = 300
		registrars = 1 // per engine
		perReg     = 60
	)
	ctx, cancel := context.WithTimeout(context.Background(), 2*wakeDeadline)
	defer cancel()
	es := make([]*Engine, engines)
	for i := range es {
		spin := func(c *EngineConfig) {}
		if i%2 == 1 {
			spin = func(c *EngineConfig) { c.SpinFor = -1 }
		}
		es[i] = newTestEngine(t, fmt.Sprintf("e%d", i), spin)
	}
	// conns[i][j] sends from engine i to engine j.
	conns := make([][]*Conn, engines)
	for i := range es {
		conns[i] = make([]*Conn, engines)
		for j := range es {
			if i == j {
				continue
			}
			c, err := es[i].Connect(ctx, es[j].Address(), ConnectOptions{})
			if err != nil {
				t.Fatal(err)
			}
			conns[i][j] = c
		}
	}
	// A message carries its sender's engine and goroutine index in the header; the echo
	// goes back on id 2 and is routed to that goroutine's channel.
	back := make([][]chan []byte, engines)
	for i := range es {
		back[i] = make([]chan []byte, senders)
		for k := range back[i] {
			back[i][k] = make(chan []byte, 1)
		}
	}
	for j, e := range es {
		if err := e.HandleAM(1, func(m AMMessage) {
			from := int(m.Header[0])
			conns[j][from].SendAMAsync(ctx, 2, m.Header, [][]byte{m.Payload}, SendOptions{})
		}); err != nil {
			t.Fatal(err)
		}
		if err := e.HandleAM(2, func(m AMMessage) { back[j][m.Header[1]] <- m.Payload }); err != nil {
			t.Fatal(err)
		}
	}
	mems := make([]*Memory, engines)
	for i := range mems {
		mems[i] = allocFilled(t, 4096, uint64(i))
	}
	for _, e := range es {
		sleepLong(t, e)
	}
	var wg sync.WaitGroup
	var failures atomic.Int32
	fail := func(format string, args ...any) {
		if failures.Add(1) <= 5 {
			t.Errorf(format, args...)
		}
		cancel()
	}
	var sent atomic.Int64
	for i := range es {
		for k := 0; k < senders; k++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(i), uint64(k)))
				for n := 0; n < perSender && ctx.Err() == nil; n++ {
					pause(r)
					j := (i + 1 + r.IntN(engines-1)) % engines
					payload := make([]byte, 1+r.IntN(256))
					payload[0] = byte(n)
					if err := conns[i][j].SendAM(ctx, 1, []byte{byte(i), byte(k)}, payload); err != nil {
						fail("e%d/%d: send %d to e%d: %v", i, k, n, j, err)
						return
					}
					select {
					case got := <-back[i][k]:
						if len(got) != len(payload) || got[0] != byte(n) {
							fail("e%d/%d: echo %d: %d bytes starting %d, sent %d starting %d", i, k, n, len(got), got[0], len(payload), byte(n))
							return
						}
						sent.Add(1)
					case <-ctx.Done():
						fail("e%d/%d: no echo of message %d from e%d: %v (a lost wake-up)", i, k, n, j, ctx.Err())
						return
					}
				}
			}()
		}
		for k := 0; k < registrars; k++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(i)+100, uint64(k)))
				buf := mems[i].Bytes()
				for n := 0; n < perReg && ctx.Err() == nil; n++ {
					pause(r)
					reg, err := es[i].Register(ctx, buf)
					if err != nil {
						fail("e%d: register %d: %v", i, n, err)
						return
					}
					if err := reg.Unregister(ctx); err != nil {
						fail("e%d: unregister %d: %v", i, n, err)
						return
					}
					// A handler change takes the engine's lock too.
					if err := es[i].HandleAM(3, func(AMMessage) {}); err != nil {
						fail("e%d: HandleAM %d: %v", i, n, err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	if failures.Load() == 0 {
		if got, want := sent.Load(), int64(engines*senders*perSender); got != want {
			t.Fatalf("%d round trips finished, want %d", got, want)
		}
	}
	var parks float64
	for _, e := range es {
		parks += testutil.ToFloat64(e.metrics.parks)
	}
	t.Logf("%d round trips; the progressors slept %v times", sent.Load(), parks)
}
