// Command bench prints the runtime's performance as ratios against baselines measured in the same
// run on the same machine (`make bench-velo`):
//
//   - chunked-path Get bandwidth at 1, 8 and 64 MiB beside a raw Go TCP stream of the same bytes
//     over loopback;
//   - messenger request/response one-way latency (RTT/2) at 64 B and 1 KiB beside a raw TCP
//     ping-pong of the same sizes;
//   - the messenger round trip and the 64 MiB chunked Get with each authentication mode of the
//     control plane (cluster secret, mutual TLS) beside the unauthenticated run (auth.go).
//
// As in a deployment, the two sides are separate processes: the bench runs itself again as a
// server (owner, echo handler, raw stream source and raw echo) and measures from the parent.
// Baseline and velo alternate, so machine noise falls on both alike: Get iterations one by one,
// latency in blocks of round trips (see latencyTable for why not one by one). Each figure is a
// median. Both raw baselines use TCP_NODELAY, as velo's TCP transport does (Go's default). It
// asserts nothing.
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"os"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/velo-go/velo/ucx/benchkit"
	"github.com/velo-go/velo/velo"
)

var sizes = []int{1 << 20, 8 << 20, 64 << 20}

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// serverInfo is what the server process prints on its first line.
type serverInfo struct {
	Peer    velo.PeerInfo
	Handles []velo.Handle
	Stream  string // raw stream source: send an 8-byte size, read that many bytes
	Echo    string // raw echo
}

func main() {
	quick := flag.Bool("quick", false, "fewer iterations (a smoke run)")
	only := flag.String("only", "", `run only "get", "latency" or "auth"`)
	serve := flag.Bool("serve", false, "run as the server process (internal)")
	cpuprofile := flag.String("cpuprofile", "", "write CPU profiles of the client side to this file and of the server side to FILE.server")
	memprofile := flag.String("memprofile", "", "write heap allocation profiles of the client side to this file and of the server side to FILE.server")
	chunk := flag.Int("chunk", 0, "owner chunk size in bytes (0: the default)")
	window := flag.Int("window", 0, "consumer pull window (0: the default)")
	rounds := flag.Int("rounds", 7, "latency rounds (each a block of raw and a block of velo round trips)")
	flag.Func("sizes", "latency message sizes in bytes, comma-separated (default 64,1024)", func(v string) error {
		var list []int
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 || n > 64<<10 {
				return fmt.Errorf("size %q: want a byte count from 1 to 65536", f)
			}
			list = append(list, n)
		}
		latencySizes = list
		return nil
	})
	flag.Parse()
	quiet := quietLog
	ctx := context.Background()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		check(err)
		check(pprof.StartCPUProfile(f))
		defer pprof.StopCPUProfile()
	}
	if *memprofile != "" {
		defer writeHeapProfile(*memprofile)
	}
	if *serve {
		runServer(ctx, quiet, *chunk)
		return
	}
	iters := func(n int) int {
		if *quick {
			return max(n/10, 2)
		}
		return n
	}

	srvArgs := []string{"-serve", fmt.Sprintf("-chunk=%d", *chunk)}
	if *cpuprofile != "" {
		srvArgs = append(srvArgs, "-cpuprofile="+*cpuprofile+".server")
	}
	if *memprofile != "" {
		srvArgs = append(srvArgs, "-memprofile="+*memprofile+".server")
	}
	var info serverInfo
	srv, err := benchkit.StartChild(nil, &info, srvArgs...)
	check(err)
	defer srv.Stop()
	server := &serverProc{in: srv.In, out: srv.Out}

	copts := []velo.Option{velo.WithLogger(quiet)}
	if *window > 0 {
		copts = append(copts, velo.WithPullWindow(*window))
	}
	consumer, err := velo.New(ctx, copts...)
	check(err)
	defer consumer.Close()
	check(consumer.RegisterPeer(ctx, info.Peer))

	fmt.Printf("velo bench: %s/%s, %d CPUs, GOMAXPROCS %d, %s; owner and consumer in separate processes\n",
		runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version())
	if *only == "" || *only == "get" {
		getTable(ctx, consumer, info, iters)
	}
	if *only == "" || *only == "latency" {
		latencyTable(ctx, consumer, info, server, *rounds, iters)
	}
	if *only == "" || *only == "auth" {
		authTable(ctx, iters)
	}
	fmt.Println()
	fmt.Println("Targets: chunked >= 0.80x raw at >= 8 MiB; messenger <= 1.50x raw ping-pong.")
}

