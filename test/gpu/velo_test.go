//go:build cuda && ucx_static && cgo && linux

package gpu

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/transport/tcp"
	"github.com/velo-go/velo/velo/transport/ucxtransport"
)

// velo over GPU memory, two processes: an owner process stages a region of GPU memory zero-copy
// (WrapRegionMemory of CUDAMemory, StageRegion), and this process reads it into GPU memory
// with GetIntoMemory and, as a batch of 64 KiB blocks, ReadRanges, each checked against the
// SHA-256 of the host copy the owner uploaded. Once with velo's RDMA path (UCX reads the device
// memory itself, path rdma/ok) and once with the owner's RDMA path switched off (the chunked path
// through host bounce buffers on both sides, path chunked/device_bounce: never silent).

const veloOwnerRole = "velo-owner"

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func veloNode(opts ...velo.Option) (*velo.Velo, error) {
	ctl, err := tcp.New(tcp.Config{})
	if err != nil {
		return nil, err
	}
	u, err := ucxtransport.New(ucxtransport.Config{TLS: suiteTLS(), EagerEndpoints: true, RMAOverSoftwareLanes: true, Logger: quiet()})
	if err != nil {
		return nil, err
	}
	return velo.New(context.Background(), append([]velo.Option{velo.WithLogger(quiet()), velo.WithTransport(ctl), velo.WithUCXTransport(u)}, opts...)...)
}

// veloHello is the owner process's first line.
type veloHello struct {
	Peer   velo.PeerInfo `json:"peer"`
	Handle string        `json:"handle"`
	SHA256 string        `json:"sha256"`
	Err    string        `json:"err,omitempty"`
}

// runVeloOwner stages size bytes of GPU memory (pattern seed 91) and serves it until stdin
// closes; then it prints its path counts and registrations and exits.
func runVeloOwner(size int, bounce bool) error {
	var opts []velo.Option
	if bounce {
		opts = append(opts, velo.WithRDMA(velo.RDMAConfig{Disabled: true}))
	}
	if os.Getenv(sameHostEnv) == "true" {
		opts = append(opts, velo.WithSameHost(velo.SameHostConfig{}))
	}
	v, err := veloNode(opts...)
	if err != nil {
		return err
	}
	data := pattern(size, 91)
	buf, err := Alloc(0, size)
	if err != nil {
		v.Close()
		return err
	}
	// velo first, then the memory: the application frees device memory only after velo is done.
	defer buf.Free()
	defer v.Close()
	if err := buf.Upload(data); err != nil {
		return err
	}
	g, err := v.WrapRegionMemory(velo.CUDAMemory(buf.Ptr, size, 0))
	if err != nil {
		return err
	}
	ctx := context.Background()
	h, err := v.StageRegion(ctx, g)
	if err != nil {
		return err
	}
	ht, err := h.MarshalText()
	if err != nil {
		return err
	}
	if err := json.NewEncoder(os.Stdout).Encode(veloHello{Peer: v.PeerInfo(), Handle: string(ht), SHA256: hexsum(data)}); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	lines, _ := metrics.Lines(v.Metrics(), metrics.RDMAPathTotal)
	fmt.Printf("OWNER PATHS\n%s\n", strings.Join(lines, "\n"))
	if s := shmSettings(v); s != nil {
		fmt.Printf("OWNER SHM cuda_exports=%s cuda_fallbacks=%s not_taken=%q\n", s["cuda_exports"], s["cuda_fallbacks"], s["cuda_consumers_not_taken"])
	}
	g.Free()
	v.Close()
	select {
	case <-g.Done():
	case <-time.After(30 * time.Second):
		return fmt.Errorf("the GPU region was not released within 30 s of Close")
	}
	return nil
}

func startVeloOwner(t *testing.T, size int, bounce bool, env ...string) (veloHello, func() string) {
	t.Helper()
	var hello veloHello
	c := startRole(t, veloOwnerRole, &hello, append([]string{fmt.Sprintf("VELO_GPU_SIZE=%d", size), fmt.Sprintf("VELO_GPU_BOUNCE=%t", bounce)}, env...)...)
	require.Empty(t, hello.Err)
	finish := func() string {
		_ = c.In.Close()
		rest, _ := io.ReadAll(c.Out)
		require.NoError(t, endRole(c, 30*time.Second), "owner process:\n%s", rest)
		return string(rest)
	}
	return hello, finish
}

