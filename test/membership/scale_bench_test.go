package membership

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/velo-go/velo/test/internal/procstat"
	"github.com/velo-go/velo/velo/discovery"
	"github.com/velo-go/velo/velo/discovery/etcd"
	"github.com/velo-go/velo/velo/discovery/etcd/etcdtest"
)

// BenchmarkEtcdScale: N light members on one real etcd, each what a velo instance's membership
// is without the instance (an etcd backend with its own client, lease and watch, publishing a
// record of a real PeerInfo's size), for N = 100, 250, 500, 1000 (VELO_SCALE_MEMBERS overrides:
// "100,1000"). For each N it prints how long N joins take to be seen by all, how long one more
// member's join and leave take to reach every watcher, what one change costs each member in CPU
// (the process's CPU over ten joins and leaves, less its idle rate, over N watchers and twenty
// changes) and the etcd server, the idle cost of the keep-alives, and the memory of one record
// in a watcher and in etcd. The last column is the CPU per change against the smallest N's: O(1)
// in N reads about 1x.
func BenchmarkEtcdScale(b *testing.B) {
	sizes, err := procstat.Sizes("VELO_SCALE_MEMBERS", []int{100, 250, 500, 1000})
	require.NoError(b, err)
	srv := etcdtest.Start(b)
	var base float64
	for _, n := range sizes {
		var r scaleResult
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			for range b.N {
				r = runScale(b, srv, n)
			}
			b.ReportMetric(r.cpuPerChange.Seconds()*1e6, "us-cpu/member/change")
			b.ReportMetric(r.joinAll.Seconds()*1e3, "ms-join-seen-by-all")
		})
		if base == 0 {
			base = r.cpuPerChange.Seconds()
		}
		fmt.Printf("etcd members n=%-5d all joined and seen %6.2f s | one join seen by all %6.1f ms, leave %6.1f ms | "+
			"CPU per change: member %5.1f us, etcd %6.2f ms | idle CPU per member %6.3f ms/s | record %4d B, Go heap per known record %5.0f B, etcd RSS per member %6.0f B | CPU/change vs n=%d %.2fx\n",
			n, r.converge.Seconds(), r.joinAll.Seconds()*1e3, r.leaveAll.Seconds()*1e3,
			r.cpuPerChange.Seconds()*1e6, r.etcdPerChange.Seconds()*1e3, r.idlePerMember.Seconds()*1e3,
			r.recordBytes, r.heapPerRecord, r.etcdPerRecord, sizes[0], r.cpuPerChange.Seconds()/base)
	}
}

type scaleResult struct {
	converge, joinAll, leaveAll time.Duration
	cpuPerChange, etcdPerChange time.Duration
	idlePerMember               time.Duration // CPU per second per member, idle
	recordBytes                 int
	heapPerRecord               float64 // bytes of Go heap per record a watcher knows
	etcdPerRecord               float64 // bytes of etcd RSS per member
}

// lightMember is one member's backend and what its watcher has seen.
type lightMember struct {
	e     *etcd.Etcd
	known atomic.Int64 // members it knows (joins less leaves)
}

// watchState is shared by every watcher of a run: which name the probe has now, and how many
// watchers saw it join and leave.
type watchState struct {
	mu     sync.Mutex
	probe  string
	joined int
	left   int
	change chan struct{} // signalled on every probe sighting
}

func (w *watchState) saw(kind discovery.EventKind, name string) {
	w.mu.Lock()
	hit := name == w.probe
	if hit {
		switch kind {
		case discovery.Joined:
			w.joined++
		case discovery.Left:
			w.left++
		}
	}
	w.mu.Unlock()
	if hit {
		select {
		case w.change <- struct{}{}:
		default:
		}
	}
}

// until waits for cond on the state, failing the benchmark after a minute.
func (w *watchState) until(b *testing.B, what string, cond func() bool) time.Duration {
	b.Helper()
	start := time.Now()
	deadline := time.After(time.Minute)
	for {
		w.mu.Lock()
		ok := cond()
		w.mu.Unlock()
		if ok {
			return time.Since(start)
		}
		select {
		case <-w.change:
		case <-time.After(10 * time.Millisecond):
		case <-deadline:
			b.Fatalf("%s: not within a minute", what)
		}
	}
}

// peerInfoSized is a record's Info the size of a real velo PeerInfo with a TCP and a UCX address
// (about 600 bytes of JSON).
var peerInfoSized = []byte(`{"id":"1f2e3d4c5b6a7988","incarnation":"8877665544332211","addresses":{"tcp":"` +
	strings.Repeat("A", 40) + `","ucx":"` + strings.Repeat("B", 480) + `"}}`)

