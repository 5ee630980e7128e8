//go:build linux

package shm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/transport"
)

// The CUDA IPC protocol of the same-host path between two transports over their real sockets and
// handshake. A machine without a GPU has no driver to export and map device memory, so hostIPC
// stands in for the driver's part (transport.CUDAIPC): an "allocation" is host memory the test
// made, its export names it by address, and a "mapping" copies out of it, counting opens and
// closes. Everything of the path itself (keys, exports only for a live key of that consumer, the
// mapping cache per allocation, the owner's notice and the consumer's answer before Dead, the
// fallbacks and their reasons) runs as it does over CUDA. The driver's own calls are tested under
// -tags cuda,ucx_static (cudaipc_stub_test.go: the stub driver's refusals) and on a GPU
// (test/gpu, TestVeloGPUSameHostCUDAIPC).

type hostIPC struct {
	mu        sync.Mutex
	allocs    map[uint64][]byte // by allocation ID (its address)
	opens     int
	closes    int
	notReady  error
	exportErr error
	openErr   error
	copying   chan struct{} // when set, a copy says it started here and waits for gate
	gate      chan struct{}
}

func newHostIPC() *hostIPC { return &hostIPC{allocs: map[uint64][]byte{}} }

func addr(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

// alloc is an allocation of n bytes (as cuMemAlloc: exported whole, whatever part is leased).
func (h *hostIPC) alloc(t *testing.T, n int) []byte {
	b := anon(t, n)
	h.mu.Lock()
	h.allocs[addr(b)] = b
	h.mu.Unlock()
	return b
}

func (h *hostIPC) ExportCUDA(mem []byte) (transport.CUDAExport, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.exportErr != nil {
		return transport.CUDAExport{}, h.exportErr
	}
	for id, a := range h.allocs {
		if addr(mem) >= id && addr(mem)+uint64(len(mem)) <= id+uint64(len(a)) {
			var e transport.CUDAExport
			binary.LittleEndian.PutUint64(e.Handle[:], id)
			e.AllocID, e.AllocSize, e.Offset = id, uint64(len(a)), addr(mem)-id
			return e, nil
		}
	}
	return transport.CUDAExport{}, errors.New("not in an allocation")
}

func (h *hostIPC) OpenCUDA(e transport.CUDAExport, _ []byte, _ transport.MemoryType) (transport.CUDAMapping, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.openErr != nil {
		return nil, h.openErr
	}
	a := h.allocs[binary.LittleEndian.Uint64(e.Handle[:])]
	if a == nil || uint64(len(a)) != e.AllocSize {
		return nil, errors.New("CUDA_ERROR_INVALID_HANDLE")
	}
	h.opens++
	return &hostMapping{h: h, a: a}, nil
}

func (h *hostIPC) CUDAReady() error { return h.notReady }

func (h *hostIPC) open() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.opens - h.closes
}

type hostMapping struct {
	h      *hostIPC
	a      []byte
	closed bool
}

func (m *hostMapping) CopyTo(dst []byte, dt transport.MemoryType, off uint64) error {
	if m.h.copying != nil {
		m.h.copying <- struct{}{}
		<-m.h.gate
	}
	m.h.mu.Lock()
	closed := m.closed
	m.h.mu.Unlock()
	if closed {
		return errors.New("a copy out of a closed mapping")
	}
	if off+uint64(len(dst)) > uint64(len(m.a)) {
		return fmt.Errorf("a copy of %d bytes at %d of %d", len(dst), off, len(m.a))
	}
	copy(dst, m.a[off:])
	return nil
}

func (m *hostMapping) Close() error {
	m.h.mu.Lock()
	defer m.h.mu.Unlock()
	if !m.closed {
		m.closed = true
		m.h.closes++
	}
	return nil
}

