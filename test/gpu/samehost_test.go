//go:build cuda && ucx_static && cgo && linux

package gpu

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo"
	"github.com/velo-go/velo/velo/metrics"
)

// GPU memory between two processes of one host on the same-host path (velo.WithSameHost on both):
// the owner process stages a region of GPU memory, this process reads it with CUDA IPC — the
// owner exports the allocation over the authenticated Unix socket, this process maps it and
// copies device to device (and device to host) — each read checked by SHA-256 against the host
// copy the owner uploaded. Both sides count path shm; the mapping is closed once the lease ended,
// and the owner holds no export when it exits.

// sameHostEnv makes the velo owner process turn the same-host path on.
const sameHostEnv = "VELO_GPU_SAMEHOST"

// shmSettings is the same-host transport's row of the introspection page (nil without it).
func shmSettings(v *velo.Velo) map[string]string {
	for _, tr := range v.Introspect().Transports {
		if tr.Name == "shm" {
			return tr.Settings
		}
	}
	return nil
}

func TestVeloGPUSameHostCUDAIPC(t *testing.T) {
	devicesOrSkip(t)
	const size = 64 << 20
	hello, finish := startVeloOwner(t, size, false, sameHostEnv+"=true")
	v, err := veloNode(velo.WithSameHost(velo.SameHostConfig{}))
	require.NoError(t, err)
	defer v.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	require.NoError(t, v.RegisterPeer(ctx, hello.Peer))
	var h velo.Handle
	require.NoError(t, h.UnmarshalText([]byte(hello.Handle)))
	owner := fmt.Sprintf("%016x", uint64(hello.Peer.ID))
	require.Eventually(t, func() bool { return strings.Contains(shmSettings(v)["cuda_owners"], owner) }, 10*time.Second, 10*time.Millisecond,
		"no CUDA IPC channel to the owner: %v", shmSettings(v))

	dst, err := Alloc(0, size)
	require.NoError(t, err)
	defer dst.Free()
	mappingsClosed := func(what string) {
		require.Eventually(t, func() bool { return shmSettings(v)["cuda_mappings"] == "0" }, 10*time.Second, 10*time.Millisecond,
			"the CUDA IPC mapping is still open after %s's lease ended: %v", what, shmSettings(v))
	}

	// Device to device, then device to host, then a batch of blocks into GPU memory.
	getRegionIntoGPU(t, ctx, v, h, dst, hello.SHA256, "same host (CUDA IPC)")
	mappingsClosed("GetIntoMemory")
	host := make([]byte, size)
	l, err := v.GetIntoMemory(ctx, h, velo.HostMemory(host))
	require.NoError(t, err)
	require.Equal(t, hello.SHA256, hexsum(host), "GPU→host over CUDA IPC")
	require.NoError(t, l.Detach(ctx))
	mappingsClosed("GetIntoMemory into host memory")
	readRangesIntoGPU(t, ctx, v, h, dst, "same host (CUDA IPC)")
	mappingsClosed("ReadRanges")

	lines, err := metrics.Lines(v.Metrics(), metrics.RDMAPathTotal)
	require.NoError(t, err)
	joined := strings.Join(lines, "\n")
	want1 := fmt.Sprintf(`path="%s",reason="%s"`, metrics.PathSameHost, metrics.ReasonOK)
	require.Contains(t, joined, want1, "consumer's path counts:\n%s", joined)
	ownerOut := finish()
	require.Contains(t, ownerOut, want1, "owner's path counts:\n%s", ownerOut)
	require.Contains(t, ownerOut, "cuda_exports=0 cuda_fallbacks=0", "the owner fell back or kept an export:\n%s", ownerOut)
	t.Logf("consumer: %v\nowner:\n%s", shmSettings(v), ownerOut)
}
