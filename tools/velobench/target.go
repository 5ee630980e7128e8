package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo/ucx/benchkit"
	"github.com/velo-go/velo/velo"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/rendezvous/rdma"
)

// target is the owner side: it stages what the initiator asks for and answers its requests until
// it is stopped (or, with --once, until its initiator says bye or goes away).
type target struct {
	n      *node
	log    *slog.Logger
	env    Environment
	name   string
	once   bool  // exit when the initiator is done
	memory int64 // --memory
	stdout io.Writer

	mu        sync.Mutex
	staged    map[stageKey][]velo.Handle
	granted   map[stageKey]*grantSet
	initiator velo.InstanceID // the one that said hello, for --once
	bye       chan struct{}
	byeOnce   sync.Once
	perftest  *exec.Cmd
	lanes     *laneCounter
}

type stageKey struct {
	from velo.InstanceID
	id   uint64
}

func runTarget(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("target", stderr)
	var m meeting
	m.register(fs, true)
	memory := int64(1 << 30)
	fs.Func("memory", "largest number of bytes the target stages at once (default 1G; the initiator's --memory should not exceed it)", func(v string) error {
		n, err := parseSize(v)
		memory = n
		return err
	})
	once := fs.Bool("once", false, "exit once the initiator is done (or gone)")
	var laneMode string
	registerLanes(fs, &laneMode)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: velobench target (--dir DIR | --etcd URL) [flags]\n\nThe owner side of a two-node run: it stages the payloads the initiator reads.\n\n")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	if err := m.check(true); err != nil {
		return err
	}
	if memory <= 0 {
		return usageErr("--memory %d: give the bytes the target may stage, for example --memory 1G", memory)
	}
	if err := checkLaneMode(laneMode); err != nil {
		return err
	}
	osEnv := os.Environ()
	t := &target{log: quietLogger(stderr), name: m.Name, once: *once, stdout: stdout, memory: memory, staged: map[stageKey][]velo.Handle{}, granted: map[stageKey]*grantSet{}, bye: make(chan struct{})}
	handlers := []velo.Option{
		velo.WithHandler(hHello, t.hello), velo.WithHandler(hStage, t.stage), velo.WithHandler(hFree, t.free),
		velo.WithHandler(hStats, t.stats), velo.WithHandler(hEcho, echo), velo.WithHandler(hPerftest, t.startPerftest),
		velo.WithHandler(hBye, t.sayBye),
	}
	// The lane counter first: only sockets made after this process entered its cgroup count.
	lc, err := startLanes(laneMode)
	if err != nil {
		return err
	}
	t.lanes = lc
	defer func() {
		if cerr := lc.close(); cerr != nil {
			t.log.Warn("velobench target: " + cerr.Error())
		}
	}()
	n, err := startNode(ctx, m, m.Name, memory, t.log, handlers...)
	if err != nil {
		return err
	}
	lc.setPorts(n.port, 0, m.etcdPort())
	t.n = n
	defer n.v.Close()
	defer t.stopPerftest()
	t.env = captureEnv(osEnv)
	t.env.UCXDefaults, t.env.Auth = engineDefaults(n.u.Settings()), n.auth
	t.env.Lanes = lc.describe()
	if len(m.Rails) > 0 {
		t.env.Rails = n.v.Rails().String()
	}
	exportDefaults(t.env.UCXDefaults)
	fmt.Fprintf(stdout, "velobench %s target %q: ready (pid %d, %s, UCX %s), found through %s\n",
		velobenchVersion(), m.Name, os.Getpid(), n.host, t.env.UCX, n.where)
	events := n.v.WatchPeers(ctx)
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintf(stdout, "velobench target %q: stopped\n", m.Name)
			return nil
		case <-t.bye:
			fmt.Fprintf(stdout, "velobench target %q: the initiator is done\n", m.Name)
			return nil
		case ev, ok := <-events:
			if !ok {
				return nil
			}
			t.mu.Lock()
			mine := ev.Peer.ID == t.initiator
			t.mu.Unlock()
			if mine && ev.Kind == velo.PeerDown {
				t.dropFrom(ev.Peer.ID)
				if *once {
					return fmt.Errorf("the initiator %v went away before it said it was done: %s", ev.Peer.ID, ev.Peer.Err)
				}
				fmt.Fprintf(stdout, "velobench target %q: initiator %v went away (%s); its payloads are freed\n", m.Name, ev.Peer.ID, ev.Peer.Err)
			}
		}
	}
}

// exportDefaults gives ucx_perftest, which this process starts, the settings velo's engine chose.
func exportDefaults(m map[string]string) {
	for k, v := range m {
		if _, set := os.LookupEnv(k); !set {
			os.Setenv(k, v)
		}
	}
}

func echo(_ context.Context, m *velo.Message) ([]byte, error) { return m.Payload, nil }

