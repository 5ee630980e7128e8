//go:build cuda && ucx_static && cgo && linux

package gpu

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/ucx/benchkit"
)

// The owner process: a child of the test binary (VELO_GPU_ROLE=owner) that registers host or
// device memory on request and serves it to the test's engine. The two talk over the child's
// stdin and stdout, one JSON object a line.
const roleEnv = "VELO_GPU_ROLE"

// suiteTLS is what both processes run UCX over (VELO_GPU_TLS overrides; UCX_TLS, when set, wins
// over both, as for every engine).
func suiteTLS() string {
	if v := os.Getenv("VELO_GPU_TLS"); v != "" {
		return v
	}
	return "tcp,cuda_copy"
}

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "owner":
		if err := runOwner(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "gpu owner:", err)
			os.Exit(1)
		}
		os.Exit(0)
	case veloOwnerRole:
		size, _ := strconv.Atoi(os.Getenv("VELO_GPU_SIZE"))
		if err := runVeloOwner(size, os.Getenv("VELO_GPU_BOUNCE") == "true"); err != nil {
			fmt.Fprintln(os.Stderr, "gpu velo owner:", err)
			_ = json.NewEncoder(os.Stdout).Encode(veloHello{Err: err.Error()})
			os.Exit(1)
		}
		os.Exit(0)
	case benchOwnerRole:
		if err := runBenchOwner(os.Getenv("VELO_GPU_BENCH_HOSTONLY") == "true"); err != nil {
			fmt.Fprintln(os.Stderr, "gpu bench owner:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// devicesOrSkip skips the test unless this machine has a CUDA device the driver can use, saying
// why; it returns the number of devices.
func devicesOrSkip(t *testing.T) int {
	t.Helper()
	if !ucx.CUDAEnabled() {
		t.Skip("the ucx module was built without CUDA (needs -tags cuda,ucx_static)")
	}
	n, err := ucx.CUDADeviceCount()
	if err != nil {
		t.Skipf("no usable NVIDIA GPU: %v", err)
	}
	if _, err := Devices(); err != nil {
		t.Fatalf("the ucx module sees %d CUDA devices, the suite's own driver calls fail: %v", n, err)
	}
	if n == 0 {
		t.Skip("no usable NVIDIA GPU: the driver reports 0 CUDA devices")
	}
	return n
}

// pattern is n reproducible bytes for seed (xorshift64*), the same in both processes.
func pattern(n int, seed uint64) []byte {
	b := make([]byte, n)
	x := seed*0x9E3779B97F4A7C15 + 1
	for i := 0; i < n; i += 8 {
		x ^= x >> 12
		x ^= x << 25
		x ^= x >> 27
		v := x * 0x2545F4914F6CDD1D
		for j := 0; j < 8 && i+j < n; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

func hexsum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// ownerReq and ownerRep are the lines between the test and its owner process.
type ownerReq struct {
	Op     string `json:"op"`               // "register", "unregister", "stats", "quit"
	Mem    string `json:"mem,omitempty"`    // "host" or "cuda"
	Size   int    `json:"size,omitempty"`   // bytes
	Seed   uint64 `json:"seed,omitempty"`   // pattern of the contents
	Device int    `json:"device,omitempty"` // CUDA device of a "cuda" region
	ID     int    `json:"id,omitempty"`
}

type ownerRep struct {
	Addr   string `json:"addr,omitempty"`   // the engine's address (first line)
	ID     int    `json:"id,omitempty"`     // of a registration
	Key    string `json:"key,omitempty"`    // its remote key
	Base   uint64 `json:"base,omitempty"`   // its address
	SHA256 string `json:"sha256,omitempty"` // of the host copy the region was filled from
	Live   int    `json:"live"`             // registrations the owner still holds
	Err    string `json:"err,omitempty"`
}

func runOwner(in io.Reader, out io.Writer) error {
	ctx := context.Background()
	e, err := ucx.NewEngine(ctx, ucx.EngineConfig{Name: "gpu-owner", Context: ucx.ContextConfig{TLS: suiteTLS()}})
	if err != nil {
		return err
	}
	defer e.Close(ctx)
	enc := json.NewEncoder(out)
	if err := enc.Encode(ownerRep{Addr: base64.StdEncoding.EncodeToString(e.Address())}); err != nil {
		return err
	}
	type region struct {
		reg  *ucx.Registration
		gpu  *Buffer
		host *ucx.Memory
	}
	regs := map[int]*region{}
	next := 0
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		var req ownerReq
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			return err
		}
		var rep ownerRep
		switch req.Op {
		case "register":
			data := pattern(req.Size, req.Seed)
			r := &region{}
			var mem []byte
			mt := ucx.MemoryHost
			if req.Mem == "cuda" {
				if r.gpu, err = Alloc(req.Device, req.Size); err == nil {
					err = r.gpu.Upload(data)
				}
				mem, mt = r.gpu.Bytes(), ucx.MemoryCUDA
			} else if r.host, err = ucx.AllocMemory(req.Size, ucx.MemoryOptions{}); err == nil {
				mem = r.host.Bytes()[:req.Size]
				copy(mem, data)
			}
			if err == nil {
				r.reg, err = e.RegisterWith(ctx, mem, ucx.RegisterOptions{MemoryType: mt})
			}
			if err != nil {
				rep.Err = err.Error()
				break
			}
			next++
			regs[next] = r
			rep.ID, rep.Key, rep.Base, rep.SHA256 = next, base64.StdEncoding.EncodeToString(r.reg.RemoteKey()), r.reg.Addr(), hexsum(data)
		case "unregister":
			r := regs[req.ID]
			if r == nil {
				rep.Err = fmt.Sprintf("no registration %d", req.ID)
				break
			}
			delete(regs, req.ID)
			if err := r.reg.Unregister(ctx); err != nil {
				rep.Err = err.Error()
			}
			<-r.reg.Done()
			if r.gpu != nil {
				_ = r.gpu.Free()
			}
			if r.host != nil {
				_ = r.host.Free()
			}
		case "quit":
			return nil
		}
		rep.Live = len(regs)
		if err := enc.Encode(rep); err != nil {
			return err
		}
	}
	return sc.Err()
}

// owner is the test's handle on its owner process.
type owner struct {
	t    *testing.T
	in   io.WriteCloser
	dec  *json.Decoder
	addr []byte
}

// startRole runs this test binary again as role (roleEnv, with env beside it), its stdin and
// stdout the test's (benchkit.StartChild), and decodes its first line into hello.
func startRole(t *testing.T, role string, hello any, env ...string) *benchkit.Child {
	t.Helper()
	c, err := benchkit.StartChild(append(append(os.Environ(), roleEnv+"="+role), env...), hello, "-test.run=^$")
	require.NoError(t, err, "the %s process", role)
	return c
}

// endRole closes the child's stdin and waits up to within for it to exit, killing it after that;
// the error says how it ended when not cleanly.
func endRole(c *benchkit.Child, within time.Duration) error {
	_ = c.In.Close()
	done := make(chan error, 1)
	go func() { done <- c.Cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(within):
		_ = c.Cmd.Process.Kill()
		<-done
		return fmt.Errorf("did not exit within %v", within)
	}
}

func startOwner(t *testing.T) *owner {
	t.Helper()
	var hello ownerRep
	c := startRole(t, "owner", &hello)
	o := &owner{t: t, in: c.In, dec: json.NewDecoder(c.Out)}
	t.Cleanup(func() {
		_ = json.NewEncoder(o.in).Encode(ownerReq{Op: "quit"})
		if err := endRole(c, 30*time.Second); err != nil {
			t.Errorf("owner process: %v", err)
		}
	})
	var err error
	o.addr, err = base64.StdEncoding.DecodeString(hello.Addr)
	require.NoError(t, err)
	return o
}

func (o *owner) call(req ownerReq) ownerRep {
	o.t.Helper()
	require.NoError(o.t, json.NewEncoder(o.in).Encode(req))
	var rep ownerRep
	require.NoError(o.t, o.dec.Decode(&rep), "owner's answer to %s", req.Op)
	require.Empty(o.t, rep.Err, "owner's answer to %+v", req)
	return rep
}

// consumer is the test's own engine, connected to the owner.
func consumer(t *testing.T, o *owner) (*ucx.Engine, *ucx.Conn) {
	t.Helper()
	ctx := context.Background()
	e, err := ucx.NewEngine(ctx, ucx.EngineConfig{Name: "gpu-consumer", Context: ucx.ContextConfig{TLS: suiteTLS()}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	c, err := e.Connect(ctx, o.addr, ucx.ConnectOptions{VectoredGet: true})
	require.NoError(t, err)
	return e, c
}

// sizeName prints n as KiB or MiB.
func sizeName(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dKiB", n>>10)
}

var getSizes = []int{4 << 10, 64 << 10, 1 << 20, 8 << 20, 64 << 20, 256 << 20}

// TestGetAcrossMemoryTypes: two processes, GETs of 4 KiB to 256 MiB GPU→GPU, host→GPU and
// GPU→host (owner's memory→destination), each checked against the SHA-256 of the host copy the
// owner filled its region from. The owner's registrations are gone after each read.
func TestGetAcrossMemoryTypes(t *testing.T) {
	ndev := devicesOrSkip(t)
	o := startOwner(t)
	_, c := consumer(t, o)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cases := []struct {
		name     string
		src, dst string
		dstDev   int
	}{
		{"gpu-to-gpu", "cuda", "cuda", 0},
		{"host-to-gpu", "host", "cuda", 0},
		{"gpu-to-host", "cuda", "host", 0},
	}
	if ndev > 1 {
		// Device 0's memory into device 1's: over cuda_ipc when VELO_GPU_TLS names it.
		cases = append(cases, struct {
			name     string
			src, dst string
			dstDev   int
		}{"gpu0-to-gpu1", "cuda", "cuda", 1})
	}
	for _, tc := range cases {
		for _, n := range getSizes {
			t.Run(tc.name+"/"+sizeName(n), func(t *testing.T) {
				seed := uint64(n) ^ uint64(len(tc.name))
				reg := o.call(ownerReq{Op: "register", Mem: tc.src, Size: n, Seed: seed})
				key, err := base64.StdEncoding.DecodeString(reg.Key)
				require.NoError(t, err)
				rk, err := ucx.ParseRegionKey(key)
				require.NoError(t, err)
				require.Equal(t, map[string]ucx.MemoryType{"cuda": ucx.MemoryCUDA, "host": ucx.MemoryHost}[tc.src], rk.MemoryType(), "the key's memory type")
				got := make([]byte, n)
				start := time.Now()
				if tc.dst == "cuda" {
					buf, err := Alloc(tc.dstDev, n)
					require.NoError(t, err)
					defer buf.Free()
					require.NoError(t, c.GetWith(ctx, buf.Bytes(), reg.Base, key, ucx.GetOptions{DstMemory: ucx.MemoryCUDA}))
					el := time.Since(start)
					require.NoError(t, buf.Download(got))
					t.Logf("%s %s: %v (%.0f MiB/s)", tc.name, sizeName(n), el, float64(n)/(1<<20)/el.Seconds())
				} else {
					require.NoError(t, c.GetWith(ctx, got, reg.Base, key, ucx.GetOptions{DstMemory: ucx.MemoryHost}))
					el := time.Since(start)
					t.Logf("%s %s: %v (%.0f MiB/s)", tc.name, sizeName(n), el, float64(n)/(1<<20)/el.Seconds())
				}
				require.Equal(t, reg.SHA256, hexsum(got), "%s of %d bytes: SHA-256 differs from the owner's host copy", tc.name, n)
				rep := o.call(ownerReq{Op: "unregister", ID: reg.ID})
				require.Zero(t, rep.Live, "the owner still holds registrations")
			})
		}
	}
}

// TestBatchIntoGPU: a batch of 64 KiB blocks from host and from GPU memory, read with GetMany
// into one GPU buffer, every block checked.
func TestBatchIntoGPU(t *testing.T) {
	devicesOrSkip(t)
	o := startOwner(t)
	_, c := consumer(t, o)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const block, blocks = 64 << 10, 512
	for _, src := range []string{"host", "cuda"} {
		t.Run(src+"-to-gpu", func(t *testing.T) {
			reg := o.call(ownerReq{Op: "register", Mem: src, Size: block * blocks, Seed: 77})
			key, err := base64.StdEncoding.DecodeString(reg.Key)
			require.NoError(t, err)
			rk, err := ucx.ParseRegionKey(key)
			require.NoError(t, err)
			dst, err := Alloc(0, block*blocks)
			require.NoError(t, err)
			defer dst.Free()
			all := dst.Bytes()
			reads := make([]ucx.KeyRead, blocks)
			for i := range reads {
				// Reversed order: block i of the region lands at slot blocks-1-i.
				j := blocks - 1 - i
				reads[i] = ucx.KeyRead{Key: rk, Offset: uint64(i * block), Dst: all[j*block : (j+1)*block], DstMemory: ucx.MemoryCUDA}
			}
			var errs []string
			start := time.Now()
			c.GetMany(ctx, reads, 32, func(i int, err error) {
				if err != nil {
					errs = append(errs, fmt.Sprintf("read %d: %v", i, err))
				}
			})
			el := time.Since(start)
			require.Empty(t, errs)
			t.Logf("%d blocks of 64 KiB %s→GPU: %v (%.0f MiB/s)", blocks, src, el, float64(block*blocks)/(1<<20)/el.Seconds())
			got := make([]byte, block*blocks)
			require.NoError(t, dst.Download(got))
			want := pattern(block*blocks, 77)
			for i := 0; i < blocks; i++ {
				j := blocks - 1 - i
				require.Equal(t, hexsum(want[i*block:(i+1)*block]), hexsum(got[j*block:(j+1)*block]), "block %d", i)
			}
			rep := o.call(ownerReq{Op: "unregister", ID: reg.ID})
			require.Zero(t, rep.Live)
		})
	}
}

// TestBadPointers: on a GPU machine, a host buffer named as CUDA memory and a device buffer named
// as host memory are refused before UCX sees them, and nothing stays registered.
func TestBadPointers(t *testing.T) {
	devicesOrSkip(t)
	ctx := context.Background()
	e, err := ucx.NewEngine(ctx, ucx.EngineConfig{Name: "gpu-bad", Context: ucx.ContextConfig{TLS: suiteTLS()}})
	require.NoError(t, err)
	defer e.Close(ctx)
	buf, err := Alloc(0, 1<<20)
	require.NoError(t, err)
	defer buf.Free()
	mt, dev, err := ucx.QueryMemory(buf.Ptr)
	require.NoError(t, err)
	require.Equal(t, ucx.MemoryCUDA, mt)
	require.Equal(t, 0, dev)
	host := make([]byte, 1<<20)
	_, err = e.RegisterWith(ctx, host, ucx.RegisterOptions{MemoryType: ucx.MemoryCUDA})
	require.Error(t, err)
	require.True(t, strings.Contains(err.Error(), "host memory"), "%v", err)
	_, err = e.RegisterWith(ctx, buf.Bytes(), ucx.RegisterOptions{MemoryType: ucx.MemoryHost})
	require.Error(t, err)
	require.True(t, strings.Contains(err.Error(), "cuda memory"), "%v", err)
	// CopyMemory both ways through the primary context.
	src := pattern(1<<20, 5)
	require.NoError(t, ucx.CopyMemory(buf.Ptr, uintptrOf(src), len(src)))
	back := make([]byte, len(src))
	require.NoError(t, ucx.CopyMemory(uintptrOf(back), buf.Ptr, len(back)))
	require.Equal(t, hexsum(src), hexsum(back))
	runtime.KeepAlive(src)
	runtime.KeepAlive(back)
}

// uintptrOf is the address of b's first byte, for a synchronous copy (the caller keeps b alive).
func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }

// TestHarnessWithHostMemory runs the suite's two-process harness (the owner process, its key
// exchange, the SHA-256 check) with host memory on both sides, on any machine: what the GPU tests
// build on works before they meet a GPU.
func TestHarnessWithHostMemory(t *testing.T) {
	o := startOwner(t)
	_, c := consumer(t, o)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, n := range []int{4 << 10, 1 << 20} {
		reg := o.call(ownerReq{Op: "register", Mem: "host", Size: n, Seed: 3})
		key, err := base64.StdEncoding.DecodeString(reg.Key)
		require.NoError(t, err)
		got := make([]byte, n)
		require.NoError(t, c.GetWith(ctx, got, reg.Base, key, ucx.GetOptions{DstMemory: ucx.MemoryHost}))
		require.Equal(t, reg.SHA256, hexsum(got))
		require.Equal(t, hexsum(pattern(n, 3)), hexsum(got))
		require.Zero(t, o.call(ownerReq{Op: "unregister", ID: reg.ID}).Live)
	}
}