// cudaPair is an owner (1) and a consumer (2) with CUDA IPC beside the path; the consumer's
// channel is proven before it returns unless the consumer cannot open one.
func cudaPair(t *testing.T, ownerIPC, consumerIPC *hostIPC, session []byte) (owner, consumer *Transport) {
	t.Helper()
	cfg := Config{Dir: privDir(t), ChunkSize: 64 << 10}
	var err error
	owner, err = New(cfg)
	require.NoError(t, err)
	consumer, err = New(cfg)
	require.NoError(t, err)
	owner.setCUDA(ownerIPC)
	consumer.setCUDA(consumerIPC)
	require.NoError(t, owner.Start(&testHost{id: 1, inc: 11, session: session}))
	require.NoError(t, consumer.Start(&testHost{id: 2, inc: 22, session: session}))
	t.Cleanup(func() { consumer.Close(); owner.Close() })
	require.NoError(t, consumer.AddPeer(context.Background(), transport.PeerAddress{ID: 1, Incarnation: 11, Blob: owner.Address()}))
	waitReady(t, consumer, 1)
	if consumerIPC.notReady == nil {
		require.Eventually(t, func() bool {
			owner.mu.Lock()
			defer owner.mu.Unlock()
			return owner.servesCUDA(2)
		}, 5*time.Second, 5*time.Millisecond, "the consumer's CUDA IPC channel never reached the owner")
	}
	return owner, consumer
}

func dead(r transport.Registration) bool {
	select {
	case <-r.Dead():
		return true
	default:
		return false
	}
}

// Two leases in one allocation: the consumer maps the allocation once, reads each lease's bytes
// exactly, is refused outside a key's range and after its revocation, and closes the mapping when
// the owner's notice of the last key came; each registration is dead only once the consumer
// answered its notice.
func TestCUDAIPCReadsLeasesOfOneAllocation(t *testing.T) {
	for _, session := range [][]byte{nil, []byte("cluster session key")} {
		t.Run(fmt.Sprintf("secret=%t", session != nil), func(t *testing.T) {
			oi := newHostIPC()
			ci := oi // one "driver": the consumer maps what the owner exported
			owner, consumer := cudaPair(t, oi, ci, session)
			ok, why := consumer.CUDAPathTo(1)
			require.True(t, ok, why)
			a := oi.alloc(t, 1<<20)

			r1 := owner.registerDevice(2, a[4096:4096+100_000])
			r2 := owner.registerDevice(2, a[512<<10:512<<10+4096])
			require.NotNil(t, r1)
			require.NotNil(t, r2)
			require.True(t, IsDeviceKey(r1.Key()) && !IsKey(r1.Key()), "a device key is not a ring key")
			assert.Nil(t, owner.registerDevice(3, a), "a consumer without a channel to this owner gets no export")

			ctx := context.Background()
			dst := make([]byte, 100_000)
			require.NoError(t, consumer.getDevice(ctx, 1, r1.Key(), 0, dst, transport.MemoryHost))
			require.True(t, bytes.Equal(dst, a[4096:4096+100_000]))
			part := make([]byte, 777)
			require.NoError(t, consumer.getDevice(ctx, 1, r1.Key(), 5000, part, transport.MemoryHost))
			require.True(t, bytes.Equal(part, a[4096+5000:4096+5000+777]))
			small := make([]byte, 4096)
			require.NoError(t, consumer.getDevice(ctx, 1, r2.Key(), 0, small, transport.MemoryHost))
			require.True(t, bytes.Equal(small, a[512<<10:512<<10+4096]))
			assert.Equal(t, 1, ci.opens, "one mapping per owner allocation")
			assert.Equal(t, "1", consumer.Describe()["cuda_mappings"])

			err := consumer.getDevice(ctx, 1, r2.Key(), 1, small, transport.MemoryHost)
			require.ErrorIs(t, err, errKeyRefused, "a read past the key's range")
			// The ring path never serves a device key, nor the device path a ring key.
			require.Error(t, consumer.Get(ctx, 1, r1.Key(), 0, dst))

			require.NoError(t, r1.Revoke(ctx))
			require.Eventually(t, func() bool { return dead(r1) }, 5*time.Second, time.Millisecond, "r1 dead once the consumer answered")
			assert.Equal(t, 1, ci.open(), "r2 still holds the allocation's mapping")
			err = consumer.getDevice(ctx, 1, r1.Key(), 0, dst, transport.MemoryHost)
			require.ErrorIs(t, err, transport.ErrKeyRevoked)

			require.NoError(t, r2.Revoke(ctx))
			require.Eventually(t, func() bool { return dead(r2) }, 5*time.Second, time.Millisecond)
			assert.Equal(t, 0, ci.open(), "the mapping closed with the allocation's last key, before Dead")
			assert.Equal(t, "0", consumer.Describe()["cuda_mappings"])
			assert.Equal(t, "0", owner.Describe()["cuda_exports"])
		})
	}
}