func runScale(b *testing.B, srv *etcdtest.Server, n int) scaleResult {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cluster := fmt.Sprintf("scale%d", time.Now().UnixNano())
	newMember := func() *etcd.Etcd {
		e, err := etcd.New(etcd.Config{Endpoints: []string{srv.Endpoint()}, Cluster: cluster, Logger: quiet})
		require.NoError(b, err)
		return e
	}
	record := func(name string, id int) discovery.Record {
		return discovery.Record{Name: name, ID: uint64(id), Incarnation: 1, Info: peerInfoSized, Started: time.Now()}
	}
	ws := &watchState{change: make(chan struct{}, 1)}
	members := make([]*lightMember, n)
	var wg sync.WaitGroup
	for i := range members {
		m := &lightMember{e: newMember()}
		members[i] = m
		events, err := m.e.Watch(ctx)
		require.NoError(b, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ev := range events {
				switch ev.Kind {
				case discovery.Joined:
					m.known.Add(1)
				case discovery.Left:
					m.known.Add(-1)
				}
				ws.saw(ev.Kind, ev.Record.Name)
			}
		}()
	}
	defer func() {
		cancel()
		for _, m := range members {
			m.e.Close()
		}
		wg.Wait()
	}()
	heapBefore := heapInUse()
	etcdBefore := procstat.RSS(srv.Pid())

	// Every member joins; each watcher must see the n-1 others.
	start := time.Now()
	sem := make(chan struct{}, 64)
	errs := make(chan error, n)
	for i, m := range members {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			errs <- m.e.Publish(ctx, record(fmt.Sprintf("m%d", i), i+1))
		}()
	}
	for range n {
		require.NoError(b, <-errs)
	}
	ws.until(b, fmt.Sprintf("%d members seen by all", n), func() bool {
		for _, m := range members {
			if m.known.Load() != int64(n-1) { // a member is not told of itself
				return false
			}
		}
		return true
	})
	var r scaleResult
	r.converge = time.Since(start)
	r.recordBytes = len(recordJSON(record("m0", 1)))
	r.heapPerRecord = float64(heapInUse()-heapBefore) / float64(n) / float64(n)
	r.etcdPerRecord = float64(procstat.RSS(srv.Pid())-etcdBefore) / float64(n)

	// The idle cost: keep-alives only.
	time.Sleep(time.Second)
	idleWindow := 3 * time.Second
	cpu0, etcd0 := selfCPU(), int64(procstat.CPU(srv.Pid()))
	time.Sleep(idleWindow)
	idleRate := float64(selfCPU()-cpu0) / idleWindow.Seconds()
	etcdIdleRate := float64(int64(procstat.CPU(srv.Pid()))-etcd0) / idleWindow.Seconds()
	r.idlePerMember = time.Duration(idleRate / float64(n))

	// Ten probes join and leave; every watcher sees each.
	const probes = 10
	var joins, leaves []time.Duration
	began := time.Now()
	cpu0, etcd0 = selfCPU(), int64(procstat.CPU(srv.Pid()))
	for k := range probes {
		name := fmt.Sprintf("probe%d", k)
		ws.mu.Lock()
		ws.probe, ws.joined, ws.left = name, 0, 0
		ws.mu.Unlock()
		p := newMember()
		require.NoError(b, p.Publish(ctx, record(name, n+k+1)))
		joins = append(joins, ws.until(b, name+" seen by all", func() bool { return ws.joined == n }))
		require.NoError(b, p.Close()) // withdraws: the lease is revoked
		leaves = append(leaves, ws.until(b, name+" seen leaving by all", func() bool { return ws.left == n }))
	}
	window := time.Since(began)
	cpu := float64(selfCPU()-cpu0) - idleRate*window.Seconds()
	etcdCPU := float64(int64(procstat.CPU(srv.Pid()))-etcd0) - etcdIdleRate*window.Seconds()
	r.cpuPerChange = time.Duration(max(cpu, 0) / float64(2*probes) / float64(n))
	r.etcdPerChange = time.Duration(max(etcdCPU, 0) / float64(2*probes))
	slices.Sort(joins)
	slices.Sort(leaves)
	r.joinAll, r.leaveAll = joins[len(joins)/2], leaves[len(leaves)/2]
	return r
}

// recordJSON is the record as the etcd backend stores it.
func recordJSON(r discovery.Record) []byte {
	b, _ := json.Marshal(r)
	return b
}

func heapInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse)
}

// selfCPU is this process's user and system CPU so far, in nanoseconds.
func selfCPU() int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
