package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math/bits"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/velo-go/velo/velo"
)

// Operations a sweep can measure, in the order a sweep runs them.
const (
	opGet     = "get"        // GetInto of one block, on the RDMA path where both sides can
	opBatch   = "batch"      // GetBatch of --batch blocks
	opRanged  = "ranged"     // ReadRanges: --batch ranges of one payload, one lease
	opChunked = "chunked"    // GetInto of a block staged in plain memory: the chunked path
	opRequest = "request"    // a messenger Request of one block, echoed back
	opPut     = "put"        // Put of one block, notified, into a region the target granted
	opPutB    = "putbatch"   // PutBatch of --batch blocks, one notification for the batch
	opPutC    = "chunkedput" // Put of one block, notified, into a region in plain memory: the chunked path
)

var allOps = []string{opGet, opBatch, opRanged, opChunked, opRequest, opPut, opPutB, opPutC}

// batched reports whether the operation moves --batch blocks per call; the others move one.
func batched(op string) bool { return op == opBatch || op == opRanged || op == opPutB }

// isPut reports whether the operation writes into the target (push) rather than reads from it.
func isPut(op string) bool { return op == opPut || op == opPutB || op == opPutC }

// errUsage marks a command line that cannot run: the exit code is 2 and the message says why.
// errHelp is -h: the flags were printed, and the exit code is 0.
var (
	errUsage = errors.New("bad command line")
	errHelp  = errors.New("help printed")
)

// usageError is a refused command line; errors.Is(err, errUsage) holds for it.
type usageError struct{ msg string }

func (e *usageError) Error() string        { return e.msg }
func (e *usageError) Is(target error) bool { return target == errUsage }

func usageErr(format string, a ...any) error {
	return &usageError{fmt.Sprintf(format, a...)}
}

// parseFlags parses a command's flags and refuses arguments it does not take.
// The flag package's own messages are kept quiet: a refused flag is printed once, by Main, and
// the flags are listed only for -h.
func parseFlags(fs *flag.FlagSet, args []string, stderr io.Writer) error {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stderr)
			fs.Usage()
			return errHelp
		}
		return &usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return usageErr("unexpected arguments %q (%s takes flags only; -h lists them)", fs.Args(), fs.Name())
	}
	return nil
}

// sweep is what to measure: every operation at every block size, batch size and number of
// concurrent callers, each point moving about Bytes.
type sweep struct {
	Ops       []string      `json:"ops"`
	Blocks    []int64       `json:"blocks"`
	Batches   []int         `json:"batches"`
	Callers   []int         `json:"callers"`
	Memory    int64         `json:"memory"`
	Bytes     int64         `json:"bytes_per_point"`
	MinIters  int           `json:"min_iterations"`
	MaxIters  int           `json:"max_iterations"`
	PointTime time.Duration `json:"point_time_ns"`
	OpTimeout time.Duration `json:"op_timeout_ns"`
	Perftest  string        `json:"perftest"`
	// PerftestBytes is the least a ucx_perftest run moves (up to 1000 operations).
	PerftestBytes int64 `json:"perftest_bytes,omitempty"`
}

// meeting is how the two sides find each other: a shared directory or an etcd, a cluster name
// inside it, and the target's member name.
type meeting struct {
	Dir       string
	Etcd      string
	Cluster   string
	Name      string
	Wait      time.Duration
	Listen    string
	Advertise string
	// Rails are the UCX_NET_DEVICES entries of velo's rails (velo.WithRails), one per rail, in
	// the same order on both sides; none: one UCX transport on UCX's own choice of devices.
	Rails []string
	// BatchInline is velo.WithBatchInlineMax on this side, or -1 for velo's default.
	BatchInline int
	// SameHost turns on velo's same-host path (velo.WithSameHost) on this side: two sides on one
	// host that both have it move their rendezvous bytes through shared memory (path shm).
	SameHost bool
}

