//go:build cuda && ucx_static && linux

package shm

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/velo/transport"
	"github.com/velo-go/velo/velo/transport/ucxtransport"
)

// CUDA IPC over the real UCX transport in a binary built with CUDA, on a machine without a GPU:
// the CUDA calls reach the toolkit's stub driver, which refuses each with
// CUDA_ERROR_STUB_LIBRARY. A lease of device memory to a same-host consumer then goes to the UCX
// transport, the reason naming the driver's answer is logged and shown, nothing stays exported or
// mapped, and a consumer whose driver sees no device opens no CUDA IPC channel at all. (With a GPU
// the suite in test/gpu runs the real thing.)
func TestCUDAIPCStubDriverFallsBackToUCX(t *testing.T) {
	if _, err := ucx.CUDADeviceCount(); err == nil {
		t.Skip("this machine has a CUDA driver: test/gpu (TestVeloGPUSameHostCUDAIPC) covers CUDA IPC")
	}
	pair := func(t *testing.T, withoutDevice bool) (owner, consumer *Transport, route transport.RMA) {
		cfg := Config{Dir: privDir(t)}
		var err error
		owner, err = New(cfg)
		require.NoError(t, err)
		consumer, err = New(cfg)
		require.NoError(t, err)
		var inner [2]*ucxtransport.Transport
		for i := range inner {
			inner[i], err = ucxtransport.New(ucxtransport.Config{TLS: "tcp", Logger: (&testHost{}).Logger()})
			require.NoError(t, err)
		}
		ho, hc := &testHost{id: 1, inc: 11}, &testHost{id: 2, inc: 22}
		require.NoError(t, inner[0].Start(ho))
		require.NoError(t, inner[1].Start(hc))
		route = Route(inner[0], owner)
		Route(inner[1], consumer)
		consumer.cuda.withoutDevice = withoutDevice
		require.NoError(t, owner.Start(ho))
		require.NoError(t, consumer.Start(hc))
		t.Cleanup(func() {
			consumer.Close()
			owner.Close()
			inner[1].Close()
			inner[0].Close()
		})
		require.NoError(t, consumer.AddPeer(context.Background(), transport.PeerAddress{ID: 1, Incarnation: 11, Blob: owner.Address()}))
		waitReady(t, consumer, 1)
		return owner, consumer, route
	}

	t.Run("consumer", func(t *testing.T) {
		_, consumer, _ := pair(t, false)
		ok, why := consumer.CUDAPathTo(1)
		assert.False(t, ok, "a consumer whose driver is the stub opens no CUDA IPC channel")
		assert.Contains(t, why, "CUDA_ERROR_STUB_LIBRARY", why)
	})

	t.Run("owner", func(t *testing.T) {
		owner, consumer, route := pair(t, true)
		require.Eventually(t, func() bool { ok, _ := consumer.CUDAPathTo(1); return ok }, probeTimeout, 5*time.Millisecond, "the consumer's CUDA IPC channel")
		require.Eventually(t, func() bool { owner.mu.Lock(); defer owner.mu.Unlock(); return owner.servesCUDA(2) }, probeTimeout, 5*time.Millisecond)

		mem := anon(t, 1<<20)
		reg, err := route.(transport.PeerMemoryRegisterer).RegisterMemoryOfFor(2, mem, transport.MemoryCUDA)
		// The export failed, so the lease went to UCX, which registers it or refuses it on its
		// own (the stub driver again); either way it is not a device key, and nothing panicked.
		if err == nil {
			assert.False(t, IsDeviceKey(reg.Key()), "a stub driver's export must not yield a device key")
			require.NoError(t, reg.Revoke(context.Background()))
		} else {
			t.Logf("UCX refused the fallback registration: %v", err)
		}
		d := owner.Describe()
		assert.Equal(t, "1", d["cuda_fallbacks"])
		assert.Equal(t, "0", d["cuda_exports"], "nothing stays exported")
		assert.Contains(t, d["cuda_consumers_not_taken"], "cuIpcGetMemHandle")
		assert.Contains(t, d["cuda_consumers_not_taken"], "CUDA_ERROR_STUB_LIBRARY")
		assert.Equal(t, "0", consumer.Describe()["cuda_mappings"])
		t.Logf("owner: %s", d["cuda_consumers_not_taken"])

		// Host memory is never exported, whatever the pair: it stays with the ring or UCX.
		reg, err = route.(transport.PeerMemoryRegisterer).RegisterMemoryOfFor(2, mem, transport.MemoryHost)
		require.NoError(t, err)
		assert.False(t, IsDeviceKey(reg.Key()))
		require.NoError(t, reg.Revoke(context.Background()))
	})
}
