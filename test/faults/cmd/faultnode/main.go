// Command faultnode is one velo instance that the fault suite (package faults) drives from its
// standard input, one command a line, answering each with one JSON line on standard output.
// The suite stops, resumes and kills these processes to play consumers that stall or die, and
// reads the owner's registry to check that nothing is lost.
//
// Commands:
//
//	info                        this instance's PeerInfo
//	info-skewed                 the same with the UCX address of another wire version (byte 0)
//	peer <PeerInfo JSON>        RegisterPeer
//	stage <bytes> <seed>        StageDataPinned of a deterministic payload; answers the handle
//	stage-plain <bytes> <seed>  StageData (unpinned)
//	ref <handle>                one more reference
//	release <handle>            drop one reference (Velo.Unref)
//	get <handle>                Get, SHA-256 of the bytes, the path it took, then Release
//	get-keep <handle>           the same without Release (the lease stays open)
//	get-all <handle>...         Get of every handle at once, each lease detached after (the
//	                            payloads stay staged for other readers); answers each one's
//	                            SHA-256, path and reason or error, and the bytes received by
//	                            each path
//	flood <peer> <bytes> <n> <timeout>
//	                            send n one-way messages of bytes to peer (hex ID), each bounded by
//	                            timeout; answers how many went and the first error with its time
//	samehost <peer>             whether reads from peer (hex ID) take the same-host path, and why not
//	peers                       Peers(): id and state of each
//	events                      the WatchPeers events since start
//	await <kind> <peer> <timeout>
//	                            wait until WatchPeers reported kind (up, down, ...) for peer (hex
//	                            ID), answering when it did (unix nanoseconds), however long ago
//	stats                       the RDMA registry's Stats and the staged counts
//	memstats                    the Go runtime's heap and stacks in use (runtime.MemStats): the
//	                            part of the resident set that is Go's, the rest being UCX's and
//	                            the binary's
//	heap-profile <file>         write a heap profile (pprof) of what is in use now to file
//	quit                        Close, then the final stats; the process exits 0
//
// The loop, the answers and the commands peer, peers, metric and samehost are the suites' own
// (test/internal/linecmd), shared with the attack suite's victim. The ready line that opens the
// output carries the time New returned (unix nanoseconds): a member found through discovery is
// published by then.
//
// Every instance runs a TCP control plane on 127.0.0.1 (or -listen) and the UCX transport
// (UCX_TLS=tcp unless the environment says otherwise); -same-host adds the same-host path, and is
// on by default under VELO_TEST_SAME_HOST=1 (-same-host=false pins it off).
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	"github.com/velo-go/velo/test/internal/linecmd"
	"github.com/velo-go/velo/velo"
	"github.com/velo-go/velo/velo/auth"
	"github.com/velo-go/velo/velo/discovery"
	"github.com/velo-go/velo/velo/discovery/etcd"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/transport/tcp"
	"github.com/velo-go/velo/velo/transport/ucxtransport"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "TCP control-plane listen address")
	ttl := flag.Duration("lease-ttl", 30*time.Second, "lease TTL of this instance as an owner")
	forceAfter := flag.Duration("force-close-after", 0, "RDMAConfig.ForceCloseAfter (0: the default)")
	budget := flag.Int64("budget", 0, "RDMAPoolConfig.RegisteredBytesBudget (0: the default)")
	arena := flag.Int("arena", 0, "RDMAPoolConfig.ArenaSize (0: the default)")
	epIdle := flag.Duration("ep-idle", 0, "ucxtransport.Config.EPIdleTimeout (0: the default)")
	maxEPs := flag.Int("max-endpoints", 0, "ucxtransport.Config.MaxEndpoints (0: the default)")
	maxConns := flag.Int("max-conns", 0, "tcp.Config.MaxConnections, the control plane's connection budget (0: the default)")
	tcpIdle := flag.Duration("tcp-idle", 0, "tcp.Config.IdleTimeout (0: the default; negative: never)")
	discDir := flag.String("discovery", "", "find peers through the filesystem backend in this directory")
	name := flag.String("name", "", "the member name under -discovery")
	etcdEndpoints := flag.String("etcd", "", "find peers through etcd at these comma-separated client URLs")
	discTTL := flag.Duration("discovery-ttl", 10*time.Second, "the discovery backend's TTL")
	discPoll := flag.Duration("discovery-poll", 100*time.Millisecond, "how often the filesystem backend reads the directory")
	logLevel := flag.String("log", "warn", "log level on standard error: debug, info, warn, error")
	sameHostDefault, err := linecmd.SameHost()
	if err != nil {
		linecmd.Fatal("faultnode", err)
	}
	sameHost := flag.Bool("same-host", sameHostDefault, "turn on the same-host path (WithSameHost); default: "+linecmd.SameHostEnv)
	shmDir := flag.String("shm-dir", "", "SameHostConfig.Dir (empty: the default)")
	shmChunk := flag.Int("shm-chunk", 0, "SameHostConfig.ChunkSize (0: the default)")
	shmSingle := flag.Int("shm-single-copy-min", 0, "SameHostConfig.SingleCopyMin (0: no single-copy payloads, every read through the ring)")
	flag.Parse()

	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*logLevel)); err != nil {
		linecmd.Fatal("faultnode", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		linecmd.Fatal("faultnode", err)
	}
	// Credentials from the environment (VELO_CLUSTER_SECRET[_FILE], VELO_TLS_*), none without.
	creds, err := auth.FromEnv()
	if err != nil {
		linecmd.Fatal("faultnode", err)
	}
	ctl, err := tcp.New(tcp.Config{Listener: ln, Auth: creds, MaxConnections: *maxConns, IdleTimeout: *tcpIdle})
	if err != nil {
		linecmd.Fatal("faultnode", err)
	}
	u, err := ucxtransport.New(ucxtransport.Config{TLS: "tcp", RMAOverSoftwareLanes: true, Logger: log, EPIdleTimeout: *epIdle, MaxEndpoints: *maxEPs})
	if err != nil {
		linecmd.Fatal("faultnode", err)
	}
	opts := []velo.Option{}
	if *discDir != "" {
		d, err := discovery.NewFilesystem(discovery.FilesystemConfig{Dir: *discDir, Cluster: "faults", TTL: *discTTL, Poll: *discPoll, Logger: log})
		if err != nil {
			linecmd.Fatal("faultnode", err)
		}
		opts = append(opts, velo.WithDiscovery(d, *name))
	}
	if *etcdEndpoints != "" {
		d, err := etcd.New(etcd.Config{Endpoints: strings.Split(*etcdEndpoints, ","), Cluster: "faults", TTL: *discTTL, Logger: log})
		if err != nil {
			linecmd.Fatal("faultnode", err)
		}
		opts = append(opts, velo.WithDiscovery(d, *name))
	}
	if *sameHost {
		opts = append(opts, velo.WithSameHost(velo.SameHostConfig{Dir: *shmDir, ChunkSize: *shmChunk, SingleCopyMin: *shmSingle}))
	}
	v, err := velo.New(context.Background(), append(opts, velo.WithLogger(log), velo.WithTransport(ctl), velo.WithUCXTransport(u),
		velo.WithLeaseTTL(*ttl),
		velo.WithRDMA(velo.RDMAConfig{ForceCloseAfter: *forceAfter, Pool: velo.RDMAPoolConfig{RegisteredBytesBudget: *budget, ArenaSize: *arena}}))...)
	if err != nil {
		linecmd.Fatal("faultnode", err)
	}
	ready := time.Now().UnixNano()
	n := &node{v: v, Replier: linecmd.NewReplier(os.Stdout), evChanged: make(chan struct{})}
	go n.record(v.WatchPeers(context.Background())) // subscribed before any command is read
	if err := v.RegisterHandler("sink", func(context.Context, *velo.Message) ([]byte, error) { return nil, nil }); err != nil {
		linecmd.Fatal("faultnode", err)
	}
	n.Reply(map[string]any{"ready": true, "at": ready})
	if linecmd.Serve(os.Stdin, 5*time.Minute, n.run) {
		err := v.Close()
		n.Reply(map[string]any{"closed": true, "err": linecmd.ErrString(err), "stats": n.stats()})
		return
	}
	// Standard input closed: the suite went away.
	v.Close()
}

