package faults

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/test/faults/internal/proc"
	"github.com/velo-go/velo/test/internal/procstat"
)

// BenchmarkInstanceScale: N velo instances, each its own faultnode process with a small arena,
// find each other through the filesystem backend and fetch one another's payloads in two
// phases: for VELO_SCALE_PHASE (default 10 s) each fetches from three random others at once,
// again and again; then a rolling all-to-all, three owners at a time, until every member has
// fetched from every other once; both at about 200 fetches a second for the whole cluster. After a quiet settle it reads each process from outside (its
// descriptors, VmRSS and CPU over VELO_SCALE_QUIET, default 15 s, with no traffic) and from its
// own metrics (UCX endpoints, TCP control-plane connections, evictions, its guard's holder
// refusals) and runtime (the Go
// heap and stacks, to tell Go's share of the resident set from UCX's), then times one more
// member's join and leave until every member's WatchPeers has reported it. The same figures but
// CPU are read once before any traffic, when each member knows every other and talked to none. It prints, per N, the
// median and the largest instance, and the slope per peer between consecutive N, once for each
// endpoint budget: N = 16, 64, 128 (VELO_SCALE_INSTANCES) with budgets of 256 (the default)
// and 8 (VELO_SCALE_BUDGETS); VELO_SCALE_MAX_CONNS, when set, is every member's budget of
// control-plane connections (faultnode -max-conns). It asserts nothing about speed; a transfer that fails, takes
// another path than RDMA or delivers other bytes fails it.
func BenchmarkInstanceScale(b *testing.B) {
	sizes, err := procstat.Sizes("VELO_SCALE_INSTANCES", []int{16, 64, 128})
	require.NoError(b, err)
	budgets, err := procstat.Sizes("VELO_SCALE_BUDGETS", []int{256, 8})
	require.NoError(b, err)
	phase := envDuration(b, "VELO_SCALE_PHASE", 10*time.Second)
	quiet := envDuration(b, "VELO_SCALE_QUIET", 15*time.Second)
	bin := faultnode(b)
	for _, budget := range budgets {
		var rows []scaleRow
		for _, n := range sizes {
			// The machine's load before the members start: other work on it inflates the CPU
			// figures.
			load, _ := os.ReadFile("/proc/loadavg")
			fmt.Printf("instances n=%d budget %d: load average before the start %s\n", n, budget, strings.Join(strings.Fields(string(load))[:3], " "))
			b.Run(fmt.Sprintf("budget=%d/n=%d", budget, n), func(b *testing.B) {
				for range b.N {
					r := runInstanceScale(b, bin, n, budget, phase, quiet)
					r.print()
					rows = append(rows, r)
				}
			})
		}
		printSlopes(budget, rows)
	}
}

func envDuration(b *testing.B, name string, def time.Duration) time.Duration {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	require.NoError(b, err, "%s=%q: want a duration such as 10s", name, s)
	return d
}

// scaleMember is one instance of the cluster and the payload it staged.
type scaleMember struct {
	*proc.Node
	id      string
	payload proc.Staged
}

// scaleRow is what one run measured. The per-instance slices hold one value per member.
type scaleRow struct {
	n, budget         int
	fetches           int
	fds, endpoints    []float64
	conns, evicted    []float64
	refused           []float64 // the guard's holder refusals (see where they are read)
	rssKiB, cpuMsPerS []float64
	goKiB             []float64 // the Go heap and stacks in use, within rssKiB
	// The same before any traffic: every peer known (registered through discovery) and none
	// talked to.
	knownFds, knownRSSKiB, knownGoKiB []float64
	allSeen                           time.Duration // from the last start until every member saw every other
	join, leave                       time.Duration // one more member seen up, then down, by every member
	joinMedian                        time.Duration
	leaveMedian                       time.Duration
}

