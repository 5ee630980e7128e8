// Command victim is a velo instance for the attacker suite (package attack), driven from its
// standard input one command a line and answering each with one JSON line on standard output.
//
// With -role owner (the default) it is the target: an owner with a cluster secret
// (VELO_CLUSTER_SECRET, required), the TCP control plane on 127.0.0.1 and the UCX transport.
// It holds three things an attacker wants: a global variable full of a secret marker, a heap
// buffer of known bytes, and the payloads it stages. It reports where each lives, the remote
// keys of the lease registrations it made (so the suite can hand an attacker a revoked key or
// another lease's key, the premise of those cases), and answers "check": are all of those bytes
// still what they were? It counts every message delivered to its "attack.sink" handler, so a
// forged frame that got through is seen, and a legitimate message that went missing too.
//
// With -role legit it is the authenticated consumer the attacker impersonates: it takes leases
// on the owner's payloads and streams numbered messages to the owner over UCX while the attack
// runs. Its UCX transport comes first in its transport list, so its messages travel as UCX
// frames (the frames the attacker forges), not on the TCP control plane.
//
// Commands of both roles:
//
//	info                  PeerInfo, instance ID, incarnation, pid, UCX version, control port
//	peer <PeerInfo JSON>  RegisterPeer
//	peers                 Peers(): id → state
//	metric <family>       that family's series, "label=value,..." → value
//	samehost <peer>       whether reads from peer (hex ID) take the same-host path, and why not
//
// The loop, the answers and the commands peer, peers, metric and samehost are the suites' own
// (test/internal/linecmd), shared with the fault suite's faultnode.
//
// Owner:
//
//	stage <bytes> <seed>  StageDataPinned of a deterministic payload, with 8 more references so
//	                      that releases never free it during a case; answers the handle
//	regs                  the lease registrations made so far: address, length, sealed key, state
//	check                 whether the global, the heap buffer, every registered range and the 64
//	                      bytes after each registration are what they were at the last check;
//	                      then the global and the heap buffer are put back, and what the ranges
//	                      hold now is what the next check compares with (one attack's write is
//	                      reported by the check after it, not by every later one)
//	received              the "attack.sink" messages: legitimate ones by number, and others
//
// Legit consumer:
//
//	acquire <handle>      Acquire a range lease and read its first 64 bytes through it
//	release <lease>       Release that lease (the owner revokes its key)
//	get <handle>          Get, the SHA-256 of the bytes and the path they took, then Detach
//	batch <handle>...     GetBatch of the handles; keeps the leases (numbered from 0 in the order of
//	                      all batches) and answers their numbers, paths and the bytes' SHA-256s
//	end <n>               Release batched lease n (the owner revokes the registration behind it
//	                      once no lease of that registration is left)
//	stream <owner> <interval>   send "LEGIT <n>" to the owner's "attack.sink" every interval
//	sent                  how many messages of the stream went, and its error if it stopped
//	pause / resume        hold the stream / go on; pause answers once no send is in flight
//	stop                  end the stream; answers how many went and the first error
//	steal <owner> <key> <offset> <length>
//	                      a GET through this instance's own UCX transport (its authenticated
//	                      endpoints to the owner) with a sealed key in hex that was given to
//	                      another consumer: what a member holding the cluster secret can do with
//	                      a key it took off the wire; answers whether bytes came back and the error
//	quit                  Close; the process exits 0
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/velo-go/velo/test/internal/linecmd"
	"github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/velo"
	"github.com/velo-go/velo/velo/auth"
	"github.com/velo-go/velo/velo/transport"
	"github.com/velo-go/velo/velo/transport/tcp"
	"github.com/velo-go/velo/velo/transport/ucxtransport"
)

// secretGlobal is the global an attacker reads or writes at its address: a marker repeated.
// It lives in the binary's data segment, outside any registration.
var secretGlobal [4096]byte

// secretHeap is a heap buffer of known bytes, also outside any registration. It is kept
// reachable for the life of the process, and Go's heap does not move it.
var secretHeap []byte

// guardLen is how many bytes after each registration's end "check" watches.
const guardLen = 64

