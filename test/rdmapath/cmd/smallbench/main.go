// Command smallbench prints what many small transfers cost, each figure beside a baseline
// measured in the same run on the same machine, in two processes (`make bench-small`):
//
//   - the UCX engine's active-message round trip (64 B, 1 KiB) beside `ucx_perftest -t
//     ucp_am_lat`: waited for by a caller (send, then wait on a channel the handler fills) and
//     driven by the handler itself (the engine's own round trip, as perftest's loop);
//   - a frame's round trip (64 B, 1 KiB, 64 KiB) over velo's UCX transport, plain and with every
//     frame sealed (the runtime's AuthGate with one session key, as between two instances with a
//     cluster secret), beside velo's TCP transport and beside `ucx_perftest -t ucp_am_lat` of the
//     same size;
//   - a GetBatch of 4 KiB blocks and one of 64 KiB blocks, 64 MiB each, beside one 64 MiB get and
//     beside `ucx_perftest -t ucp_get` at the same size with the same number of reads in flight
//     (-O, the batch window): MiB/s, reads per second and CPU time per read on each side (on a
//     UCX with velo's guard, which refuses perftest's software GET over tcp, that baseline is
//     left out and the table says so). The 4 KiB blocks run twice: inside the acquires' answers
//     (the default, path inline) and by RDMA reads (a second consumer with WithBatchInlineMax(0)),
//     so that both paths keep a figure;
//   - ending the 4 KiB batch's leases with one DetachLeases call beside one Detach per lease,
//     batch-window at a time.
//
// The parent measures; its second process (this program again, -role peer) echoes frames and
// owns the staged blocks, and a third (-role echo) echoes the engine's pings. Rounds alternate the
// measured thing and its baseline, with a pause longer than the engines' SpinFor between them, so
// neither runs while the other's progressor still spins. It asserts nothing, but it stops if a
// get does not take the path its row names.
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/ucx/benchkit"
	"github.com/velo-go/velo/velo"
	"github.com/velo-go/velo/velo/auth"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/transport"
	"github.com/velo-go/velo/velo/transport/tcp"
	"github.com/velo-go/velo/velo/transport/ucxtransport"
)

const (
	roleEnv = "SMALLBENCH_ROLE"
	// sessionEnv carries the sealed pair's session key (hex) from the parent to the peer process.
	sessionEnv = "SMALLBENCH_SESSION"
	total      = 64 << 20 // bytes of one batch
	pause      = 3 * time.Millisecond
	frameIts   = 2000
)

var (
	blockSizes = []int{4 << 10, 64 << 10}
	frameSizes = []int{64, 1 << 10, 64 << 10} // -sizes
	quiet      = slog.New(slog.NewTextHandler(io.Discard, nil))
)

func main() {
	quick := flag.Bool("quick", false, "one round, fewer iterations (a smoke run)")
	window := flag.Int("window", velo.DefaultBatchWindow, "reads in flight per owner (WithBatchWindow; perftest -O)")
	flag.StringVar(&profilePrefix, "profile", "", "write CPU profiles of the measuring and the peer process to PREFIX.{consumer,peer}.cpu.pprof")
	flag.StringVar(&only, "only", "", `run one part: "am" (the engine's round trip), "frames" (the transports) or "batch" (GetBatch and the lease endings)`)
	flag.IntVar(&nrounds, "rounds", 3, "alternating rounds per figure")
	flag.Func("sizes", "frame sizes of the transports' table in bytes, comma-separated (default 64,1024,65536)", func(v string) error {
		frameSizes = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 || n > 1<<20 {
				return fmt.Errorf("a frame size of 1 B to 1 MiB, not %q", f)
			}
			frameSizes = append(frameSizes, n)
		}
		return nil
	})
	flag.Parse()
	if v := os.Getenv(profileEnv); v != "" {
		profilePrefix = v
	}
	log.SetFlags(0)
	if os.Getenv("UCX_TLS") == "" {
		os.Setenv("UCX_TLS", "tcp")
	}
	var err error
	switch os.Getenv(roleEnv) {
	case "echo":
		err = benchkit.ServeEcho(context.Background(), ucx.EngineConfig{Name: "echo"}, os.Stdin)
	case "peer":
		stop := startProfile("peer")
		err = runPeer(*window)
		stop()
	default:
		switch only {
		case "", "am", "frames", "batch":
		default:
			log.Fatalf("smallbench: -only %q: want am, frames or batch", only)
		}
		if err = newSession(); err == nil {
			err = run(*quick, *window)
		}
	}
	if err != nil {
		log.Fatalf("smallbench: %v", err)
	}
}

