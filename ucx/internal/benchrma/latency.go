package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/ucx/benchkit"
)

// echoAMID is the active-message id of the latency benchmark's ping and pong.
const echoAMID = 1

// spinFor is EngineConfig.SpinFor of both engines (-spin); the echo process gets it in
// spinEnv.
var spinFor time.Duration

const spinEnv = "UCX_BENCH_RMA_SPIN"

// echo is the latency benchmark's second process: it prints its engine's address, reads
// the client's from stdin, connects back and answers every ping with the same bytes.
func echo() error {
	ctx := context.Background()
	e, err := ucx.NewEngine(ctx, ucx.EngineConfig{Name: "echo", SpinFor: spinFor})
	if err != nil {
		return err
	}
	defer e.Close(ctx)
	if err := writeAddress(os.Stdout, e.Address()); err != nil {
		return err
	}
	in := bufio.NewReader(os.Stdin)
	line, err := in.ReadString('\n')
	if err != nil {
		return fmt.Errorf("client address: %w", err)
	}
	var addr []byte
	if err := json.Unmarshal([]byte(line), &addr); err != nil {
		return err
	}
	c, err := e.Connect(ctx, addr, ucx.ConnectOptions{})
	if err != nil {
		return err
	}
	if err := e.HandleAM(echoAMID, func(m ucx.AMMessage) {
		c.SendAMAsync(ctx, echoAMID, nil, [][]byte{m.Payload}, ucx.SendOptions{})
	}); err != nil {
		return err
	}
	stop, err := startProfile("echo")
	if err != nil {
		return err
	}
	defer stop()
	fmt.Println("ready")
	_, _ = in.ReadString('\n') // until stdin closes
	return nil
}

