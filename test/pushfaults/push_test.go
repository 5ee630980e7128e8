package pushfaults

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/test/internal/netns"
)

// guard is how many bytes on each side of a grant no put may touch.
const guard = 64 << 10

// regionSeed is the fill of every receiver's region; writers put other fills.
const regionSeed = 1

// receiverWithRegionOn starts a receiver where at puts it, with a pinned region of size bytes
// plus a guard on each side.
func receiverWithRegionOn(t *testing.T, at placement, size uint64, flags ...string) *peer {
	t.Helper()
	recv := at(t, "receiver", flags...)
	r := recv.ok("region %d %d", size+2*guard, regionSeed)
	require.Equal(t, true, r["pinned"], "the region is not pinned: %v", r["reason"])
	return recv
}

// placement starts the suite's peers: all on this host, or the receiver on one host and the
// writers on another (network namespaces joined by a veth pair, so the writes leave a host).
type placement func(t *testing.T, name string, flags ...string) *peer

func oneHost(t *testing.T, name string, flags ...string) *peer {
	t.Helper()
	return startPeer(t, name, flags...)
}

// twoHosts makes the hosts (it skips the test where namespaces cannot be made, saying why).
func twoHosts(t *testing.T) placement {
	t.Helper()
	p := netns.New(t)
	return func(t *testing.T, name string, flags ...string) *peer {
		t.Helper()
		if name == "receiver" {
			return startPeerOn(t, &p.A, name, flags...)
		}
		return startPeerOn(t, &p.B, name, flags...)
	}
}

// TestPutSizes: puts of 1 KiB to 256 MiB, at odd offsets, from a writer process into a receiver
// process. The receiver reads each put's range the moment its notification arrives and finds the
// writer's bytes (SHA-256); the bytes around the grant are untouched; the grant took the RDMA path
// (one registration); once revoked, nothing stays registered.
func TestPutSizes(t *testing.T) {
	putSizes(t, oneHost, 256<<20, []uint64{1 << 10, 64<<10 + 3, 1<<20 + 1, 16 << 20, 256 << 20})
}

// TestPutSizesAcrossHosts: the same between two hosts (network namespaces joined by a veth pair,
// UCX and the control plane on the veth's addresses), up to 64 MiB.
func TestPutSizesAcrossHosts(t *testing.T) {
	putSizes(t, twoHosts(t), 64<<20, []uint64{1 << 10, 64<<10 + 3, 1<<20 + 1, 64 << 20})
}

func putSizes(t *testing.T, at placement, span uint64, sizes []uint64) {
	recv := receiverWithRegionOn(t, at, span)
	writer := at(t, "writer")
	link(t, recv, writer)
	id, h := recv.grant(writer, guard, span, time.Minute)

	putEach(t, recv, writer, id, h, span, sizes)
	assert.Equal(t, 1, recv.stats().LeaseRegistrations, "the grant's one range is registered once: the RDMA path")

	recv.ok("revoke %d", id)
	_, why := recv.done(id, 10*time.Second)
	assert.Contains(t, why, "revoked")
	r := writer.do("put %s %d %d %d", h, guard, 4096, 7)
	assert.Equal(t, true, r["ended"], "a put on a revoked grant: %v", r["error"])
	recv.clean()
	recv.guards("after the revocation", guard, span)
}

// putEach puts each size in turn through grant id (handle h) at odd offsets of [guard,
// guard+span), each notified: the receiver reads each put's range the moment its notification
// arrives and finds the writer's bytes (SHA-256), notifications come in order, and the bytes
// around the grant are untouched.
func putEach(t *testing.T, recv, writer *peer, id uint64, h string, span uint64, sizes []uint64) {
	t.Helper()
	for i, n := range sizes {
		off := guard + uint64(i)*4099%(span-n+1)
		note := fmt.Sprintf("put-%d", i)
		r := writer.ok("put %s %d %d %d %s", h, off, n, 100+i, note)
		require.EqualValues(t, 1, r["puts"])
		t.Logf("%d bytes at %d: %.4f s", n, off, r["seconds"])

		notes := recv.ok("notes %d", id)["notes"].([]any)
		require.Len(t, notes, i+1, "one notification per put, delivered by the time Put returned")
		got := notes[i].(map[string]any)
		require.Equal(t, note, got["payload"], "notifications in order")
		require.EqualValues(t, off, got["offset"])
		require.EqualValues(t, n, got["length"])
		require.Equal(t, r["sha256"], got["sha256"], "%d bytes: the range read at its notification is not what the writer put", n)
		require.Equal(t, r["sha256"], recv.sum(off, n), "%d bytes: the range is not what the writer put", n)
		recv.guards(fmt.Sprintf("after the put of %d bytes", n), guard, span)
	}
}