func main() {
	role := flag.String("role", "owner", "owner (the target) or legit (the authenticated consumer)")
	marker := flag.String("marker", "", "the run's secret marker (hex); the global and the heap buffer are filled from it")
	logLevel := flag.String("log", "warn", "log level on standard error")
	epIdle := flag.Duration("ep-idle", 0, "ucx.Config.EPIdleTimeout (0: keep endpoints)")
	maxFDs := flag.Uint64("max-fds", 0, "RLIMIT_NOFILE, soft and hard (0: as inherited): a low limit makes a connection flood reach it fast")
	flag.Parse()

	if *maxFDs > 0 {
		// Both limits: the Go runtime raises the soft limit to the hard one at start.
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: *maxFDs, Max: *maxFDs}); err != nil {
			linecmd.Fatal("victim", fmt.Errorf("-max-fds %d: %w", *maxFDs, err))
		}
	}

	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*logLevel)); err != nil {
		linecmd.Fatal("victim", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	if os.Getenv(auth.SecretEnv) == "" && os.Getenv(auth.SecretFileEnv) == "" {
		linecmd.Fatal("victim", fmt.Errorf("no cluster secret: set %s (the suite does)", auth.SecretEnv))
	}
	creds, err := auth.FromEnv()
	if err != nil {
		linecmd.Fatal("victim", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		linecmd.Fatal("victim", err)
	}
	ctl, err := tcp.New(tcp.Config{Listener: ln, Auth: creds})
	if err != nil {
		linecmd.Fatal("victim", err)
	}
	u, err := ucxtransport.New(ucxtransport.Config{TLS: "tcp", RMAOverSoftwareLanes: true, Logger: log, EPIdleTimeout: *epIdle})
	if err != nil {
		linecmd.Fatal("victim", err)
	}
	n := &node{role: *role, Replier: linecmd.NewReplier(os.Stdout), ctlPort: ln.Addr().(*net.TCPAddr).Port, ucx: u}
	var opts []velo.Option
	switch *role {
	case "owner":
		m, err := hex.DecodeString(*marker)
		if err != nil || len(m) == 0 {
			linecmd.Fatal("victim", fmt.Errorf("-marker %q: want the run's marker in hex", *marker))
		}
		fillMarker(secretGlobal[:], "VELO-GLOBAL:", m)
		secretHeap = make([]byte, 64<<10)
		fillMarker(secretHeap, "VELO-HEAP:", m)
		n.rec = &recorder{}
		opts = []velo.Option{velo.WithTransport(ctl), velo.WithUCXTransport(&recordingRMA{Transport: u, rec: n.rec})}
	case "legit":
		// UCX first: messages to the owner go out as UCX frames, the ones an attacker forges.
		opts = []velo.Option{velo.WithUCXTransport(u), velo.WithTransport(ctl)}
	default:
		linecmd.Fatal("victim", fmt.Errorf("-role %q: want owner or legit", *role))
	}
	// Under VELO_TEST_SAME_HOST=1 both roles turn the same-host path on (its socket in
	// $VELO_SHM_DIR, which the suite sets): a consumer of this host then reads through shared
	// memory, and one the suite configures as another host (VELO_SHM_HOST_ID) through UCX.
	sameHost, err := linecmd.SameHost()
	if err != nil {
		linecmd.Fatal("victim", err)
	}
	if sameHost {
		opts = append(opts, velo.WithSameHost(velo.SameHostConfig{}))
	}
	v, err := velo.New(context.Background(), append(opts, velo.WithLogger(log), velo.WithLeaseTTL(5*time.Minute))...)
	if err != nil {
		linecmd.Fatal("victim", err)
	}
	n.v = v
	if *role == "owner" {
		if err := v.RegisterHandler("attack.sink", n.sink); err != nil {
			linecmd.Fatal("victim", err)
		}
	}
	n.Reply(map[string]any{"ready": true})
	quit := linecmd.Serve(os.Stdin, 30*time.Second, n.run)
	n.stopStream()
	err = v.Close()
	if quit {
		n.Reply(map[string]any{"closed": true, "err": linecmd.ErrString(err)})
	}
}

// fillMarker fills b with prefix and the marker, repeated.
func fillMarker(b []byte, prefix string, marker []byte) {
	unit := append([]byte(prefix), []byte(hex.EncodeToString(marker)+"|")...)
	for i := 0; i < len(b); i += len(unit) {
		copy(b[i:], unit)
	}
}

type node struct {
	*linecmd.Replier
	role    string
	v       *velo.Velo
	ctlPort int
	rec     *recorder
	ucx     *ucxtransport.Transport

	// The owner's sink.
	sinkMu  sync.Mutex
	legit   []uint64 // numbers of the legitimate messages, in the order they were delivered
	foreign []string // every other payload delivered (hex of the first 64 bytes)

	// The consumer's leases and stream.
	leases   []*velo.RangeLease
	batched  []*velo.Lease
	streamMu sync.Mutex
	stream   *streamer
}

func (n *node) sink(_ context.Context, m *velo.Message) ([]byte, error) {
	n.sinkMu.Lock()
	defer n.sinkMu.Unlock()
	if s, ok := strings.CutPrefix(string(m.Payload), "LEGIT "); ok && m.From != 0 {
		if k, err := strconv.ParseUint(s, 10, 64); err == nil {
			n.legit = append(n.legit, k)
			return nil, nil
		}
	}
	p := m.Payload
	if len(p) > 64 {
		p = p[:64]
	}
	n.foreign = append(n.foreign, fmt.Sprintf("from %016x: %q", uint64(m.From), p))
	return nil, nil
}

func (n *node) run(ctx context.Context, cmd, arg string) {
	if linecmd.Common(ctx, n.Replier, n.v, cmd, arg) {
		return
	}
	switch cmd {
	case "info":
		ucxBlob := n.v.PeerInfo().Addresses["ucx"]
		m := map[string]any{
			"info": n.v.PeerInfo(), "id": fmt.Sprintf("%016x", uint64(n.v.ID())),
			"incarnation": fmt.Sprintf("%016x", n.v.Incarnation()), "pid": os.Getpid(),
			"ucx_version": ucx.Version().String, "ctl_port": n.ctlPort, "ucx_blob": hex.EncodeToString(ucxBlob),
		}
		if n.role == "owner" {
			m["global"] = region(secretGlobal[:])
			m["heap"] = region(secretHeap)
		}
		n.Reply(m)
	case "stage":
		n.stage(ctx, arg)
	case "regs":
		n.Reply(map[string]any{"regs": n.rec.list()})
	case "check":
		n.Reply(n.check())
	case "received":
		n.sinkMu.Lock()
		legit := append([]uint64{}, n.legit...)
		foreign := append([]string{}, n.foreign...)
		n.sinkMu.Unlock()
		n.Reply(map[string]any{"legit": legit, "foreign": foreign})
	case "acquire":
		n.acquire(ctx, arg)
	case "release":
		releaseAt(ctx, n, n.leases, "release", arg, "lease")
	case "get":
		n.get(ctx, arg)
	case "batch":
		n.batch(ctx, arg)
	case "end":
		releaseAt(ctx, n, n.batched, "end", arg, "batched lease")
	case "stream":
		n.startStream(arg)
	case "sent":
		s := n.streaming()
		if s == nil {
			return
		}
		s.mu.Lock()
		sent, err := s.sent, s.err
		s.mu.Unlock()
		n.Reply(map[string]any{"sent": sent, "error": linecmd.ErrString(err)})
	case "pause", "resume":
		s := n.streaming()
		if s == nil {
			return
		}
		sent := s.hold(cmd == "pause")
		n.Reply(map[string]any{"sent": sent})
	case "steal":
		n.steal(ctx, arg)
	case "stop":
		sent, err := n.stopStream()
		n.Reply(map[string]any{"sent": sent, "error": linecmd.ErrString(err)})
	default:
		n.Fail(fmt.Errorf("unknown command %q", cmd))
	}
}

// streaming is the stream under way; without one it answers the command's failure and is nil.
func (n *node) streaming() *streamer {
	n.streamMu.Lock()
	s := n.stream
	n.streamMu.Unlock()
	if s == nil {
		n.Fail(errors.New("no stream"))
	}
	return s
}

func region(b []byte) map[string]any {
	return map[string]any{"addr": uint64(uintptr(unsafe.Pointer(&b[0]))), "len": len(b)}
}

func (n *node) stage(ctx context.Context, arg string) {
	size, seed, err := linecmd.SizeSeed(arg)
	if err != nil {
		n.Fail(err)
		return
	}
	data := payload(size, seed)
	h, err := n.v.StageDataPinned(ctx, data)
	if err != nil {
		n.Fail(err)
		return
	}
	for range 8 {
		if err := n.v.Ref(ctx, h); err != nil {
			n.Fail(err)
			return
		}
	}
	sum := sha256.Sum256(data)
	text, _ := h.MarshalText()
	n.Reply(map[string]any{"handle": string(text), "sha256": hex.EncodeToString(sum[:])})
}

// check compares everything the attacker may have written against what it was.
func (n *node) check() map[string]any {
	var changed []string
	m, _ := hex.DecodeString(flag.Lookup("marker").Value.String())
	want := make([]byte, len(secretGlobal))
	fillMarker(want, "VELO-GLOBAL:", m)
	if string(want) != string(secretGlobal[:]) {
		changed = append(changed, "global: "+firstDiff(want, secretGlobal[:]))
		copy(secretGlobal[:], want)
	}
	want = make([]byte, len(secretHeap))
	fillMarker(want, "VELO-HEAP:", m)
	if string(want) != string(secretHeap) {
		changed = append(changed, "heap: "+firstDiff(want, secretHeap))
		copy(secretHeap, want)
	}
	changed = append(changed, n.rec.check()...)
	return map[string]any{"changed": changed}
}

func firstDiff(want, got []byte) string {
	for i := range want {
		if want[i] != got[i] {
			end := min(i+16, len(got))
			return fmt.Sprintf("byte %d is %q, was %q", i, got[i:end], want[i:end])
		}
	}
	return "equal"
}

// releaseAt releases lease number arg of list and forgets it: the commands "release" (a ranged
// lease) and "end" (a batched one).
func releaseAt[L interface {
	comparable
	Release(context.Context) error
}](ctx context.Context, n *node, list []L, cmd, arg, what string) {
	i, err := strconv.Atoi(arg)
	var none L
	if err != nil || i < 0 || i >= len(list) || list[i] == none {
		n.Fail(fmt.Errorf("%s %q: no such %s", cmd, arg, what))
		return
	}
	err = list[i].Release(ctx)
	list[i] = none
	if err != nil {
		n.Fail(err)
		return
	}
	n.Reply(map[string]any{"ok": true})
}

func (n *node) acquire(ctx context.Context, arg string) {
	h, err := linecmd.ParseHandle(arg)
	if err != nil {
		n.Fail(err)
		return
	}
	l, err := n.v.Acquire(ctx, h)
	if err != nil {
		n.Fail(err)
		return
	}
	dst := make([]byte, 64)
	if err := l.ReadRanges(ctx, []velo.Range{{Offset: 0, Length: 64, Dst: dst}}); err != nil {
		_ = l.Detach(ctx)
		n.Fail(fmt.Errorf("acquire: the lease's own read: %w", err))
		return
	}
	n.leases = append(n.leases, l)
	n.Reply(map[string]any{"lease": len(n.leases) - 1, "first": hex.EncodeToString(dst)})
}

func (n *node) get(ctx context.Context, arg string) {
	h, err := linecmd.ParseHandle(arg)
	if err != nil {
		n.Fail(err)
		return
	}
	before := linecmd.Paths(n.v)
	l, err := n.v.Get(ctx, h)
	if err != nil {
		n.Fail(err)
		return
	}
	sum := sha256.Sum256(l.Bytes())
	n.Reply(map[string]any{"sha256": hex.EncodeToString(sum[:]), "path": linecmd.Grew(before, linecmd.Paths(n.v)), "detach_err": linecmd.ErrString(l.Detach(ctx))})
}

// batch fetches the handles in one GetBatch and keeps their leases.
func (n *node) batch(ctx context.Context, arg string) {
	var reqs []velo.GetRequest
	for _, f := range strings.Fields(arg) {
		h, err := linecmd.ParseHandle(f)
		if err != nil {
			n.Fail(err)
			return
		}
		reqs = append(reqs, velo.GetRequest{Handle: h})
	}
	var leases []int
	var paths, sums []string
	for i, r := range n.v.GetBatch(ctx, reqs, nil) {
		if r.Err != nil {
			for _, k := range leases {
				_ = n.batched[k].Release(ctx)
				n.batched[k] = nil
			}
			n.Fail(fmt.Errorf("batch entry %d: %w", i, r.Err))
			return
		}
		sum := sha256.Sum256(r.Lease.Bytes())
		n.batched = append(n.batched, r.Lease)
		leases, paths, sums = append(leases, len(n.batched)-1), append(paths, string(r.Lease.Path)), append(sums, hex.EncodeToString(sum[:]))
	}
	n.Reply(map[string]any{"leases": leases, "paths": paths, "sha256": sums})
}

// steal reads with another consumer's key through this instance's UCX transport.
func (n *node) steal(ctx context.Context, arg string) {
	f := strings.Fields(arg)
	if len(f) != 4 {
		n.Fail(errors.New("steal: want <owner id hex> <sealed key hex> <offset> <length>"))
		return
	}
	owner, err1 := strconv.ParseUint(f[0], 16, 64)
	key, err2 := hex.DecodeString(f[1])
	off, err3 := strconv.ParseUint(f[2], 10, 64)
	size, err4 := strconv.ParseUint(f[3], 10, 64)
	if err := errors.Join(err1, err2, err3, err4); err != nil || size == 0 || size > 1<<20 {
		n.Fail(fmt.Errorf("steal: %q: want <owner id hex> <sealed key hex> <offset> <length of 1 B to 1 MiB>: %v", arg, err))
		return
	}
	dst := make([]byte, size)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := n.ucx.Get(ctx, transport.InstanceID(owner), key, off, dst)
	m := map[string]any{"read": err == nil, "err": linecmd.ErrString(err)}
	if err == nil {
		m["data"] = hex.EncodeToString(dst)
	}
	n.Reply(m)
}

// streamer sends numbered messages to the owner until stopped.
type streamer struct {
	mu     sync.Mutex
	cond   *sync.Cond
	held   bool
	busy   bool
	sent   uint64
	err    error
	stop   chan struct{}
	done   chan struct{}
	period time.Duration
}

func (n *node) startStream(arg string) {
	a, b, _ := strings.Cut(arg, " ")
	peer, err := strconv.ParseUint(a, 16, 64)
	if err != nil {
		n.Fail(fmt.Errorf("stream: owner %q: %w", a, err))
		return
	}
	period, err := time.ParseDuration(strings.TrimSpace(b))
	if err != nil {
		n.Fail(fmt.Errorf("stream: interval %q: %w", b, err))
		return
	}
	n.streamMu.Lock()
	defer n.streamMu.Unlock()
	if n.stream != nil {
		n.Fail(errors.New("stream: already running"))
		return
	}
	s := &streamer{stop: make(chan struct{}), done: make(chan struct{}), period: period}
	s.cond = sync.NewCond(&s.mu)
	n.stream = s
	go s.run(n.v, velo.InstanceID(peer))
	n.Reply(map[string]any{"ok": true})
}

func (s *streamer) run(v *velo.Velo, peer velo.InstanceID) {
	defer close(s.done)
	t := time.NewTicker(s.period)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.mu.Lock()
		if s.held || s.err != nil {
			s.mu.Unlock()
			continue
		}
		s.busy = true
		k := s.sent + 1
		s.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := v.Send(ctx, peer, "attack.sink", []byte(fmt.Sprintf("LEGIT %d", k)))
		cancel()
		s.mu.Lock()
		s.busy = false
		if err != nil {
			s.err = fmt.Errorf("message %d: %w", k, err)
		} else {
			s.sent = k
		}
		s.cond.Broadcast()
		s.mu.Unlock()
	}
}

// hold pauses or resumes the stream; a pause returns once no send is in flight.
func (s *streamer) hold(pause bool) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.held = pause
	for pause && s.busy {
		s.cond.Wait()
	}
	return s.sent
}

