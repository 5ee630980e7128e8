package benchkit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/velo-go/velo/ucx"
)

// The engine's active-message round trip between two processes, the measurement both
// ucx/internal/benchrma and test/rdmapath/cmd/smallbench print beside ucx_perftest -t ucp_am_lat.
// The parent runs a Pinger; the child, started with StartChild in a role of the caller's, runs
// ServeEcho. They swap worker addresses over the child's stdin and stdout.

// echoAMID is the active-message id of the ping and its echo.
const echoAMID = 1

// echoHello is the child's announcement: its engine's worker address.
type echoHello struct{ Address []byte }

// ServeEcho is the echo process: it announces its engine's address, reads the pinger's from
// stdin, connects back, answers every ping with the same bytes from the handler, and returns
// when stdin closes. cfg configures its engine.
func ServeEcho(ctx context.Context, cfg ucx.EngineConfig, stdin io.Reader) error {
	in := bufio.NewReader(stdin)
	e, err := ucx.NewEngine(ctx, cfg)
	if err != nil {
		return err
	}
	defer e.Close(ctx)
	if err := Announce(echoHello{Address: e.Address()}); err != nil {
		return err
	}
	var peer echoHello
	if err := readJSONLine(in, &peer); err != nil {
		return fmt.Errorf("the pinger's address: %w", err)
	}
	c, err := e.Connect(ctx, peer.Address, ucx.ConnectOptions{})
	if err != nil {
		return err
	}
	if err := e.HandleAM(echoAMID, func(m ucx.AMMessage) {
		c.SendAMAsync(ctx, echoAMID, nil, [][]byte{m.Payload}, ucx.SendOptions{})
	}); err != nil {
		return err
	}
	if err := Announce("ready"); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, in) // until stdin closes
	return nil
}

// Pinger is the measuring side of the AM round trip.
type Pinger struct {
	e     *ucx.Engine
	c     *ucx.Conn
	child *Child
	pong  chan int

	// chain is the handler-driven run's state: the handler owns it while a run is on.
	chain struct {
		buf   []byte
		left  int
		last  time.Time
		d     []time.Duration
		done  chan error
		ended bool
	}
}

// StartPinger starts the echo child (env and args select its role; nil env: this process's) and an
// engine configured by cfg in this process, and connects the two.
func StartPinger(ctx context.Context, cfg ucx.EngineConfig, env []string, args ...string) (*Pinger, error) {
	var hello echoHello
	child, err := StartChild(env, &hello, args...)
	if err != nil {
		return nil, fmt.Errorf("echo process: %w", err)
	}
	p := &Pinger{child: child, pong: make(chan int, 1)}
	if p.e, err = ucx.NewEngine(ctx, cfg); err != nil {
		child.Stop()
		return nil, err
	}
	if err := p.e.HandleAM(echoAMID, p.onPong); err != nil {
		p.Close()
		return nil, err
	}
	if err := writeJSONLine(child.In, echoHello{Address: p.e.Address()}); err != nil {
		p.Close()
		return nil, fmt.Errorf("echo process: %w", err)
	}
	var ready string
	if err := readJSONLine(child.Out, &ready); err != nil || ready != "ready" {
		p.Close()
		return nil, fmt.Errorf("echo process not ready: %q %v", ready, err)
	}
	if p.c, err = p.e.Connect(ctx, hello.Address, ucx.ConnectOptions{}); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// Close ends the child and the engine.
func (p *Pinger) Close() {
	if p.child != nil {
		p.child.Stop()
	}
	if p.e != nil {
		p.e.Close(context.Background())
	}
}

// Engine is the pinger's engine (for its settings).
func (p *Pinger) Engine() *ucx.Engine { return p.e }

func (p *Pinger) onPong(m ucx.AMMessage) {
	ch := &p.chain
	if ch.done == nil || ch.ended {
		p.pong <- len(m.Payload)
		return
	}
	ch.d = append(ch.d, time.Since(ch.last))
	if len(m.Payload) != len(ch.buf) {
		ch.ended = true
		ch.done <- fmt.Errorf("pong of %d bytes, sent %d", len(m.Payload), len(ch.buf))
		return
	}
	if ch.left--; ch.left == 0 {
		ch.ended = true
		ch.done <- nil
		return
	}
	ch.last = time.Now()
	if err := p.c.SendAMAsync(context.Background(), echoAMID, nil, [][]byte{ch.buf}, ucx.SendOptions{}).Err(); err != nil && !errors.Is(err, ucx.StatusInProgress) {
		ch.ended = true
		ch.done <- err
	}
}

// CallerRoundTrips times n round trips of size bytes the way a request/response caller waits:
// the calling goroutine sends, then waits on a channel the handler fills, so each includes one
// goroutine hand-off on this side.
func (p *Pinger) CallerRoundTrips(size, n int) ([]time.Duration, error) {
	buf := make([]byte, size)
	d := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if err := p.c.SendAM(context.Background(), echoAMID, nil, buf); err != nil {
			return nil, err
		}
		select {
		case got := <-p.pong:
			if got != size {
				return nil, fmt.Errorf("pong of %d bytes, sent %d", got, size)
			}
		case <-time.After(10 * time.Second):
			return nil, errors.New("no pong within 10 s")
		}
		d = append(d, time.Since(t0))
	}
	return d, nil
}

// HandlerRoundTrips times n round trips driven by the pong's handler, which sends the next ping
// itself: the engine's own round trip, as in ucx_perftest's single-thread loop.
func (p *Pinger) HandlerRoundTrips(size, n int) ([]time.Duration, error) {
	ch := &p.chain
	ch.buf, ch.left, ch.d, ch.ended = make([]byte, size), n, make([]time.Duration, 0, n), false
	ch.done = make(chan error, 1)
	ch.last = time.Now()
	if err := p.c.SendAM(context.Background(), echoAMID, nil, ch.buf); err != nil {
		return nil, err
	}
	select {
	case err := <-ch.done:
		ch.done = nil
		return ch.d, err
	case <-time.After(30 * time.Second):
		return nil, errors.New("the handler-driven round trips did not finish within 30 s")
	}
}

// PerftestAMLatency runs ucx_perftest's AM latency test on loopback and returns its median round
// trip (perftest prints half the round trip for latency tests).
func PerftestAMLatency(ctx context.Context, tool ucx.Tool, size, iters int) (time.Duration, error) {
	r, err := Run(ctx, tool, "-t", "ucp_am_lat", "-s", fmt.Sprint(size), "-n", fmt.Sprint(iters))
	return time.Duration(2 * r.LatencyP50 * float64(time.Microsecond)), err
}
