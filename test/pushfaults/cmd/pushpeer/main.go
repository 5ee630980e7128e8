// Command pushpeer is one velo instance that the push fault suite (package push) drives from its
// standard input, one command a line, answering each with one JSON line on standard output. The
// same program plays the receiver (a region, grants over it, the notifications that arrive) and
// the writer (puts through a grant handle); the suite kills and stops writers in the middle of
// their puts and reads the receiver's region and registry afterwards.
//
// Commands (read through test/internal/linecmd, which also answers its common peers and metric):
//
//	info                              this instance's PeerInfo and ID
//	peer <PeerInfo JSON>              RegisterPeer
//	region <bytes> <seed>             NewRegion, filled with Fill(seed) (the only region; a second
//	                                  command frees the first)
//	grant <writer> <off> <len> <ttl>  GrantWrite of [off, off+len) of the region to the writer (hex
//	                                  ID); answers the grant's ID and its handle as text
//	revoke <grant>                    Revoke
//	done <grant> <timeout>            wait up to timeout for Done; answers whether it closed, how
//	                                  long it took, and Err
//	notes <grant>                     the notifications so far, each with the SHA-256 of its range
//	                                  as the receiver read it the moment the notification arrived
//	sum <off> <len>                   SHA-256 of the region's bytes [off, off+len)
//	guards <off> <len>                compare every byte of the region outside [off, off+len) with
//	                                  the fill it was given; answers the first that differs
//	drain                             BeginDrain
//	stats                             RDMA registry counts and PushGrants
//	paths                             velo_push_path_total, as "side/path/reason" → count
//	samehost <peer>                   whether this instance's traffic with peer (hex ID) takes the
//	                                  same-host path (-same-host), and why not
//	put <handle> <off> <bytes> <seed> [note]
//	                                  Put of Fill(seed) at off (the region's offsets), with a
//	                                  notification carrying note when given; answers its SHA-256
//	putloop <handle> <off> <bytes> <seed> <max>
//	                                  the same put again and again, up to max times or until one
//	                                  fails; answers how many completed and the error
//	batch <handle> <off> <bytes> <n> <seed> <window> <rounds>
//	                                  PutBatch of n entries of bytes each (entry i the fill of
//	                                  seed+i), back to back from off, again up to rounds times
//	                                  until an entry fails; answers the last round's SHA-256 of
//	                                  each completed entry, its errors, and how many of them are
//	                                  neither ErrGrantEnded nor ErrDraining
//	checkgrant <writer> <off> <len> <ttl>
//	                                  a grant like grant's whose handler checks soak notifications:
//	                                  it hashes the notified range at once and compares it with the
//	                                  SHA-256 the payload carries (soak.go)
//	checks <grant>                    what a checkgrant's handler counted: notifications, ranges
//	                                  not yet written when notified, canaries, examples
//	soak <handle> <off> <span> <puts> <window> <seed> <min> <max>
//	                                  rounds of PutBatch of notified puts of min to max bytes laid
//	                                  end to end in [off, off+span), until puts are done or an
//	                                  entry fails, then one canary put (soak.go)
//	quit                              Close; the process exits 0
//
// With -burn N the program is no velo instance but N busy threads, until standard input closes
// (the soak's CPU load); with -cpu C every thread of the process is bound to CPU C.
//
// The instance runs a TCP control plane on 127.0.0.1 (or -listen) and the UCX transport (UCX_TLS=tcp unless the
// environment names transports), with the RDMA registry, so a region is pinned and a put takes
// the RDMA path (velo's guarded PUT over tcp); -same-host adds the same-host path, so a put to a
// receiver of this host goes through shared memory.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/velo-go/velo/test/internal/linecmd"
	"github.com/velo-go/velo/velo"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/transport/tcp"
	"github.com/velo-go/velo/velo/transport/ucxtransport"
)