// A revocation while the consumer copies: the registration stays alive until the copy is done
// and the consumer answered the owner's notice (after closing its mapping).
func TestCUDAIPCRevokeWaitsForTheCopyAndTheUnmapping(t *testing.T) {
	oi := newHostIPC()
	ci := oi // one "driver": the consumer maps what the owner exported
	owner, consumer := cudaPair(t, oi, ci, nil)
	a := oi.alloc(t, 64<<10)
	r := owner.registerDevice(2, a)
	require.NotNil(t, r)
	ci.copying, ci.gate = make(chan struct{}), make(chan struct{})
	dst := make([]byte, len(a))
	errc := make(chan error, 1)
	go func() { errc <- consumer.getDevice(context.Background(), 1, r.Key(), 0, dst, transport.MemoryHost) }()
	<-ci.copying
	require.NoError(t, r.Revoke(context.Background()))
	time.Sleep(50 * time.Millisecond)
	assert.False(t, dead(r), "dead while the consumer copies out of the allocation")
	close(ci.gate)
	require.NoError(t, <-errc)
	require.True(t, bytes.Equal(dst, a))
	require.Eventually(t, func() bool { return dead(r) }, 5*time.Second, time.Millisecond)
	assert.Equal(t, 0, ci.open())
}

// readOnce is a pair whose consumer read a lease of device memory once (its mapping is open).
func readOnce(t *testing.T) (owner, consumer *Transport, ipc *hostIPC, r transport.Registration) {
	ipc = newHostIPC()
	owner, consumer = cudaPair(t, ipc, ipc, nil)
	r = owner.registerDevice(2, ipc.alloc(t, 64<<10))
	require.NotNil(t, r)
	require.NoError(t, consumer.getDevice(context.Background(), 1, r.Key(), 0, make([]byte, 10), transport.MemoryHost))
	require.Equal(t, 1, ipc.open())
	return owner, consumer, ipc, r
}

// The consumer or the owner going: the consumer's mappings close, and the owner's registrations
// die without waiting for an answer that cannot come.
func TestCUDAIPCPeerGoneClosesEverything(t *testing.T) {
	t.Run("consumer", func(t *testing.T) {
		_, consumer, ci, r := readOnce(t)
		require.NoError(t, consumer.Close())
		assert.Equal(t, 0, ci.open(), "Close unmaps")
		require.NoError(t, r.Revoke(context.Background()))
		require.Eventually(t, func() bool { return dead(r) }, 5*time.Second, time.Millisecond)
	})
	t.Run("owner", func(t *testing.T) {
		owner, consumer, ci, r := readOnce(t)
		require.NoError(t, owner.Close())
		require.True(t, dead(r), "Close revokes and ends the channels")
		require.Eventually(t, func() bool { return ci.open() == 0 }, 5*time.Second, time.Millisecond, "the consumer unmaps when the owner goes")
		ok, why := consumer.CUDAPathTo(1)
		assert.False(t, ok)
		assert.Contains(t, why, "closed")
	})
	t.Run("removed", func(t *testing.T) {
		_, consumer, ci, r := readOnce(t)
		consumer.RemovePeer(1)
		assert.Equal(t, 0, ci.open(), "RemovePeer unmaps")
		require.NoError(t, r.Revoke(context.Background()))
		require.Eventually(t, func() bool { return dead(r) }, 5*time.Second, time.Millisecond)
	})
}

