//go:build linux

package shm

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/transport"
)

// A payload of its own file: the single-copy read.
//
// A read through the ring copies twice (the owner into the ring, the consumer out of it). A
// payload the registry stages in pinned memory (StageDataPinned) of at least Config.SingleCopyMin
// bytes lives instead in a memfd of its own (MapPayload): created for that payload alone, sized
// to its pages, sealed at once against shrinking, growing, any later writable mapping or write
// (F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_FUTURE_WRITE) and against further seals (F_SEAL_SEAL), and
// never handed out again: the registry releases it (unmapped and closed here) when the payload
// is freed and no registration of it is alive. The owner keeps only its writable shared mapping,
// into which the registry copies the payload once, and a read-only descriptor of the file, which
// it opened through /proc/self/fd (the descriptor it created with is closed at once). Where the
// kernel gives them, the file's pages are huge pages (mapHuge): a read out of 4 KiB pages costs
// the consumer a page-cache lookup or a page-table entry per page, several times a memcpy.
//
// When a consumer that can read a file (its read frames carry flagFile) asks for at least
// SingleCopyMin bytes through a key that reaches the whole of such a payload, the owner checks the
// read as it checks a ring read (a live key, this consumer's, the range inside it) and answers
// with a file frame (wire.SHMFileFrame) and the read-only descriptor. The consumer reads the range
// straight into the caller's buffer (pread, split over a few threads for a large read), closes
// the descriptor and sends a done frame; the owner counts the read in flight until then (or until
// the channel closes), so Revoke and Dead behave as for a ring read.
//
// What a consumer holding the descriptor can reach is the payload's file: the payload and the
// zeros after it up to its last page, and nothing else, for as long as it keeps the descriptor,
// and never a byte that changes (the file is never written after staging and never reused). It
// cannot write it: the descriptor is read-only, and the seals refuse a writable descriptor that
// the consumer opens itself through /proc any write, writable mapping, truncation or hole punch.

// payloadFile is one payload's memfd, owner side.
type payloadFile struct {
	fd  int    // read-only: what a consumer is handed
	mem []byte // the owner's writable shared mapping, the whole file
}

const fileSeals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_FUTURE_WRITE | unix.F_SEAL_SEAL

// PayloadMin implements transport.PayloadMapper: Config.SingleCopyMin, or 0 once the transport is
// closed.
func (t *Transport) PayloadMin() int {
	if t.isClosed() {
		return 0
	}
	return t.cfg.SingleCopyMin
}

// MapPayload implements transport.PayloadMapper: a sealed memfd of size bytes of its own, mapped
// shared and writable here, its pages present before the payload is copied in, in huge pages where
// the kernel gives them (mapHuge).
func (t *Transport) MapPayload(size int) (mem []byte, release func() error, err error) {
	if size <= 0 || size%pageSize != 0 {
		return nil, nil, fmt.Errorf("shm: MapPayload(%d): want a positive whole number of pages", size)
	}
	if t.isClosed() {
		return nil, nil, fmt.Errorf("shm: MapPayload: %w", transport.ErrClosed)
	}
	fd, err := unix.MemfdCreate("velo-shm-payload", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, nil, fmt.Errorf("shm: memfd_create: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		return nil, nil, fmt.Errorf("shm: sizing a payload file of %d bytes: %w", size, err)
	}
	mem, huge, err := mapHuge(fd, size)
	if err != nil {
		return nil, nil, fmt.Errorf("shm: mapping a payload file of %d bytes: %w", size, err)
	}
	unmap := func() error { return unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(mem)), uintptr(size)) }
	// The mapping made before F_SEAL_FUTURE_WRITE stays writable; nothing made after it can write.
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, fileSeals); err != nil {
		unmap()
		return nil, nil, fmt.Errorf("shm: sealing a payload file: %w (a kernel before 5.1 has no F_SEAL_FUTURE_WRITE: set SingleCopyMin to 0)", err)
	}
	ro, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", fd), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		unmap()
		return nil, nil, fmt.Errorf("shm: a read-only descriptor of a payload file through /proc/self/fd: %w (mount /proc, or set SingleCopyMin to 0)", err)
	}
	pf := &payloadFile{fd: ro, mem: mem}
	t.mu.Lock()
	t.files[addrOf(mem)] = pf
	if huge {
		t.hugeFiles++
	}
	t.mu.Unlock()
	var once sync.Once
	release = func() error {
		var err error
		once.Do(func() {
			t.mu.Lock()
			delete(t.files, addrOf(mem))
			if huge {
				t.hugeFiles--
			}
			t.mu.Unlock()
			err = errors.Join(unmap(), unix.Close(ro))
		})
		return err
	}
	return mem, release, nil
}

