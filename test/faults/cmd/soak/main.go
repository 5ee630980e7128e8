// Command soak runs several owners and consumers (faultnode processes over the real UCX
// transport) for a while, moving payloads from every owner to every consumer, and breaks them at
// random: consumers stopped for up to twice the force-close bound and resumed, consumers and
// owners killed and restarted, owners stopped for a moment. At the end it checks what must hold
// whatever happened: no payload reported delivered with other bytes, no get failed without a
// fault near it, and every owner back to holding nothing (no lease, no registration, no
// quarantined key, no staged slot, nothing pinned after Close). It prints the counts and exits 1
// if any of that does not hold.
//
//	go run ./faults/cmd/soak -duration 10m     (make soak; SOAK=30m make soak)
package main

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo/test/faults/internal/proc"
)

func main() {
	cfg := config{}
	flag.DurationVar(&cfg.duration, "duration", 10*time.Minute, "how long to run")
	flag.IntVar(&cfg.owners, "owners", 2, "owner processes")
	flag.IntVar(&cfg.consumers, "consumers", 3, "consumer processes")
	flag.DurationVar(&cfg.faultEvery, "fault-every", 4*time.Second, "mean time between injected faults")
	flag.Uint64Var(&cfg.seed, "seed", 0, "random seed (0: from the clock)")
	flag.Parse()
	if cfg.seed == 0 {
		cfg.seed = uint64(time.Now().UnixNano())
	}
	rep, err := run(cfg)
	rep.print(os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak: FAIL:", err)
		os.Exit(1)
	}
	fmt.Println("soak: PASS")
}

type config struct {
	duration          time.Duration
	owners, consumers int
	faultEvery        time.Duration
	seed              uint64
}

// The owners' settings: a short TTL and force bound, so stalls cross both within a soak.
const (
	leaseTTL   = 2 * time.Second
	forceAfter = 6 * time.Second
)

// member is one place in the cluster; its process is replaced on restart.
type member struct {
	name string
	role string

	mu   sync.RWMutex // held for reading by an operation, for writing by a restart
	node *proc.Node
	gen  int

	faults  atomic.Int64 // faults injected on this member, counted at their start and end
	faulted atomic.Int32 // a fault is in progress
	large   atomic.Int32 // large gets in flight on this consumer (the stalls aim at them)
}

func (m *member) flags() []string {
	if m.role == "owner" {
		return []string{"-lease-ttl", leaseTTL.String(), "-force-close-after", forceAfter.String(), "-budget", fmt.Sprint(int64(4 << 30))}
	}
	return nil
}

type cluster struct {
	bin       string
	owners    []*member
	consumers []*member
	rep       *report
}

func (c *cluster) start(m *member) error {
	m.gen++
	c.rep.tally(m)
	n, err := proc.Start(fmt.Sprintf("%s#%d", m.name, m.gen), exec.Command(c.bin, append([]string{"-log", "info"}, m.flags()...)...))
	if err != nil {
		return err
	}
	m.node = n
	return nil
}

// pairWith registers m with every member of others (whose locks the caller does not hold).
func (c *cluster) pairWith(m *member, others []*member) error {
	for _, o := range others {
		o.mu.RLock()
		err := proc.Pair(m.node, o.node)
		o.mu.RUnlock()
		if err != nil && o.node.Alive() {
			return err
		}
	}
	return nil
}

type report struct {
	mu         sync.Mutex
	seed       uint64
	ran        time.Duration
	paths      map[string]int
	bytes      int64
	failed     int
	unexplain  []string
	lost       []string
	faults     map[string]int
	endOwners  []string
	endPinned  int64
	endStaged  int
	endQuarant int
	forced     int // force-closes of stalled consumers the owners logged
	quarantine int // keys the owners quarantined (a read in flight when the lease ended)
}

// tally counts what an owner's log says it did, before the process is replaced or closed.
func (r *report) tally(m *member) {
	if m.role != "owner" || m.node == nil {
		return
	}
	log := m.node.Stderr.String()
	r.mu.Lock()
	r.forced += strings.Count(log, "closing its endpoints with force")
	r.quarantine += strings.Count(log, "msg=\"rdma: a revoked key's read is still in flight")
	r.mu.Unlock()
}

func (r *report) add(path string, n int) {
	r.mu.Lock()
	r.paths[path]++
	r.bytes += int64(n)
	r.mu.Unlock()
}

func (r *report) fault(kind string) {
	r.mu.Lock()
	r.faults[kind]++
	r.mu.Unlock()
}

