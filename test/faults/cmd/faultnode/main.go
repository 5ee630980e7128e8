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
//	stage <bytes> <seed>        RegisterDataPinned of a deterministic payload; answers the handle
//	stage-plain <bytes> <seed>  RegisterData (unpinned)
//	ref <handle>                one more reference
//	release <handle>            drop one reference (Velo.Release)
//	get <handle>                Get, SHA-256 of the bytes, the path it took, then Release
//	get-keep <handle>           the same without Release (the lease stays open)
//	get-all <handle>...         Get of every handle at once, each lease detached after (the
//	                            payloads stay staged for other readers); answers each one's
//	                            SHA-256 or error, and the bytes received by each path
//	flood <peer> <bytes> <n> <timeout>
//	                            send n one-way messages of bytes to peer (hex ID), each bounded by
//	                            timeout; answers how many went and the first error with its time
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
// The ready line that opens the output carries the time New returned (unix nanoseconds): a member
// found through discovery is published by then.
//
// Every instance runs a TCP control plane on 127.0.0.1 (or -listen) and the UCX transport
// (UCX_TLS=tcp unless the environment says otherwise).
package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

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
	discDir := flag.String("discovery", "", "find peers through the filesystem backend in this directory")
	name := flag.String("name", "", "the member name under -discovery")
	etcdEndpoints := flag.String("etcd", "", "find peers through etcd at these comma-separated client URLs")
	discTTL := flag.Duration("discovery-ttl", 10*time.Second, "the discovery backend's TTL")
	discPoll := flag.Duration("discovery-poll", 100*time.Millisecond, "how often the filesystem backend reads the directory")
	logLevel := flag.String("log", "warn", "log level on standard error: debug, info, warn, error")
	flag.Parse()

	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*logLevel)); err != nil {
		fatal(err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fatal(err)
	}
	// Credentials from the environment (VELO_CLUSTER_SECRET[_FILE], VELO_TLS_*), none without.
	creds, err := auth.FromEnv()
	if err != nil {
		fatal(err)
	}
	ctl, err := tcp.New(tcp.Config{Listener: ln, Auth: creds})
	if err != nil {
		fatal(err)
	}
	u, err := ucxtransport.New(ucxtransport.Config{TLS: "tcp", Logger: log, EPIdleTimeout: *epIdle, MaxEndpoints: *maxEPs})
	if err != nil {
		fatal(err)
	}
	opts := []velo.Option{}
	if *discDir != "" {
		d, err := discovery.NewFilesystem(discovery.FilesystemConfig{Dir: *discDir, Cluster: "faults", TTL: *discTTL, Poll: *discPoll, Logger: log})
		if err != nil {
			fatal(err)
		}
		opts = append(opts, velo.WithDiscovery(d, *name))
	}
	if *etcdEndpoints != "" {
		d, err := etcd.New(etcd.Config{Endpoints: strings.Split(*etcdEndpoints, ","), Cluster: "faults", TTL: *discTTL, Logger: log})
		if err != nil {
			fatal(err)
		}
		opts = append(opts, velo.WithDiscovery(d, *name))
	}
	v, err := velo.New(context.Background(), append(opts, velo.WithLogger(log), velo.WithTransport(ctl), velo.WithUCXTransport(u),
		velo.WithLeaseTTL(*ttl),
		velo.WithRDMA(velo.RDMAConfig{ForceCloseAfter: *forceAfter, Pool: velo.RDMAPoolConfig{RegisteredBytesBudget: *budget, ArenaSize: *arena}}))...)
	if err != nil {
		fatal(err)
	}
	ready := time.Now().UnixNano()
	n := &node{v: v, out: json.NewEncoder(os.Stdout), evChanged: make(chan struct{})}
	go n.record(v.WatchPeers(context.Background())) // subscribed before any command is read
	if err := v.RegisterHandler("sink", func(context.Context, *velo.Message) ([]byte, error) { return nil, nil }); err != nil {
		fatal(err)
	}
	n.reply(map[string]any{"ready": true, "at": ready})
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	for in.Scan() {
		cmd, arg, _ := strings.Cut(strings.TrimSpace(in.Text()), " ")
		if cmd == "quit" {
			err := v.Close()
			n.reply(map[string]any{"closed": true, "err": errString(err), "stats": n.stats()})
			return
		}
		n.run(cmd, arg)
	}
	// Standard input closed: the suite went away.
	v.Close()
}