func runServer(ctx context.Context, log *slog.Logger, chunk int) {
	opts := []velo.Option{velo.WithLogger(log)}
	if chunk > 0 {
		opts = append(opts, velo.WithChunkSize(chunk))
	}
	owner, err := velo.New(ctx, opts...)
	check(err)
	defer owner.Close()
	check(owner.RegisterHandler("echo", func(ctx context.Context, m *velo.Message) ([]byte, error) { return m.Payload, nil }))
	info := serverInfo{Peer: owner.PeerInfo()}
	var payloads [][]byte
	for _, s := range sizes {
		data := make([]byte, s)
		for i := range data {
			data[i] = byte(i * 7)
		}
		h, err := owner.StageData(ctx, data)
		check(err)
		info.Handles = append(info.Handles, h)
		payloads = append(payloads, data)
	}
	stream, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	info.Stream, info.Echo = stream.Addr().String(), echo.Addr().String()
	go serveStream(stream, payloads)
	go serveEcho(echo)
	b, err := json.Marshal(info)
	check(err)
	os.Stdout.Write(append(b, '\n'))
	// Until the parent is done, answer each "cpu" line with this process's CPU use.
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		u := cpuNow()
		b, err := json.Marshal(u)
		check(err)
		os.Stdout.Write(append(b, '\n'))
	}
}

// serveStream writes the very bytes the owner staged (not a small hot buffer), in 1 MiB writes,
// so the baseline pays the same memory traffic as the chunked path.
func serveStream(ln net.Listener, payloads [][]byte) {
	c, err := ln.Accept()
	check(err)
	var hdr [8]byte
	for {
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		size := int(binary.BigEndian.Uint64(hdr[:]))
		var src []byte
		for _, p := range payloads {
			if len(p) == size {
				src = p
			}
		}
		for off := 0; off < size; off += 1 << 20 {
			if _, err := c.Write(src[off:min(off+1<<20, size)]); err != nil {
				return
			}
		}
	}
}

func serveEcho(ln net.Listener) {
	c, err := ln.Accept()
	check(err)
	check(c.(*net.TCPConn).SetNoDelay(true))
	b := make([]byte, 64<<10)
	for {
		n, err := c.Read(b)
		if err != nil {
			return
		}
		if _, err := c.Write(b[:n]); err != nil {
			return
		}
	}
}

func getTable(ctx context.Context, consumer *velo.Velo, info serverInfo, iters func(int) int) {
	fmt.Println()
	fmt.Println("Chunked-path Get over loopback TCP (median of iterations; ratio = velo / raw, higher is better)")
	fmt.Printf("%-8s %6s %14s %14s %8s\n", "size", "iters", "raw MB/s", "velo MB/s", "ratio")
	raw, err := net.Dial("tcp", info.Stream)
	check(err)
	defer raw.Close()
	for i, size := range sizes {
		n := iters([]int{200, 40, 8}[i])
		h := info.Handles[i]
		dst := make([]byte, size)
		var rawT, veloT []time.Duration
		for it := 0; it < n+1; it++ { // the first iteration warms up both sides
			start := time.Now()
			var hdr [8]byte
			binary.BigEndian.PutUint64(hdr[:], uint64(size))
			_, err := raw.Write(hdr[:])
			check(err)
			_, err = io.ReadFull(raw, dst)
			check(err)
			rt := time.Since(start)

			start = time.Now()
			l, err := consumer.GetInto(ctx, h, dst)
			vt := time.Since(start)
			check(err)
			check(l.Detach(ctx))
			if it > 0 {
				rawT, veloT = append(rawT, rt), append(veloT, vt)
			}
		}
		rb, vb := mbps(size, median(rawT)), mbps(size, median(veloT))
		fmt.Printf("%-8s %6d %14.0f %14.0f %8.2f\n", fmt.Sprintf("%d MiB", size>>20), n, rb, vb, vb/rb)
	}
}

// writeHeapProfile writes the allocation profile (go tool pprof -sample_index=alloc_space shows
// where the bytes allocated per message come from).
func writeHeapProfile(path string) {
	f, err := os.Create(path)
	check(err)
	defer f.Close()
	runtime.GC() // the profile is as of the last completed cycle
	check(pprof.Lookup("allocs").WriteTo(f, 0))
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func mbps(size int, d time.Duration) float64 { return float64(size) / d.Seconds() / 1e6 }
func us(d time.Duration) float64             { return float64(d.Nanoseconds()) / 1e3 }
