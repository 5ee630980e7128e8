// Package benchkit is what velo's three benchmark harnesses (ucx/internal/benchrma,
// velo/internal/bench and test/rdmapath/cmd/rdmabench, in three modules) share: the baseline, UCX's
// own ucx_perftest from the release this binary links (ucx.FindTool), run as one server and one
// client process on loopback with this process's environment (UCX_TLS and the binding's UCX
// defaults included), so the baseline and the measurement see the same UCX; and the second
// process of a two-process measurement, which is the harness itself started again in another
// role. It lives in module ucx, the one module all three import, and not under a harness's
// internal/.
package benchkit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/velo-go/velo/ucx"
)

// Result is the client's Final line.
type Result struct {
	Iterations int
	// Latency in µs as perftest prints it: half a round trip for the latency tests
	// (ucp_am_lat), the time per operation for the others.
	LatencyP50, LatencyAvg, LatencyOverall float64
	// Bandwidth in MiB/s (perftest's "MB" is 2^20 bytes).
	BandwidthAvg, BandwidthOverall float64
	// Message rate in operations per second.
	RateAvg, RateOverall float64
}

// Find locates the ucx_perftest of the linked UCX release.
func Find() (ucx.Tool, error) { return ucx.FindTool("ucx_perftest") }

// ErrGetRefusedByGuard marks a GET that the linked UCX's guard (velo's patch set, the static
// build) refused because it was software RMA: over tcp, ucp_get_nbx is emulated with active
// messages, and the guard turns every such request down.
var ErrGetRefusedByGuard = errors.New("the linked UCX's guard refuses software RMA")

// ProbeDirectGet reads one byte at addr with key over c, a connection of an engine with
// ucx.RMADirect, and says whether ucp_get_nbx, and so ucx_perftest -t ucp_get, can be measured
// over the transports in use. nil: it can. An error wrapping ErrGetRefusedByGuard: the linked
// UCX's guard refused the GET as software RMA; perftest's GET would be refused the same way, and
// its client does not end on the refusal (it waits until killed), so a harness must not start
// it and should print this error where the baseline would be. Any other error is the GET's own.
func ProbeDirectGet(ctx context.Context, c *ucx.Conn, addr uint64, key []byte) error {
	err := c.Get(ctx, make([]byte, 1), addr, key)
	if err == nil {
		return nil
	}
	if g, gerr := ucx.SoftwareRMAGuard(); gerr == nil && g.Enforced && errors.Is(err, ucx.StatusRejected) {
		return fmt.Errorf("%w (%s): a direct GET over UCX_TLS=%q is software RMA here and was refused (%v), so ucx_perftest -t ucp_get would wait forever; "+
			"a UCX without the guard (the system's, make bench-rma) or hardware RMA (UCX_TLS=rc or dc) gives that baseline", ErrGetRefusedByGuard, g.Version, os.Getenv("UCX_TLS"), err)
	}
	return fmt.Errorf("benchkit: probing a direct GET: %w", err)
}

// ProbeLoopbackGet is ProbeDirectGet between two engines of this process, over the transports
// the environment selects: one maps and registers a page, the other reads a byte of it with a
// direct GET. It answers in well under a second what starting ucx_perftest -t ucp_get would
// otherwise find out by hanging: nil where the GET works, an error wrapping ErrGetRefusedByGuard
// where the linked UCX's guard refuses it as software RMA, any other error as it came. On UCX
// 1.13 two engines in one process draw a warning (one engine per process is that release's
// supported shape); the guard the probe is for exists only in velo's static 1.22 build.
func ProbeLoopbackGet(ctx context.Context) error {
	owner, err := ucx.NewEngine(ctx, ucx.EngineConfig{Name: "probe-owner"})
	if err != nil {
		return fmt.Errorf("benchkit: probing a direct GET: %w", err)
	}
	defer owner.Close(context.Background())
	reader, err := ucx.NewEngine(ctx, ucx.EngineConfig{Name: "probe-reader", RMA: ucx.RMADirect})
	if err != nil {
		return fmt.Errorf("benchkit: probing a direct GET: %w", err)
	}
	defer reader.Close(context.Background())
	mem, err := ucx.AllocMemory(os.Getpagesize(), ucx.MemoryOptions{})
	if err != nil {
		return fmt.Errorf("benchkit: probing a direct GET: %w", err)
	}
	defer mem.Free()
	reg, err := owner.Register(ctx, mem.Bytes())
	if err != nil {
		return fmt.Errorf("benchkit: probing a direct GET: %w", err)
	}
	defer reg.Unregister(context.Background())
	c, err := reader.Connect(ctx, owner.Address(), ucx.ConnectOptions{})
	if err != nil {
		return fmt.Errorf("benchkit: probing a direct GET: %w", err)
	}
	return ProbeDirectGet(ctx, c, reg.Addr(), reg.RemoteKey())
}