func (n *node) stopStream() (uint64, error) {
	n.streamMu.Lock()
	s := n.stream
	n.stream = nil
	n.streamMu.Unlock()
	if s == nil {
		return 0, errors.New("no stream")
	}
	close(s.stop)
	<-s.done
	return s.sent, s.err
}

// recorder keeps every lease registration the owner made: where it is, its key, its state, and
// the bytes in it and right after it when it was made.
type recorder struct {
	mu   sync.Mutex
	regs []*recorded
}

type recorded struct {
	transport.Registration
	mem     []byte
	content []byte
	guard   []byte
	revoked atomic.Bool
}

func (r *recorder) add(reg transport.Registration, mem []byte) transport.Registration {
	// The bytes after the region belong to the same pinned arena (the suite stages small
	// payloads at the start of a large one), so reading them is safe; they are only read.
	after := unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(&mem[0]), len(mem))), guardLen)
	rec := &recorded{Registration: reg, mem: mem, content: append([]byte(nil), mem...), guard: append([]byte(nil), after...)}
	r.mu.Lock()
	r.regs = append(r.regs, rec)
	r.mu.Unlock()
	return rec
}

// RangeKey passes a run's part keys through (transport.RangeKeyer): the owner registers the
// neighbouring slots of a batch once and hands each lease the key of its part.
func (c *recorded) RangeKey(off, n int) ([]byte, error) {
	rk, ok := c.Registration.(transport.RangeKeyer)
	if !ok {
		return nil, errors.New("victim: the transport's registration names no parts")
	}
	return rk.RangeKey(off, n)
}