// registerLanes adds --lanes to a command that runs a velobench process.
func registerLanes(fs *flag.FlagSet, mode *string) {
	fs.StringVar(mode, "lanes", "auto", "count the bytes the kernel sees on the control plane and on UCX's sockets per point (lanes: cgroup v2 + eBPF, needs root or CAP_BPF+CAP_NET_ADMIN): auto (where possible, else the report says why), on (fail without it) or off")
}

// outputs are the files a run writes and how it shows progress.
type outputs struct {
	JSON, CSV, Plot string
	Progress        string // auto, tty, plain or off
}

func (s *sweep) register(fs *flag.FlagSet) {
	s.Ops = append([]string(nil), allOps...)
	s.Blocks = []int64{4 << 10, 64 << 10, 1 << 20, 8 << 20}
	s.Batches = []int{16}
	s.Callers = []int{1}
	s.Memory = 1 << 30
	s.Bytes = 64 << 20
	fs.Func("ops", "operations to measure, comma-separated: get, batch, ranged, chunked, request, put, putbatch, chunkedput (default all)", func(v string) error {
		ops, err := parseOps(v)
		s.Ops = ops
		return err
	})
	fs.Func("blocks", "block sizes: a list (4K,64K,1M) or a range of powers of two (4K-1G) (default 4K,64K,1M,8M)", func(v string) error {
		b, err := parseBlocks(v)
		s.Blocks = b
		return err
	})
	fs.Func("batch", "blocks per call of the batch and ranged operations, comma-separated (default 16)", func(v string) error {
		b, err := parseInts("--batch", v)
		s.Batches = b
		return err
	})
	fs.Func("callers", "concurrent callers, comma-separated (default 1)", func(v string) error {
		c, err := parseInts("--callers", v)
		s.Callers = c
		return err
	})
	fs.Func("memory", "largest number of bytes one point stages on the target and reads into on the initiator (default 1G)", func(v string) error {
		n, err := parseSize(v)
		s.Memory = n
		return err
	})
	fs.Func("bytes", "bytes each point moves, about (default 64M); --min-iters and --max-iters bound the operations", func(v string) error {
		n, err := parseSize(v)
		s.Bytes = n
		return err
	})
	fs.IntVar(&s.MinIters, "min-iters", 8, "fewest operations per point")
	fs.IntVar(&s.MaxIters, "max-iters", 2000, "most operations per point")
	fs.DurationVar(&s.PointTime, "point-time", 3*time.Second, "a point stops once it ran this long and made --min-iters operations")
	fs.DurationVar(&s.OpTimeout, "op-timeout", 60*time.Second, "longest one operation may take before the sweep ends with an error")
	fs.StringVar(&s.Perftest, "perftest", "auto", "the ucx_perftest baseline beside each point: auto (where one exists) or off")
	s.PerftestBytes = 64 << 20
	fs.Func("perftest-bytes", "the least each ucx_perftest run moves, about (default 64M; at most 1000 operations): less is quicker and noisier", func(v string) error {
		n, err := parseSize(v)
		s.PerftestBytes = n
		return err
	})
}

func (m *meeting) register(fs *flag.FlagSet, target bool) {
	fs.StringVar(&m.Dir, "dir", "", "filesystem discovery: a directory both sides read and write (NFS across nodes)")
	fs.StringVar(&m.Etcd, "etcd", "", "etcd discovery: the client URL of an etcd both sides reach (http://host:2379)")
	fs.StringVar(&m.Cluster, "cluster", "velobench", "cluster name inside the discovery location")
	fs.StringVar(&m.Name, "name", "target", "the target's member name (several targets can share a location)")
	if !target {
		fs.DurationVar(&m.Wait, "wait", 60*time.Second, "how long to wait for the target to appear")
	}
	fs.StringVar(&m.Listen, "listen", "0.0.0.0:0", "address of velo's TCP control plane")
	fs.StringVar(&m.Advertise, "advertise", "", "host (or host:port) the other side dials (default: this node's routable address)")
	registerRails(fs, &m.Rails)
	registerBatchInline(fs, &m.BatchInline)
	registerSameHost(fs, &m.SameHost)
}