// Every step that can fail leaves the pair on the inner transport with the reason said, and
// nothing open.
func TestCUDAIPCFallsBackWithAReason(t *testing.T) {
	t.Run("consumer without a device", func(t *testing.T) {
		oi := newHostIPC()
		ci := oi // one "driver": the consumer maps what the owner exported
		ci.notReady = errors.New("cuInit: CUDA_ERROR_NO_DEVICE (100)")
		owner, consumer := cudaPair(t, oi, ci, nil)
		ok, why := consumer.CUDAPathTo(1)
		assert.False(t, ok)
		assert.Contains(t, why, "CUDA_ERROR_NO_DEVICE")
		assert.Nil(t, owner.registerDevice(2, oi.alloc(t, 4096)))
		d := owner.Describe()
		assert.Equal(t, "1", d["cuda_fallbacks"])
		assert.Contains(t, d["cuda_consumers_not_taken"], "no CUDA IPC channel")
	})
	t.Run("export refused", func(t *testing.T) {
		oi := newHostIPC()
		ci := oi // one "driver": the consumer maps what the owner exported
		oi.exportErr = errors.New("ucx: cuIpcGetMemHandle: CUDA_ERROR_STUB_LIBRARY (34)")
		owner, _ := cudaPair(t, oi, ci, nil)
		assert.Nil(t, owner.registerDevice(2, oi.alloc(t, 4096)))
		assert.Contains(t, owner.Describe()["cuda_consumers_not_taken"], "CUDA_ERROR_STUB_LIBRARY")
		assert.Equal(t, "0", owner.Describe()["cuda_exports"])
	})
	t.Run("open refused", func(t *testing.T) {
		oi := newHostIPC()
		ci := oi // one "driver": the consumer maps what the owner exported
		ci.openErr = errors.New("ucx: cuIpcOpenMemHandle: CUDA_ERROR_INVALID_HANDLE (400)")
		owner, consumer := cudaPair(t, oi, ci, nil)
		r := owner.registerDevice(2, oi.alloc(t, 4096))
		require.NotNil(t, r)
		err := consumer.getDevice(context.Background(), 1, r.Key(), 0, make([]byte, 10), transport.MemoryHost)
		require.ErrorContains(t, err, "CUDA_ERROR_INVALID_HANDLE")
		ok, why := consumer.CUDAPathTo(1)
		assert.False(t, ok)
		assert.Contains(t, why, "CUDA_ERROR_INVALID_HANDLE")
		require.Eventually(t, func() bool {
			owner.mu.Lock()
			defer owner.mu.Unlock()
			return !owner.servesCUDA(2)
		}, 5*time.Second, time.Millisecond, "the owner sees the consumer's channel close")
		assert.Nil(t, owner.registerDevice(2, oi.alloc(t, 4096)), "later leases go to the inner transport")
		require.NoError(t, r.Revoke(context.Background()))
		require.True(t, dead(r), "nothing holds it once the channel closed")
		assert.Equal(t, 0, ci.open())
	})
	t.Run("no CUDA IPC beside the path", func(t *testing.T) {
		owner, consumer := newPair(t, Config{}, nil, nil)
		waitReady(t, consumer, 1)
		assert.Nil(t, owner.registerDevice(2, anon(t, 4096)))
		ok, why := consumer.CUDAPathTo(1)
		assert.False(t, ok)
		assert.Contains(t, why, "no CUDA IPC")
		assert.Equal(t, "off", owner.Describe()["cuda_ipc"])
	})
}
