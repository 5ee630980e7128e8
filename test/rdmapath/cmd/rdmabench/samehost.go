package main

// The same-host table (-only samehost, make bench-samehost): what the same-host path costs, as
// ratios against one core's memory copy and against the UCX RDMA path, measured in the same run.
//
// The owner is another process of this host (-role shmowner: WithSameHost and the UCX
// transport), which stages one pinned payload per size and a batch of pinned blocks per block
// size. The parent runs two consumers: one with WithSameHost (its gets take path shm) and one
// without (path rdma, over UCX_TLS, tcp by default). Each round copies the payload with one core
// (copy between two buffers of this process), then makes the same-host gets, then the RDMA gets,
// so machine noise falls on all three. A get is timed as in the get table (GetInto, the detach
// not timed); GetBatch entries never come inline (WithBatchInlineMax(0) on every side), so the
// batch rows measure the lanes. Both same-host instances stage with SameHostConfig.SingleCopyMin
// of 1 MiB (-single-copy-min; 0 puts every get on the ring), so the payloads of 8 and 64 MiB live in files of their own and a same-host get copies
// each once out of its file; the table prints how many gets did (the batch blocks, below 1 MiB,
// go through the ring). Since such a file costs its staging more than an arena's slot, the table
// then times StageDataPinned of each size in this process both ways: on the same-host instance (a
// file of its own) and on the other (a slot of an arena mapped by an earlier staging).
//
// The push rows are the other direction: the owner process is the receiver of a pinned region
// of twice the largest size, half of it granted to each of the parent's two instances (grants
// may not overlap), and each puts payloads of each size into it: the same-host instance through
// shared memory (path shm), the other over UCX (path rdma). A put is timed from the call until it
// returns, which is once the bytes are in the receiver's memory; no notification is asked for.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sort"
	"strconv"
	"time"

	"github.com/velo-go/velo/ucx/benchkit"
	"github.com/velo-go/velo/velo"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/push"
)

var (
	// shmSingleCopyMin is the same-host instances' SameHostConfig.SingleCopyMin (-single-copy-min).
	shmSingleCopyMin = 1 << 20

	shmSizes      = []int{8 << 20, 64 << 20}
	shmBlockSizes = []int{4 << 10, 64 << 10}
)

const shmBlocks = 256 // blocks per GetBatch

type shmOwnerInfo struct {
	Peer    velo.PeerInfo
	Payload []velo.Handle   // one per size
	Blocks  [][]velo.Handle // one batch per block size
}

// shmGrants is the owner's answer to the writers' PeerInfos: a grant handle for each.
type shmGrants struct {
	Handles []velo.GrantHandle
	Offsets []uint64 // where each grant's range begins (grants may not overlap)
	Err     string
}

func runSameHostOwner() error {
	ctx := context.Background()
	v, err := startSameHost(ctx, true)
	if err != nil {
		return err
	}
	defer v.Close()
	info := shmOwnerInfo{Peer: v.PeerInfo()}
	stage := func(n int, seed byte) (velo.Handle, error) {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i*7) + seed
		}
		return v.StageDataPinned(ctx, b)
	}
	for i, n := range shmSizes {
		h, err := stage(n, byte(i))
		if err != nil {
			return err
		}
		info.Payload = append(info.Payload, h)
	}
	for _, n := range shmBlockSizes {
		var hs []velo.Handle
		for k := 0; k < shmBlocks; k++ {
			h, err := stage(n, byte(k))
			if err != nil {
				return err
			}
			hs = append(hs, h)
		}
		info.Blocks = append(info.Blocks, hs)
	}
	if err := json.NewEncoder(os.Stdout).Encode(info); err != nil {
		return err
	}
	// The parent's writers: one PeerInfo JSON line, then a grant over the region for each.
	in := bufio.NewReader(os.Stdin)
	if line, err := in.ReadBytes('\n'); err == nil {
		var writers []velo.PeerInfo
		var ans shmGrants
		err = json.Unmarshal(line, &writers)
		size := uint64(shmSizes[len(shmSizes)-1])
		region, rerr := v.NewRegion(int(size) * len(writers))
		if err == nil {
			err = rerr
		}
		for i, w := range writers {
			if err == nil {
				err = v.RegisterPeer(ctx, w)
			}
			var g *velo.WriteGrant
			off := uint64(i) * size
			if err == nil {
				g, err = v.GrantWrite(ctx, w.ID, region, velo.GrantOptions{TTL: time.Hour, Ranges: []velo.GrantRange{{Offset: off, Length: size}}})
			}
			if err == nil {
				ans.Handles, ans.Offsets = append(ans.Handles, g.Handle()), append(ans.Offsets, off)
			}
		}
		if err != nil {
			ans.Err = err.Error()
		}
		if err := json.NewEncoder(os.Stdout).Encode(ans); err != nil {
			return err
		}
	}
	io.Copy(io.Discard, in) // serve until the parent closes stdin
	return nil
}