// registerSameHost adds --same-host.
func registerSameHost(fs *flag.FlagSet, on *bool) {
	fs.BoolVar(on, "same-host", false, "turn on velo's same-host path (velo.WithSameHost) on this side: with both sides on one host and both given it, gets move through shared memory and count path shm")
}

// registerBatchInline adds --batch-inline; *n stays -1 (velo's default) unless it is given.
func registerBatchInline(fs *flag.FlagSet, n *int) {
	*n = -1
	fs.Func("batch-inline", "the largest batch entry that comes inside the owner's answer to the batch's acquire (velo.WithBatchInlineMax; velo's default 4K; the smaller of the two sides' applies): 0 sends every batch entry by its RDMA read", func(v string) error {
		b, err := parseSize(v)
		if err != nil {
			return err
		}
		if b < 0 || b > velo.MaxBatchInline {
			return usageErr("--batch-inline %s: want 0 (off) to %s", v, human(velo.MaxBatchInline))
		}
		*n = int(b)
		return nil
	})
}

// registerRails adds --rails.
func registerRails(fs *flag.FlagSet, r *[]string) {
	fs.Func("rails", "velo's rails: devices, comma-separated, one per rail, in the same order on both sides (mlx5_0:1,mlx5_1:1, or interfaces for UCX_TLS=tcp); two or more slice every large read over them (velo.WithRails, Slice); each point then reports the bytes per rail", func(v string) error {
		*r = splitList(v)
		if len(*r) == 0 {
			return usageErr("--rails %q: name at least one device", v)
		}
		return nil
	})
}

// checkRails refuses --rails beside UCX_NET_DEVICES, which would win over it inside velo.
func checkRails(r []string) error {
	if d, set := os.LookupEnv("UCX_NET_DEVICES"); set && len(r) > 0 {
		return usageErr("--rails %s and UCX_NET_DEVICES=%s both given: velo lets the variable win and would use no rails; unset UCX_NET_DEVICES or leave out --rails", strings.Join(r, ","), d)
	}
	return nil
}

func (o *outputs) register(fs *flag.FlagSet) {
	fs.StringVar(&o.JSON, "json", "", "write the results as JSON (schema "+schemaVersion+") to FILE")
	fs.StringVar(&o.CSV, "csv", "", "write one CSV row per point to FILE")
	fs.StringVar(&o.Plot, "plot", "", "draw GB/s and latency against block size, per operation and beside ucx_perftest, to FILE.svg")
	fs.StringVar(&o.Progress, "progress", "auto", "progress output: auto (a live line on a terminal, plain lines otherwise), tty, plain or off")
}

// check refuses flags that contradict each other, naming the fix.
func (s *sweep) check() error {
	if len(s.Ops) == 0 || len(s.Blocks) == 0 || len(s.Batches) == 0 || len(s.Callers) == 0 {
		return usageErr("--ops, --blocks, --batch and --callers each need at least one value")
	}
	if s.Memory <= 0 {
		return usageErr("--memory %d: give the bytes one point may stage, for example --memory 1G", s.Memory)
	}
	for _, b := range s.Blocks {
		if b <= 0 {
			return usageErr("--blocks: a block of %d bytes; blocks are 1 byte or more", b)
		}
		if b > s.Memory {
			return usageErr("--blocks %s is larger than --memory %s: the target stages whole blocks in registered memory; raise --memory to at least %s or leave %s out of --blocks",
				human(b), human(s.Memory), human(b), human(b))
		}
	}
	for _, b := range s.Batches {
		if b < 1 {
			return usageErr("--batch %d: a batch holds at least one block; give 1 or more (for example --batch 1,16)", b)
		}
	}
	for _, c := range s.Callers {
		if c < 1 {
			return usageErr("--callers %d: at least one caller measures; give 1 or more", c)
		}
	}
	if s.Bytes <= 0 {
		return usageErr("--bytes %d: give the bytes each point moves, for example --bytes 64M", s.Bytes)
	}
	if s.MinIters < 1 || s.MaxIters < s.MinIters {
		return usageErr("--min-iters %d and --max-iters %d: want 1 <= min <= max", s.MinIters, s.MaxIters)
	}
	if s.PointTime <= 0 || s.OpTimeout <= 0 {
		return usageErr("--point-time and --op-timeout must be positive")
	}
	if s.PerftestBytes <= 0 {
		return usageErr("--perftest-bytes %d: give the bytes a ucx_perftest run moves at least, for example --perftest-bytes 64M", s.PerftestBytes)
	}
	if s.Perftest != "auto" && s.Perftest != "off" {
		return usageErr("--perftest %q: want auto or off", s.Perftest)
	}
	if run, _ := plan(*s); len(run) == 0 {
		return usageErr("no point of the sweep fits --memory %s; raise --memory or choose smaller --blocks, --batch or --callers", human(s.Memory))
	}
	return nil
}