var finalLine = regexp.MustCompile(`(?m)^\s*Final:\s+(.*)$`)

// ParseFinal reads the Final line of ucx_perftest's output.
func ParseFinal(out []byte) (Result, error) {
	m := finalLine.FindSubmatch(out)
	if m == nil {
		return Result{}, fmt.Errorf("perftest: no Final line in its output:\n%s", out)
	}
	f := strings.Fields(string(m[1]))
	if len(f) < 8 {
		return Result{}, fmt.Errorf("perftest: Final line %q has %d fields, want 8", m[1], len(f))
	}
	var v [8]float64
	for i := range v {
		x, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return Result{}, fmt.Errorf("perftest: field %d of Final line %q: %w", i+1, m[1], err)
		}
		v[i] = x
	}
	return Result{
		Iterations: int(v[0]), LatencyP50: v[1], LatencyAvg: v[2], LatencyOverall: v[3],
		BandwidthAvg: v[4], BandwidthOverall: v[5], RateAvg: v[6], RateOverall: v[7],
	}, nil
}

// Run runs tool as a server and a client on a free loopback port, the client with args (for
// example "-t", "ucp_get", "-s", "1048576", "-n", "100"), and returns the client's Final line.
// The client retries its connect while the server starts. The port is free when it is picked but
// not reserved: on a busy host another process can bind it before perftest's server does, and
// then the server exits at once; Run starts again on another port (up to three ports).
func Run(ctx context.Context, tool ucx.Tool, args ...string) (Result, error) {
	if tool.Path == "" {
		return Result{}, errors.New("benchkit: no ucx_perftest (use Find)")
	}
	var err error
	for try := 0; try < 3; try++ {
		var res Result
		var portTaken bool
		res, portTaken, err = runOnFreePort(ctx, tool, args)
		if !portTaken {
			return res, err
		}
	}
	return Result{}, err
}

// runOnFreePort is one try of Run. portTaken reports that the server could not bind the port it
// was given, which a new port may fix.
func runOnFreePort(ctx context.Context, tool ucx.Tool, args []string) (res Result, portTaken bool, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return Result{}, false, err
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	srv := exec.CommandContext(ctx, tool.Path, "-p", port)
	srv.Env = os.Environ()
	var srvOut lockedBuffer
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	if err := srv.Start(); err != nil {
		return Result{}, false, fmt.Errorf("perftest: %s: %w", tool.Path, err)
	}
	exited := make(chan struct{})
	go func() { srv.Wait(); close(exited) }()
	defer func() { <-exited }()
	defer srv.Process.Kill()
	var out []byte
	for attempt := 0; ; attempt++ {
		cli := exec.CommandContext(ctx, tool.Path, append([]string{"127.0.0.1", "-p", port}, args...)...)
		cli.Env = os.Environ()
		out, err = cli.CombinedOutput()
		if err == nil || attempt == 50 || ctx.Err() != nil {
			break
		}
		select {
		case <-exited:
			// The server is gone before any client got through: the port was taken.
			if strings.Contains(srvOut.String(), "Address already in use") {
				return Result{}, true, fmt.Errorf("perftest: server could not bind port %s:\n%s", port, srvOut.String())
			}
		case <-time.After(100 * time.Millisecond): // the server may not listen yet
		}
	}
	if err != nil {
		return Result{}, false, fmt.Errorf("perftest: client %v: %w\n%s\nserver:\n%s", args, err, out, srvOut.String())
	}
	res, err = ParseFinal(out)
	return res, false, err
}

// lockedBuffer collects a process's output while another goroutine may read it.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