func runSameHost(quick bool, rounds int) error {
	ctx := context.Background()
	var info shmOwnerInfo
	owner, err := benchkit.StartChild(nil, &info, "-role", "shmowner", "-single-copy-min", strconv.Itoa(shmSingleCopyMin))
	if err != nil {
		return err
	}
	defer owner.Stop()
	shm, err := startSameHost(ctx, true)
	if err != nil {
		return err
	}
	defer shm.Close()
	rdma, err := startSameHost(ctx, false)
	if err != nil {
		return err
	}
	defer rdma.Close()
	for _, v := range []*velo.Velo{shm, rdma} {
		if err := v.RegisterPeer(ctx, info.Peer); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for ok, why := shm.SameHost(info.Peer.ID); !ok; ok, why = shm.SameHost(info.Peer.ID) {
		if time.Now().After(deadline) {
			return fmt.Errorf("the same-host path to the owner was not taken: %s", why)
		}
		time.Sleep(10 * time.Millisecond)
	}

	fmt.Printf("same-host path: two processes of this host, %d CPUs, UCX_TLS=%s for the rdma column; %d alternating rounds; SingleCopyMin %d\n",
		runtime.NumCPU(), os.Getenv("UCX_TLS"), rounds, shmSingleCopyMin)
	printLoad()
	fmt.Printf("MiB/s, median of the rounds [min–max]; memcpy is one core's copy of the same size in this process\n\n")
	fmt.Printf("%-8s %5s %22s %22s %22s %11s %9s\n", "size", "gets", "memcpy", "velo shm", "velo rdma", "shm/memcpy", "shm/rdma")
	for i, n := range shmSizes {
		iters := max(4, min(200, (256<<20)/n))
		if quick {
			iters = max(2, iters/8)
		}
		dst := make([]byte, n)
		src := make([]byte, n)
		for j := range src {
			src[j] = byte(j)
		}
		for _, v := range []*velo.Velo{shm, rdma} { // warm up: channels, endpoints, page faults
			if _, err := getOnce(ctx, v, info.Payload[i], dst, ""); err != nil {
				return err
			}
		}
		var mc, sh, rd []float64
		for r := 0; r < rounds; r++ {
			mc = append(mc, memcpyRate(dst, src, iters))
			x, err := velorate(ctx, shm, info.Payload[i], dst, iters, metrics.PathSameHost)
			if err != nil {
				return err
			}
			sh = append(sh, x)
			if x, err = velorate(ctx, rdma, info.Payload[i], dst, iters, metrics.PathRDMA); err != nil {
				return err
			}
			rd = append(rd, x)
		}
		fmt.Printf("%-8s %5d %22s %22s %22s %10.2fx %8.2fx\n", fmt.Sprintf("%d MiB", n>>20), iters, spread(mc), spread(sh), spread(rd),
			median(sh)/median(mc), median(sh)/median(rd))
	}
	fmt.Printf("single-copy reads (out of a payload's own file) so far: %s\n", shmSetting(shm, "single_copy_reads"))
	if shmSingleCopyMin > 0 {
		if err := stageRows(ctx, shm, rdma, quick); err != nil {
			return err
		}
	}
	fmt.Printf("\nGetBatch of %d pinned blocks (inline off on both sides): blocks/s, median of the rounds [min–max]\n", shmBlocks)
	fmt.Printf("%-8s %5s %22s %22s %9s\n", "block", "calls", "velo shm", "velo rdma", "shm/rdma")
	for i, n := range shmBlockSizes {
		calls := 20
		if quick {
			calls = 3
		}
		if _, err := batchRate(ctx, shm, info.Blocks[i], 1, ""); err != nil {
			return err
		}
		if _, err := batchRate(ctx, rdma, info.Blocks[i], 1, ""); err != nil {
			return err
		}
		var sh, rd []float64
		for r := 0; r < rounds; r++ {
			x, err := batchRate(ctx, shm, info.Blocks[i], calls, metrics.PathSameHost)
			if err != nil {
				return err
			}
			sh = append(sh, x)
			if x, err = batchRate(ctx, rdma, info.Blocks[i], calls, metrics.PathRDMA); err != nil {
				return err
			}
			rd = append(rd, x)
		}
		fmt.Printf("%-8s %5d %22s %22s %8.2fx\n", fmt.Sprintf("%d KiB", n>>10), calls, spread(sh), spread(rd), median(sh)/median(rd))
	}
	return pushRows(ctx, owner, shm, rdma, quick, rounds)
}

// pushRows is the push table: puts into the owner's region through a grant to each writer.
func pushRows(ctx context.Context, owner *benchkit.Child, shm, rdma *velo.Velo, quick bool, rounds int) error {
	b, err := json.Marshal([]velo.PeerInfo{shm.PeerInfo(), rdma.PeerInfo()})
	if err != nil {
		return err
	}
	if _, err := owner.In.Write(append(b, '\n')); err != nil {
		return err
	}
	var g shmGrants
	line, err := owner.Out.ReadBytes('\n')
	if err == nil {
		err = json.Unmarshal(line, &g)
	}
	if err == nil && g.Err != "" {
		err = errors.New(g.Err)
	}
	if err != nil {
		return fmt.Errorf("the owner's grants: %w", err)
	}
	// A first put each starts the push service (its metrics), acquires the grant and opens the
	// lane; the rounds' puts are timed after it.
	warm := make([]byte, 4096)
	for i, v := range []*velo.Velo{shm, rdma} {
		if err := v.Put(ctx, g.Handles[i], g.Offsets[i], warm, nil); err != nil {
			return err
		}
	}
	fmt.Printf("\nPut into a pinned region of the owner (no notification): MiB/s, median of the rounds [min–max]\n")
	fmt.Printf("%-8s %5s %22s %22s %22s %11s %9s\n", "size", "puts", "memcpy", "velo shm", "velo rdma", "shm/memcpy", "shm/rdma")
	for _, n := range shmSizes {
		iters := max(4, min(200, (256<<20)/n))
		if quick {
			iters = max(2, iters/8)
		}
		src, dst := make([]byte, n), make([]byte, n)
		fill(src, 3)
		var mc, sh, rd []float64
		for r := 0; r < rounds+1; r++ { // round 0 warms up: channels, endpoints, page faults
			m := memcpyRate(dst, src, iters)
			x, err := putRate(ctx, shm, g.Handles[0], g.Offsets[0], src, iters, metrics.PathSameHost)
			if err != nil {
				return err
			}
			y, err := putRate(ctx, rdma, g.Handles[1], g.Offsets[1], src, iters, metrics.PathRDMA)
			if err != nil {
				return err
			}
			if r > 0 {
				mc, sh, rd = append(mc, m), append(sh, x), append(rd, y)
			}
		}
		fmt.Printf("%-8s %5d %22s %22s %22s %10.2fx %8.2fx\n", fmt.Sprintf("%d MiB", n>>20), iters, spread(mc), spread(sh), spread(rd),
			median(sh)/median(mc), median(sh)/median(rd))
	}
	return nil
}

// putRate is the rate of n puts of src at off through h in MiB/s; it fails unless every one
// counted on path want at the writer.
func putRate(ctx context.Context, v *velo.Velo, h velo.GrantHandle, off uint64, src []byte, n int, want metrics.Path) (float64, error) {
	labels := metrics.Labels{"side": "writer", "path": string(want), "reason": string(metrics.ReasonOK)}
	before, err := metrics.Value(v.Metrics(), push.PathTotal, labels)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	for i := 0; i < n; i++ {
		if err := v.Put(ctx, h, off, src, nil); err != nil {
			return 0, err
		}
	}
	took := time.Since(start)
	after, err := metrics.Value(v.Metrics(), push.PathTotal, labels)
	if err != nil {
		return 0, err
	}
	if int(after-before) != n {
		return 0, fmt.Errorf("%d of %d puts measured as %s took that path", int(after-before), n, want)
	}
	return float64(len(src)) * float64(n) / (1 << 20) / took.Seconds(), nil
}

// stageRows times StageDataPinned of each size into a payload file of its own (on file, whose
// SingleCopyMin is 1 MiB) and into an arena's slot (on arena), the handle dropped after each.
func stageRows(ctx context.Context, file, arena *velo.Velo, quick bool) error {
	n := 10
	if quick {
		n = 3
	}
	fmt.Printf("\nStageDataPinned in this process, ms per payload, median of %d [min–max]\n", n)
	fmt.Printf("%-8s %22s %22s %9s\n", "size", "own file", "arena slot", "file/slot")
	for _, size := range shmSizes {
		data := make([]byte, size)
		fill(data, 5)
		var rows [2][]float64
		for r := 0; r < n+1; r++ { // the first maps the arena
			for k, v := range []*velo.Velo{file, arena} {
				start := time.Now()
				h, err := v.StageDataPinned(ctx, data)
				took := time.Since(start)
				if err != nil {
					return err
				}
				if err := v.Unref(ctx, h); err != nil {
					return err
				}
				if r > 0 {
					rows[k] = append(rows[k], float64(took.Microseconds())/1000)
				}
			}
		}
		fmt.Printf("%-8s %22s %22s %8.1fx\n", fmt.Sprintf("%d MiB", size>>20), spreadMs(rows[0]), spreadMs(rows[1]), median(rows[0])/median(rows[1]))
	}
	return nil
}

// spreadMs is spread for milliseconds.
func spreadMs(v []float64) string {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return fmt.Sprintf("%.2f [%.2f–%.2f]", median(s), s[0], s[len(s)-1])
}

// shmSetting is one of v's same-host transport settings on its introspection page.
func shmSetting(v *velo.Velo, key string) string {
	for _, t := range v.Introspect().Transports {
		if t.Name == "shm" {
			return t.Settings[key]
		}
	}
	return "?"
}

// startSameHost is start with the same-host path on (sameHost) or off, and no inline batch entries.
func startSameHost(ctx context.Context, sameHost bool) (*velo.Velo, error) {
	opts := []velo.Option{velo.WithBatchInlineMax(0)}
	if sameHost {
		opts = append(opts, velo.WithSameHost(velo.SameHostConfig{SingleCopyMin: shmSingleCopyMin}))
	}
	v, _, err := start(ctx, opts...)
	return v, err
}

// memcpyRate is one core's copy of len(src) bytes, iters times, in MiB/s.
func memcpyRate(dst, src []byte, iters int) float64 {
	start := time.Now()
	for i := 0; i < iters; i++ {
		copy(dst, src)
	}
	return float64(len(src)) * float64(iters) / (1 << 20) / time.Since(start).Seconds()
}

// batchRate is blocks per second over calls GetBatch calls of hs (the detaches not timed).
func batchRate(ctx context.Context, v *velo.Velo, hs []velo.Handle, calls int, want metrics.Path) (float64, error) {
	reqs := make([]velo.GetRequest, len(hs))
	for i, h := range hs {
		reqs[i] = velo.GetRequest{Handle: h, Into: make([]byte, h.Size)}
	}
	var total time.Duration
	for c := 0; c < calls; c++ {
		start := time.Now()
		res := v.GetBatch(ctx, reqs, nil)
		total += time.Since(start)
		var leases []*velo.Lease
		for _, r := range res {
			if r.Err != nil {
				return 0, r.Err
			}
			if want != "" && r.Lease.Path != want {
				return 0, fmt.Errorf("a batch entry measured as %s took %s/%s", want, r.Lease.Path, r.Lease.Reason)
			}
			leases = append(leases, r.Lease)
		}
		for _, l := range leases {
			if err := l.Detach(ctx); err != nil {
				return 0, err
			}
		}
	}
	return float64(len(hs)*calls) / total.Seconds(), nil
}