func (r *report) print(w *os.File) {
	r.mu.Lock()
	defer r.mu.Unlock()
	total := 0
	var paths []string
	for p, n := range r.paths {
		paths = append(paths, fmt.Sprintf("%s %d", p, n))
		total += n
	}
	sort.Strings(paths)
	var faults []string
	nf := 0
	for k, n := range r.faults {
		faults = append(faults, fmt.Sprintf("%s %d", k, n))
		nf += n
	}
	sort.Strings(faults)
	fmt.Fprintf(w, "soak: ran %v (seed %d)\n", r.ran.Round(time.Second), r.seed)
	fmt.Fprintf(w, "  transfers delivered  %d (%s), %.1f GiB\n", total, strings.Join(paths, ", "), float64(r.bytes)/(1<<30))
	fmt.Fprintf(w, "  gets failed          %d (each within a fault window), %d without a fault near them\n", r.failed, len(r.unexplain))
	fmt.Fprintf(w, "  faults injected      %d (%s)\n", nf, strings.Join(faults, ", "))
	fmt.Fprintf(w, "  keys quarantined     %d, consumers force-closed %d\n", r.quarantine, r.forced)
	fmt.Fprintf(w, "  pinned at the end    %d bytes after Close (start 0)\n", r.endPinned)
	fmt.Fprintf(w, "  staged slots at end  %d; quarantined keys %d\n", r.endStaged, r.endQuarant)
	fmt.Fprintf(w, "  loss                 %d\n", len(r.lost))
	for _, s := range r.endOwners {
		fmt.Fprintf(w, "  %s\n", s)
	}
	for _, s := range append(r.lost, r.unexplain...) {
		fmt.Fprintf(w, "  ! %s\n", s)
	}
}

func run(cfg config) (*report, error) {
	rep := &report{seed: cfg.seed, paths: map[string]int{}, faults: map[string]int{}}
	bin, err := proc.Build()
	if err != nil {
		return rep, err
	}
	defer os.RemoveAll(filepath.Dir(bin))
	c := &cluster{bin: bin, rep: rep}
	for i := range cfg.owners {
		c.owners = append(c.owners, &member{name: fmt.Sprintf("owner%d", i), role: "owner"})
	}
	for i := range cfg.consumers {
		c.consumers = append(c.consumers, &member{name: fmt.Sprintf("consumer%d", i), role: "consumer"})
	}
	all := append(append([]*member(nil), c.owners...), c.consumers...)
	for _, m := range all {
		if err := c.start(m); err != nil {
			return rep, err
		}
	}
	defer func() {
		for _, m := range all {
			m.node.Close(10 * time.Second)
		}
	}()
	for _, o := range c.owners {
		if err := c.pairWith(o, c.consumers); err != nil {
			return rep, err
		}
	}

	began := time.Now()
	deadline := began.Add(cfg.duration)
	var wg sync.WaitGroup
	var fatal atomic.Pointer[error]
	for i, cons := range c.consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(cfg.seed, uint64(i)))
			for time.Now().Before(deadline) && fatal.Load() == nil {
				c.transfer(r, c.owners[r.IntN(len(c.owners))], cons)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		r := rand.New(rand.NewPCG(cfg.seed, 1<<32))
		for time.Now().Before(deadline) && fatal.Load() == nil {
			time.Sleep(time.Duration(r.Int64N(int64(2 * cfg.faultEvery))))
			if !time.Now().Before(deadline) {
				return
			}
			if err := c.inject(r); err != nil {
				fatal.Store(&err)
				return
			}
		}
	}()
	wg.Wait()
	rep.ran = time.Since(began)
	if p := fatal.Load(); p != nil {
		return rep, *p
	}
	return rep, c.finish()
}

// transfer stages one payload on owner and fetches it on cons.
func (c *cluster) transfer(r *rand.Rand, owner, cons *member) {
	owner.mu.RLock()
	defer owner.mu.RUnlock()
	cons.mu.RLock()
	defer cons.mu.RUnlock()
	before := owner.faults.Load() + cons.faults.Load()
	inFault := func() bool {
		return owner.faulted.Load() != 0 || cons.faulted.Load() != 0 || owner.faults.Load()+cons.faults.Load() != before
	}
	size := 4<<10 + r.IntN(4<<20)
	if r.IntN(8) == 0 {
		size = 32<<20 + r.IntN(96<<20) // some large enough to be mid-GET when a fault strikes
	}
	if size >= 32<<20 {
		cons.large.Add(1)
		defer cons.large.Add(-1)
	}
	p, err := owner.node.Stage(size, r.Uint64()>>1, r.IntN(6) != 0)
	if err != nil {
		c.failure(inFault(), fmt.Sprintf("stage %d bytes on %s: %v", size, owner.node.Name, err))
		return
	}
	ans, err := cons.node.Do("get "+p.Handle, 5*time.Minute)
	if err == nil {
		if e, _ := ans["error"].(string); e != "" {
			err = errors.New(e)
		}
	}
	if err != nil {
		// The reference the get did not spend is dropped on the owner, or it stays staged.
		_, _ = owner.node.Do("release "+p.Handle, time.Minute)
		c.failure(inFault(), fmt.Sprintf("get %d bytes from %s on %s: %v", size, owner.node.Name, cons.node.Name, err))
		return
	}
	if ans["sha256"] != p.SHA256 {
		c.rep.mu.Lock()
		c.rep.lost = append(c.rep.lost, fmt.Sprintf("%s → %s: %d bytes delivered with other bytes (%v)", owner.node.Name, cons.node.Name, size, ans["path"]))
		c.rep.mu.Unlock()
		return
	}
	path, _ := ans["path"].(string)
	c.rep.add(path, size)
}