type node struct {
	*linecmd.Replier
	v *velo.Velo

	evMu      sync.Mutex
	events    []string
	evAt      []int64       // when each event arrived, unix nanoseconds
	evChanged chan struct{} // closed and replaced at each event
}

// record keeps the instance's peer events for the "events" command. Events from before the
// subscription (peers discovery found while New ran) are not among them.
func (n *node) record(events <-chan velo.PeerEvent) {
	for ev := range events {
		line := fmt.Sprintf("%s %016x", ev.Kind, uint64(ev.Peer.ID))
		if ev.Previous != 0 {
			line += fmt.Sprintf(" %016x", uint64(ev.Previous))
		}
		n.evMu.Lock()
		n.events = append(n.events, line)
		n.evAt = append(n.evAt, time.Now().UnixNano())
		close(n.evChanged)
		n.evChanged = make(chan struct{})
		n.evMu.Unlock()
	}
}

func (n *node) run(ctx context.Context, cmd, arg string) {
	if linecmd.Common(ctx, n.Replier, n.v, cmd, arg) {
		return
	}
	switch cmd {
	case "info":
		n.Reply(map[string]any{"info": n.v.PeerInfo(), "id": fmt.Sprintf("%016x", uint64(n.v.ID()))})
	case "info-skewed":
		p := n.v.PeerInfo()
		blob := append([]byte(nil), p.Addresses["ucx"]...)
		blob[0]++
		p.Addresses["ucx"] = blob
		n.Reply(map[string]any{"info": p})
	case "stage", "stage-plain":
		size, seed, err := linecmd.SizeSeed(arg)
		if err != nil {
			n.Fail(err)
			return
		}
		data := Payload(size, seed)
		var h velo.Handle
		if cmd == "stage" {
			h, err = n.v.StageDataPinned(ctx, data)
		} else {
			h, err = n.v.StageData(ctx, data)
		}
		if err != nil {
			n.Fail(err)
			return
		}
		sum := sha256.Sum256(data)
		text, _ := h.MarshalText()
		n.Reply(map[string]any{"handle": string(text), "sha256": hex.EncodeToString(sum[:])})
	case "ref", "release":
		h, err := linecmd.ParseHandle(arg)
		if err == nil && cmd == "ref" {
			err = n.v.Ref(ctx, h)
		} else if err == nil {
			err = n.v.Unref(ctx, h)
		}
		if err != nil {
			n.Fail(err)
			return
		}
		n.Reply(map[string]any{"ok": true})
	case "get", "get-keep":
		h, err := linecmd.ParseHandle(arg)
		if err != nil {
			n.Fail(err)
			return
		}
		before := linecmd.Paths(n.v)
		start := time.Now()
		l, err := n.v.Get(ctx, h)
		if err != nil {
			n.Fail(err)
			return
		}
		sum := sha256.Sum256(l.Bytes())
		m := map[string]any{"sha256": hex.EncodeToString(sum[:]), "path": linecmd.Grew(before, linecmd.Paths(n.v)), "seconds": time.Since(start).Seconds()}
		if cmd == "get" {
			m["release_err"] = linecmd.ErrString(l.Release(ctx))
		}
		n.Reply(m)
	case "flood":
		var peer uint64
		var size, count int
		var timeout time.Duration
		if _, err := fmt.Sscanf(arg, "%x %d %d %s", &peer, &size, &count, new(string)); err != nil {
			n.Fail(fmt.Errorf("flood: %q: %w", arg, err))
			return
		}
		f := strings.Fields(arg)
		timeout, err := time.ParseDuration(f[3])
		if err != nil {
			n.Fail(err)
			return
		}
		buf := make([]byte, size)
		sent := 0
		for range count {
			began := time.Now()
			sctx, scancel := context.WithTimeout(ctx, timeout)
			err := n.v.Send(sctx, velo.InstanceID(peer), "sink", buf)
			scancel()
			if err != nil {
				n.Reply(map[string]any{"sent": sent, "error": err.Error(), "seconds": time.Since(began).Seconds()})
				return
			}
			sent++
		}
		n.Reply(map[string]any{"sent": sent})
	case "get-all":
		n.getAll(ctx, strings.Fields(arg))
	case "await":
		n.await(arg)
	case "heap-profile":
		runtime.GC() // the profile shows the heap as of the last collection
		f, err := os.Create(arg)
		if err == nil {
			err = pprof.WriteHeapProfile(f)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			n.Fail(err)
			return
		}
		n.Reply(map[string]any{"ok": true})
	case "memstats":
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		n.Reply(map[string]any{"heap_inuse": ms.HeapInuse, "stack_inuse": ms.StackInuse, "sys": ms.Sys})
	case "stats":
		n.Reply(map[string]any{"stats": n.stats()})
	case "health":
		h := n.v.Health()
		n.Reply(map[string]any{"state": string(h.State), "reasons": h.Reasons})
	case "events":
		// The WatchPeers events since start, as "kind peer [previous]".
		n.evMu.Lock()
		evs := append([]string{}, n.events...)
		n.evMu.Unlock()
		n.Reply(map[string]any{"events": evs})
	default:
		n.Fail(fmt.Errorf("unknown command %q", cmd))
	}
}