// ---------------------------------------------------------------- the second process

// peerInfo is the peer's announcement: its echo transports' addresses and the owner's blocks.
type peerInfo struct {
	TCP, UCX, Sealed transport.PeerAddress
	Owner            velo.PeerInfo
	Blocks           map[int][]velo.Handle // by block size
	Whole            velo.Handle           `json:",omitzero"` // one payload of total bytes (none with -only frames)
}

// echoHost answers every frame with the same bytes over its transport, or hands it to back.
type echoHost struct {
	id   transport.InstanceID
	inc  uint64
	tr   transport.Transport
	back chan []byte
}

func (h *echoHost) LocalID() transport.InstanceID        { return h.id }
func (h *echoHost) Incarnation() uint64                  { return h.inc }
func (h *echoHost) Logger() *slog.Logger                 { return quiet }
func (h *echoHost) PeerDown(transport.InstanceID, error) {}
func (h *echoHost) Deliver(from transport.InstanceID, frame []byte) {
	if h.back != nil {
		h.back <- frame
		return
	}
	_ = h.tr.Send(context.Background(), from, frame)
}

// startHost starts tr under a new echoHost (back nil: it echoes).
func startHost(tr transport.Transport, back chan []byte) (*echoHost, error) {
	h := newEchoHost(tr, back)
	return h, tr.Start(h)
}

func newEchoHost(tr transport.Transport, back chan []byte) *echoHost {
	return &echoHost{id: transport.InstanceID(mrand.Uint64() | 1), inc: mrand.Uint64(), tr: tr, back: back}
}

// session is the key the sealed pair's hosts prove their hellos with: made by the parent, handed
// to the peer process in its environment. Between two instances with a cluster secret it is the
// session key of their control-plane handshake; here the pair needs no control plane, so the
// measured frames cost exactly what the seal adds to them.
var session []byte

func newSession() error {
	session = make([]byte, 32)
	if _, err := rand.Read(session); err != nil {
		return err
	}
	return os.Setenv(sessionEnv, hex.EncodeToString(session))
}

// gatedHost is an echoHost whose runtime requires authenticated peers (transport.AuthGate) and has
// authenticated one peer incarnation, allowed once its address is known. The UCX transport then
// proves its hellos and seals every frame after them, as under a cluster secret.
type gatedHost struct {
	*echoHost
	mu   sync.Mutex
	peer transport.PeerAddress
}

func (g *gatedHost) allow(p transport.PeerAddress) {
	g.mu.Lock()
	g.peer = p
	g.mu.Unlock()
}

func (g *gatedHost) AuthRequired() bool { return true }
func (g *gatedHost) Authenticated(p transport.InstanceID, inc uint64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return p != 0 && p == g.peer.ID && inc == g.peer.Incarnation
}
func (g *gatedHost) Authenticate(_ context.Context, p transport.InstanceID) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if p == 0 || p != g.peer.ID {
		return fmt.Errorf("smallbench: peer %v is not the sealed pair's peer", p)
	}
	return nil
}
func (g *gatedHost) HelloProof(_ transport.InstanceID, msg []byte) ([]byte, error) {
	return auth.HelloProof(session, msg), nil
}
func (g *gatedHost) HelloKey(p transport.InstanceID, inc uint64, msg, proof []byte) ([]byte, bool) {
	if !g.Authenticated(p, inc) {
		return nil, false
	}
	return auth.HelloKey([][]byte{session}, msg, proof)
}

