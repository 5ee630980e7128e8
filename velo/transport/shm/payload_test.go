//go:build linux

package shm

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/transport"
)

// payloadMaps counts this process's mappings of payload files, and payloadFDs its descriptors of
// them (both ends of a test pair live in this process).
func payloadMaps(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	require.NoError(t, err)
	return strings.Count(string(b), "memfd:velo-shm-payload")
}

func payloadFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.Contains(l, "memfd:velo-shm-payload") {
			n++
		}
	}
	return n
}

// payload maps a payload file of n bytes through the owner, filled, as the registry stages one.
func payload(t *testing.T, owner *Transport, n int) ([]byte, func() error) {
	t.Helper()
	size := (n + pageSize - 1) / pageSize * pageSize
	mem, release, err := owner.MapPayload(size)
	require.NoError(t, err)
	for i := range n {
		mem[i] = byte(i*13 + i>>12)
	}
	return mem, release
}

func described(t *Transport, k string) string { return t.Describe()[k] }

// hookFiles sets the consumer's fileHook.
func hookFiles(consumer *Transport, f func(fd int)) { consumer.fileHook = f }

// TestSingleCopyReadsAPayloadFile: a read of a payload file's key, of at least SingleCopyMin
// bytes, is answered with the file (counted on both sides) and returns the right bytes; a small
// read, a read through a key narrowed to a part, and memory that is no payload file go through the
// ring. After each read the consumer holds no descriptor or mapping of the file; after the
// registration died and the payload was released the owner holds none either.
func TestSingleCopyReadsAPayloadFile(t *testing.T) {
	owner, consumer := newPair(t, Config{SingleCopyMin: 1 << 20}, nil, nil)
	waitReady(t, consumer, 1)
	mapsBefore, fdsBefore := payloadMaps(t), payloadFDs(t)
	const n = 8<<20 + 100
	mem, release := payload(t, owner, n)
	assert.Equal(t, mapsBefore+1, payloadMaps(t), "the owner maps the file once")
	assert.Equal(t, fdsBefore+1, payloadFDs(t), "the owner keeps one descriptor of it")
	regs, errs := owner.RegisterMemoryFor(2, [][]byte{mem})
	require.NoError(t, errs[0])
	reg := regs[0]

	reads := 0
	get := func(key []byte, off uint64, n int, file bool) {
		t.Helper()
		dst := make([]byte, n)
		require.NoError(t, consumer.Get(context.Background(), 1, key, off, dst))
		require.True(t, bytes.Equal(dst, mem[off:off+uint64(n)]), "a read of %d bytes at %d returned other bytes", n, off)
		if file {
			reads++
		}
		assert.Equal(t, fmt.Sprint(reads), described(consumer, "single_copy_reads"), "a read of %d bytes at %d (file %v)", n, off, file)
		assert.Equal(t, fmt.Sprint(reads), described(owner, "single_copy_served"))
		assert.Equal(t, mapsBefore+1, payloadMaps(t), "the consumer keeps a mapping of the file after a read")
		assert.Equal(t, fdsBefore+1, payloadFDs(t), "the consumer keeps a descriptor of the file after a read")
	}
	get(reg.Key(), 0, len(mem), true)
	get(reg.Key(), 0, n, true)
	get(reg.Key(), 12345, 3<<20, true)
	get(reg.Key(), 4096, 64<<10, false) // below SingleCopyMin
	rk, err := reg.(transport.RangeKeyer).RangeKey(0, 4<<20)
	require.NoError(t, err)
	get(rk, 0, 4<<20, false) // a key that reaches a part of the file

	plain := anon(t, 4<<20)
	pregs, errs := owner.RegisterMemoryFor(2, [][]byte{plain})
	require.NoError(t, errs[0])
	dst := make([]byte, len(plain))
	require.NoError(t, consumer.Get(context.Background(), 1, pregs[0].Key(), 0, dst))
	assert.Equal(t, plain, dst)
	assert.Equal(t, fmt.Sprint(reads), described(consumer, "single_copy_reads"), "memory that is no payload file goes through the ring")

	require.NoError(t, reg.Revoke(context.Background()))
	<-reg.Dead()
	require.NoError(t, release())
	assert.Equal(t, mapsBefore, payloadMaps(t), "a released payload is still mapped")
	assert.Equal(t, fdsBefore, payloadFDs(t), "a released payload's descriptor is still open")
	assert.Equal(t, "0", described(owner, "payload_files"))
}