// getAll gets every handle at once, as a member fetching from several peers does. It detaches
// rather than releases: many members read one staged payload.
func (n *node) getAll(ctx context.Context, handles []string) {
	results := make([]map[string]any, len(handles))
	// The bytes this instance received, by path: as an owner it serves others meanwhile, which
	// the path counter would mix in, but received bytes are its own gets' alone.
	before := linecmd.Series(n.v, metrics.RendezvousBytesTotal)
	var wg sync.WaitGroup
	for i, arg := range handles {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, err := linecmd.ParseHandle(arg)
			if err != nil {
				results[i] = map[string]any{"error": err.Error()}
				return
			}
			l, err := n.v.Get(ctx, h)
			if err != nil {
				results[i] = map[string]any{"error": err.Error()}
				return
			}
			sum := sha256.Sum256(l.Bytes())
			results[i] = map[string]any{"sha256": hex.EncodeToString(sum[:]), "path": string(l.Path), "reason": string(l.Reason), "detach_err": linecmd.ErrString(l.Detach(ctx))}
		}()
	}
	wg.Wait()
	received := map[string]float64{}
	for k, v := range linecmd.Series(n.v, metrics.RendezvousBytesTotal) {
		path, ok := strings.CutPrefix(k, "direction=received,path=")
		if d := v - before[k]; ok && d > 0 {
			received[path] = d
		}
	}
	n.Reply(map[string]any{"results": results, "received": received})
}