func (t *target) hello(_ context.Context, m *velo.Message) ([]byte, error) {
	var req helloReq
	if err := json.Unmarshal(m.Payload, &req); err != nil {
		return nil, fmt.Errorf("velobench target: a hello that is not JSON: %w", err)
	}
	if req.Version != velobenchVersion() || req.Protocol != protocol {
		t.log.Warn("velobench target: an initiator of another version said hello; it will refuse this target",
			"initiator", req.Version, "target", velobenchVersion())
	} else {
		t.mu.Lock()
		t.initiator = m.From
		t.mu.Unlock()
		t.lanes.setPorts(0, req.ControlPort, 0)
	}
	return json.Marshal(helloResp{Role: "target", Name: t.name, Version: velobenchVersion(), Protocol: protocol,
		Host: t.n.host, PID: os.Getpid(), Memory: t.memory, Env: t.env, ControlPort: t.n.port})
}

// accepted refuses work from an instance that did not say hello with this version.
func (t *target) accepted(from velo.InstanceID) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if from != t.initiator {
		return fmt.Errorf("velobench target %q serves the initiator that said hello with version %s; %v did not", t.name, velobenchVersion(), from)
	}
	return nil
}

func (t *target) stage(ctx context.Context, m *velo.Message) ([]byte, error) {
	if err := t.accepted(m.From); err != nil {
		return nil, err
	}
	var req stageReq
	if err := json.Unmarshal(m.Payload, &req); err != nil {
		return nil, err
	}
	if req.Count < 1 || req.Size < 1 {
		return nil, fmt.Errorf("velobench target: staging %d payloads of %d bytes", req.Count, req.Size)
	}
	key := stageKey{m.From, req.ID}
	if req.Grant {
		return t.grant(ctx, m.From, key, req)
	}
	var resp stageResp
	var buf []byte
	for k := 0; k < req.Count; k++ {
		var h velo.Handle
		var err error
		if req.Plain {
			// StageData keeps the slice itself: one buffer per payload.
			b := make([]byte, req.Size)
			fill(b, k, 0)
			h, err = t.n.v.StageData(ctx, b)
		} else {
			// StageDataPinned copies into pinned memory: one buffer serves every payload.
			if buf == nil {
				buf = make([]byte, req.Size)
			}
			fill(buf, k, 0)
			h, err = t.n.v.StageDataPinned(ctx, buf)
		}
		if err != nil {
			t.unref(resp.Handles)
			return nil, fmt.Errorf("velobench target: staging payload %d of %d (%s): %w", k+1, req.Count, human(req.Size), err)
		}
		resp.Handles = append(resp.Handles, h)
	}
	t.mu.Lock()
	t.staged[key] = resp.Handles
	t.mu.Unlock()
	return json.Marshal(resp)
}

// grantSet is what a put point staged: one region per caller, each granted to the initiator, and
// how many notifications arrived through them.
type grantSet struct {
	regions  []*velo.Region
	grants   []*velo.WriteGrant
	notified atomic.Int64
}

// grant stages req.Count regions of req.Size bytes and grants each to the initiator for writing.
// Notifications are counted, not read: free checks their number and the bytes.
func (t *target) grant(ctx context.Context, from velo.InstanceID, key stageKey, req stageReq) ([]byte, error) {
	if req.Size > int64(math.MaxInt) {
		return nil, fmt.Errorf("velobench target: a region of %d bytes", req.Size)
	}
	gs := &grantSet{}
	var resp stageResp
	for k := 0; k < req.Count; k++ {
		var g *velo.Region
		var err error
		if req.Plain {
			// Plain memory, which no transport registers: every put into it takes the chunked
			// path (not_pinned), as a receiver's buffer that velo did not allocate does.
			g = rdma.PlainRegion(make([]byte, req.Size), metrics.ReasonNotPinned)
		} else if g, err = t.n.v.NewRegion(int(req.Size)); err != nil {
			gs.end()
			return nil, fmt.Errorf("velobench target: a region of %s for writing: %w", human(req.Size), err)
		}
		gs.regions = append(gs.regions, g)
		clear(g.Bytes()) // what the initiator writes must be its own
		wg, err := t.n.v.GrantWrite(ctx, from, g, velo.GrantOptions{TTL: time.Hour, OnNotify: func(velo.Notification) { gs.notified.Add(1) }})
		if err != nil {
			gs.end()
			return nil, fmt.Errorf("velobench target: granting a region of %s to %v: %w", human(req.Size), from, err)
		}
		gs.grants = append(gs.grants, wg)
		resp.Grants = append(resp.Grants, wg.Handle())
	}
	t.mu.Lock()
	t.granted[key] = gs
	t.mu.Unlock()
	return json.Marshal(resp)
}