func (h *echoHost) address() transport.PeerAddress {
	return transport.PeerAddress{ID: h.id, Incarnation: h.inc, Blob: h.tr.Address()}
}

// newVelo starts an instance with a TCP control plane and the UCX transport, room in the budget
// for every block and its lease registration, the batch window, and opts.
func newVelo(ctx context.Context, window int, opts ...velo.Option) (*velo.Velo, *ucxtransport.Transport, error) {
	ctl, err := tcp.New(tcp.Config{})
	if err != nil {
		return nil, nil, err
	}
	// The batch table measures the RDMA path, over tcp's software lanes too.
	u, err := ucxtransport.New(ucxtransport.Config{EagerEndpoints: true, RMAOverSoftwareLanes: true, Logger: quiet})
	if err != nil {
		ctl.Close()
		return nil, nil, err
	}
	v, err := velo.New(ctx, append([]velo.Option{velo.WithTransport(ctl), velo.WithUCXTransport(u), velo.WithLogger(quiet), velo.WithBatchWindow(window),
		velo.WithRDMA(velo.RDMAConfig{Pool: velo.RDMAPoolConfig{RegisteredBytesBudget: 4 << 30}})}, opts...)...)
	return v, u, err
}

// echoSet is a TCP transport, a UCX transport and a UCX transport that seals its frames, each
// under its own host.
type echoSet struct {
	tcp, ucx *echoHost
	sealed   *gatedHost
	stop     func()
}

// echoHosts starts an echoSet, its hosts echoing, or handing frames to a channel of their own
// when collect is true; stop closes the three.
func echoHosts(collect bool) (*echoSet, error) {
	tt, err := tcp.New(tcp.Config{})
	if err != nil {
		return nil, err
	}
	ut, err := ucxtransport.New(ucxtransport.Config{EagerEndpoints: true, Logger: quiet})
	if err != nil {
		tt.Close()
		return nil, err
	}
	st, err := ucxtransport.New(ucxtransport.Config{EagerEndpoints: true, Logger: quiet})
	if err != nil {
		ut.Close()
		tt.Close()
		return nil, err
	}
	set := &echoSet{stop: func() { st.Close(); ut.Close(); tt.Close() }}
	var tb, ub, sb chan []byte
	if collect {
		tb, ub, sb = make(chan []byte, 1), make(chan []byte, 1), make(chan []byte, 1)
	}
	set.sealed = &gatedHost{echoHost: newEchoHost(st, sb)}
	if set.tcp, err = startHost(tt, tb); err == nil {
		if set.ucx, err = startHost(ut, ub); err == nil {
			err = st.Start(set.sealed)
		}
	}
	if err != nil {
		set.stop()
		return nil, err
	}
	return set, nil
}

