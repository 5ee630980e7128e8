package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"runtime/metrics"
	"sort"
	"time"

	"github.com/velo-go/velo/velo"
)

// serverProc is the server process as the parent talks to it: its first stdout line is the
// serverInfo; afterwards each "cpu" line on its stdin is answered with its CPU use.
type serverProc struct {
	in  io.Writer
	out *bufio.Reader
}

func (s *serverProc) cpu() cpuUse {
	_, err := io.WriteString(s.in, "cpu\n")
	check(err)
	line, err := s.out.ReadBytes('\n')
	check(err)
	var u cpuUse
	check(json.Unmarshal(line, &u))
	return u
}

// latencySizes are the message sizes of the latency table.
var latencySizes = []int{64, 1024}

// latencyTable measures request/response round trips against a raw TCP ping-pong of the same size.
//
// Wall-clock latency: raw and velo run in alternating blocks of round trips (the order swaps every
// round), so load that comes and goes on a shared machine falls on both, and each block reports its
// median. Alternating single round trips instead flatters velo: the threads a velo round trip
// leaves spinning slow the raw round trip right after it (on two cores, by a third or more). The
// last line per size is the median of the rounds' ratios, with their range.
//
// CPU: raw and velo then run in separate blocks, and both processes' CPU time (user + system) and
// context switches are read before and after each block. CPU per round trip barely depends on
// what else the machine runs, so it shows a change in the messenger's cost more reliably than
// latency on a loaded machine; context switches count the times a thread went to sleep, which is
// what a goroutine hand-off costs on an otherwise idle P.
func latencyTable(ctx context.Context, consumer *velo.Velo, info serverInfo, srv *serverProc, rounds int, iters func(int) int) {
	fmt.Println()
	fmt.Println("Messenger request/response one-way latency, RTT/2 (median per block; ratio = velo / raw, lower is better)")
	fmt.Printf("%-8s %6s %6s %10s %10s %8s %9s\n", "size", "round", "iters", "raw µs", "velo µs", "ratio", "velo pf")
	raw, err := net.Dial("tcp", info.Echo)
	check(err)
	defer raw.Close()
	check(raw.(*net.TCPConn).SetNoDelay(true))
	pp := &pingPong{raw: raw, buf: make([]byte, 64<<10), consumer: consumer, peer: info.Peer.ID}
	warm := pp.warmUp(ctx, srv)
	fmt.Printf("(after %d warm-up round trips of 1 KiB, until both processes had collected garbage once)\n", warm)
	n := iters(5000)
	for _, size := range latencySizes {
		msg := make([]byte, size)
		// block returns the median RTT/2 and the page faults per round trip of both processes
		// together, read outside the timed loop.
		block := func(once func([]byte) time.Duration) (float64, float64) {
			for i := 0; i < n/10; i++ { // warm up
				once(msg)
			}
			f0 := cpuNow().Faults + srv.cpu().Faults
			t := make([]time.Duration, n)
			for i := range t {
				t[i] = once(msg)
			}
			f1 := cpuNow().Faults + srv.cpu().Faults
			return us(median(t)) / 2, (f1 - f0) / float64(n)
		}
		veloOnce := func(m []byte) time.Duration { return pp.veloOnce(ctx, m) }
		var ratios []float64
		for r := 1; r <= max(rounds, 1); r++ {
			var rv, vv, pf float64
			if r%2 == 1 {
				rv, _ = block(pp.rawOnce)
				vv, pf = block(veloOnce)
			} else {
				vv, pf = block(veloOnce)
				rv, _ = block(pp.rawOnce)
			}
			ratios = append(ratios, vv/rv)
			fmt.Printf("%-8s %6d %6d %10.1f %10.1f %8.2f %9.3f\n", fmt.Sprintf("%d B", size), r, n, rv, vv, vv/rv, pf)
		}
		sort.Float64s(ratios)
		fmt.Printf("%-8s %6s %6s %10s %10s %8.2f  (median of %d rounds, range %.2f-%.2f)\n",
			fmt.Sprintf("%d B", size), "all", "", "", "", ratios[len(ratios)/2], len(ratios), ratios[0], ratios[len(ratios)-1])
	}

	fmt.Println()
	fmt.Println("CPU per round trip (user + system µs; context switches, csw) of the calling (client) and the answering")
	fmt.Println("(server) process; ratio = velo / raw of the two processes' CPU together")
	fmt.Printf("%-8s %6s %-5s %10s %10s %10s %10s %8s\n", "size", "iters", "", "client µs", "server µs", "client csw", "server csw", "ratio")
	n = iters(20000)
	var mem [][2]perTrip // client, server
	for _, size := range latencySizes {
		msg := make([]byte, size)
		block := func(once func([]byte) time.Duration) (client, server perTrip) {
			c0, s0 := cpuNow(), srv.cpu()
			for i := 0; i < n; i++ {
				once(msg)
			}
			c1, s1 := cpuNow(), srv.cpu()
			return c1.sub(c0).per(n), s1.sub(s0).per(n)
		}
		rc, rs := block(pp.rawOnce)
		vc, vs := block(func(m []byte) time.Duration { return pp.veloOnce(ctx, m) })
		label := fmt.Sprintf("%d B", size)
		fmt.Printf("%-8s %6d %-5s %10.1f %10.1f %10.2f %10.2f\n", label, n, "raw", rc.CPUMicros, rs.CPUMicros, rc.Switches, rs.Switches)
		fmt.Printf("%-8s %6d %-5s %10.1f %10.1f %10.2f %10.2f %8.2f\n", label, n, "velo", vc.CPUMicros, vs.CPUMicros, vc.Switches, vs.Switches,
			(vc.CPUMicros+vs.CPUMicros)/(rc.CPUMicros+rs.CPUMicros))
		mem = append(mem, [2]perTrip{vc, vs})
	}

	fmt.Println()
	fmt.Println("Memory per velo round trip of the same blocks: heap bytes allocated, page faults, and garbage")
	fmt.Println("collection cycles per 10,000 round trips, of the client and the server process")
	fmt.Printf("%-8s %10s %10s %10s %10s %10s %10s\n", "size", "client B", "server B", "client pf", "server pf", "client GC", "server GC")
	for i, size := range latencySizes {
		c, s := mem[i][0], mem[i][1]
		fmt.Printf("%-8s %10.0f %10.0f %10.3f %10.3f %10.2f %10.2f\n", fmt.Sprintf("%d B", size),
			c.AllocBytes, s.AllocBytes, c.Faults, s.Faults, c.GCsPer10k, s.GCsPer10k)
	}
}

