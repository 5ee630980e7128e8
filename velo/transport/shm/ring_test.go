//go:build linux

package shm

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/velo-go/velo/velo/transport"
)

// ringVMAs is how many kB of each mapping of a ring in this process are mapped by huge pages
// whole (both ends of a test pair live in this process, so a channel's ring shows twice).
func ringVMAs(t *testing.T) []int {
	t.Helper()
	smaps, err := os.ReadFile("/proc/self/smaps")
	require.NoError(t, err)
	header := regexp.MustCompile(`^[0-9a-f]+-[0-9a-f]+ `)
	pmd := regexp.MustCompile(`^(?:File|Shmem)PmdMapped:\s+(\d+) kB`)
	var out []int
	in := false
	for _, l := range strings.Split(string(smaps), "\n") {
		if header.MatchString(l) {
			in = strings.Contains(l, "memfd:velo-shm-ring")
			if in {
				out = append(out, 0)
			}
			continue
		}
		if m := pmd.FindStringSubmatch(l); in && m != nil {
			kb, _ := strconv.Atoi(m[1])
			out[len(out)-1] += kb
		}
	}
	return out
}

// ringFDs counts this process's descriptors of rings.
func ringFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.Contains(l, "memfd:velo-shm-ring") {
			n++
		}
	}
	return n
}

// crossSlots reads and writes ranges that begin and end inside ring buffers and span several,
// through the one channel of a pair whose buffers are chunk bytes, and checks every byte.
func crossSlots(t *testing.T, owner, consumer *Transport, chunk int) {
	t.Helper()
	mem := anon(t, 9*chunk+4096)
	regs, errs := owner.RegisterMemoryFor(2, [][]byte{mem})
	require.NoError(t, errs[0])
	for _, r := range [][2]int{{0, len(mem)}, {chunk - 3, 2*chunk + 7}, {2*chunk - 1, 2}, {chunk, 5 * chunk}, {4095, 7*chunk + 1}} {
		dst := make([]byte, r[1])
		require.NoError(t, consumer.Get(context.Background(), 1, regs[0].Key(), uint64(r[0]), dst))
		require.True(t, bytes.Equal(dst, mem[r[0]:r[0]+r[1]]), "a read of %d bytes at %d", r[1], r[0])
	}
	// Small reads packed into one buffer, the last of them across its end.
	reads := make([]transport.Read, 0, 9)
	for i := range 9 {
		reads = append(reads, transport.Read{Key: regs[0].Key(), Offset: uint64(i*chunk/8 + 11), Dst: make([]byte, chunk/8+5)})
	}
	consumer.ReadMany(context.Background(), 1, reads, 1, func(i int, err error) {
		require.NoError(t, err)
		off := int(reads[i].Offset)
		require.True(t, bytes.Equal(reads[i].Dst, mem[off:off+len(reads[i].Dst)]), "packed read %d", i)
	})

	// A push across buffers lands intact, and nothing beside it.
	into := anon(t, 5*chunk)
	clear(into)
	w, err := owner.RegisterMemoryWritableFor(2, into)
	require.NoError(t, err)
	src := make([]byte, 3*chunk+13)
	for i := range src {
		src[i] = byte(i*31 + 7)
	}
	var werr error
	consumer.WriteMany(context.Background(), 1, []transport.Write{{Key: w.Key(), Offset: uint64(chunk - 5), Src: src}}, 1, func(_ int, err error) { werr = err })
	require.NoError(t, werr)
	assert.True(t, bytes.Equal(src, into[chunk-5:chunk-5+len(src)]), "the pushed bytes")
	assert.Equal(t, make([]byte, chunk-5), into[:chunk-5], "nothing lands before the write")
	assert.Equal(t, make([]byte, len(into)-(chunk-5+len(src))), into[chunk-5+len(src):], "nothing lands after it")
}

// TestRingInHugePages: a ring of whole huge pages is backed by huge pages where the kernel gives
// them (MADV_COLLAPSE): the owner counts it on its introspection row; reads and pushes across its
// buffers return and land every byte, after which both the owner's and the consumer's mappings map
// the whole ring by huge pages; once both sides closed no mapping or descriptor of a ring is left.
func TestRingInHugePages(t *testing.T) {
	require.Empty(t, ringVMAs(t), "a ring mapped before the test")
	fdsBefore := ringFDs(t)
	owner, consumer := newPair(t, Config{}, nil, nil)
	waitReady(t, consumer, 1)
	require.Equal(t, "1", described(owner, "rings"), "the probe's channel")
	if described(owner, "rings_huge") != "1" {
		t.Skip("the kernel gave the ring no huge pages (MADV_COLLAPSE, Linux 6.1; or none free): the ring stays in 4 KiB pages")
	}
	crossSlots(t, owner, consumer, DefaultChunkSize)
	ringKB := DefaultSlots * DefaultChunkSize >> 10
	assert.Equal(t, []int{ringKB, ringKB}, ringVMAs(t), "the owner's and the consumer's mappings of the ring, kB mapped by huge pages")

	consumer.Close()
	owner.Close()
	assert.Empty(t, ringVMAs(t), "a ring still mapped after both sides closed")
	assert.Equal(t, fdsBefore, ringFDs(t), "a ring's descriptor left open")
	assert.Equal(t, "0", described(owner, "rings"))
	assert.Equal(t, "0", described(owner, "rings_huge"))
}

// TestRingShapeNotOfWholeHugePages: a ring of 3 MiB (3 x 1 MiB) has its first 2 MiB in a huge page
// and the last MiB in 4 KiB pages, on both sides, and its buffers carry every byte.
func TestRingShapeNotOfWholeHugePages(t *testing.T) {
	owner, consumer := newPair(t, Config{Slots: 3}, nil, nil)
	waitReady(t, consumer, 1)
	if described(owner, "rings_huge") != "1" {
		t.Skip("the kernel gave the ring no huge pages")
	}
	crossSlots(t, owner, consumer, DefaultChunkSize)
	assert.Equal(t, []int{2048, 2048}, ringVMAs(t), "kB of each mapping of the ring mapped by huge pages")
}

// TestRingInSmallPages: with SmallPageRing, and where the kernel refuses huge pages (THP turned
// off for this process with PR_SET_THP_DISABLE, which MADV_COLLAPSE obeys), the ring stays in
// 4 KiB pages on both sides, the introspection row says so, and it carries every byte.
func TestRingInSmallPages(t *testing.T) {
	for _, how := range []string{"SmallPageRing", "refused"} {
		t.Run(how, func(t *testing.T) {
			if how == "refused" {
				require.NoError(t, unix.Prctl(unix.PR_SET_THP_DISABLE, 1, 0, 0, 0))
				t.Cleanup(func() { unix.Prctl(unix.PR_SET_THP_DISABLE, 0, 0, 0, 0) })
			}
			owner, consumer := newPair(t, Config{ChunkSize: 1 << 20, SmallPageRing: how == "SmallPageRing"}, nil, nil)
			waitReady(t, consumer, 1)
			assert.Equal(t, "1", described(owner, "rings"))
			assert.Equal(t, "0", described(owner, "rings_huge"))
			crossSlots(t, owner, consumer, 1<<20)
			assert.Equal(t, []int{0, 0}, ringVMAs(t), "no part of either mapping of the ring is mapped by huge pages")
		})
	}
}