// check waits briefly for the notifications the initiator counted and looks at the first, middle
// and last byte of every block it wrote.
func (gs *grantSet) check(req freeReq) error {
	deadline := time.Now().Add(5 * time.Second)
	for gs.notified.Load() < int64(req.Notified) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := gs.notified.Load(); n < int64(req.Notified) {
		return fmt.Errorf("%d notifications arrived, the initiator sent %d", n, req.Notified)
	}
	for k, g := range gs.regions {
		b := g.Bytes()
		for i := 0; i < req.Blocks; i++ {
			off := int64(i) * req.Block
			if off+req.Block > int64(len(b)) {
				return fmt.Errorf("block %d of %s lies beyond the region of %s", i, human(req.Block), human(int64(len(b))))
			}
			if err := checkBytes(b[off:off+req.Block], k, off); err != nil {
				return fmt.Errorf("region %d: %w", k, err)
			}
		}
	}
	return nil
}

// end revokes the grants, waits until no write can land, and frees the regions.
func (gs *grantSet) end() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, g := range gs.grants {
		_ = g.Revoke(ctx)
		select {
		case <-g.Done():
		case <-ctx.Done():
		}
	}
	for _, g := range gs.regions {
		g.Free()
	}
}

func (t *target) unref(hs []velo.Handle) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, h := range hs {
		if err := t.n.v.Unref(ctx, h); err != nil {
			t.log.Warn("velobench target: freeing a payload", "err", err)
		}
	}
}

func (t *target) free(_ context.Context, m *velo.Message) ([]byte, error) {
	var req freeReq
	if err := json.Unmarshal(m.Payload, &req); err != nil {
		return nil, err
	}
	key := stageKey{m.From, req.ID}
	t.mu.Lock()
	hs := t.staged[key]
	delete(t.staged, key)
	gs := t.granted[key]
	delete(t.granted, key)
	t.mu.Unlock()
	t.unref(hs)
	var resp freeResp
	if gs != nil {
		if err := gs.check(req); err != nil {
			resp.Err = err.Error()
		}
		gs.end()
	}
	return json.Marshal(resp)
}

// dropFrom frees what a departed initiator had staged.
func (t *target) dropFrom(from velo.InstanceID) {
	t.mu.Lock()
	var hs []velo.Handle
	for k, v := range t.staged {
		if k.from == from {
			hs = append(hs, v...)
			delete(t.staged, k)
		}
	}
	var gss []*grantSet
	for k, gs := range t.granted {
		if k.from == from {
			gss = append(gss, gs)
			delete(t.granted, k)
		}
	}
	t.mu.Unlock()
	t.unref(hs)
	for _, gs := range gss {
		gs.end()
	}
}

func (t *target) stats(context.Context, *velo.Message) ([]byte, error) {
	lb, why := t.lanes.read()
	paths, railBytes := counters(t.n.v.Metrics())
	return json.Marshal(statsResp{CPUNanos: cpuNanos(), Paths: paths, Lanes: lb, LanesWhy: why, Rails: railBytes})
}

func (t *target) sayBye(_ context.Context, m *velo.Message) ([]byte, error) {
	if t.accepted(m.From) != nil {
		return []byte("{}"), nil
	}
	t.dropFrom(m.From)
	if t.once {
		t.byeOnce.Do(func() { close(t.bye) })
	} else {
		fmt.Fprintf(t.stdout, "velobench target %q: initiator %v is done; waiting for the next\n", t.name, m.From)
	}
	return []byte("{}"), nil
}

// startPerftest starts a ucx_perftest server for one client run of the initiator's, on a free
// port, killed after the request's timeout if the client never comes.
func (t *target) startPerftest(_ context.Context, m *velo.Message) ([]byte, error) {
	if err := t.accepted(m.From); err != nil {
		return nil, err
	}
	var req perftestReq
	if err := json.Unmarshal(m.Payload, &req); err != nil {
		return nil, err
	}
	t.stopPerftest()
	tool, err := benchkit.Find()
	if err != nil {
		return json.Marshal(perftestResp{Err: err.Error()})
	}
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		return json.Marshal(perftestResp{Err: err.Error()})
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	timeout := time.Duration(max(req.TimeoutSec, 1)) * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	cmd := exec.CommandContext(ctx, tool.Path, "-p", strconv.Itoa(port))
	cmd.Env = os.Environ()
	if err := cmd.Start(); err != nil {
		cancel()
		return json.Marshal(perftestResp{Err: fmt.Sprintf("%s: %v", tool.Path, err)})
	}
	t.mu.Lock()
	t.perftest = cmd
	t.mu.Unlock()
	go func() { _ = cmd.Wait(); cancel() }()
	return json.Marshal(perftestResp{Port: port, Version: tool.Version})
}

func (t *target) stopPerftest() {
	t.mu.Lock()
	cmd := t.perftest
	t.perftest = nil
	t.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		_ = cmd.Process.Kill()
	}
}