func main() {
	forceAfter := flag.Duration("force-close-after", 0, "RDMAConfig.ForceCloseAfter (0: the default)")
	ioTimeout := flag.Duration("io-timeout", 0, "the TCP control plane's tcp.Config.IOTimeout (0: the default)")
	listen := flag.String("listen", "127.0.0.1:0", "the TCP control plane's listen address (a network namespace's own address, for the suite's two hosts)")
	logLevel := flag.String("log", "warn", "log level on standard error")
	cpu := flag.Int("cpu", -1, "bind every thread of the process to this CPU (-1: no binding)")
	burners := flag.Int("burn", 0, "be N busy threads, not a velo instance, until standard input closes")
	sameHost := flag.Bool("same-host", false, "turn on the same-host path (WithSameHost)")
	shmDir := flag.String("shm-dir", "", "SameHostConfig.Dir (empty: the default)")
	flag.Parse()

	if *cpu >= 0 {
		if err := pinTo(*cpu); err != nil {
			linecmd.Fatal("pushpeer", err)
		}
	}
	if *burners > 0 {
		burn(*burners)
	}

	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*logLevel)); err != nil {
		linecmd.Fatal("pushpeer", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		linecmd.Fatal("pushpeer", err)
	}
	ctl, err := tcp.New(tcp.Config{Listener: ln, IOTimeout: *ioTimeout})
	if err != nil {
		linecmd.Fatal("pushpeer", err)
	}
	tls := os.Getenv("UCX_TLS")
	if tls == "" {
		tls = "tcp"
	}
	u, err := ucxtransport.New(ucxtransport.Config{TLS: tls, RMAOverSoftwareLanes: true, Logger: log})
	if err != nil {
		linecmd.Fatal("pushpeer", err)
	}
	opts := []velo.Option{velo.WithLogger(log), velo.WithTransport(ctl), velo.WithUCXTransport(u),
		velo.WithRDMA(velo.RDMAConfig{ForceCloseAfter: *forceAfter})}
	if *sameHost {
		opts = append(opts, velo.WithSameHost(velo.SameHostConfig{Dir: *shmDir}))
	}
	v, err := velo.New(context.Background(), opts...)
	if err != nil {
		linecmd.Fatal("pushpeer", err)
	}
	n := &node{v: v, Replier: linecmd.NewReplier(os.Stdout), grants: map[uint64]*grant{}, checkers: map[uint64]*checker{}}
	n.Reply(map[string]any{"ready": true})
	if linecmd.Serve(os.Stdin, 5*time.Minute, n.run) {
		err := v.Close()
		n.Reply(map[string]any{"closed": true, "err": linecmd.ErrString(err)})
		return
	}
	v.Close()
}

type node struct {
	*linecmd.Replier
	v      *velo.Velo
	region *velo.Region
	seed   uint64

	mu       sync.Mutex
	grants   map[uint64]*grant
	checkers map[uint64]*checker // soak grants (checkgrant)
}

// grant is a receiver's grant and the notifications it got.
type grant struct {
	g     *velo.WriteGrant
	mu    sync.Mutex
	notes []note
}

type note struct {
	Payload string `json:"payload"`
	Offset  uint64 `json:"offset"`
	Length  uint64 `json:"length"`
	SHA256  string `json:"sha256"`
}