// await answers when WatchPeers reported kind for peer, with the time it did.
func (n *node) await(arg string) {
	f := strings.Fields(arg)
	if len(f) != 3 {
		n.Fail(fmt.Errorf("await: %q: want <kind> <peer> <timeout>", arg))
		return
	}
	timeout, err := time.ParseDuration(f[2])
	if err != nil {
		n.Fail(fmt.Errorf("await: %w", err))
		return
	}
	want := f[0] + " " + f[1]
	deadline := time.After(timeout)
	for {
		n.evMu.Lock()
		for i, ev := range n.events {
			if ev == want || strings.HasPrefix(ev, want+" ") {
				at := n.evAt[i]
				n.evMu.Unlock()
				n.Reply(map[string]any{"at": at})
				return
			}
		}
		changed := n.evChanged
		n.evMu.Unlock()
		select {
		case <-changed:
		case <-deadline:
			n.Fail(fmt.Errorf("await: no %s event for %s within %v", f[0], f[1], timeout))
			return
		}
	}
}

func (n *node) stats() map[string]any {
	st := n.v.RDMAStats()
	slots, leases := n.v.StagedCounts()
	return map[string]any{
		"arenas": st.Arenas, "arena_bytes": st.ArenaBytes, "slots": st.Slots,
		"lease_registrations": st.LeaseRegistrations, "lease_bytes": st.LeaseBytes,
		"quarantined": st.QuarantinedRegistrations, "quarantined_bytes": st.QuarantinedBytes,
		"held_slots": st.HeldSlots, "pinned_bytes": st.PinnedBytes,
		"staged_slots": slots, "open_leases": leases,
	}
}

// Payload is the deterministic payload of size bytes for seed (the suite computes the same).
func Payload(size int, seed uint64) []byte {
	b := make([]byte, size)
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := 0; i+8 <= len(b); i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}