func (c *recorded) Revoke(ctx context.Context) error {
	err := c.Registration.Revoke(ctx)
	if err == nil {
		c.revoked.Store(true)
	}
	return err
}

func (r *recorder) list() []map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]map[string]any, 0, len(r.regs))
	for i, c := range r.regs {
		dead := false
		select {
		case <-c.Dead():
			dead = true
		default:
		}
		out = append(out, map[string]any{
			"index": i, "addr": uint64(uintptr(unsafe.Pointer(&c.mem[0]))), "len": len(c.mem),
			"key": hex.EncodeToString(c.Key()), "revoked": c.revoked.Load() || dead, "dead": dead,
		})
	}
	return out
}

func (r *recorder) check() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var changed []string
	for i, c := range r.regs {
		if string(c.mem) != string(c.content) {
			changed = append(changed, fmt.Sprintf("registration %d: %s", i, firstDiff(c.content, c.mem)))
			c.content = append(c.content[:0], c.mem...)
		}
		after := unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(&c.mem[0]), len(c.mem))), guardLen)
		if string(after) != string(c.guard) {
			changed = append(changed, fmt.Sprintf("the %d bytes after registration %d: %s", guardLen, i, firstDiff(c.guard, after)))
			c.guard = append(c.guard[:0], after...)
		}
	}
	return changed
}