func (c *cluster) failure(explained bool, what string) {
	c.rep.mu.Lock()
	defer c.rep.mu.Unlock()
	if explained {
		c.rep.failed++
		return
	}
	c.rep.unexplain = append(c.rep.unexplain, what)
}

// inject breaks one member.
func (c *cluster) inject(r *rand.Rand) error {
	cons := c.consumers[r.IntN(len(c.consumers))]
	owner := c.owners[r.IntN(len(c.owners))]
	switch k := r.IntN(10); {
	case k < 4: // a consumer stalls, sometimes past the force bound, mid-GET when it can
		for wait := 0; wait < 40; wait++ {
			if busy := c.busyConsumer(); busy != nil {
				cons = busy
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		c.rep.fault("consumer_stalled")
		d := time.Duration(500+r.IntN(int(2*forceAfter/time.Millisecond))) * time.Millisecond
		c.during(cons, func() {
			cons.node.Stop()
			time.Sleep(d)
			cons.node.Resume()
		})
	case k < 6: // a consumer is killed and restarted
		c.rep.fault("consumer_killed")
		return c.restart(cons, c.owners)
	case k < 8: // an owner stalls briefly
		c.rep.fault("owner_stalled")
		c.during(owner, func() {
			owner.node.Stop()
			time.Sleep(time.Duration(100+r.IntN(1500)) * time.Millisecond)
			owner.node.Resume()
		})
	default: // an owner is killed and restarted
		c.rep.fault("owner_killed")
		return c.restart(owner, c.consumers)
	}
	return nil
}

// busyConsumer returns a consumer with a large get in flight, or nil.
func (c *cluster) busyConsumer() *member {
	for _, m := range c.consumers {
		if m.large.Load() > 0 {
			return m
		}
	}
	return nil
}

// during runs f with m marked as faulted; the mark outlives f by a lease TTL, the time its
// consequences (a reaped lease, a failed GET) take to show.
func (c *cluster) during(m *member, f func()) {
	m.faulted.Add(1)
	m.faults.Add(1)
	f()
	go func() {
		time.Sleep(leaseTTL + time.Second)
		m.faults.Add(1)
		m.faulted.Add(-1)
	}()
}

// restart kills m's process and starts a new one in its place, paired with peers.
func (c *cluster) restart(m *member, peers []*member) error {
	var err error
	c.during(m, func() {
		m.node.Kill()
		m.mu.Lock()
		defer m.mu.Unlock()
		if err = c.start(m); err == nil {
			err = c.pairWith(m, peers)
		}
	})
	return err
}

// finish checks that every owner is back to holding nothing, then closes every member.
func (c *cluster) finish() error {
	var errs []error
	time.Sleep(leaseTTL + time.Second) // let the last faults' leases end
	for _, o := range c.owners {
		st, err := o.node.WaitStats(forceAfter+30*time.Second, func(s proc.Stats) bool {
			return s.Quarantined == 0 && s.HeldSlots == 0 && s.LeaseRegistrations == 0 && s.OpenLeases == 0 && s.StagedSlots == 0 && s.PinnedBytes == s.ArenaBytes
		})
		c.rep.endStaged += st.StagedSlots
		c.rep.endQuarant += st.Quarantined
		c.rep.endOwners = append(c.rep.endOwners, fmt.Sprintf("%s at the end: %+v", o.node.Name, st))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s did not return to holding nothing: %w", o.node.Name, err))
		}
		final, err := o.node.Quit(30 * time.Second)
		if err != nil {
			errs = append(errs, err)
		}
		c.rep.tally(o)
		c.rep.endPinned += final.PinnedBytes
	}
	for _, m := range c.consumers {
		if _, err := m.node.Quit(30 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	if n := len(c.rep.lost); n > 0 {
		errs = append(errs, fmt.Errorf("%d payloads delivered with other bytes", n))
	}
	if n := len(c.rep.unexplain); n > 0 {
		errs = append(errs, fmt.Errorf("%d gets failed with no fault near them", n))
	}
	if c.rep.endPinned != 0 {
		errs = append(errs, fmt.Errorf("%d bytes still pinned after Close", c.rep.endPinned))
	}
	return errors.Join(errs...)
}