func (m *meeting) check(target bool) error {
	switch {
	case m.Dir == "" && m.Etcd == "":
		return usageErr("give --dir DIR (a directory both sides read and write) or --etcd URL (an etcd both reach) so that the initiator and the target find each other")
	case m.Dir != "" && m.Etcd != "":
		return usageErr("--dir and --etcd both given: the two sides meet through one discovery location; keep one")
	case m.Name == "":
		return usageErr("--name is empty: the target needs a member name")
	case !target && m.Wait <= 0:
		return usageErr("--wait %s: give how long to wait for the target, for example --wait 60s", m.Wait)
	}
	return checkRails(m.Rails)
}

func (o *outputs) check() error {
	switch o.Progress {
	case "auto", "tty", "plain", "off":
	default:
		return usageErr("--progress %q: want auto, tty, plain or off", o.Progress)
	}
	if o.Plot != "" && !strings.HasSuffix(strings.ToLower(o.Plot), ".svg") {
		return usageErr("--plot %s: the plot is an SVG file; name it FILE.svg", o.Plot)
	}
	return nil
}

func parseOps(v string) ([]string, error) {
	var ops []string
	seen := map[string]bool{}
	for _, f := range splitList(v) {
		ok := false
		for _, o := range allOps {
			ok = ok || o == f
		}
		if !ok {
			return nil, usageErr("unknown operation %q in --ops: want %s", f, strings.Join(allOps, ", "))
		}
		if !seen[f] {
			seen[f] = true
			ops = append(ops, f)
		}
	}
	return ops, nil
}

func parseInts(name, v string) ([]int, error) {
	var out []int
	for _, f := range splitList(v) {
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, usageErr("%s %q: want whole numbers, comma-separated", name, f)
		}
		out = append(out, n)
	}
	return out, nil
}

// parseBlocks reads a list of sizes or A-B, every power of two from A to B.
func parseBlocks(v string) ([]int64, error) {
	var out []int64
	for _, f := range splitList(v) {
		if lo, hi, ok := strings.Cut(f, "-"); ok {
			a, err := parseSize(lo)
			if err != nil {
				return nil, err
			}
			b, err := parseSize(hi)
			if err != nil {
				return nil, err
			}
			if a <= 0 || b < a || bits.OnesCount64(uint64(a)) != 1 {
				return nil, usageErr("--blocks %s: a range runs from a power of two up to a larger size (4K-1G)", f)
			}
			for n := a; n <= b; n *= 2 {
				out = append(out, n)
			}
			continue
		}
		n, err := parseSize(f)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// parseSize reads 4096, 4K, 4KiB, 64k, 1M, 1MiB, 1G (binary units).
func parseSize(v string) (int64, error) {
	s := strings.TrimSpace(v)
	mult := int64(1)
	low := strings.ToLower(s)
	for _, u := range []struct {
		suffix string
		m      int64
	}{{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"b", 1}} {
		if strings.HasSuffix(low, u.suffix) {
			mult, s = u.m, s[:len(s)-len(u.suffix)]
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, usageErr("size %q: want bytes, optionally with K, M or G (4K, 64K, 1M, 1G)", v)
	}
	return n * mult, nil
}

func splitList(v string) []string {
	var out []string
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// human prints a byte count in binary units when it is a whole number of them.
func human(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

// newFlagSet is a flag set that reports its errors to the caller, not to os.Exit.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("velobench "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}