// TestSingleCopyDescriptorIsReadOnly: the descriptor a consumer is handed neither maps writable
// nor writes, and neither does one it opens writable itself through /proc: the file's seals
// refuse writes, writable mappings, truncation and hole punching, so the owner's bytes never
// change under it.
func TestSingleCopyDescriptorIsReadOnly(t *testing.T) {
	owner, consumer := newPair(t, Config{SingleCopyMin: 1 << 20}, nil, nil)
	waitReady(t, consumer, 1)
	mem, release := payload(t, owner, 2<<20)
	defer release()
	regs, errs := owner.RegisterMemoryFor(2, [][]byte{mem})
	require.NoError(t, errs[0])
	want := bytes.Clone(mem)

	var checked bool
	hookFiles(consumer, func(fd int) {
		checked = true
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
		assert.NoError(t, err)
		assert.Equal(t, unix.O_RDONLY, flags&unix.O_ACCMODE, "the descriptor is not read-only")
		_, err = unix.Mmap(fd, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		assert.ErrorIs(t, err, unix.EACCES, "a writable shared mapping of the handed descriptor")
		_, err = unix.Pwrite(fd, []byte{1}, 0)
		assert.ErrorIs(t, err, unix.EBADF, "a write through the handed descriptor")
		if m, err := unix.Mmap(fd, 0, 4096, unix.PROT_READ, unix.MAP_SHARED); assert.NoError(t, err) {
			assert.Error(t, unix.Mprotect(m, unix.PROT_READ|unix.PROT_WRITE), "a read-only mapping turned writable")
			assert.NoError(t, unix.Munmap(m))
		}

		rw, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", fd), unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return // the kernel refused the writable open itself
		}
		defer unix.Close(rw)
		_, err = unix.Mmap(rw, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		assert.ErrorIs(t, err, unix.EPERM, "a writable mapping through a descriptor reopened writable")
		_, err = unix.Pwrite(rw, []byte{1}, 0)
		assert.ErrorIs(t, err, unix.EPERM, "a write through a descriptor reopened writable")
		assert.ErrorIs(t, unix.Ftruncate(rw, 4096), unix.EPERM, "a truncation")
		assert.ErrorIs(t, unix.Fallocate(rw, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, 4096), unix.EPERM, "a hole punched")
	})
	dst := make([]byte, len(mem))
	require.NoError(t, consumer.Get(context.Background(), 1, regs[0].Key(), 0, dst))
	require.True(t, checked, "the read was not answered with a file")
	assert.Equal(t, want, mem, "the owner's payload changed")
	assert.Equal(t, want, dst)
}

// TestSingleCopyRevokeWaitsForTheConsumer: a file answer is a read in flight until the consumer
// says it is done: Revoke refuses new reads at once, Dead waits for the copy under way, and the
// read finishes with the right bytes.
func TestSingleCopyRevokeWaitsForTheConsumer(t *testing.T) {
	owner, consumer := newPair(t, Config{SingleCopyMin: 1 << 20}, nil, nil)
	waitReady(t, consumer, 1)
	mem, release := payload(t, owner, 4<<20)
	defer release()
	regs, errs := owner.RegisterMemoryFor(2, [][]byte{mem})
	require.NoError(t, errs[0])
	reg := regs[0]

	inRead, goOn := make(chan struct{}), make(chan struct{})
	hookFiles(consumer, func(int) { close(inRead); <-goOn })
	dst := make([]byte, len(mem))
	done := make(chan error, 1)
	go func() { done <- consumer.Get(context.Background(), 1, reg.Key(), 0, dst) }()
	<-inRead
	require.NoError(t, reg.Revoke(context.Background()))
	select {
	case <-reg.Dead():
		t.Fatal("Dead closed while the consumer was copying out of the file")
	case <-time.After(100 * time.Millisecond):
	}
	close(goOn)
	require.NoError(t, <-done)
	assert.Equal(t, mem, dst)
	select {
	case <-reg.Dead():
	case <-time.After(5 * time.Second):
		t.Fatal("Dead never closed after the consumer's done frame")
	}
	consumer.fileHook = nil
	err := consumer.Get(context.Background(), 1, reg.Key(), 0, dst)
	require.ErrorIs(t, err, transport.ErrKeyRevoked, "a revoked key's file read")
}

// TestSingleCopyReleasedWhileTheConsumerHoldsTheFile: the owner releases a payload (its key dead,
// its file unmapped and closed) while a consumer still holds a descriptor of it: the owner keeps
// nothing of it, the consumer reads exactly the leased bytes, unchanged, through the descriptor it
// kept, and once that is closed nothing of the file is left.
func TestSingleCopyReleasedWhileTheConsumerHoldsTheFile(t *testing.T) {
	owner, consumer := newPair(t, Config{SingleCopyMin: 1 << 20}, nil, nil)
	waitReady(t, consumer, 1)
	mapsBefore, fdsBefore := payloadMaps(t), payloadFDs(t)
	mem, release := payload(t, owner, 2<<20)
	want := bytes.Clone(mem)
	regs, errs := owner.RegisterMemoryFor(2, [][]byte{mem})
	require.NoError(t, errs[0])
	kept := -1
	hookFiles(consumer, func(fd int) {
		var err error
		kept, err = unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		assert.NoError(t, err)
	})
	dst := make([]byte, len(mem))
	require.NoError(t, consumer.Get(context.Background(), 1, regs[0].Key(), 0, dst))
	require.GreaterOrEqual(t, kept, 0)
	require.NoError(t, regs[0].Revoke(context.Background()))
	<-regs[0].Dead()
	require.NoError(t, release())
	assert.Equal(t, mapsBefore, payloadMaps(t), "the owner still maps the released payload")
	assert.Equal(t, fdsBefore+1, payloadFDs(t), "only the consumer's kept descriptor is left")

	var st unix.Stat_t
	require.NoError(t, unix.Fstat(kept, &st))
	assert.EqualValues(t, len(want), st.Size, "the kept descriptor reaches the payload's pages, no more")
	again := make([]byte, len(want))
	require.NoError(t, preadFull(kept, 0, again))
	assert.Equal(t, want, again, "the kept descriptor reads other bytes")
	require.NoError(t, unix.Close(kept))
	assert.Equal(t, fdsBefore, payloadFDs(t))
}

// TestSingleCopyOffKeepsTheRing: an owner without single-copy payloads (SingleCopyMin 0, as a
// release before them, which ignores the read's flag) answers a read of a payload file through the
// ring, and so does one whose consumer does not flag its reads (a release before them): the bytes
// are right either way.
func TestSingleCopyOffKeepsTheRing(t *testing.T) {
	for _, side := range []string{"owner", "consumer"} {
		t.Run(side, func(t *testing.T) {
			cfg := Config{SingleCopyMin: 1 << 20}
			if side == "owner" {
				cfg.SingleCopyMin = 0
			}
			owner, consumer := newPair(t, cfg, nil, nil)
			consumer.ringOnly = side == "consumer"
			waitReady(t, consumer, 1)
			if side == "owner" {
				assert.Zero(t, owner.PayloadMin(), "an owner with single-copy reads off maps no payload files")
			}
			// A payload file as an owner with single-copy reads on has it (MapPayload does not
			// look at the size; the registry asks PayloadMin first).
			mem, release := payload(t, owner, 2<<20)
			defer release()
			regs, errs := owner.RegisterMemoryFor(2, [][]byte{mem})
			require.NoError(t, errs[0])
			dst := make([]byte, len(mem))
			require.NoError(t, consumer.Get(context.Background(), 1, regs[0].Key(), 0, dst))
			assert.Equal(t, mem, dst)
			assert.Equal(t, "0", described(consumer, "single_copy_reads"))
			assert.Equal(t, "0", described(owner, "single_copy_served"))
		})
	}
}

// TestSingleCopyRefusesAFileThatIsNotAPayload: the consumer reads only a sealed file of the size
// the answer names (an unsealed or resized file could change or shrink under it).
func TestSingleCopyRefusesAFileThatIsNotAPayload(t *testing.T) {
	fd, err := unix.MemfdCreate("not-a-payload", unix.MFD_CLOEXEC)
	require.NoError(t, err)
	defer unix.Close(fd)
	require.NoError(t, unix.Ftruncate(fd, 8192))
	fr := wire.SHMFileFrame{Kind: wire.SHMFileRead, Length: 4096, Size: 8192}
	err = readFileInto(fd, fr, make([]byte, 4096), false)
	require.ErrorIs(t, err, errProtocol)
	assert.Contains(t, err.Error(), "not sealed")
	fr.Size = 4096
	err = readFileInto(fd, fr, make([]byte, 4096), false)
	assert.ErrorIs(t, err, errProtocol, "a file of another size than the answer's")
	fr.Size = 8192
	err = readFileInto(fd, fr, make([]byte, 100), false)
	assert.ErrorIs(t, err, errProtocol, "an answer of another length than the read")
}

// TestSingleCopyConcurrentReads: many reads of one payload file on several channels at once all
// return the right bytes, and leave no descriptor or mapping behind.
func TestSingleCopyConcurrentReads(t *testing.T) {
	owner, consumer := newPair(t, Config{SingleCopyMin: 1 << 20}, nil, nil)
	waitReady(t, consumer, 1)
	mem, release := payload(t, owner, 3<<20)
	defer release()
	regs, errs := owner.RegisterMemoryFor(2, [][]byte{mem})
	require.NoError(t, errs[0])
	mapsBefore, fdsBefore := payloadMaps(t), payloadFDs(t)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reads := make([]transport.Read, 4)
			for i := range reads {
				reads[i] = transport.Read{Key: regs[0].Key(), Offset: uint64(i * 4096), Dst: make([]byte, 2<<20)}
			}
			consumer.ReadMany(context.Background(), 1, reads, 2, func(i int, err error) {
				assert.NoError(t, err)
				assert.True(t, bytes.Equal(reads[i].Dst, mem[i*4096:i*4096+2<<20]))
			})
		}()
	}
	wg.Wait()
	assert.Equal(t, "32", described(consumer, "single_copy_reads"))
	assert.Equal(t, mapsBefore, payloadMaps(t))
	assert.Equal(t, fdsBefore, payloadFDs(t))
}