// hugePage is the size of a huge page of shared memory (a PMD's reach on x86-64 and arm64 with
// 4 KiB pages).
const hugePage = 2 << 20

// mapHuge maps the size bytes of the memfd fd shared and writable at an address aligned to a huge
// page, and asks the kernel to back the whole huge pages of it with huge pages (MADV_COLLAPSE,
// Linux 6.1, which a shared-memory file takes whatever transparent_hugepage/shmem_enabled says,
// short of deny); huge says whether it did. A file in 4 KiB pages costs a consumer's read, by
// pread or through a mapping, several times a memcpy (a page-cache lookup or a page-table entry
// per 4 KiB); in 2 MiB pages its read runs near memcpy's speed. Where the kernel refuses (an older
// kernel, no huge page to be had), the file stays in 4 KiB pages. Every page is then made present
// (MADV_POPULATE_WRITE), so copying the payload in takes no fault.
func mapHuge(fd, size int) (mem []byte, huge bool, err error) {
	if mem, err = mapAligned(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, 0); err != nil {
		return nil, false, err
	}
	p := unsafe.Pointer(unsafe.SliceData(mem))
	if whole := size / hugePage * hugePage; whole > 0 {
		// A page present in each huge page: MADV_COLLAPSE fills the rest with zeros, where a range
		// with no page at all is refused. (Made present by madvise, which fails where a touch would
		// raise SIGBUS.)
		huge = true
		for off := 0; off < whole && huge; off += hugePage {
			huge = unix.Madvise(mem[off:off+pageSize], unix.MADV_POPULATE_WRITE) == nil
		}
		huge = huge && unix.Madvise(mem[:whole], unix.MADV_COLLAPSE) == nil
	}
	if err := unix.Madvise(mem, unix.MADV_POPULATE_WRITE); err != nil && !errors.Is(err, unix.EINVAL) {
		unix.MunmapPtr(p, uintptr(size))
		return nil, false, err
	}
	return mem, huge, nil
}

var pageSize = unix.Getpagesize()

func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// fileOf is the payload file whose whole mapping mem is, or nil; t.mu is held.
func (t *Transport) fileOf(mem []byte) *payloadFile {
	pf := t.files[addrOf(mem)]
	if pf == nil || len(pf.mem) != len(mem) {
		return nil
	}
	return pf
}

// sendFile answers req with the registration's file: a file frame and its read-only descriptor.
// The read stays in flight (r.end is owed) until the consumer's done frame.
func (c *serverConn) sendFile(r *registration, at uint64, req request) error {
	f, err := wire.AppendSHMFileFrame(make([]byte, 0, frameLen), wire.SHMFileFrame{Kind: wire.SHMFileRead, Req: req.idx,
		Offset: at, Length: req.n, Size: uint64(len(r.file.mem))})
	if err != nil {
		return err
	}
	n, _, err := c.c.WriteMsgUnix(f, unix.UnixRights(r.file.fd), nil)
	if err == nil && n != len(f) {
		err = io.ErrShortWrite
	}
	return err
}

// readFrame reads one frame of the channel into f, keeping any descriptor that came with it in
// c.fds (a file answer's).
func (c *clientConn) readFrame(f []byte) error {
	for got := 0; got < len(f); {
		n, oobn, _, _, err := c.c.ReadMsgUnix(f[got:], c.oob)
		if oobn > 0 {
			c.fds = append(c.fds, parseRights(c.oob[:oobn])...)
		}
		if err != nil {
			return err
		}
		if n == 0 { // the owner closed the channel: EOF as io.ReadFull says it
			if got == 0 {
				return io.EOF
			}
			return io.ErrUnexpectedEOF
		}
		got += n
	}
	return nil
}

// fileReads is how a consumer's reads take file answers: at all (on: its read frames carry
// flagFile), and the test seams hook (sees each descriptor a file answer brought before it is
// read) and byMap (copyFile's).
type fileReads struct {
	on    bool
	hook  func(fd int)
	byMap bool
}

// parseRights is every descriptor in a control message.
func parseRights(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if f, err := unix.ParseUnixRights(&m); err == nil {
			fds = append(fds, f...)
		}
	}
	return fds
}

// dropFDs closes descriptors that came with no file answer.
func (c *clientConn) dropFDs() {
	for _, fd := range c.fds {
		unix.Close(fd)
	}
	c.fds = c.fds[:0]
}