func runPeer(window int) error {
	ctx := context.Background()
	var err error
	if session, err = hex.DecodeString(os.Getenv(sessionEnv)); err != nil || len(session) == 0 {
		return fmt.Errorf("the peer process needs the session key in %s (it is started by the bench)", sessionEnv)
	}
	set, err := echoHosts(false)
	if err != nil {
		return err
	}
	defer set.stop()
	tt, ut, st := set.tcp.tr, set.ucx.tr, set.sealed.tr
	v, _, err := newVelo(ctx, window)
	if err != nil {
		return err
	}
	defer v.Close()
	info := peerInfo{TCP: set.tcp.address(), UCX: set.ucx.address(), Sealed: set.sealed.address(), Owner: v.PeerInfo(), Blocks: map[int][]velo.Handle{}}
	for _, size := range blockSizes {
		if only == "frames" {
			break
		}
		b := make([]byte, size)
		for i := 0; i < total/size; i++ {
			b[0], b[1] = byte(i), byte(i>>8)
			h, err := v.StageDataPinned(ctx, b)
			if err != nil {
				return err
			}
			info.Blocks[size] = append(info.Blocks[size], h)
		}
	}
	if only != "frames" {
		if info.Whole, err = v.StageDataPinned(ctx, make([]byte, total)); err != nil {
			return err
		}
	}
	if err := benchkit.Announce(info); err != nil {
		return err
	}
	// Peers learn each other from the parent: it sends its addresses, then asks for CPU time.
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	for in.Scan() {
		line := in.Text()
		switch {
		case strings.HasPrefix(line, "peers "):
			var pa [3]transport.PeerAddress
			if err := json.Unmarshal([]byte(line[len("peers "):]), &pa); err != nil {
				return err
			}
			if err := tt.AddPeer(ctx, pa[0]); err != nil {
				return err
			}
			if err := ut.AddPeer(ctx, pa[1]); err != nil {
				return err
			}
			set.sealed.allow(pa[2])
			if err := st.AddPeer(ctx, pa[2]); err != nil {
				return err
			}
			fmt.Println(`"ok"`)
		case line == "cpu":
			fmt.Println(cpuTime().Nanoseconds())
		}
	}
	return nil
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ---------------------------------------------------------------- the measuring process

func run(quick bool, window int) error {
	ctx := context.Background()
	rounds, amIts := max(1, nrounds), 2000
	if quick {
		rounds, amIts = 1, 200
	}
	tool, toolErr := benchkit.Find()
	fmt.Printf("small transfers, UCX %s (linked), UCX_TLS=%s, %d CPUs, %d alternating rounds\n", ucx.Version().String, os.Getenv("UCX_TLS"), runtime.NumCPU(), rounds)
	if toolErr != nil {
		return fmt.Errorf("no ucx_perftest for the baselines: %w", toolErr)
	}
	fmt.Printf("baseline: %s (UCX %s, the linked release)\n", tool.Path, tool.Version)
	if g, err := ucx.SoftwareRMAGuard(); err == nil {
		fmt.Printf("software RMA guard: %s\n", g)
		if g.Enforced && (only == "" || only == "batch") {
			// Over tcp (and ud) perftest's GET is software RMA, which the guard refuses, and a refused
			// GET hangs perftest instead of failing it: one direct GET between two engines of this
			// process says beforehand whether perftest can run.
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			switch err := benchkit.ProbeLoopbackGet(pctx); {
			case errors.Is(err, benchkit.ErrGetRefusedByGuard):
				guarded = true
				fmt.Printf("ucx_perftest -t ucp_get: refused by the guard over UCX_TLS=%s (software RMA): the batch rows go without it\n", os.Getenv("UCX_TLS"))
			case err != nil:
				guarded = true
				fmt.Printf("ucx_perftest -t ucp_get: not run, a direct GET failed (%v): the batch rows go without it\n", err)
			}
			cancel()
		}
	}
	if la, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Printf("load average at the start: %s", la)
	}

	// The engine's round trip.
	p, err := benchkit.StartPinger(ctx, ucx.EngineConfig{Name: "ping"}, append(os.Environ(), roleEnv+"=echo"))
	if err != nil {
		return err
	}
	exportEngineDefaults(p.Engine().Settings())
	if only != "" && only != "am" {
		p.Close()
		return rest(ctx, tool, rounds, amIts, window, quick)
	}
	fmt.Printf("\nengine active-message round trip (µs, p50; median of the rounds)\n")
	fmt.Printf("%-7s %-8s %14s %12s %8s\n", "size", "waiter", "ucx_perftest", "engine", "ratio")
	for _, size := range []int{64, 1 << 10} {
		if _, err := p.CallerRoundTrips(size, amIts/10); err != nil {
			return err
		}
		var base, caller, handler []float64
		for r := 0; r < rounds; r++ {
			b, err := benchkit.PerftestAMLatency(ctx, tool, size, amIts*5)
			if err != nil {
				return err
			}
			base = append(base, us(b))
			time.Sleep(pause)
			d, err := p.CallerRoundTrips(size, amIts)
			if err != nil {
				return err
			}
			caller = append(caller, us(p50(d)))
			time.Sleep(pause)
			if d, err = p.HandlerRoundTrips(size, amIts); err != nil {
				return err
			}
			handler = append(handler, us(p50(d)))
			time.Sleep(pause)
		}
		b := median(base)
		fmt.Printf("%-7s %-8s %14.1f %12.1f %7.2fx\n", human(size), "caller", b, median(caller), median(caller)/b)
		fmt.Printf("%-7s %-8s %14.1f %12.1f %7.2fx\n", human(size), "handler", b, median(handler), median(handler)/b)
	}
	p.Close()
	if only == "am" {
		return nil
	}
	return rest(ctx, tool, rounds, amIts, window, quick)
}

