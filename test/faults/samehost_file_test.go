package faults

// The same-host path's single-copy reads between real processes: a pinned payload of at least
// SameHostConfig.SingleCopyMin lives in a sealed memfd of its own, and the owner hands a consumer
// a read-only descriptor of it for each checked read. A consumer killed while it copies out of the
// file, an owner killed then, and a payload released while a consumer holds the descriptor leave
// no descriptor and no mapping of the file behind, in either process (counted in /proc).

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fileSize is a payload large enough that a consumer's copy out of its file is still under way a
// few milliseconds after the descriptor arrived.
const fileSize = 1 << 30

// payloadFiles counts process pid's descriptors and mappings of payload files.
func payloadFiles(t *testing.T, pid int) (fds, maps int) {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, 0 // the process is gone
	}
	for _, e := range ents {
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name())); err == nil && strings.Contains(l, "memfd:velo-shm-payload") {
			fds++
		}
	}
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	return fds, strings.Count(string(b), "memfd:velo-shm-payload")
}

// noPayloadFiles waits until process n holds no descriptor and no mapping of a payload file.
func noPayloadFiles(t *testing.T, n *node) {
	t.Helper()
	require.Eventually(t, func() bool { fds, maps := payloadFiles(t, n.pid()); return fds == 0 && maps == 0 }, 30*time.Second, 20*time.Millisecond,
		"%s still holds a payload file", n.Name)
}

// midFileRead starts a get of p on cons and returns once cons holds the file's descriptor: its
// copy out of the file is under way.
func midFileRead(t *testing.T, cons *node, p staged) {
	t.Helper()
	cons.send("get " + p.Handle)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if fds, _ := payloadFiles(t, cons.pid()); fds > 0 {
			return
		}
		require.True(t, time.Now().Before(deadline), "the consumer never held the payload's file")
		time.Sleep(200 * time.Microsecond)
	}
}

// filePair starts an owner with single-copy payloads from 1 MiB and a budget for fileSize, and
// a consumer, both with the path on.
func filePair(t *testing.T) (dir string, owner, cons *node) {
	dir = shmDir(t)
	owner = shmNode(t, "owner", dir, nil, "-budget", "4294967296", "-shm-single-copy-min", "1048576")
	cons = shmNode(t, "consumer", dir, nil)
	pair(t, owner, cons)
	cons.waitSameHost(owner.id())
	return dir, owner, cons
}

func TestSameHostSingleCopyReads(t *testing.T) {
	_, owner, cons := filePair(t)
	p := stage(owner, 8<<20+3, true)
	fds, maps := payloadFiles(t, owner.pid())
	assert.Equal(t, 1, fds, "the owner keeps one descriptor of the payload's file")
	assert.Equal(t, 1, maps, "the owner maps the payload's file once")
	for range 3 {
		owner.ok("ref " + p.Handle)
		delivered(t, cons.do("get "+p.Handle), p, "shm/ok")
		fds, maps := payloadFiles(t, cons.pid())
		assert.Zero(t, fds, "the consumer kept the file's descriptor after a read")
		assert.Zero(t, maps, "the consumer kept a mapping of the file after a read")
	}
	owner.ok("release " + p.Handle)
	noPayloadFiles(t, owner)
}

func TestSameHostSingleCopyConsumerKilledMidRead(t *testing.T) {
	dir, owner, cons := filePair(t)
	ownerID := owner.id()
	start := owner.stats()
	p := stage(owner, fileSize, true)

	midFileRead(t, cons, p)
	cons.kill()
	owner.ok("release " + p.Handle)
	backToStart(t, owner, start)
	require.Eventually(t, func() bool { return channels(t, owner, dir, ownerID) == 0 }, 30*time.Second, 50*time.Millisecond, "a channel of the dead consumer is open")
	noPayloadFiles(t, owner)
	// The owner goes on serving: a new consumer reads a payload of its own file.
	second := shmNode(t, "second", dir, nil)
	pair(t, owner, second)
	second.waitSameHost(ownerID)
	q := stage(owner, 2<<20, true)
	delivered(t, second.do("get "+q.Handle), q, "shm/ok")
	noPayloadFiles(t, second)
}

func TestSameHostSingleCopyOwnerKilledMidRead(t *testing.T) {
	_, owner, cons := filePair(t)
	p := stage(owner, fileSize, true)

	midFileRead(t, cons, p)
	owner.kill()
	r := cons.read(2 * time.Minute)
	if r["error"] == nil {
		assert.Equal(t, p.SHA256, r["sha256"], "a read whose owner died returned other bytes")
	}
	require.True(t, cons.alive())
	noPayloadFiles(t, cons)
	st := cons.quit(15 * time.Second)
	assert.Zero(t, st.OpenLeases)
}

// TestSameHostSingleCopyReleasedUnderTheRead: the owner releases the payload's handle while the
// consumer copies out of its file; the read returns the payload's bytes (they never change), the
// owner frees the payload once the lease ends, and then neither process holds anything of it.
func TestSameHostSingleCopyReleasedUnderTheRead(t *testing.T) {
	_, owner, cons := filePair(t)
	start := owner.stats()
	p := stage(owner, fileSize, true)

	midFileRead(t, cons, p)
	owner.ok("release " + p.Handle)
	r := cons.read(2 * time.Minute)
	require.Empty(t, r["error"])
	assert.Equal(t, p.SHA256, r["sha256"])
	assert.Equal(t, "shm/ok", r["path"])
	noPayloadFiles(t, cons)
	backToStart(t, owner, start)
	noPayloadFiles(t, owner)
}