func (n *node) run(ctx context.Context, cmd, arg string) {
	if linecmd.Common(ctx, n.Replier, n.v, cmd, arg) {
		return
	}
	args := strings.Fields(arg)
	var err error
	num := func(i int) uint64 {
		if err != nil {
			return 0
		}
		if i >= len(args) {
			err = fmt.Errorf("%s: argument %d missing", cmd, i+1)
			return 0
		}
		var x uint64
		x, err = strconv.ParseUint(args[i], 0, 64)
		return x
	}
	switch cmd {
	case "info":
		n.Reply(map[string]any{"info": n.v.PeerInfo(), "id": fmt.Sprintf("%016x", uint64(n.v.ID()))})
	case "region":
		size, seed := num(0), num(1)
		if err != nil {
			n.Fail(err)
			return
		}
		if n.region != nil {
			n.region.Free()
		}
		g, err := n.v.NewRegion(int(size))
		if err != nil {
			n.Fail(err)
			return
		}
		Fill(g.Bytes(), 0, seed)
		n.region, n.seed = g, seed
		n.Reply(map[string]any{"pinned": g.Pinned(), "reason": string(g.Reason())})
	case "grant":
		gr := &grant{}
		n.grantWrite(ctx, args, n.region, func(nt velo.Notification) {
			// Read the notified range the moment the notification arrives: its bytes must be
			// there already.
			r := nt.Ranges[0]
			sum := sha256.Sum256(n.region.Bytes()[r.Offset:r.End()])
			gr.mu.Lock()
			gr.notes = append(gr.notes, note{Payload: string(nt.Payload), Offset: r.Offset, Length: r.Length, SHA256: hex.EncodeToString(sum[:])})
			gr.mu.Unlock()
		}, func(wg *velo.WriteGrant) {
			gr.g = wg
			n.grants[wg.ID()] = gr
		})
	case "revoke", "done", "notes":
		id := num(0)
		gr := n.grant(id)
		if err == nil && gr == nil {
			err = fmt.Errorf("%s: no grant %d", cmd, id)
		}
		if err != nil {
			n.Fail(err)
			return
		}
		switch cmd {
		case "revoke":
			n.Reply(map[string]any{"ok": true, "err": linecmd.ErrString(gr.g.Revoke(ctx))})
		case "done":
			timeout, err := time.ParseDuration(argOr(args, 1))
			if err != nil {
				n.Fail(err)
				return
			}
			start := time.Now()
			closed := true
			select {
			case <-gr.g.Done():
			case <-time.After(timeout):
				closed = false
			}
			n.Reply(map[string]any{"done": closed, "seconds": time.Since(start).Seconds(), "err": linecmd.ErrString(gr.g.Err())})
		case "notes":
			gr.mu.Lock()
			notes := append([]note{}, gr.notes...)
			gr.mu.Unlock()
			n.Reply(map[string]any{"notes": notes})
		}
	case "sum":
		off, length := num(0), num(1)
		if err == nil && (n.region == nil || off+length > uint64(len(n.region.Bytes()))) {
			err = errors.New("sum: no region, or the range is outside it")
		}
		if err != nil {
			n.Fail(err)
			return
		}
		n.Reply(map[string]any{"sha256": sum(n.region.Bytes()[off : off+length])})
	case "guards":
		off, length := num(0), num(1)
		if err == nil && n.region == nil {
			err = errors.New("guards: no region")
		}
		if err != nil {
			n.Fail(err)
			return
		}
		mem := n.region.Bytes()
		for _, r := range [][2]uint64{{0, off}, {off + length, uint64(len(mem))}} {
			if i := differs(mem, r[0], r[1], n.seed); i >= 0 {
				n.Reply(map[string]any{"ok": false, "first": i, "range": r})
				return
			}
		}
		n.Reply(map[string]any{"ok": true})
	case "drain":
		n.v.BeginDrain()
		n.Reply(map[string]any{"ok": true})
	case "paths":
		lines, err := metrics.Lines(n.v.Metrics(), "velo_push_path_total")
		if err != nil {
			n.Fail(err)
			return
		}
		n.Reply(map[string]any{"paths": pushPaths(lines)})
	case "samehost":
		var peer uint64
		peer, err = strconv.ParseUint(argOr(args, 0), 16, 64)
		if err != nil {
			n.Fail(err)
			return
		}
		ok, why := n.v.SameHost(velo.InstanceID(peer))
		n.Reply(map[string]any{"same_host": ok, "why": why})
	case "stats":
		st := n.v.RDMAStats()
		n.Reply(map[string]any{"lease_registrations": st.LeaseRegistrations, "quarantined": st.QuarantinedRegistrations,
			"held_slots": st.HeldSlots, "pinned_bytes": st.PinnedBytes, "arena_bytes": st.ArenaBytes, "grants": n.v.PushGrants()})
	case "put", "putloop":
		var h velo.GrantHandle
		err = h.UnmarshalText([]byte(argOr(args, 0)))
		off, size, seed := num(1), num(2), num(3)
		var opts *velo.PutOptions
		max := uint64(1)
		if cmd == "put" && len(args) > 4 {
			opts = &velo.PutOptions{Notify: true, Payload: []byte(args[4])}
		}
		if cmd == "putloop" {
			max = num(4)
		}
		if err != nil {
			n.Fail(err)
			return
		}
		src := make([]byte, size)
		Fill(src, 0, seed)
		start := time.Now()
		done := uint64(0)
		for ; done < max; done++ {
			if err = n.v.Put(ctx, h, off, src, opts); err != nil {
				break
			}
		}
		n.Reply(map[string]any{"puts": done, "error": linecmd.ErrString(err), "sha256": sum(src), "seconds": time.Since(start).Seconds(),
			"ended": errors.Is(err, velo.ErrGrantEnded), "draining": errors.Is(err, velo.ErrDraining)})
	case "batch":
		var h velo.GrantHandle
		err = h.UnmarshalText([]byte(argOr(args, 0)))
		off, size, count, seed, window, rounds := num(1), num(2), num(3), num(4), num(5), num(6)
		if err != nil {
			n.Fail(err)
			return
		}
		reqs := make([]velo.PutRequest, count)
		for i := range reqs {
			src := make([]byte, size)
			Fill(src, 0, seed+uint64(i))
			reqs[i] = velo.PutRequest{Offset: off + uint64(i)*size, Src: src}
		}
		start := time.Now()
		var errs []error
		round := uint64(0)
		failed := false
		for round < rounds && !failed {
			round++
			errs, _ = n.v.PutBatch(ctx, h, reqs, &velo.PutBatchOptions{Window: int(window)})
			for _, e := range errs {
				failed = failed || e != nil
			}
		}
		sums := make([]string, len(reqs)) // "" for an entry that failed
		var texts []string
		unclear := 0
		for i, e := range errs {
			if e == nil {
				sums[i] = sum(reqs[i].Src)
				continue
			}
			if !errors.Is(e, velo.ErrGrantEnded) && !errors.Is(e, velo.ErrDraining) {
				unclear++
			}
			texts = append(texts, e.Error())
		}
		n.Reply(map[string]any{"rounds": round, "sums": sums, "errors": texts, "unclear": unclear, "seconds": time.Since(start).Seconds()})
	case "checkgrant", "checks", "soak":
		n.soakCommand(ctx, cmd, args)
	default:
		n.Fail(fmt.Errorf("unknown command %q", cmd))
	}
}

