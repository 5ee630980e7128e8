package main

// The push soak (make soak-push, test/pushfaults/soak_test.go): a writer that puts rounds of small
// notified puts, each carrying in its notification the SHA-256 of its bytes, and a receiver grant
// whose handler hashes the notified range the moment the notification arrives and counts every
// range whose bytes are not yet the writer's. Also the CPU load beside the writer: a process of
// busy threads pinned to the writer's CPU.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/velo-go/velo/test/internal/linecmd"
	"github.com/velo-go/velo/velo"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/push"
)

// pinTo binds every thread of this process to cpu. Threads started later are made by one of these
// and inherit the binding; the second pass catches one being made during the first.
func pinTo(cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	for range 2 {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return err
		}
		for _, e := range tasks {
			tid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("sched_setaffinity(%d, cpu %d): %w", tid, cpu, err)
			}
		}
	}
	return nil
}

// spinSink keeps the compiler from dropping the busy loops.
var spinSink atomic.Uint64

// burn runs threads busy loops on as many OS threads until standard input closes: the load beside
// a writer pinned to the same CPU, which the kernel shares between the writer's threads and these.
func burn(threads int) {
	runtime.GOMAXPROCS(threads)
	for i := range threads {
		go func() {
			x := uint64(i) + 1
			for {
				for range 1 << 20 {
					x ^= x << 13
					x ^= x >> 7
					x ^= x << 17
				}
				spinSink.Add(x & 1)
			}
		}()
	}
	fmt.Printf("{\"ready\":true,\"burning\":%d}\n", threads)
	_, _ = io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// checker is a soak grant's account of the notifications it got.
type checker struct {
	mu         sync.Mutex
	notes      uint64 // soak notifications checked
	mismatches uint64 // ranges whose bytes were not the writer's when their notification came
	settled    uint64 // of those, ranges that held the writer's bytes 5 ms later
	wrongRange uint64 // a notification naming another range than its payload
	// repeated: a sequence number seen before (a notification delivered twice). Order is not
	// checked inside a round: the entries of one PutBatch complete, and are notified, in the
	// order their writes finish, which on the chunked path is not their order in the batch;
	// rounds are ordered by construction (one starts once the last's notifications came).
	repeated     uint64
	badPayload   uint64
	canaryCaught uint64 // canaries (a notification with a wrong SHA-256) seen as mismatches
	canaryMissed uint64
	seen         map[int64]bool
	examples     []string
}

const maxExamples = 10

// check is a soak grant's OnNotify: the range's SHA-256 first, then the payload's claims.
// A payload is "soak|canary <seq> <fill seed> <offset> <length> <sha256 hex>".
func (c *checker) check(region *velo.Region, nt velo.Notification) {
	var mem []byte
	var sum [32]byte
	if len(nt.Ranges) == 1 {
		r := nt.Ranges[0]
		mem = region.Bytes()[r.Offset:r.End()]
		sum = sha256.Sum256(mem)
	}
	f := strings.Fields(string(nt.Payload))
	c.mu.Lock()
	defer c.mu.Unlock()
	example := func(format string, args ...any) {
		if len(c.examples) < maxExamples {
			c.examples = append(c.examples, fmt.Sprintf(format, args...))
		}
	}
	var seq int64
	var seed, off, length uint64
	var err error
	if len(f) == 6 {
		seq, err = strconv.ParseInt(f[1], 10, 64)
		for i, p := range []*uint64{&seed, &off, &length} {
			if err == nil {
				*p, err = strconv.ParseUint(f[2+i], 10, 64)
			}
		}
	}
	if len(f) != 6 || err != nil || (f[0] != "soak" && f[0] != "canary") || len(nt.Ranges) != 1 {
		c.badPayload++
		example("a notification with %d ranges and payload %q", len(nt.Ranges), nt.Payload)
		return
	}
	if c.seen == nil {
		c.seen = map[int64]bool{}
	}
	if c.seen[seq] {
		c.repeated++
		example("notification %d delivered again", seq)
	}
	c.seen[seq] = true
	if r := nt.Ranges[0]; r.Offset != off || r.Length != length {
		c.wrongRange++
		example("notification %d names [%d, +%d), its put wrote [%d, +%d)", seq, r.Offset, r.Length, off, length)
	}
	got := hex.EncodeToString(sum[:])
	if f[0] == "canary" {
		if got != f[5] {
			c.canaryCaught++
		} else {
			c.canaryMissed++
		}
		return
	}
	c.notes++
	if got == f[5] {
		return
	}
	c.mismatches++
	// Where the bytes differ from the put's, and whether they turn into the put's bytes a little
	// later (the notification came before its data) or never do. The next round does not start
	// before this handler returns, so nothing else writes the range meanwhile.
	seen := append([]byte(nil), mem...)
	want := make([]byte, len(mem))
	Fill(want, 0, seed)
	first, differ := -1, 0
	for i := range seen {
		if seen[i] != want[i] {
			if first < 0 {
				first = i
			}
			differ++
		}
	}
	time.Sleep(5 * time.Millisecond)
	later := sha256.Sum256(mem)
	settled := hex.EncodeToString(later[:]) == f[5]
	if settled {
		c.settled++
	}
	example("put %d [%d, +%d): %d bytes differ, the first at %d; 5 ms later the range held the put's bytes: %v",
		seq, off, length, differ, first, settled)
}

func (c *checker) report() map[string]any {
	c.mu.Lock()
	defer c.mu.Unlock()
	return map[string]any{"notes": c.notes, "mismatches": c.mismatches, "settled": c.settled, "wrong_range": c.wrongRange,
		"repeated": c.repeated, "bad_payload": c.badPayload, "canary_caught": c.canaryCaught,
		"canary_missed": c.canaryMissed, "examples": append([]string{}, c.examples...)}
}

// soakArgs are the soak command's: a grant handle, the granted span [off, off+span), how many
// notified puts to make, the batch window, a seed, and the smallest and largest put.
type soakArgs struct {
	h                  velo.GrantHandle
	off, span, total   uint64
	window             int
	seed, minSz, maxSz uint64
}

// soak puts rounds of notified puts until a.total are done or an entry fails. Each round lays puts
// of random sizes in [minSz, maxSz] end to end from a random start, so the boundaries move from
// round to round, each put the fill of a seed of its own and its notification carrying that fill's
// SHA-256; PutBatch writes the round, a.window in flight, and returns once every notification of
// the round was handled, so no round writes a range the receiver may still be checking. Then one
// canary: a put whose notification claims a wrong SHA-256, which the receiver must count.
func (n *node) soak(a soakArgs) map[string]any {
	ctx, cancel := context.WithTimeout(context.Background(), 24*time.Hour)
	defer cancel()
	rng := rand.New(rand.NewPCG(a.seed, 0x70757368))
	backing := make([]byte, a.span)
	var done, rounds, bytes uint64
	var seq int64
	var failures []string
	start := time.Now()
	var inBatch time.Duration
	inlineBefore := n.inlineWrites()
	for done < a.total && len(failures) == 0 {
		rounds++
		var reqs []velo.PutRequest
		pos := rng.Uint64N(a.minSz)
		for done+uint64(len(reqs)) < a.total {
			size := a.minSz + rng.Uint64N(a.maxSz-a.minSz+1)
			if pos+size > a.span {
				break
			}
			seq++
			seed := word(a.seed^0x736f616b, uint64(seq))
			src := backing[pos : pos+size]
			Fill(src, 0, seed)
			off := a.off + pos
			payload := fmt.Sprintf("soak %d %d %d %d %s", seq, seed, off, size, sum(src))
			reqs = append(reqs, velo.PutRequest{Offset: off, Src: src, Notify: true, Payload: []byte(payload)})
			pos += size
		}
		t0 := time.Now()
		errs, _ := n.v.PutBatch(ctx, a.h, reqs, &velo.PutBatchOptions{Window: a.window})
		inBatch += time.Since(t0)
		for i, e := range errs {
			if e != nil {
				if len(failures) < maxExamples {
					failures = append(failures, fmt.Sprintf("round %d entry %d: %v", rounds, i, e))
				}
				continue
			}
			done++
			bytes += uint64(len(reqs[i].Src))
		}
	}
	elapsed := time.Since(start)
	canary := ""
	if len(failures) == 0 {
		src := backing[:a.minSz]
		seq++
		Fill(src, 0, 7)
		payload := fmt.Sprintf("canary %d %d %d %d %s", seq, 7, a.off, a.minSz, sum(src[1:]))
		canary = linecmd.ErrString(n.v.Put(ctx, a.h, a.off, src, &velo.PutOptions{Notify: true, Payload: []byte(payload)}))
	}
	return map[string]any{"puts": done, "rounds": rounds, "bytes": bytes, "seconds": elapsed.Seconds(),
		"batch_seconds": inBatch.Seconds(), "failures": failures, "canary_error": canary,
		"inline": n.inlineWrites() - inlineBefore}
}

// inlineWrites is how many puts this writer sent inside their notifications so far.
func (n *node) inlineWrites() float64 {
	x, _ := metrics.Value(n.v.Metrics(), push.InlineWritesTotal, map[string]string{"side": "writer"})
	return x
}

// soakCommand runs checkgrant, checks and soak.
func (n *node) soakCommand(ctx context.Context, cmd string, args []string) {
	var err error
	num := func(i int) uint64 {
		if err != nil {
			return 0
		}
		var x uint64
		x, err = strconv.ParseUint(argOr(args, i), 0, 64)
		return x
	}
	switch cmd {
	case "checkgrant":
		if n.region == nil {
			n.Fail(errors.New("checkgrant: no region"))
			return
		}
		c := &checker{}
		region := n.region
		n.grantWrite(ctx, args, region, func(nt velo.Notification) { c.check(region, nt) }, func(wg *velo.WriteGrant) {
			n.grants[wg.ID()] = &grant{g: wg}
			n.checkers[wg.ID()] = c
		})
	case "checks":
		id := num(0)
		n.mu.Lock()
		c := n.checkers[id]
		n.mu.Unlock()
		if err == nil && c == nil {
			err = fmt.Errorf("checks: no soak grant %d", id)
		}
		if err != nil {
			n.Fail(err)
			return
		}
		n.Reply(c.report())
	case "soak":
		var a soakArgs
		err = a.h.UnmarshalText([]byte(argOr(args, 0)))
		a.off, a.span, a.total = num(1), num(2), num(3)
		a.window = int(num(4))
		a.seed, a.minSz, a.maxSz = num(5), num(6), num(7)
		if err == nil && (a.minSz == 0 || a.maxSz < a.minSz || a.span < 2*a.maxSz) {
			err = fmt.Errorf("soak: sizes [%d, %d] do not fit twice in a span of %d", a.minSz, a.maxSz, a.span)
		}
		if err != nil {
			n.Fail(err)
			return
		}
		n.Reply(n.soak(a))
	}
}