type node struct {
	v   *velo.Velo
	out *json.Encoder

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

func (n *node) reply(m map[string]any) {
	if err := n.out.Encode(m); err != nil {
		os.Exit(3)
	}
}

func (n *node) fail(err error) { n.reply(map[string]any{"error": err.Error()}) }

func (n *node) run(cmd, arg string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	switch cmd {
	case "info":
		n.reply(map[string]any{"info": n.v.PeerInfo(), "id": fmt.Sprintf("%016x", uint64(n.v.ID()))})
	case "info-skewed":
		p := n.v.PeerInfo()
		blob := append([]byte(nil), p.Addresses["ucx"]...)
		blob[0]++
		p.Addresses["ucx"] = blob
		n.reply(map[string]any{"info": p})
	case "peer":
		var p velo.PeerInfo
		if err := json.Unmarshal([]byte(arg), &p); err != nil {
			n.fail(err)
			return
		}
		if err := n.v.RegisterPeer(ctx, p); err != nil {
			n.fail(err)
			return
		}
		n.reply(map[string]any{"ok": true})
	case "stage", "stage-plain":
		size, seed, err := sizeSeed(arg)
		if err != nil {
			n.fail(err)
			return
		}
		data := Payload(size, seed)
		var h velo.Handle
		if cmd == "stage" {
			h, err = n.v.RegisterDataPinned(ctx, data)
		} else {
			h, err = n.v.RegisterData(ctx, data)
		}
		if err != nil {
			n.fail(err)
			return
		}
		sum := sha256.Sum256(data)
		text, _ := h.MarshalText()
		n.reply(map[string]any{"handle": string(text), "sha256": hex.EncodeToString(sum[:])})
	case "ref", "release":
		h, err := parseHandle(arg)
		if err == nil && cmd == "ref" {
			err = n.v.Ref(ctx, h)
		} else if err == nil {
			err = n.v.Unref(ctx, h)
		}
		if err != nil {
			n.fail(err)
			return
		}
		n.reply(map[string]any{"ok": true})
	case "get", "get-keep":
		h, err := parseHandle(arg)
		if err != nil {
			n.fail(err)
			return
		}
		before := n.paths()
		start := time.Now()
		l, err := n.v.Get(ctx, h)
		if err != nil {
			n.fail(err)
			return
		}
		sum := sha256.Sum256(l.Bytes())
		m := map[string]any{"sha256": hex.EncodeToString(sum[:]), "path": diffPaths(before, n.paths()), "seconds": time.Since(start).Seconds()}
		if cmd == "get" {
			m["release_err"] = errString(l.Release(ctx))
		}
		n.reply(m)
	case "get-all":
		n.getAll(ctx, strings.Fields(arg))
	case "await":
		n.await(arg)
	case "flood":
		var peer uint64
		var size, count int
		var timeout time.Duration
		if _, err := fmt.Sscanf(arg, "%x %d %d %s", &peer, &size, &count, new(string)); err != nil {
			n.fail(fmt.Errorf("flood: %q: %w", arg, err))
			return
		}
		f := strings.Fields(arg)
		timeout, err := time.ParseDuration(f[3])
		if err != nil {
			n.fail(err)
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
				n.reply(map[string]any{"sent": sent, "error": err.Error(), "seconds": time.Since(began).Seconds()})
				return
			}
			sent++
		}
		n.reply(map[string]any{"sent": sent})
	case "peers":
		peers := map[string]string{}
		for _, p := range n.v.Peers() {
			peers[fmt.Sprintf("%016x", uint64(p.ID))] = string(p.State)
		}
		n.reply(map[string]any{"peers": peers})
	case "stats":
		n.reply(map[string]any{"stats": n.stats()})
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
			n.fail(err)
			return
		}
		n.reply(map[string]any{"ok": true})
	case "memstats":
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		n.reply(map[string]any{"heap_inuse": ms.HeapInuse, "stack_inuse": ms.StackInuse, "sys": ms.Sys})
	case "health":
		h := n.v.Health()
		n.reply(map[string]any{"state": string(h.State), "reasons": h.Reasons})
	case "metric":
		// One metric family's series, as "label=value,..." → value (counters and gauges).
		n.reply(map[string]any{"series": n.series(arg)})
	case "events":
		// The WatchPeers events since start, as "kind peer [previous]".
		n.evMu.Lock()
		evs := append([]string{}, n.events...)
		n.evMu.Unlock()
		n.reply(map[string]any{"events": evs})
	default:
		n.fail(fmt.Errorf("unknown command %q", cmd))
	}
}