// grantWrite runs the GrantWrite of grant and checkgrant ("<writer> <off> <len> <ttl>", the writer
// in hex): [off, off+len) of region for ttl, with onNotify. file records the grant (under n.mu);
// the answer is the grant's ID and its handle as text.
func (n *node) grantWrite(ctx context.Context, args []string, region *velo.Region, onNotify func(velo.Notification), file func(*velo.WriteGrant)) {
	writer, err := strconv.ParseUint(argOr(args, 0), 16, 64)
	var off, length uint64
	if err == nil {
		off, err = strconv.ParseUint(argOr(args, 1), 0, 64)
	}
	if err == nil {
		length, err = strconv.ParseUint(argOr(args, 2), 0, 64)
	}
	var ttl time.Duration
	if err == nil {
		ttl, err = time.ParseDuration(argOr(args, 3))
	}
	if err != nil {
		n.Fail(err)
		return
	}
	wg, err := n.v.GrantWrite(ctx, velo.InstanceID(writer), region, velo.GrantOptions{
		Ranges: []velo.GrantRange{{Offset: off, Length: length}}, TTL: ttl, OnNotify: onNotify})
	if err != nil {
		n.Fail(err)
		return
	}
	n.mu.Lock()
	file(wg)
	n.mu.Unlock()
	text, err := wg.Handle().MarshalText()
	if err != nil {
		n.Fail(err)
		return
	}
	n.Reply(map[string]any{"grant": wg.ID(), "handle": string(text)})
}

func (n *node) grant(id uint64) *grant {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.grants[id]
}

func argOr(args []string, i int) string {
	if i < len(args) {
		return args[i]
	}
	return ""
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// word is the fill's 8 bytes at word index i for seed (splitmix64): any byte of a fill can be
// computed on its own, so the guard check needs no copy of the region.
func word(seed, i uint64) uint64 {
	z := seed + (i+1)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Fill writes the fill of seed into b, b[0] being the fill's byte at position at.
func Fill(b []byte, at, seed uint64) {
	var w [8]byte
	i := 0
	for ; i < len(b) && (at+uint64(i))%8 != 0; i++ { // up to the first whole word
		p := at + uint64(i)
		binary.LittleEndian.PutUint64(w[:], word(seed, p/8))
		b[i] = w[p%8]
	}
	for ; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], word(seed, (at+uint64(i))/8))
	}
	if i < len(b) {
		binary.LittleEndian.PutUint64(w[:], word(seed, (at+uint64(i))/8))
		copy(b[i:], w[:])
	}
}

// differs returns the first index in [lo, hi) where mem is not the fill of seed, or -1.
func differs(mem []byte, lo, hi, seed uint64) int64 {
	var w [8]byte
	for p := lo; p < hi; p++ {
		if p == lo || p%8 == 0 {
			binary.LittleEndian.PutUint64(w[:], word(seed, p/8))
		}
		if mem[p] != w[p%8] {
			return int64(p)
		}
	}
	return -1
}

// pushPaths reads velo_push_path_total's lines ("velo_push_path_total{path=\"rdma\",reason=\"ok\",side=\"writer\"} 3")
// into "side/path/reason" → count, leaving out the series at zero.
func pushPaths(lines []string) map[string]float64 {
	out := map[string]float64{}
	for _, l := range lines {
		labels, value, ok := strings.Cut(l, "} ")
		v, err := strconv.ParseFloat(value, 64)
		if !ok || err != nil || v == 0 {
			continue
		}
		get := func(k string) string {
			_, rest, _ := strings.Cut(labels, k+`="`)
			val, _, _ := strings.Cut(rest, `"`)
			return val
		}
		out[get("side")+"/"+get("path")+"/"+get("reason")] = v
	}
	return out
}