// rest runs the parts that need the peer process: the transports' frames and the batches.
func rest(ctx context.Context, tool ucx.Tool, rounds, amIts, window int, quick bool) error {
	var info peerInfo
	peer, err := benchkit.StartChild(append(os.Environ(), roleEnv+"=peer", profileEnv+"="+profilePrefix), &info,
		"-window", strconv.Itoa(window), "-only", only)
	if err != nil {
		return fmt.Errorf("the peer process: %w", err)
	}
	defer peer.Stop()
	stop := startProfile("consumer")
	defer stop()
	if only == "" || only == "frames" {
		if err := frames(ctx, peer, info, tool, rounds, amIts); err != nil {
			return err
		}
	}
	if only == "" || only == "batch" {
		return batches(ctx, peer, info, tool, rounds, window, quick)
	}
	return nil
}

var (
	only    string // -only
	nrounds int    // -rounds
	guarded bool   // the linked UCX's guard refuses perftest's GET (software RMA over tcp): no GET baseline
)

// profileEnv carries -profile to the peer process.
const profileEnv = "SMALLBENCH_PROFILE"

var profilePrefix string

// startProfile starts a CPU profile of this process when -profile was given.
func startProfile(role string) func() {
	if profilePrefix == "" {
		return func() {}
	}
	f, err := os.Create(profilePrefix + "." + role + ".cpu.pprof")
	if err != nil {
		log.Printf("smallbench: profile: %v", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		log.Printf("smallbench: profile: %v", err)
		return func() {}
	}
	return func() { pprof.StopCPUProfile(); f.Close() }
}

// frames times a frame's round trip over velo's UCX transport, plain and sealed, over its TCP
// transport, and ucx_perftest's AM round trip of the same size. The peer process echoes each.
func frames(ctx context.Context, peer *benchkit.Child, info peerInfo, tool ucx.Tool, rounds, amIts int) error {
	set, err := echoHosts(true)
	if err != nil {
		return err
	}
	defer set.stop()
	th, uh, sh := set.tcp, set.ucx, set.sealed.echoHost
	set.sealed.allow(info.Sealed) // before the peer's hello arrives
	b, _ := json.Marshal([3]transport.PeerAddress{th.address(), uh.address(), sh.address()})
	if _, err := fmt.Fprintf(peer.In, "peers %s\n", b); err != nil {
		return err
	}
	if line, err := peer.Out.ReadString('\n'); err != nil || strings.TrimSpace(line) != `"ok"` {
		return fmt.Errorf("the peer did not take the addresses: %q %v", line, err)
	}
	if err := th.tr.AddPeer(ctx, info.TCP); err != nil {
		return err
	}
	if err := uh.tr.AddPeer(ctx, info.UCX); err != nil {
		return err
	}
	if err := sh.tr.AddPeer(ctx, info.Sealed); err != nil {
		return err
	}
	// rt makes n round trips and returns their times, sorted.
	rt := func(h *echoHost, to transport.InstanceID, frame []byte, n int) ([]time.Duration, error) {
		d := make([]time.Duration, 0, n)
		for i := 0; i < n; i++ {
			t0 := time.Now()
			if err := h.tr.Send(ctx, to, frame); err != nil {
				return nil, err
			}
			select {
			case got := <-h.back:
				if len(got) != len(frame) {
					return nil, fmt.Errorf("an echo of %d bytes over %s for %d", len(got), h.tr.Name(), len(frame))
				}
			case <-time.After(10 * time.Second):
				return nil, fmt.Errorf("no echo over %s within 10 s", h.tr.Name())
			}
			d = append(d, time.Since(t0))
		}
		sort.Slice(d, func(a, b int) bool { return d[a] < d[b] })
		return d, nil
	}
	fmt.Printf("\nvelo transport frame round trip, two processes (µs, p50; median of the rounds); sealed: every frame\n")
	fmt.Printf("carries the 24-byte GCM seal of a runtime with credentials; perftest: ucx_perftest -t ucp_am_lat\n")
	fmt.Printf("%-7s %9s %9s %9s %9s %8s %8s %8s %8s %8s\n", "size", "perftest", "velo tcp", "velo ucx", "sealed",
		"ucx/tcp", "sld/tcp", "sld/ucx", "ucx/perf", "sld/perf")
	pairs := []struct {
		h  *echoHost
		to transport.InstanceID
	}{{th, info.TCP.ID}, {uh, info.UCX.ID}, {sh, info.Sealed.ID}}
	for _, size := range frameSizes {
		frame := make([]byte, size)
		for _, p := range pairs {
			if _, err := rt(p.h, p.to, frame, 50); err != nil {
				return err
			}
		}
		var perf []float64
		got := make([][]float64, len(pairs))
		all := make([][]time.Duration, len(pairs)) // every round trip of the rounds, for the spread
		for r := 0; r < rounds; r++ {
			d, err := benchkit.PerftestAMLatency(ctx, tool, size, amIts*5)
			if err != nil {
				return err
			}
			perf = append(perf, us(d))
			time.Sleep(pause)
			// The pairs take turns in a rotating order, so none always follows perftest.
			for k := range pairs {
				i := (k + r) % len(pairs)
				d, err := rt(pairs[i].h, pairs[i].to, frame, frameIts)
				if err != nil {
					return err
				}
				got[i], all[i] = append(got[i], us(d[len(d)/2])), append(all[i], d...)
				time.Sleep(pause)
			}
		}
		pf, tc, uc, sl := median(perf), median(got[0]), median(got[1]), median(got[2])
		fmt.Printf("%-7s %9.1f %9.1f %9.1f %9.1f %7.2fx %7.2fx %7.2fx %7.2fx %7.2fx\n", human(size), pf, tc, uc, sl,
			uc/tc, sl/tc, sl/uc, uc/pf, sl/pf)
		// On a loaded machine a progressor that lost its core turns a round trip from tens of µs
		// into hundreds: the spread of all round trips shows whether a median fell in that mode.
		q := func(d []time.Duration, f float64) float64 {
			sort.Slice(d, func(a, b int) bool { return d[a] < d[b] })
			return us(d[int(f*float64(len(d)-1))])
		}
		fmt.Printf("%-7s %9s %9s p10–p90 of all rounds: tcp %.0f–%.0f, ucx %.0f–%.0f, sealed %.0f–%.0f\n", "", "", "",
			q(all[0], .1), q(all[0], .9), q(all[1], .1), q(all[1], .9), q(all[2], .1), q(all[2], .9))
	}
	return nil
}

// batches times GetBatch of the peer's blocks against one get of the whole and against
// ucx_perftest's GETs of the same size with the same window.
func batches(ctx context.Context, peer *benchkit.Child, info peerInfo, tool ucx.Tool, rounds, window int, quick bool) error {
	v, _, err := newVelo(ctx, window)
	if err != nil {
		return err
	}
	defer v.Close()
	if err := v.RegisterPeer(ctx, info.Owner); err != nil {
		return err
	}
	// A second consumer that asks for no inline payloads: its batches of small blocks take the
	// RDMA path, a lease, a registration and a read each (the row that checks that path).
	vr, _, err := newVelo(ctx, window, velo.WithBatchInlineMax(0))
	if err != nil {
		return err
	}
	defer vr.Close()
	if err := vr.RegisterPeer(ctx, info.Owner); err != nil {
		return err
	}
	dst := make([]byte, total)
	whole := func() (time.Duration, error) {
		t0 := time.Now()
		l, err := v.GetInto(ctx, info.Whole, dst)
		took := time.Since(t0)
		if err != nil {
			return 0, err
		}
		if l.Path != metrics.PathRDMA {
			return 0, fmt.Errorf("the whole get took %s/%s", l.Path, l.Reason)
		}
		return took, l.Detach(ctx)
	}
	ownerCPU := func() (time.Duration, error) {
		if _, err := io.WriteString(peer.In, "cpu\n"); err != nil {
			return 0, err
		}
		line, err := peer.Out.ReadString('\n')
		if err != nil {
			return 0, err
		}
		n, err := strconv.ParseInt(strings.TrimSpace(line), 10, 64)
		return time.Duration(n), err
	}
	// endLeases ends a batch's leases (the blocks stay staged for the next round): in one
	// DetachLeases call, or one Detach per lease, window at a time, as a caller without the batch
	// call would.
	batched := true
	endLeases := func(c *velo.Velo, ls []*velo.Lease) error {
		if !batched {
			return detachEach(ctx, ls, window)
		}
		for i, err := range c.DetachLeases(ctx, ls) {
			if err != nil {
				return fmt.Errorf("block %d: detach: %w", i, err)
			}
		}
		return nil
	}
	var ended time.Duration // how long the last endLeases took
	batch := func(c *velo.Velo, size int, want metrics.Path) (took, cpuCons, cpuOwner time.Duration, err error) {
		hs := info.Blocks[size]
		if quick {
			hs = hs[:len(hs)/8]
		}
		reqs := make([]velo.GetRequest, len(hs))
		for i, h := range hs {
			reqs[i] = velo.GetRequest{Handle: h, Into: dst[i*size : (i+1)*size]}
		}
		oc0, err := ownerCPU()
		if err != nil {
			return 0, 0, 0, err
		}
		c0, t0 := cpuTime(), time.Now()
		res := c.GetBatch(ctx, reqs, nil)
		took, cpuCons = time.Since(t0), cpuTime()-c0
		oc1, err := ownerCPU()
		if err != nil {
			return 0, 0, 0, err
		}
		for i, r := range res {
			if r.Err != nil {
				return 0, 0, 0, fmt.Errorf("block %d: %w", i, r.Err)
			}
			if r.Lease.Path != want {
				return 0, 0, 0, fmt.Errorf("block %d took %s/%s, not %s", i, r.Lease.Path, r.Lease.Reason, want)
			}
			if b := r.Lease.Bytes(); b[0] != byte(i) || b[1] != byte(i>>8) {
				return 0, 0, 0, fmt.Errorf("block %d: wrong bytes", i)
			}
		}
		// Not timed: end the leases (the blocks stay staged for the next round).
		ls := make([]*velo.Lease, len(res))
		for i, r := range res {
			ls[i] = r.Lease
		}
		t1 := time.Now()
		if err := endLeases(c, ls); err != nil {
			return 0, 0, 0, err
		}
		ended = time.Since(t1)
		return took, cpuCons, oc1 - oc0, nil
	}
	if _, err := whole(); err != nil { // warm up: endpoints, first registrations
		return err
	}
	fmt.Printf("\nbatched gets of %d MiB, window %d (MiB/s, median of the rounds; CPU µs per read in the consumer and the owner process)\n", total>>20, window)
	fmt.Printf("%-7s %-7s %6s %10s %10s %7s %14s %7s %10s %12s\n", "block", "path", "reads", "one get", "GetBatch", "ratio", "ucx_perftest", "ratio", "reads/s", "CPU µs/read")
	// Each size on the path the default takes (4 KiB inside the acquire's answer, 64 KiB by RDMA
	// reads), and 4 KiB on the RDMA path too, from the consumer that asks for no inline payloads.
	type row struct {
		size int
		c    *velo.Velo
		path metrics.Path
	}
	var rows []row
	for _, size := range blockSizes {
		if size <= velo.DefaultBatchInlineMax {
			rows = append(rows, row{size, v, metrics.PathInline})
		}
		rows = append(rows, row{size, vr, metrics.PathRDMA})
	}
	for _, rw := range rows {
		size := rw.size
		if _, _, _, err := batch(rw.c, size, rw.path); err != nil { // warm up this size
			return err
		}
		n := total / size
		if quick {
			n /= 8
		}
		var one, got, perf, rate, cpuC, cpuO []float64
		for r := 0; r < rounds; r++ {
			d, err := whole()
			if err != nil {
				return err
			}
			one = append(one, mibps(total, d))
			time.Sleep(pause)
			took, cc, co, err := batch(rw.c, size, rw.path)
			if err != nil {
				return err
			}
			got = append(got, mibps(n*size, took))
			rate = append(rate, float64(n)/took.Seconds())
			cpuC, cpuO = append(cpuC, us(cc)/float64(n)), append(cpuO, us(co)/float64(n))
			time.Sleep(pause)
			if guarded {
				continue // perftest's GET over tcp is the software RMA the guard refuses
			}
			pr, err := benchkit.Run(ctx, tool, "-t", "ucp_get", "-s", strconv.Itoa(size), "-n", strconv.Itoa(n), "-O", strconv.Itoa(window))
			if err != nil {
				return err
			}
			perf = append(perf, pr.BandwidthOverall)
			time.Sleep(pause)
		}
		base := fmt.Sprintf("%14s %7s", "refused", "-") // the guard refuses perftest's GET
		if len(perf) > 0 {
			base = fmt.Sprintf("%14.0f %6.2fx", median(perf), median(got)/median(perf))
		}
		fmt.Printf("%-7s %-7s %6d %10.0f %10.0f %6.2fx %s %10.0f %5.1f + %4.1f\n", human(size), rw.path, n, median(one), median(got),
			median(got)/median(one), base, median(rate), median(cpuC), median(cpuO))
	}
	// Ending the leases of the 4 KiB batch: one DetachLeases call against one Detach per lease.
	size := blockSizes[0]
	var each, inOne []float64
	for r := 0; r < rounds; r++ {
		for _, b := range []bool{false, true} {
			batched = b
			if _, _, _, err := batch(vr, size, metrics.PathRDMA); err != nil {
				return err
			}
			n := float64(len(info.Blocks[size]))
			if quick {
				n = float64(len(info.Blocks[size]) / 8)
			}
			if b {
				inOne = append(inOne, us(ended)/n)
			} else {
				each = append(each, us(ended)/n)
			}
		}
	}
	batched = true
	fmt.Printf("\nending the %s batch's leases (µs per lease, median of the rounds)\n", human(size))
	fmt.Printf("%-30s %10.2f\n%-30s %10.2f\n%-30s %9.2fx\n", fmt.Sprintf("one Detach each, window %d", window), median(each),
		"one DetachLeases call", median(inOne), "ratio", median(inOne)/median(each))
	return nil
}

// detachEach ends leases one Detach each, window at a time.
func detachEach(ctx context.Context, ls []*velo.Lease, window int) error {
	sem := make(chan struct{}, window)
	errs := make(chan error, len(ls))
	for _, l := range ls {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			errs <- l.Detach(ctx)
		}()
	}
	var first error
	for range ls {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// exportEngineDefaults gives ucx_perftest the UCX settings the engine applies on its own, so that
// both run with the same configuration (the user's are in the environment already).
func exportEngineDefaults(settings []ucx.Setting) {
	var same []string
	for _, st := range settings {
		if st.Source == ucx.SourceProgram {
			os.Setenv("UCX_"+st.Name, st.Value)
			same = append(same, "UCX_"+st.Name+"="+st.Value)
		}
	}
	if len(same) > 0 {
		fmt.Printf("engine defaults, exported to ucx_perftest too: %s\n", strings.Join(same, " "))
	}
}

func p50(d []time.Duration) time.Duration {
	sort.Slice(d, func(a, b int) bool { return d[a] < d[b] })
	return d[len(d)/2]
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func mibps(n int, d time.Duration) float64 { return float64(n) / (1 << 20) / d.Seconds() }

func human(n int) string {
	if n >= 1<<10 {
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}