// getAll gets every handle at once, as a member fetching from several peers does. It detaches
// rather than releases: many members read one staged payload.
func (n *node) getAll(ctx context.Context, handles []string) {
	results := make([]map[string]any, len(handles))
	// The bytes this instance received, by path: as an owner it serves others meanwhile, which
	// the path counter would mix in, but received bytes are its own gets' alone.
	before := n.series(metrics.RendezvousBytesTotal)
	var wg sync.WaitGroup
	for i, arg := range handles {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, err := parseHandle(arg)
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
			results[i] = map[string]any{"sha256": hex.EncodeToString(sum[:]), "detach_err": errString(l.Detach(ctx))}
		}()
	}
	wg.Wait()
	received := map[string]float64{}
	for k, v := range n.series(metrics.RendezvousBytesTotal) {
		path, ok := strings.CutPrefix(k, "direction=received,path=")
		if d := v - before[k]; ok && d > 0 {
			received[path] = d
		}
	}
	n.reply(map[string]any{"results": results, "received": received})
}

// await answers when WatchPeers reported kind for peer, with the time it did.
func (n *node) await(arg string) {
	f := strings.Fields(arg)
	if len(f) != 3 {
		n.fail(fmt.Errorf("await: %q: want <kind> <peer> <timeout>", arg))
		return
	}
	timeout, err := time.ParseDuration(f[2])
	if err != nil {
		n.fail(fmt.Errorf("await: %w", err))
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
				n.reply(map[string]any{"at": at})
				return
			}
		}
		changed := n.evChanged
		n.evMu.Unlock()
		select {
		case <-changed:
		case <-deadline:
			n.fail(fmt.Errorf("await: no %s event for %s within %v", f[0], f[1], timeout))
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

// paths reads the path metric's series as "path/reason" → count.
func (n *node) paths() map[string]float64 {
	out := map[string]float64{}
	mfs, err := n.v.Metrics().Gather()
	if err != nil {
		return out
	}
	for _, mf := range mfs {
		if mf.GetName() != metrics.RDMAPathTotal {
			continue
		}
		for _, m := range mf.GetMetric() {
			var path, reason string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "path":
					path = l.GetValue()
				case "reason":
					reason = l.GetValue()
				}
			}
			out[path+"/"+reason] = m.GetCounter().GetValue()
		}
	}
	return out
}

// series reads every series of the family name.
func (n *node) series(name string) map[string]float64 {
	out := map[string]float64{}
	mfs, err := n.v.Metrics().Gather()
	if err != nil {
		return out
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			out[strings.Join(labels, ",")] = v
		}
	}
	return out
}

// diffPaths names the series that grew between two readings.
func diffPaths(before, after map[string]float64) string {
	var grew []string
	for k, v := range after {
		if v > before[k] {
			grew = append(grew, k)
		}
	}
	return strings.Join(grew, ",")
}

func parseHandle(s string) (velo.Handle, error) {
	var h velo.Handle
	err := h.UnmarshalText([]byte(strings.TrimSpace(s)))
	return h, err
}

func sizeSeed(arg string) (int, uint64, error) {
	a, b, _ := strings.Cut(arg, " ")
	size, err := strconv.Atoi(a)
	if err != nil || size <= 0 {
		return 0, 0, fmt.Errorf("stage: size %q: want a positive number of bytes", a)
	}
	seed, err := strconv.ParseUint(strings.TrimSpace(b), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("stage: seed %q: %w", b, err)
	}
	return size, seed, nil
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

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func fatal(err error) {
	if errors.Is(err, io.EOF) {
		os.Exit(0)
	}
	fmt.Fprintln(os.Stderr, "faultnode:", err)
	os.Exit(1)
}