// warmUp runs velo round trips until both processes have finished a garbage collection cycle
// since it began, and returns how many it ran. Until then a process whose live heap is large (the
// server holds the 73 MiB that the Get table fetches) allocates each message on memory it has never
// touched, and the page faults (very costly in a VM) would be charged to velo: raw TCP allocates
// nothing per message. A long-running process is past that after its first cycle.
func (p *pingPong) warmUp(ctx context.Context, srv *serverProc) int {
	msg := make([]byte, 1024)
	c0, s0 := gcCycles(), srv.cpu().GCs
	for i := 1; ; i++ {
		p.veloOnce(ctx, msg)
		if i%1000 == 0 && (gcCycles() > c0 && srv.cpu().GCs > s0 || i >= 1_000_000) {
			return i
		}
	}
}

// gcCycles is how many garbage collection cycles this process completed.
func gcCycles() uint64 { return readMetric("/gc/cycles/total:gc-cycles") }

// allocBytes is how many bytes this process allocated on the heap since it started.
func allocBytes() uint64 { return readMetric("/gc/heap/allocs:bytes") }

func readMetric(name string) uint64 {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// pingPong runs one round trip of either kind and returns its duration.
type pingPong struct {
	raw      net.Conn
	buf      []byte
	consumer *velo.Velo
	peer     velo.InstanceID
}

func (p *pingPong) rawOnce(msg []byte) time.Duration {
	start := time.Now()
	_, err := p.raw.Write(msg)
	check(err)
	_, err = io.ReadFull(p.raw, p.buf[:len(msg)])
	check(err)
	return time.Since(start)
}

func (p *pingPong) veloOnce(ctx context.Context, msg []byte) time.Duration {
	start := time.Now()
	_, err := p.consumer.Request(ctx, p.peer, "echo", msg)
	check(err)
	return time.Since(start)
}

// cpuUse is a process's CPU time, context switches, page faults and heap allocation (or their
// difference, or per round trip).
type cpuUse struct {
	CPUMicros float64 // user + system
	Switches  float64 // voluntary + involuntary context switches
	Faults    float64 // minor + major page faults
	GCs       uint64  // garbage collection cycles completed
	Alloc     uint64  // bytes allocated on the heap (cumulative)
}

func (a cpuUse) sub(b cpuUse) cpuUse {
	return cpuUse{CPUMicros: a.CPUMicros - b.CPUMicros, Switches: a.Switches - b.Switches, Faults: a.Faults - b.Faults,
		GCs: a.GCs - b.GCs, Alloc: a.Alloc - b.Alloc}
}

// perTrip is a block's difference divided by its n round trips.
type perTrip struct {
	CPUMicros, Switches, Faults float64
	AllocBytes                  float64
	GCsPer10k                   float64
}

func (a cpuUse) per(n int) perTrip {
	f := float64(n)
	return perTrip{CPUMicros: a.CPUMicros / f, Switches: a.Switches / f, Faults: a.Faults / f,
		AllocBytes: float64(a.Alloc) / f, GCsPer10k: float64(a.GCs) * 1e4 / f}
}