func TestVeloGPURegion(t *testing.T) {
	devicesOrSkip(t)
	const size = 64 << 20
	for _, c := range []struct {
		name   string
		bounce bool
		path   metrics.Path
		reason metrics.Reason
	}{
		{"zero-copy", false, metrics.PathRDMA, metrics.ReasonOK},
		{"bounce", true, metrics.PathChunked, metrics.ReasonDeviceBounce},
	} {
		t.Run(c.name, func(t *testing.T) {
			hello, finish := startVeloOwner(t, size, c.bounce)
			v, err := veloNode()
			require.NoError(t, err)
			defer v.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			require.NoError(t, v.RegisterPeer(ctx, hello.Peer))
			var h velo.Handle
			require.NoError(t, h.UnmarshalText([]byte(hello.Handle)))
			require.EqualValues(t, size, h.Size)

			dst, err := Alloc(0, size)
			require.NoError(t, err)
			defer dst.Free()

			getRegionIntoGPU(t, ctx, v, h, dst, hello.SHA256, c.name)
			readRangesIntoGPU(t, ctx, v, h, dst, c.name)

			lines, err := metrics.Lines(v.Metrics(), metrics.RDMAPathTotal)
			require.NoError(t, err)
			joined := strings.Join(lines, "\n")
			require.Contains(t, joined, fmt.Sprintf(`path="%s",reason="%s"`, c.path, c.reason), "consumer's path counts:\n%s", joined)
			ownerOut := finish()
			require.Contains(t, ownerOut, fmt.Sprintf(`path="%s",reason="%s"`, c.path, c.reason), "owner's path counts:\n%s", ownerOut)
			t.Logf("consumer paths:\n%s\nowner:\n%s", joined, ownerOut)
		})
	}
}

// getRegionIntoGPU reads the owner's whole region (pattern seed 91, sum its SHA-256) into dst
// with GetIntoMemory, checks it, and ends the lease.
func getRegionIntoGPU(t *testing.T, ctx context.Context, v *velo.Velo, h velo.Handle, dst *Buffer, sum, name string) {
	t.Helper()
	start := time.Now()
	l, err := v.GetIntoMemory(ctx, h, velo.CUDAMemory(dst.Ptr, int(h.Size), 0))
	require.NoError(t, err)
	el := time.Since(start)
	got := make([]byte, h.Size)
	require.NoError(t, dst.Download(got))
	require.Equal(t, sum, hexsum(got), "GetIntoMemory: SHA-256 differs from the owner's host copy")
	require.NoError(t, l.Detach(ctx))
	t.Logf("%s: %d MiB GPU→GPU with GetIntoMemory in %v (%.0f MiB/s)", name, h.Size>>20, el, float64(h.Size)/(1<<20)/el.Seconds())
}

// readRangesIntoGPU reads the owner's first 256 blocks of 64 KiB into dst in reverse order with
// ReadRanges, and checks each block.
func readRangesIntoGPU(t *testing.T, ctx context.Context, v *velo.Velo, h velo.Handle, dst *Buffer, name string) {
	t.Helper()
	const block = 64 << 10
	n := 256
	ranges := make([]velo.Range, n)
	for i := range ranges {
		j := n - 1 - i
		ranges[i] = velo.RangeInto(uint64(i*block), block, velo.CUDAMemory(dst.Ptr+uintptr(j*block), block, 0))
	}
	start := time.Now()
	require.NoError(t, v.ReadRanges(ctx, h, ranges))
	t.Logf("%s: %d blocks of 64 KiB GPU→GPU with ReadRanges in %v", name, n, time.Since(start))
	got := make([]byte, n*block)
	require.NoError(t, dst.Download(got))
	want := pattern(int(h.Size), 91)
	for i := 0; i < n; i++ {
		j := n - 1 - i
		require.Equal(t, hexsum(want[i*block:(i+1)*block]), hexsum(got[j*block:(j+1)*block]), "block %d", i)
	}
}