const (
	scaleArena   = 2 << 20  // each member's pinned arena
	scalePayload = 64 << 10 // each member stages one payload of this size, fetched by all
	scaleFanout  = 3        // owners a member fetches from at once
	// scaleRate is the fetches a second the whole cluster makes. Two cores serve every member
	// here, so a rate that grew with N would measure the machine's overload rather than what a
	// peer costs; spread over N members it stands for a larger cluster's quieter pace.
	scaleRate = 200
	// scaleTTL is the members' discovery TTL: long enough that a member the scheduler starves
	// for a few seconds during the traffic is not taken to have left.
	scaleTTL = "60s"
)

// scaleConnFlags passes VELO_SCALE_MAX_CONNS on to a member.
func scaleConnFlags() []string {
	if v := os.Getenv("VELO_SCALE_MAX_CONNS"); v != "" {
		return []string{"-max-conns", v}
	}
	return nil
}

func runInstanceScale(b *testing.B, bin string, n, budget int, phase, quiet time.Duration) scaleRow {
	dir := filepath.Join(b.TempDir(), "cluster")
	start := func(i int) (*scaleMember, error) {
		name := fmt.Sprintf("m%d", i)
		// The backend's default poll (1 s): the faultnode's 100 ms, meant for quick tests, would
		// have every member read every other's file ten times a second.
		cmd := exec.Command(bin, append([]string{"-discovery", dir, "-name", name, "-discovery-poll", "1s", "-discovery-ttl", scaleTTL,
			"-arena", fmt.Sprint(scaleArena), "-max-endpoints", fmt.Sprint(budget), "-log", "warn"}, scaleConnFlags()...)...)
		nd, err := proc.Start(name, cmd)
		if err != nil {
			return nil, err
		}
		b.Cleanup(func() { nd.Close(20 * time.Second) })
		r, err := nd.OK("info", time.Minute)
		if err != nil {
			return nil, err
		}
		m := &scaleMember{Node: nd, id: fmt.Sprint(r["id"])}
		m.payload, err = nd.Stage(scalePayload, rand.Uint64()>>1, true)
		return m, err
	}
	members := make([]*scaleMember, n)
	require.NoError(b, eachMember(n, 8, func(i int) (err error) {
		members[i], err = start(i)
		return err
	}), "starting %d members", n)
	started := time.Now()
	// Every member sees every other up: the membership has converged.
	require.NoError(b, eachMember(n, 16, func(i int) error {
		deadline := time.Now().Add(5 * time.Minute)
		for {
			up, err := upPeers(members[i].Node)
			if err != nil {
				return err
			}
			if up == n-1 {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("m%d sees %d of %d peers up after 5 minutes", i, up, n-1)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}))
	row := scaleRow{n: n, budget: budget, allSeen: time.Since(started)}
	time.Sleep(2 * time.Second)
	for _, m := range members {
		goKiB, err := goInUse(m.Node)
		require.NoError(b, err)
		row.knownFds = append(row.knownFds, float64(procstat.FDs(m.Cmd.Process.Pid)))
		row.knownRSSKiB = append(row.knownRSSKiB, float64(procstat.RSS(m.Cmd.Process.Pid))/1024)
		row.knownGoKiB = append(row.knownGoKiB, goKiB)
	}

	// Phase 1: each member fetches from three random others at a time until the phase ends,
	// pausing between rounds so that the cluster makes about scaleRate fetches a second.
	pause := time.Duration(float64(n*scaleFanout) / scaleRate * float64(time.Second))
	var mu sync.Mutex
	end := time.Now().Add(phase)
	require.NoError(b, eachMember(n, n, func(i int) error {
		for time.Now().Before(end) {
			others := rand.Perm(n - 1)[:min(scaleFanout, n-1)]
			for k, o := range others {
				if o >= i {
					others[k] = o + 1 // skip the member itself
				}
			}
			if err := fetchAll(members, i, others); err != nil {
				return err
			}
			mu.Lock()
			row.fetches += len(others)
			mu.Unlock()
			time.Sleep(pause/2 + rand.N(pause))
		}
		return nil
	}), "phase 1")
	// Phase 2: a rolling all-to-all. In round r member i fetches from members i+r .. i+r+2, so
	// every member fetches from every other once and no owner serves more than three at a time.
	for r := 1; r < n; r += scaleFanout {
		round := time.Now()
		require.NoError(b, eachMember(n, n, func(i int) error {
			var owners []int
			for d := r; d < min(r+scaleFanout, n); d++ {
				owners = append(owners, (i+d)%n)
			}
			return fetchAll(members, i, owners)
		}), "all-to-all round %d", r)
		row.fetches += n * min(scaleFanout, n-r)
		time.Sleep(pause - time.Since(round)) // the same pace: a round is N*3 fetches
	}

	// Settle: the endpoints over the budget are retired on the transport's maintenance ticks
	// once idle; the figures below are those of a member at rest.
	settle := time.Now().Add(30 * time.Second)
	for time.Now().Before(settle) {
		over := false
		for _, m := range members {
			if v, err := seriesSum(m.Node, "velo_ucx_transport_endpoints", ""); err != nil || v > float64(budget) {
				over = true
				break
			}
		}
		if !over {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)
	cpu0 := make([]time.Duration, n)
	for i, m := range members {
		cpu0[i] = procstat.CPU(m.Cmd.Process.Pid)
	}
	time.Sleep(quiet) // nothing asks the members anything here
	for i, m := range members {
		pid := m.Cmd.Process.Pid
		row.cpuMsPerS = append(row.cpuMsPerS, float64(procstat.CPU(pid)-cpu0[i])/float64(time.Millisecond)/quiet.Seconds())
		row.fds = append(row.fds, float64(procstat.FDs(pid)))
		row.rssKiB = append(row.rssKiB, float64(procstat.RSS(pid))/1024)
	}
	for i, m := range members {
		eps, err := seriesSum(m.Node, "velo_ucx_transport_endpoints", "")
		require.NoError(b, err)
		conns, err := seriesSum(m.Node, "velo_tcp_connections", "")
		require.NoError(b, err)
		evicted, err := seriesSum(m.Node, "velo_ucx_transport_endpoint_events_total", "event=evicted")
		require.NoError(b, err)
		failed, err := seriesSum(m.Node, "velo_ucx_transport_endpoint_events_total", "event=failed")
		require.NoError(b, err)
		require.Zero(b, failed, "m%d: an endpoint failed", i)
		// The reads and writes the member's guard refused as "not yet connected back": a
		// consumer's operation that reached it on a slot it had not joined yet, and went again.
		refused, err := seriesSum(m.Node, "ucx_engine_rma_refused_total", "kind=holder")
		require.NoError(b, err)
		row.refused = append(row.refused, refused)
		goKiB, err := goInUse(m.Node)
		require.NoError(b, err)
		row.goKiB = append(row.goKiB, goKiB)
		row.endpoints = append(row.endpoints, eps)
		row.conns = append(row.conns, conns)
		row.evicted = append(row.evicted, evicted)
	}

	// With VELO_SCALE_HEAP_PROFILE set to a folder, the first member writes its heap profile
	// there (go tool pprof -top -sample_index=inuse_space): what the Go share of a peer is made of.
	if dir := os.Getenv("VELO_SCALE_HEAP_PROFILE"); dir != "" {
		_, err := members[0].OK(fmt.Sprintf("heap-profile %s", filepath.Join(dir, fmt.Sprintf("n%d-budget%d.pprof", n, budget))), time.Minute)
		require.NoError(b, err)
	}
	// One more member joins, then leaves; every member must see both.
	joiner, err := proc.Start(fmt.Sprintf("m%d", n), exec.Command(bin, append([]string{"-discovery", dir, "-name", fmt.Sprintf("m%d", n),
		"-discovery-poll", "1s", "-discovery-ttl", scaleTTL, "-arena", fmt.Sprint(scaleArena), "-max-endpoints", fmt.Sprint(budget), "-log", "warn"},
		scaleConnFlags()...)...))
	require.NoError(b, err)
	b.Cleanup(func() { joiner.Close(20 * time.Second) })
	require.False(b, joiner.ReadyAt.IsZero(), "the joiner's ready line has no time")
	r, err := joiner.OK("info", time.Minute)
	require.NoError(b, err)
	joinerID := fmt.Sprint(r["id"])
	row.join, row.joinMedian = awaitAll(b, members, "up", joinerID, joiner.ReadyAt)
	left := time.Now()
	_, err = joiner.Quit(time.Minute)
	require.NoError(b, err, "the joiner's Close")
	row.leave, row.leaveMedian = awaitAll(b, members, "down", joinerID, left)

	// Every member closes cleanly.
	require.NoError(b, eachMember(n, 16, func(i int) error {
		_, err := members[i].Quit(time.Minute)
		return err
	}), "closing the members")
	return row
}

// fetchAll has member i get the payloads of owners at once and checks every byte.
func fetchAll(members []*scaleMember, i int, owners []int) error {
	handles := make([]string, len(owners))
	for k, o := range owners {
		handles[k] = members[o].payload.Handle
	}
	r, err := members[i].OK("get-all "+strings.Join(handles, " "), 2*time.Minute)
	if err != nil {
		return err
	}
	results, _ := r["results"].([]any)
	if len(results) != len(owners) {
		return fmt.Errorf("m%d: get-all answered %d results for %d handles", i, len(results), len(owners))
	}
	for k, res := range results {
		m, _ := res.(map[string]any)
		if e, _ := m["error"].(string); e != "" {
			return fmt.Errorf("m%d from m%d: %s", i, owners[k], e)
		}
		if m["sha256"] != members[owners[k]].payload.SHA256 {
			return fmt.Errorf("m%d from m%d: %w", i, owners[k], proc.ErrLoss)
		}
		if e, _ := m["detach_err"].(string); e != "" {
			return fmt.Errorf("m%d from m%d: detach: %s", i, owners[k], e)
		}
	}
	// Bytes that came by chunks mean an RDMA GET failed and fell back: not a loss, but what an
	// endpoint closed under a transfer would look like. The error names each such transfer's
	// reason.
	received, _ := r["received"].(map[string]any)
	if rdma, _ := received["rdma"].(float64); int(rdma) != len(owners)*scalePayload || len(received) != 1 {
		var off []string
		for k, res := range results {
			if m, _ := res.(map[string]any); m["path"] != "rdma" {
				off = append(off, fmt.Sprintf("from m%d: %v/%v", owners[k], m["path"], m["reason"]))
			}
		}
		return fmt.Errorf("m%d: %d payloads of %d bytes arrived as %v bytes by path, want all by rdma (%s)", i, len(owners), scalePayload, received, strings.Join(off, ", "))
	}
	return nil
}

// awaitAll waits until every member's WatchPeers reported kind for peer and returns the time from
// since to the last member's event, and to the median member's.
func awaitAll(b *testing.B, members []*scaleMember, kind, peer string, since time.Time) (last, median time.Duration) {
	ats := make([]time.Duration, len(members))
	require.NoError(b, eachMember(len(members), len(members), func(i int) error {
		r, err := members[i].OK(fmt.Sprintf("await %s %s 2m", kind, peer), 3*time.Minute)
		if err != nil {
			return err
		}
		at, _ := r["at"].(float64)
		ats[i] = time.Unix(0, int64(at)).Sub(since)
		return nil
	}), "every member sees %s %s", kind, peer)
	slices.Sort(ats)
	return ats[len(ats)-1], ats[len(ats)/2]
}

// eachMember runs f for 0..n-1, at most par at once, and returns the errors joined.
func eachMember(n, par int, f func(i int) error) error {
	sem := make(chan struct{}, par)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = f(i)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// goInUse is the node's Go heap and stacks in use, in KiB.
func goInUse(n *proc.Node) (float64, error) {
	mem, err := n.OK("memstats", time.Minute)
	if err != nil {
		return 0, err
	}
	heap, _ := mem["heap_inuse"].(float64)
	stacks, _ := mem["stack_inuse"].(float64)
	return (heap + stacks) / 1024, nil
}

// upPeers is how many peers the node's Peers() lists up.
func upPeers(n *proc.Node) (int, error) {
	r, err := n.OK("peers", time.Minute)
	if err != nil {
		return 0, err
	}
	peers, _ := r["peers"].(map[string]any)
	up := 0
	for _, st := range peers {
		if st == "up" {
			up++
		}
	}
	return up, nil
}

// seriesSum adds the node's series of one metric family whose labels contain match.
func seriesSum(n *proc.Node, family, match string) (float64, error) {
	r, err := n.OK("metric "+family, time.Minute)
	if err != nil {
		return 0, err
	}
	series, _ := r["series"].(map[string]any)
	sum := 0.0
	for labels, v := range series {
		if f, ok := v.(float64); ok && strings.Contains(labels, match) {
			sum += f
		}
	}
	return sum, nil
}

func sum(v []float64) float64 {
	t := 0.0
	for _, x := range v {
		t += x
	}
	return t
}

func medianOf(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func (r scaleRow) print() {
	fmt.Printf("instances n=%-4d budget %-3d | before traffic (median): fds %4.0f RSS %6.1f MiB (Go %5.1f) | %6d fetches, all saw all %5.1f s | after, per instance (median/max): fds %4.0f/%-4.0f "+
		"RSS %6.1f/%-6.1f MiB (Go %5.1f) idle CPU %5.2f/%-5.2f ms/s UCX endpoints %3.0f/%-3.0f TCP conns %3.0f/%-3.0f evicted %4.0f/%-4.0f | "+
		"join seen by all %5.2f s (median %5.2f), leave %5.2f s (median %5.2f) | holder refusals %.0f in all\n",
		r.n, r.budget, medianOf(r.knownFds), medianOf(r.knownRSSKiB)/1024, medianOf(r.knownGoKiB)/1024, r.fetches, r.allSeen.Seconds(),
		medianOf(r.fds), slices.Max(r.fds), medianOf(r.rssKiB)/1024, slices.Max(r.rssKiB)/1024, medianOf(r.goKiB)/1024,
		medianOf(r.cpuMsPerS), slices.Max(r.cpuMsPerS), medianOf(r.endpoints), slices.Max(r.endpoints),
		medianOf(r.conns), slices.Max(r.conns), medianOf(r.evicted), slices.Max(r.evicted),
		r.join.Seconds(), r.joinMedian.Seconds(), r.leave.Seconds(), r.leaveMedian.Seconds(), sum(r.refused))
}

// printSlopes prints what one more peer costs the median instance between consecutive N.
func printSlopes(budget int, rows []scaleRow) {
	for k := 1; k < len(rows); k++ {
		a, c := rows[k-1], rows[k]
		peers := float64(c.n - a.n)
		fmt.Printf("instances budget %-3d n=%d->%d | per peer known, before traffic: fds %+.2f, RSS %+.1f KiB (Go %+.1f) | after: fds %+.2f, RSS %+.1f KiB (Go %+.1f), idle CPU %+.4f ms/s, UCX endpoints %+.2f, TCP conns %+.2f\n",
			budget, a.n, c.n, (medianOf(c.knownFds)-medianOf(a.knownFds))/peers, (medianOf(c.knownRSSKiB)-medianOf(a.knownRSSKiB))/peers,
			(medianOf(c.knownGoKiB)-medianOf(a.knownGoKiB))/peers, (medianOf(c.fds)-medianOf(a.fds))/peers, (medianOf(c.rssKiB)-medianOf(a.rssKiB))/peers, (medianOf(c.goKiB)-medianOf(a.goKiB))/peers,
			(medianOf(c.cpuMsPerS)-medianOf(a.cpuMsPerS))/peers, (medianOf(c.endpoints)-medianOf(a.endpoints))/peers,
			(medianOf(c.conns)-medianOf(a.conns))/peers)
	}
}