// TestWriterKilledMidPut: the writer is SIGKILLed while puts of 64 MiB follow each other. The
// receiver's grant ends naming the writer, nothing outside it was written, nothing stays
// registered, and a new writer gets the same range and writes it.
func TestWriterKilledMidPut(t *testing.T) { writerKilledMidPut(t, oneHost) }

// TestWriterKilledMidPutAcrossHosts: the same with the writers on another host than the receiver.
func TestWriterKilledMidPutAcrossHosts(t *testing.T) { writerKilledMidPut(t, twoHosts(t)) }

func writerKilledMidPut(t *testing.T, at placement) {
	const span = 64 << 20
	recv := receiverWithRegionOn(t, at, span)
	writer := at(t, "writer")
	link(t, recv, writer)
	id, h := recv.grant(writer, guard, span, time.Minute)

	writer.send("putloop %s %d %d %d %d", h, guard, span, 2, 1000)
	recv.waitStats("the grant acquired", 30*time.Second, func(s stats) bool { return s.LeaseRegistrations == 1 })
	time.Sleep(300 * time.Millisecond)
	writer.kill()

	took, why := recv.done(id, 20*time.Second)
	t.Logf("the grant ended %v after the kill: %s", took, why)
	assert.Contains(t, why, "write grant ended")
	assert.Contains(t, why, "its writer went down")
	recv.clean()
	recv.guards("after the writer died", guard, span)

	second := at(t, "second")
	link(t, recv, second)
	id2, h2 := recv.grant(second, guard, span, time.Minute)
	r := second.ok("put %s %d %d %d", h2, guard, span, 3)
	require.Equal(t, r["sha256"], recv.sum(guard, span), "the second writer's bytes")
	recv.guards("after the second writer", guard, span)
	recv.ok("revoke %d", id2)
	recv.done(id2, 10*time.Second)
	recv.clean()
}

// The stalled writer's bound: the receiver closes a stalled writer's endpoints with force this
// long after revoking its key (velo.RDMAConfig.ForceCloseAfter).
const forceAfter = 2 * time.Second

// TestWriterStoppedMidPut: the writer is SIGSTOPped while puts of 64 MiB follow each other. The
// receiver revokes the grant, and Done closes within the force bound (the stalled writer does not
// keep the region); the range is granted to a second writer, which writes it. Then the stopped
// writer goes on: its put fails saying the grant ended, and the region keeps the second writer's
// bytes.
func TestWriterStoppedMidPut(t *testing.T) { writerStoppedMidPut(t, oneHost) }

// TestWriterStoppedMidPutAcrossHosts: the same with the writers on another host than the receiver.
func TestWriterStoppedMidPutAcrossHosts(t *testing.T) { writerStoppedMidPut(t, twoHosts(t)) }

func writerStoppedMidPut(t *testing.T, at placement) {
	const span = 64 << 20
	recv := receiverWithRegionOn(t, at, span, "-force-close-after", forceAfter.String())
	writer := at(t, "writer")
	link(t, recv, writer)
	id, h := recv.grant(writer, guard, span, time.Minute)

	writer.send("putloop %s %d %d %d %d", h, guard, span, 2, 1000)
	recv.waitStats("the grant acquired", 30*time.Second, func(s stats) bool { return s.LeaseRegistrations == 1 })
	time.Sleep(300 * time.Millisecond)
	writer.signal(syscall.SIGSTOP)

	recv.ok("revoke %d", id)
	// A guarded PUT's fragments are checked against the key one by one as they arrive, so a
	// revoked write key is dead at once; the bound allows for the force close all the same.
	took, why := recv.done(id, forceAfter+5*time.Second)
	t.Logf("Done %v after the revocation: %s", took, why)
	assert.Contains(t, why, "write grant ended")
	recv.clean()
	recv.guards("after the stalled writer's grant ended", guard, span)

	r := takeOver(t, at, recv, writer, span)
	assert.True(t, r["ended"] == true || strings.Contains(r["error"].(string), "revoked"),
		"the resumed writer's error does not say the grant ended: %q", r["error"])
	recv.clean()
}

// takeOver grants the stopped writer's range to a second writer, which writes it; then the
// stopped writer resumes, its put fails, and the region keeps the second writer's bytes with
// nothing outside the grant changed. It ends the second grant and returns the resumed writer's
// answer.
func takeOver(t *testing.T, at placement, recv, stopped *peer, span uint64) map[string]any {
	t.Helper()
	second := at(t, "second")
	link(t, recv, second)
	id2, h2 := recv.grant(second, guard, span, time.Minute)
	want := second.ok("put %s %d %d %d", h2, guard, span, 3)["sha256"]
	require.Equal(t, want, recv.sum(guard, span), "the second writer's bytes")

	stopped.signal(syscall.SIGCONT)
	r := stopped.read(time.Minute)
	t.Logf("the resumed writer: %v puts, then %q", r["puts"], r["error"])
	require.NotEmpty(t, r["error"], "the resumed writer's put succeeded after its grant ended")
	time.Sleep(200 * time.Millisecond)
	require.Equal(t, want, recv.sum(guard, span), "the resumed writer wrote into the region after its grant ended")
	recv.guards("after the stalled writer resumed", guard, span)

	recv.ok("revoke %d", id2)
	recv.done(id2, 10*time.Second)
	return r
}

