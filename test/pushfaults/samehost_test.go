package pushfaults

// Push through the same-host path: a writer and a receiver of this host, both with WithSameHost,
// write a grant through shared memory. Both sides' push path metrics say shm, the bytes land
// intact inside the grant and nowhere else, and the grant's end ends the writer's reach.

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sameHost places every peer on this host with the same-host path on, their sockets in one
// private directory (link then waits for their channels).
func sameHost(t *testing.T) placement {
	t.Helper()
	dir, err := os.MkdirTemp("", "velo-shm-") // short: a socket path has at most 107 bytes
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return func(t *testing.T, name string, flags ...string) *peer {
		t.Helper()
		return startPeer(t, name, append([]string{"-same-host", "-shm-dir", dir}, flags...)...)
	}
}

// paths is the peer's velo_push_path_total as "side/path/reason" → count.
func (p *peer) paths() map[string]float64 {
	p.t.Helper()
	out := map[string]float64{}
	for k, v := range p.ok("paths")["paths"].(map[string]any) {
		out[k] = v.(float64)
	}
	return out
}

// TestSameHostPutSizes: notified puts of 1 KiB (inside its notification) to 64 MiB, at odd
// offsets, from a writer process into a receiver process of this host. Each range holds the
// writer's bytes when its notification arrives; nothing outside the grant changes; the writer
// counts every put on path shm and the receiver its grant; once revoked, a put ends with
// ErrGrantEnded, writes nothing, and nothing stays registered; once the writer quit, the receiver
// maps no ring.
func TestSameHostPutSizes(t *testing.T) {
	const span = 64 << 20
	at := sameHost(t)
	recv := receiverWithRegionOn(t, at, span)
	writer := at(t, "writer")
	link(t, recv, writer)
	id, h := recv.grant(writer, guard, span, time.Minute)

	sizes := []uint64{1 << 10, 64<<10 + 3, 1<<20 + 1, 5<<20 + 7, 64 << 20}
	putEach(t, recv, writer, id, h, span, sizes)
	// A batch of puts that each span several ring buffers, on several channels at once.
	b := writer.ok("batch %s %d %d %d %d %d %d", h, guard+4096, 3<<20, 8, 500, 4, 1)
	require.Empty(t, b["errors"])
	for i, s := range b["sums"].([]any) {
		off := uint64(guard + 4096 + i*(3<<20))
		require.Equal(t, s, recv.sum(off, 3<<20), "batch entry %d", i)
	}
	recv.guards("after the batch", guard, span)

	wp, rp := writer.paths(), recv.paths()
	t.Logf("writer paths %v, receiver paths %v", wp, rp)
	assert.EqualValues(t, len(sizes)+8, wp["writer/shm/ok"], "every put counts on path shm at the writer")
	assert.Zero(t, wp["writer/rdma/ok"], "no put went over UCX")
	assert.EqualValues(t, 1, rp["receiver/shm/ok"], "the receiver answered its grant on path shm")
	assert.Zero(t, rp["receiver/rdma/ok"])
	assert.Equal(t, 1, recv.stats().LeaseRegistrations, "the grant's one range is registered once")

	recv.ok("revoke %d", id)
	_, why := recv.done(id, 10*time.Second)
	assert.Contains(t, why, "revoked")
	before := recv.sum(guard, span)
	r := writer.do("put %s %d %d %d", h, guard, 1<<20, 7)
	assert.Equal(t, true, r["ended"], "a put on a revoked grant: %v", r["error"])
	assert.Equal(t, before, recv.sum(guard, span), "a put after the grant's end wrote into the region")
	recv.clean()
	recv.guards("after the revocation", guard, span)

	// The writer goes: the receiver keeps no ring of it.
	require.Greater(t, ringMaps(t, recv.Cmd.Process.Pid), 0, "the receiver maps the channels' rings")
	writer.ok("quit")
	<-writer.Exited()
	require.Eventually(t, func() bool { return ringMaps(t, recv.Cmd.Process.Pid) == 0 }, 10*time.Second, 50*time.Millisecond,
		"the receiver still maps a ring of the writer that went")
}

// TestSameHostWriterKilledMidPut: TestWriterKilledMidPut with both on the same-host path: the
// grant ends naming the writer, nothing outside it was written, nothing stays registered, and a
// second writer writes the range through shared memory.
func TestSameHostWriterKilledMidPut(t *testing.T) { writerKilledMidPut(t, sameHost(t)) }

// ringMaps counts the same-host rings process pid maps (each channel's, in either direction).
func ringMaps(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	require.NoError(t, err)
	return strings.Count(string(b), "velo-shm-ring")
}

// TestPushUnderSharedMemoryUCXLanes: with UCX_TLS=sm,self UCX has no lane between the two
// processes; a grant then goes by chunks under no_ucx_lane on both sides (never a failed write),
// with the bytes intact, and with the same-host path on it goes through shared memory.
func TestPushUnderSharedMemoryUCXLanes(t *testing.T) {
	const span = 8 << 20
	smOnly := func(flags ...string) placement {
		return func(t *testing.T, name string, more ...string) *peer {
			t.Helper()
			return launchPeer(t, nil, pushpeer.Path(t), []string{"UCX_TLS=sm,self"}, name, append(flags, more...)...)
		}
	}
	dir, err := os.MkdirTemp("", "velo-shm-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	for _, c := range []struct {
		name  string
		at    placement
		path  string
		grant string
	}{
		{"chunked", smOnly(), "writer/chunked/no_ucx_lane", "receiver/chunked/no_ucx_lane"},
		{"same-host", smOnly("-same-host", "-shm-dir", dir), "writer/shm/ok", "receiver/shm/ok"},
	} {
		t.Run(c.name, func(t *testing.T) {
			recv := receiverWithRegionOn(t, c.at, span)
			writer := c.at(t, "writer")
			link(t, recv, writer)
			id, h := recv.grant(writer, guard, span, time.Minute)
			putEach(t, recv, writer, id, h, span, []uint64{64<<10 + 3, 5<<20 + 7})
			wp, rp := writer.paths(), recv.paths()
			assert.Equal(t, map[string]float64{c.path: 2}, wp, "the writer's paths")
			assert.Equal(t, map[string]float64{c.grant: 1}, rp, "the receiver's paths")
			assert.NotContains(t, writer.Stderr.String()+recv.Stderr.String(), "get_failed")
		})
	}
}