// writeAddress writes a worker address as one JSON line (the two processes' handshake).
func writeAddress(w io.Writer, addr []byte) error {
	b, err := json.Marshal(addr)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

var latSizes = []int{64, 1 << 10}

// latency measures active-message round trips between two engines in two processes
// against `ucx_perftest -t ucp_am_lat` (also two processes, same UCX_TLS), alternating
// rounds so load on the machine falls on both.
func latency(quick bool) error {
	ctx := context.Background()
	var addr []byte
	child, err := benchkit.StartChild(append(os.Environ(), roleEnv+"=echo", spinEnv+"="+spinFor.String(), profileEnv+"="+profilePrefix), &addr)
	if err != nil {
		return fmt.Errorf("echo process: %w", err)
	}
	defer child.Stop()
	stdin, out := child.In, child.Out
	e, err := ucx.NewEngine(ctx, ucx.EngineConfig{Name: "ping", SpinFor: spinFor})
	if err != nil {
		return err
	}
	defer e.Close(ctx)
	// Two ways to wait for the pong. "caller": the benchmark's goroutine sends the ping and
	// waits on a channel the handler fills, so every round trip includes one goroutine
	// hand-off on this side (what a request/response caller pays). "handler": the pong's
	// handler sends the next ping itself and notes the time, so the round trip is the
	// engine's alone, as in ucx_perftest's single-thread loop.
	pong := make(chan int, 1)
	var chain struct {
		c     *ucx.Conn
		buf   []byte
		left  int
		last  time.Time
		d     []time.Duration
		done  chan error
		ended bool
	}
	if err := e.HandleAM(echoAMID, func(m ucx.AMMessage) {
		if chain.done == nil || chain.ended {
			pong <- len(m.Payload)
			return
		}
		now := time.Now()
		chain.d = append(chain.d, now.Sub(chain.last))
		if len(m.Payload) != len(chain.buf) {
			chain.ended = true
			chain.done <- fmt.Errorf("pong of %d bytes, sent %d", len(m.Payload), len(chain.buf))
			return
		}
		if chain.left--; chain.left == 0 {
			chain.ended = true
			chain.done <- nil
			return
		}
		chain.last = time.Now()
		if err := chain.c.SendAMAsync(ctx, echoAMID, nil, [][]byte{chain.buf}, ucx.SendOptions{}).Err(); err != nil && !errors.Is(err, ucx.StatusInProgress) {
			chain.ended = true
			chain.done <- err
		}
	}); err != nil {
		return err
	}
	if err := writeAddress(stdin, e.Address()); err != nil {
		return fmt.Errorf("echo process: %w", err)
	}
	if l, err := out.ReadString('\n'); err != nil || strings.TrimSpace(l) != "ready" {
		return fmt.Errorf("echo process not ready: %q %v", l, err)
	}
	c, err := e.Connect(ctx, addr, ucx.ConnectOptions{})
	if err != nil {
		return err
	}
	iters, rounds := 2000, 5
	if quick {
		iters, rounds = 200, 1
	}
	stop, err := startProfile("ping")
	if err != nil {
		return err
	}
	defer stop()
	pingPong := func(size, n int) ([]time.Duration, error) {
		buf := make([]byte, size)
		d := make([]time.Duration, 0, n)
		for i := 0; i < n; i++ {
			t0 := time.Now()
			if err := c.SendAM(ctx, echoAMID, nil, buf); err != nil {
				return nil, err
			}
			select {
			case got := <-pong:
				if got != size {
					return nil, fmt.Errorf("pong of %d bytes, sent %d", got, size)
				}
			case <-time.After(10 * time.Second):
				return nil, fmt.Errorf("no pong within 10 s")
			}
			d = append(d, time.Since(t0))
		}
		return d, nil
	}
	// inHandler runs n round trips driven by the pong handler (see chain above). The chain's
	// fields belong to the handler while it runs; done hands them back.
	inHandler := func(size, n int) ([]time.Duration, error) {
		chain.c, chain.buf, chain.left, chain.d, chain.ended = c, make([]byte, size), n, make([]time.Duration, 0, n), false
		chain.done = make(chan error, 1)
		chain.last = time.Now()
		if err := c.SendAM(ctx, echoAMID, nil, chain.buf); err != nil {
			return nil, err
		}
		select {
		case err := <-chain.done:
			chain.done = nil
			return chain.d, err
		case <-time.After(30 * time.Second):
			return nil, fmt.Errorf("the handler-driven round trips did not finish within 30 s")
		}
	}
	spin := "engine default"
	if spinFor != 0 {
		spin = spinFor.String()
	}
	fmt.Printf("Active-message round trip (µs, median of %d rounds of %d; baseline: ucx_perftest -t ucp_am_lat, UCX_TLS=%s, same run; SpinFor %s)\n", rounds, iters, os.Getenv("UCX_TLS"), spin)
	fmt.Printf("%-8s %-8s %14s %14s %14s %8s\n", "size", "waiter", "ucx_perftest", "engine p50", "engine p90", "ratio")
	for _, size := range latSizes {
		if _, err := pingPong(size, iters/10); err != nil { // warm-up: wireup, buffers
			return err
		}
		var base, p50, p90, hp50, hp90 []float64
		var perr error
		for r := 0; r < rounds; r++ {
			b, err := perftestLatency(size, iters*5)
			if err != nil {
				perr = err
				break
			}
			base = append(base, b)
			for _, m := range []struct {
				run      func(int, int) ([]time.Duration, error)
				p50, p90 *[]float64
			}{{pingPong, &p50, &p90}, {inHandler, &hp50, &hp90}} {
				d, err := m.run(size, iters)
				if err != nil {
					return err
				}
				sort.Slice(d, func(a, b int) bool { return d[a] < d[b] })
				*m.p50 = append(*m.p50, us(d[len(d)/2]))
				*m.p90 = append(*m.p90, us(d[len(d)*9/10]))
			}
		}
		if perr != nil {
			fmt.Printf("%-8s %14s (ucx_perftest failed: %v)\n", human(size), "-", perr)
			continue
		}
		b := med(base)
		fmt.Printf("%-8s %-8s %14.1f %14.1f %14.1f %7.2fx\n", human(size), "caller", b, med(p50), med(p90), med(p50)/b)
		fmt.Printf("%-8s %-8s %14.1f %14.1f %14.1f %7.2fx\n", human(size), "handler", b, med(hp50), med(hp90), med(hp50)/b)
	}
	return nil
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// perftestLatency runs ucx_perftest's AM latency test on loopback and returns its median
// round trip in µs (perftest prints half the round trip for latency tests).
func perftestLatency(size, iters int) (float64, error) {
	if perftestErr != nil {
		return 0, perftestErr
	}
	r, err := benchkit.Run(context.Background(), perftestTool, "-t", "ucp_am_lat", "-s", strconv.Itoa(size), "-n", strconv.Itoa(iters))
	return 2 * r.LatencyP50, err
}