func TestSingleCopyMinMustNotBeNegative(t *testing.T) {
	_, err := New(Config{Dir: privDir(t), SingleCopyMin: -1})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "SingleCopyMin -1 is negative")
}

// TestSingleCopyPayloadInHugePages: a payload file of whole huge pages is backed by huge pages
// where the kernel gives them (MADV_COLLAPSE), mapped whole in the owner, and reads of it, by pread
// and through a mapping, at any offset, return its bytes and leave nothing mapped.
func TestSingleCopyPayloadInHugePages(t *testing.T) {
	owner, consumer := newPair(t, Config{SingleCopyMin: 1 << 20}, nil, nil)
	waitReady(t, consumer, 1)
	mem, release := payload(t, owner, 6<<20+4096)
	defer release()
	if described(owner, "payload_files_huge") != "1" {
		t.Skip("the kernel gave the payload file no huge pages (MADV_COLLAPSE, Linux 6.1; or none free): its reads take 4 KiB pages")
	}
	smaps, err := os.ReadFile("/proc/self/smaps")
	require.NoError(t, err)
	start := bytes.Index(smaps, []byte("memfd:velo-shm-payload"))
	require.GreaterOrEqual(t, start, 0)
	vma := string(smaps[start:])
	if next := strings.Index(vma[1:], "memfd:"); next > 0 { // the next mapping of a file
		vma = vma[:next]
	}
	assert.Regexp(t, `(File|Shmem)PmdMapped:\s+[1-9]`, vma, "the owner's mapping maps no huge page whole")

	regs, errs := owner.RegisterMemoryFor(2, [][]byte{mem})
	require.NoError(t, errs[0])
	mapsBefore := payloadMaps(t)
	for _, byMap := range []bool{false, true} {
		consumer.copyByMap = byMap
		for _, r := range [][2]int{{0, len(mem)}, {12345, 3 << 20}, {2<<20 + 4096, 4 << 20}} {
			dst := make([]byte, r[1])
			require.NoError(t, consumer.Get(context.Background(), 1, regs[0].Key(), uint64(r[0]), dst))
			assert.True(t, bytes.Equal(dst, mem[r[0]:r[0]+r[1]]), "%d bytes at %d (mapped %v)", r[1], r[0], byMap)
		}
		assert.Equal(t, mapsBefore, payloadMaps(t), "a read left a mapping (mapped %v)", byMap)
	}
}