// recordingRMA is the owner's UCX transport with its registrations recorded; everything else is
// the transport itself (its other methods are promoted, so velo sees every interface it has).
type recordingRMA struct {
	*ucxtransport.Transport
	rec *recorder
}

func (t *recordingRMA) RegisterMemory(mem []byte) (transport.Registration, error) {
	reg, err := t.Transport.RegisterMemory(mem)
	if err != nil {
		return nil, err
	}
	return t.rec.add(reg, mem), nil
}

func (t *recordingRMA) RegisterMemoryMany(mems [][]byte) ([]transport.Registration, []error) {
	regs, errs := t.Transport.RegisterMemoryMany(mems)
	return t.record(mems, regs, errs)
}

// RegisterMemoryFor records the registrations of keys bound to their consumer (what velo's
// registry asks for, since the transport has it).
func (t *recordingRMA) RegisterMemoryFor(peer transport.InstanceID, mems [][]byte) ([]transport.Registration, []error) {
	regs, errs := t.Transport.RegisterMemoryFor(peer, mems)
	return t.record(mems, regs, errs)
}

// record records every registration that succeeded, each with its region.
func (t *recordingRMA) record(mems [][]byte, regs []transport.Registration, errs []error) ([]transport.Registration, []error) {
	for i, reg := range regs {
		if errs[i] == nil && reg != nil {
			regs[i] = t.rec.add(reg, mems[i])
		}
	}
	return regs, errs
}

// payload is the deterministic payload of size bytes for seed.
func payload(size int, seed uint64) []byte {
	b := make([]byte, size)
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}
