package rdma_test

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"os"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/rendezvous"
	"github.com/velo-go/velo/velo/rendezvous/rdma"
	"github.com/velo-go/velo/velo/rendezvous/rdma/rdmatest"
)

// TestServeManyRegistersRuns: slots staged one after another and leased to one consumer in one
// call are registered once, each lease with the key of its own slot; a gap in the arena, or
// another consumer, starts a new registration. The run's registration lives until the last of
// its leases ends, and the pages of a slot whose lease ended first stay out of use until then.
func TestServeManyRegistersRuns(t *testing.T) {
	r, rt := newRegistry(t, rdma.Config{})
	page := os.Getpagesize()
	const n = 10_000 // three pages each
	pages := (n + page - 1) / page * page
	var data [][]byte
	var frees []func()
	var slots []rendezvous.Slot
	for i := range 7 {
		mem, opts := r.Pin(n, true)
		require.NotNil(t, mem, "Pin: %s", opts.Reason)
		data, frees = append(data, mem), append(frees, opts.OnFree)
		if i != 1 {
			t.Cleanup(opts.OnFree)
		}
		slots = append(slots, rendezvous.Slot{ID: uint64(i + 1), Data: mem, Opts: opts, Lease: rendezvous.LeaseInfo{ID: uint64(100 + i), Consumer: 7}})
	}
	for i := 1; i < len(data); i++ {
		require.Equal(t, uintptr(unsafe.Pointer(&data[i-1][0]))+uintptr(pages), uintptr(unsafe.Pointer(&data[i][0])), "slot %d does not follow slot %d in the arena", i, i-1)
	}
	// 0, 1, 2: a run for consumer 7; 3 follows 2 but goes to consumer 8; 4 is not leased, so 5
	// follows a gap.
	slots[3].Lease.Consumer, slots[5].Lease.Consumer = 8, 8
	batch := []rendezvous.Slot{slots[0], slots[1], slots[2], slots[3], slots[5]}
	offer, err := r.Consumer().Offer(0)
	require.NoError(t, err)
	served := r.Owner().ServeMany(context.Background(), batch, offer)
	require.Len(t, served, len(batch))
	for i, sv := range served {
		require.NoError(t, sv.Err, "entry %d", i)
		require.Equal(t, metrics.ReasonOK, sv.Reason, "entry %d", i)
	}
	assert.Equal(t, int64(3), rt.Registrations.Load(), "one registration for the run of three, one each for the others")
	st := r.Stats()
	assert.Equal(t, 3, st.LeaseRegistrations)
	assert.Equal(t, int64(5*pages), st.LeaseBytes, "the registrations cover the five slots' pages, no more")

	// Each lease's key names its own slot: the run's registration, at the slot's offset in it.
	keys := make([][]byte, len(served))
	for i, sv := range served {
		d, err := wire.DecodeRDMADescriptor(sv.Descriptor)
		require.NoError(t, err)
		keys[i] = d.Key
	}
	for j := range 3 {
		require.Len(t, keys[j], 32, "entry %d: a part's key", j)
		assert.Equal(t, keys[0][:16], keys[j][:16], "entry %d: the run's registration", j)
		assert.Equal(t, uint64(j*pages), binary.LittleEndian.Uint64(keys[j][16:]), "entry %d: its offset in the run", j)
		assert.Equal(t, uint64(pages), binary.LittleEndian.Uint64(keys[j][24:]), "entry %d: its slot's pages", j)
	}
	for j := 3; j < 5; j++ {
		assert.Len(t, keys[j], 16, "entry %d: a registration of its own", j)
	}

	// Slot 1's lease ends first and its payload is freed: its pages stay held while the run's
	// key lives, so a new slot of that size lands elsewhere.
	served[1].OnLeaseEnd()
	served[1].OnLeaseEnd() // a second end of the same lease counts once
	frees[1]()
	assert.Equal(t, 3, r.Stats().LeaseRegistrations, "the run lives while two of its leases do")
	assert.Zero(t, rt.Deregistrations.Load(), "nothing revoked yet")
	mem, opts := r.Pin(n, true)
	require.NotNil(t, mem)
	assert.NotEqual(t, unsafe.Pointer(&data[1][0]), unsafe.Pointer(&mem[0]), "a held slot's pages were handed out again")
	opts.OnFree()
	served[0].OnLeaseEnd()
	assert.Zero(t, rt.Deregistrations.Load())
	served[2].OnLeaseEnd()
	assert.Equal(t, int64(1), rt.Deregistrations.Load(), "the last lease of the run revoked its registration")
	assert.Equal(t, 2, r.Stats().LeaseRegistrations)
	mem, opts = r.Pin(n, true)
	require.NotNil(t, mem)
	assert.Equal(t, unsafe.Pointer(&data[1][0]), unsafe.Pointer(&mem[0]), "the freed slot's pages are back in use once the run is dead")
	opts.OnFree()
	for _, sv := range served[3:] {
		sv.OnLeaseEnd()
	}
	assert.Zero(t, rt.LiveRegistrations())
	st = r.Stats()
	assert.Zero(t, st.LeaseRegistrations)
	assert.Zero(t, st.LeaseBytes)
}

// noRuns is the fabric's transport saying it cannot name parts of a registration.
type noRuns struct{ *rdmatest.Transport }

func (noRuns) RegistersRuns() bool { return false }

// TestServeManyWithoutRuns: over a transport that cannot name parts of a registration, slots
// that follow each other get one registration each, with its whole key.
func TestServeManyWithoutRuns(t *testing.T) {
	rt, err := rdmatest.NewFabric().New("ucx")
	require.NoError(t, err)
	t.Cleanup(func() { rt.Close() })
	r, err := rdma.New(noRuns{rt}, rdma.Config{}, rdma.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	t.Cleanup(func() { r.Close() })
	var batch []rendezvous.Slot
	for i := range 3 {
		mem, opts := r.Pin(4096, true)
		require.NotNil(t, mem)
		t.Cleanup(opts.OnFree)
		batch = append(batch, rendezvous.Slot{ID: uint64(i + 1), Data: mem, Opts: opts, Lease: rendezvous.LeaseInfo{ID: uint64(i + 1), Consumer: 7}})
	}
	offer, err := r.Consumer().Offer(0)
	require.NoError(t, err)
	served := r.Owner().ServeMany(context.Background(), batch, offer)
	for i, sv := range served {
		require.NoError(t, sv.Err)
		d, err := wire.DecodeRDMADescriptor(sv.Descriptor)
		require.NoError(t, err)
		assert.Len(t, d.Key, 16, "entry %d: a registration of its own", i)
	}
	assert.Equal(t, int64(3), rt.Registrations.Load())
	for _, sv := range served {
		sv.OnLeaseEnd()
	}
	assert.Zero(t, rt.LiveRegistrations())
}