// readFile serves a file answer: it takes the descriptor that came with it, checks that it is a
// sealed file of the size the frame says, reads the range into dst, closes the descriptor and
// says so with a done frame.
func (c *clientConn) readFile(b []byte, dst []byte, how fileReads) error {
	fr, err := wire.DecodeSHMFileFrame(b)
	if err != nil {
		return fmt.Errorf("%w: %w", errProtocol, err)
	}
	if len(c.fds) == 0 {
		return fmt.Errorf("%w: a file answer without a descriptor", errProtocol)
	}
	fd := c.fds[0]
	c.fds = c.fds[1:]
	if how.hook != nil {
		how.hook(fd)
	}
	err = readFileInto(fd, fr, dst, how.byMap)
	unix.Close(fd)
	if err != nil {
		return err
	}
	d, err := wire.AppendSHMFileFrame(make([]byte, 0, frameLen), wire.SHMFileFrame{Kind: wire.SHMFileDone, Req: fr.Req})
	if err != nil {
		return err
	}
	_, err = c.c.Write(d)
	return err
}

// readFileInto copies fr's range of the file fd into dst, which is exactly that long.
func readFileInto(fd int, fr wire.SHMFileFrame, dst []byte, byMap bool) error {
	if fr.Length != uint64(len(dst)) {
		return fmt.Errorf("%w: a file answer of %d bytes for a read of %d", errProtocol, fr.Length, len(dst))
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("shm: fstat of a payload file: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || uint64(st.Size) != fr.Size {
		return fmt.Errorf("%w: the answer's file is not a payload file of %d bytes", errProtocol, fr.Size)
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil || seals&fileSeals != fileSeals {
		return fmt.Errorf("%w: the answer's file is not sealed (seals %#x, %v)", errProtocol, seals, err)
	}
	return copyFile(fd, int64(fr.Offset), dst, byMap)
}

// copyFile reads len(dst) bytes at off of fd into dst (or, byMap, maps the range and copies out of
// the mapping, which BenchmarkGet compares): one copy, by the kernel, out of the
// file's pages. A large read is split over a few threads (one per CPU, at most maxCopiers, parts
// of at least copierPart bytes): a copy out of a file's 4 KiB pages runs well below one core's
// memcpy, and the pages are independent. Reading the file (pread) maps nothing into this process:
// measured against mapping the range (MAP_SHARED, with or without MAP_POPULATE) and copying out
// of the mapping, it was as fast or faster, since the mapping's page tables cost more than the
// copy (docs/performance.md).
func copyFile(fd int, off int64, dst []byte, byMap bool) error {
	if byMap {
		return copyMapped(fd, off, dst)
	}
	parts := min(runtime.GOMAXPROCS(0), maxCopiers, max(1, len(dst)/copierPart))
	if parts == 1 {
		return preadFull(fd, off, dst)
	}
	errs := make([]error, parts)
	var wg sync.WaitGroup
	step := (len(dst)/parts + pageSize - 1) / pageSize * pageSize
	for p := range parts {
		lo, hi := min(p*step, len(dst)), min((p+1)*step, len(dst))
		if p == parts-1 {
			hi = len(dst)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[p] = preadFull(fd, off+int64(lo), dst[lo:hi])
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

const (
	maxCopiers = 4
	copierPart = 2 << 20
)

// mapAligned maps size bytes of fd at off (a multiple of hugePage) shared, at an address aligned to
// a huge page, so that the file's huge pages can be mapped whole: it reserves a huge page more
// than needed, maps the file over the aligned part and gives the rest back. Unmap it with
// unix.MunmapPtr.
func mapAligned(fd int, off int64, size, prot, flags int) ([]byte, error) {
	res, err := unix.MmapPtr(-1, 0, nil, uintptr(size+hugePage), unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil, err
	}
	lead := (hugePage - int(uintptr(res)%hugePage)) % hugePage
	p, err := unix.MmapPtr(fd, off, unsafe.Add(res, lead), uintptr(size), prot, unix.MAP_SHARED|unix.MAP_FIXED|flags)
	if err != nil {
		unix.MunmapPtr(res, uintptr(size+hugePage))
		return nil, err
	}
	if lead > 0 {
		unix.MunmapPtr(res, uintptr(lead))
	}
	if tail := hugePage - lead; tail > 0 {
		unix.MunmapPtr(unsafe.Add(res, lead+size), uintptr(tail))
	}
	return unsafe.Slice((*byte)(p), size), nil
}

func preadFull(fd int, off int64, dst []byte) error {
	for len(dst) > 0 {
		n, err := unix.Pread(fd, dst, off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("shm: reading a payload file: %w", err)
		}
		if n == 0 {
			return fmt.Errorf("%w: a payload file shorter than its answer", errProtocol)
		}
		dst, off = dst[n:], off+int64(n)
	}
	return nil
}

func copyMapped(fd int, off int64, dst []byte) error {
	lo := off &^ int64(hugePage-1)
	n := (int(off-lo) + len(dst) + pageSize - 1) &^ (pageSize - 1)
	m, err := mapAligned(fd, lo, n, unix.PROT_READ, unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("shm: mapping a payload file: %w", err)
	}
	copy(dst, m[off-lo:])
	return unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(m)), uintptr(n))
}