// TestChunkedWriterStoppedMidChunk: on the chunked path the receiver reads each chunk from the
// socket straight into the region, so a writer stopped in the middle of a chunk leaves a read into
// the region pending. The writer is SIGSTOPped while 64 MiB puts follow each other over the
// receiver's chunked path (its kill switch), and the receiver revokes the grant: Done waits for
// that read, and closes once the control plane's I/O timeout (3 s here) has cut it, not later.
// A second writer then writes the range; the stopped writer resumes, its put fails, and the region
// keeps the second writer's bytes; nothing outside the grant changed.
func TestChunkedWriterStoppedMidChunk(t *testing.T) {
	const span = 64 << 20
	const ioTimeout = 3 * time.Second
	t.Setenv(killSwitchEnv, "1")
	recv := startPeer(t, "receiver", "-io-timeout", ioTimeout.String())
	t.Setenv(killSwitchEnv, "") // the writers keep their RDMA path; the receiver answers chunked
	r := recv.ok("region %d %d", span+2*guard, regionSeed)
	require.Equal(t, false, r["pinned"], "the receiver's region (reason %v)", r["reason"])
	writer := startPeer(t, "writer")
	link(t, recv, writer)
	id, h := recv.grant(writer, guard, span, time.Minute)

	writer.send("putloop %s %d %d %d %d", h, guard, span, 2, 1000)
	time.Sleep(500 * time.Millisecond)
	writer.signal(syscall.SIGSTOP)
	time.Sleep(100 * time.Millisecond) // what the writer had sent is read; the receiver waits for the rest

	recv.ok("revoke %d", id)
	took, why := recv.done(id, ioTimeout+5*time.Second)
	t.Logf("Done %v after the revocation: %s", took, why)
	assert.Contains(t, why, "write grant ended")
	recv.guards("after the stalled writer's grant ended", guard, span)

	takeOver(t, oneHost, recv, writer, span)
}

// TestReceiverDrainsMidPut: the receiver drains while the writer's batches of 1 MiB puts are in
// flight. The batch returns (no hang); each entry completed, with its bytes in the receiver's
// memory, or failed saying the grant ended or the receiver drains; the grant ends; nothing outside
// it was written and nothing stays registered.
func TestReceiverDrainsMidPut(t *testing.T) { receiverDrainsMidPut(t, oneHost) }

// TestReceiverDrainsMidPutAcrossHosts: the same with the writer on another host than the receiver.
func TestReceiverDrainsMidPutAcrossHosts(t *testing.T) { receiverDrainsMidPut(t, twoHosts(t)) }

func receiverDrainsMidPut(t *testing.T, at placement) {
	const entry, entries = 1 << 20, 64
	const span = entry * entries
	recv := receiverWithRegionOn(t, at, span)
	writer := at(t, "writer")
	link(t, recv, writer)
	id, h := recv.grant(writer, guard, span, time.Minute)

	writer.send("batch %s %d %d %d %d %d %d", h, guard, entry, entries, 10, 8, 1000)
	recv.waitStats("the grant acquired", 30*time.Second, func(s stats) bool { return s.LeaseRegistrations == 1 })
	time.Sleep(200 * time.Millisecond)
	recv.ok("drain")

	r := writer.read(30 * time.Second)
	errs, _ := r["errors"].([]any)
	t.Logf("%v rounds; the last: %d of %d entries failed, e.g. %v", r["rounds"], len(errs), entries, errs[:min(len(errs), 1)])
	require.NotEmpty(t, errs, "the batches ran to their end: the drain came too late")
	require.EqualValues(t, 0, r["unclear"], "entries failed with errors that say neither that the grant ended nor that the receiver drains: %v", errs)

	_, why := recv.done(id, 10*time.Second)
	assert.Contains(t, why, "drain")
	for i, s := range r["sums"].([]any) {
		if s != "" {
			require.Equal(t, s, recv.sum(guard+uint64(i)*entry, entry), "entry %d completed, but its bytes are not in the receiver's memory", i)
		}
	}
	recv.clean()
	recv.guards("after the drain", guard, span)

	r = writer.do("put %s %d %d %d", h, guard, 4096, 7)
	assert.True(t, r["ended"] == true || r["draining"] == true, "a put after the drain: %v", r["error"])
	recv.clean()
}
