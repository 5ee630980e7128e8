//go:build linux

package shm

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/transport"
)

// handshakeTimeout bounds each side's handshake: a peer that connects and says nothing holds
// a goroutine that long.
const handshakeTimeout = 5 * time.Second

// registration is one registered region of the owner.
type registration struct {
	t     *Transport
	slot  uint32
	token uint64
	mem   []byte
	peer  transport.InstanceID // the consumer it was registered for; 0: any proven consumer
	write bool                 // a write grant's range: peers may write it and not read it
	file  *payloadFile         // mem is the whole of a payload's own file (payload.go); nil: the ring only

	mu      sync.Mutex
	revoked bool
	reading int
	dead    chan struct{}
}

var (
	_ transport.Registration = (*registration)(nil)
	_ transport.RangeKeyer   = (*registration)(nil)
	_ transport.RMAWriter    = (*Transport)(nil)
)

func (r *registration) Len() int              { return len(r.mem) }
func (r *registration) Dead() <-chan struct{} { return r.dead }

// Key implements transport.Registration: the slot, a random token and the whole region.
func (r *registration) Key() []byte {
	return key{slot: r.slot, token: r.token, length: uint64(len(r.mem))}.append(nil)
}

// RangeKey implements transport.RangeKeyer: a key that reaches only the n bytes at off. (It
// narrows more than the interface asks: a read through it is checked against the part, not the
// whole registration.)
func (r *registration) RangeKey(off, n int) ([]byte, error) {
	if off < 0 || n < 0 || off+n > len(r.mem) {
		return nil, fmt.Errorf("shm: RangeKey(%d, %d) of a registration of %d bytes", off, n, len(r.mem))
	}
	return key{slot: r.slot, token: r.token, base: uint64(off), length: uint64(n)}.append(nil), nil
}

// Revoke implements transport.Registration: later reads are refused; a read whose copy is under
// way finishes, and Dead is closed once none is.
func (r *registration) Revoke(context.Context) error {
	r.revokeNow()
	return nil
}

func (r *registration) revokeNow() {
	r.t.mu.Lock()
	if r.t.regs[r.slot] == r {
		delete(r.t.regs, r.slot)
	}
	r.t.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.revoked {
		return
	}
	r.revoked = true
	if r.reading == 0 {
		close(r.dead)
	}
}

// begin counts a read of the registration; false once it is revoked.
func (r *registration) begin() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.revoked {
		return false
	}
	r.reading++
	return true
}

func (r *registration) end() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reading--
	if r.revoked && r.reading == 0 {
		close(r.dead)
	}
}

// RegisterMemory implements transport.RMA: mem becomes readable, through its key, by any
// consumer that opened a proven channel to this instance. The registry registers through
// RegisterMemoryFor, which binds each region to its lease's consumer.
func (t *Transport) RegisterMemory(mem []byte) (transport.Registration, error) {
	return t.register(mem, 0, false)
}

// RegisterMemoryWritable implements transport.RMAWriter: mem becomes writable, and not readable,
// through its key by any consumer that opened a proven channel to this instance. A write grant
// registers through RegisterMemoryWritableFor, which binds the range to the grant's writer.
func (t *Transport) RegisterMemoryWritable(mem []byte) (transport.Registration, error) {
	return t.register(mem, 0, true)
}

// RegisterMemoryWritableFor registers mem for writes by peer alone (a push grant's range).
func (t *Transport) RegisterMemoryWritableFor(peer transport.InstanceID, mem []byte) (transport.Registration, error) {
	return t.register(mem, peer, true)
}

// RegisterMemoryFor implements transport.PeerRegisterer: each region is readable by peer alone.
func (t *Transport) RegisterMemoryFor(peer transport.InstanceID, mems [][]byte) ([]transport.Registration, []error) {
	regs := make([]transport.Registration, len(mems))
	errs := make([]error, len(mems))
	for i, m := range mems {
		regs[i], errs[i] = t.register(m, peer, false)
	}
	return regs, errs
}

func (t *Transport) register(mem []byte, peer transport.InstanceID, write bool) (transport.Registration, error) {
	if len(mem) == 0 {
		return nil, errors.New("shm: RegisterMemory: empty region")
	}
	var tok [8]byte
	rand.Read(tok[:])
	r := &registration{t: t, token: binary.LittleEndian.Uint64(tok[:]), mem: mem, peer: peer, write: write, dead: make(chan struct{})}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, fmt.Errorf("shm: RegisterMemory: %w", transport.ErrClosed)
	}
	for {
		t.nextReg++
		if _, used := t.regs[t.nextReg]; !used && t.nextReg != 0 {
			break
		}
	}
	r.slot = t.nextReg
	t.regs[r.slot] = r
	if !write {
		r.file = t.fileOf(mem)
	}
	return r, nil
}

// serverConn is one consumer's channel on the owner's side.
type serverConn struct {
	t     *Transport
	c     *net.UnixConn
	peer  transport.InstanceID
	ring  []byte
	chunk int
	slots int
	cuda  bool // a CUDA IPC channel (cudaipc.go): no ring
	once  sync.Once
}

func (c *serverConn) close() { c.once.Do(func() { c.c.Close() }) }

func (t *Transport) accept() {
	defer t.wg.Done()
	for {
		c, err := t.ln.AcceptUnix()
		if err != nil {
			if t.isClosed() {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			t.log.Warn("shm: accept failed; the same-host socket stops serving", "err", err)
			return
		}
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			t.serve(c)
		}()
	}
}

// serve runs one channel: the handshake, then reads until the consumer goes or the channel is
// closed.
func (t *Transport) serve(c *net.UnixConn) {
	sc, err := t.handshakeOwner(c)
	if err != nil {
		t.log.Info("shm: refused a same-host channel", "err", err)
		c.Close()
		return
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		sc.close()
		unix.Munmap(sc.ring)
		return
	}
	t.inbound[sc] = struct{}{}
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		delete(t.inbound, sc)
		t.mu.Unlock()
		sc.close()
		unix.Munmap(sc.ring)
	}()
	if sc.cuda {
		t.serveCUDA(sc)
		return
	}
	if err := sc.run(); !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		t.log.Info("shm: closing a consumer's channel", "peer", sc.peer, "err", err)
	}
}

// handshakeOwner checks the consumer's credentials and proof and hands it the ring.
func (t *Transport) handshakeOwner(c *net.UnixConn) (*serverConn, error) {
	c.SetDeadline(time.Now().Add(handshakeTimeout))
	uid, err := peerUID(c)
	if err != nil {
		return nil, fmt.Errorf("reading the peer's credentials: %w", err)
	}
	if !t.allow[uid] {
		writeMsg(c, append(append([]byte{}, acceptMagic[:]...), 1), -1)
		return nil, fmt.Errorf("a process of uid %d connected; only uids %v may (Config.AllowUIDs)", uid, keys(t.allow))
	}
	var nonceO [16]byte
	rand.Read(nonceO[:])
	g := append([]byte{}, greetMagic[:]...)
	g = binary.LittleEndian.AppendUint64(g, uint64(t.host.LocalID()))
	g = binary.LittleEndian.AppendUint64(g, t.host.Incarnation())
	g = append(g, nonceO[:]...)
	g = binary.LittleEndian.AppendUint16(g, uint16(len(t.hostID)))
	g = append(g, t.hostID...)
	if err := writeMsg(c, g, -1); err != nil {
		return nil, err
	}
	h, fd, err := readMsg(c, 1024)
	if fd >= 0 {
		unix.Close(fd)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the consumer's hello: %w", err)
	}
	const fixed = 4 + 8 + 8 + 8 + 8 + 16 + 16
	cudaChan := len(h) >= 4 && [4]byte(h[:4]) == cudaHelloMagic
	if len(h) < fixed+2 || ([4]byte(h[:4]) != helloMagic && !cudaChan) {
		return nil, fmt.Errorf("%w: a malformed hello", errProtocol)
	}
	cid := transport.InstanceID(binary.LittleEndian.Uint64(h[4:]))
	cinc := binary.LittleEndian.Uint64(h[12:])
	if transport.InstanceID(binary.LittleEndian.Uint64(h[20:])) != t.host.LocalID() || binary.LittleEndian.Uint64(h[28:]) != t.host.Incarnation() ||
		[16]byte(h[36:52]) != nonceO {
		return nil, fmt.Errorf("%w: a hello for another instance or an old greeting", errProtocol)
	}
	plen := int(binary.LittleEndian.Uint16(h[fixed:]))
	if len(h) != fixed+2+plen {
		return nil, fmt.Errorf("%w: a malformed hello proof", errProtocol)
	}
	msgC := append(append([]byte{}, helloDomain...), h[:fixed]...)
	proof := h[fixed+2:]
	var proofO []byte
	if t.gate != nil && t.gate.AuthRequired() {
		if _, ok := t.gate.HelloKey(cid, cinc, msgC, proof); !ok {
			writeMsg(c, append(append([]byte{}, acceptMagic[:]...), 1), -1)
			return nil, fmt.Errorf("instance %016x did not prove its hello with a control-plane session key (no cluster secret, or not authenticated)", uint64(cid))
		}
		if proofO, err = t.gate.HelloProof(cid, append(append([]byte{}, acceptDomain...), msgC...)); err != nil {
			return nil, err
		}
	}
	// The answer: accepted, the chunk size, the ring's slot count and the proof; with the ring's
	// descriptor, except on a CUDA IPC channel, which carries fixed frames of its own (cudaipc.go).
	a := append([]byte{}, acceptMagic[:]...)
	a = append(a, 0)
	a = binary.LittleEndian.AppendUint32(a, uint32(t.cfg.ChunkSize))
	a = append(a, byte(t.cfg.Slots))
	a = binary.LittleEndian.AppendUint16(a, uint16(len(proofO)))
	a = append(a, proofO...)
	if cudaChan {
		if err := writeMsg(c, a, -1); err != nil {
			return nil, err
		}
		c.SetDeadline(time.Time{})
		return &serverConn{t: t, c: c, peer: cid, cuda: true}, nil
	}
	size := t.cfg.Slots * t.cfg.ChunkSize
	mfd, err := unix.MemfdCreate("velo-shm-ring", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	defer unix.Close(mfd)
	if err := unix.Ftruncate(mfd, int64(size)); err != nil {
		return nil, fmt.Errorf("sizing the ring: %w", err)
	}
	ring, err := unix.Mmap(mfd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping the ring: %w", err)
	}
	if err := writeMsg(c, a, mfd); err != nil {
		unix.Munmap(ring)
		return nil, err
	}
	c.SetDeadline(time.Time{})
	return &serverConn{t: t, c: c, peer: cid, ring: ring, chunk: t.cfg.ChunkSize, slots: t.cfg.Slots}, nil
}

func keys(m map[int]bool) []int {
	var out []int
	for k := range m {
		out = append(out, k)
	}
	return out
}

// request is one read a consumer asked for.
type request struct {
	key     []byte
	off, n  uint64
	idx     uint32
	lastOne bool // the last of the consumer's batch: the ring is handed over after it
	file    bool // the consumer takes a file answer (payload.go)
}

func parseRequest(f []byte) request {
	return request{key: append([]byte(nil), f[4:4+keyLen]...), off: binary.LittleEndian.Uint64(f[36:]), n: binary.LittleEndian.Uint64(f[44:]),
		idx: binary.LittleEndian.Uint32(f[52:]), lastOne: f[2]&flagLast != 0, file: f[2]&flagFile != 0}
}

// run serves the channel's reads in the order they came, until the channel fails or closes (it
// never returns nil). A consumer sends a batch of requests at once; the owner packs their bytes
// into the ring buffer it is filling (a piece per chunk frame, naming the request, the buffer and
// where in it), hands a buffer over when it is full or the batch ends (the piece's frame says so),
// and takes the other buffer once the consumer gave it back. A refused request is answered with
// an error frame and the others go on. A request the owner answers with a payload's file
// (payload.go) stays in flight until the consumer's done frame for it, or the channel's end.
func (c *serverConn) run() error {
	var queue []request
	var f [frameLen]byte
	files := map[uint32]*registration{} // file answers whose done frame has not come yet
	defer func() {
		for _, r := range files {
			r.end()
		}
	}()
	free := make([]bool, c.slots)
	for b := range free {
		free[b] = true
	}
	cur, fill := 0, 0
	send := func(kind byte, b, flags byte, off, n int, idx uint32) error {
		var o [frameLen]byte
		o[0], o[1], o[2] = kind, b, flags
		binary.LittleEndian.PutUint32(o[4:], uint32(n))
		binary.LittleEndian.PutUint32(o[8:], uint32(off))
		binary.LittleEndian.PutUint32(o[12:], idx)
		_, err := c.c.Write(o[:])
		return err
	}
	// next reads one frame from the consumer: a request joins the queue, a returned buffer is
	// freed, and a write is served at once when no read is under way (idle: the loop waits for
	// requests, and every buffer is back).
	idle := false
	next := func() error {
		if _, err := io.ReadFull(c.c, f[:]); err != nil {
			return err
		}
		switch {
		case f[0] == frameRead && len(queue) >= maxBatch:
			// A consumer sends at most maxBatch requests before it reads the answers: more is
			// a flood, not a batch.
			return fmt.Errorf("%w: more than %d requests waiting", errProtocol, maxBatch)
		case f[0] == frameRead:
			queue = append(queue, parseRequest(f[:]))
		case f[0] == frameFree && int(f[1]) < c.slots && !free[f[1]]:
			free[f[1]] = true
		case f[0] == wire.SHMFileDone:
			d, err := wire.DecodeSHMFileFrame(f[:])
			r := files[d.Req]
			if err != nil || r == nil {
				return fmt.Errorf("%w: a done frame for no file answer (%v)", errProtocol, err)
			}
			delete(files, d.Req)
			r.end()
		case f[0] == frameWrite && idle && len(queue) == 0 && fill == 0 && len(files) == 0 && !slices.Contains(free, false):
			return c.write(f[:], send)
		default:
			return fmt.Errorf("%w: frame %q", errProtocol, f[0])
		}
		return nil
	}
	// handOver gives the buffer being filled to the consumer (with the frame of its last piece, or
	// alone) and moves to the other one.
	handOver := func() {
		free[cur] = false
		cur, fill = (cur+1)%c.slots, 0
	}
	for {
		idle = true
		for len(queue) == 0 {
			if err := next(); err != nil {
				return err
			}
		}
		idle = false
		req := queue[0]
		queue = queue[1:]
		r, at, code := c.check(req, false)
		if code != 0 {
			if err := send(frameError, code, 0, 0, 0, req.idx); err != nil {
				return err
			}
			if req.lastOne && fill > 0 {
				if err := send(frameChunk, byte(cur), flagHandOver, fill, 0, req.idx); err != nil {
					return err
				}
				handOver()
			}
			continue
		}
		if c.takesFile(r, req) {
			if files[req.idx] != nil {
				r.end()
				return fmt.Errorf("%w: request %d asked twice in one batch", errProtocol, req.idx)
			}
			files[req.idx] = r // from here the deferred end or the done frame ends the read
			if err := c.sendFile(r, at, req); err != nil {
				return err
			}
			c.t.fileServed.Add(1)
			if req.lastOne && fill > 0 {
				if err := send(frameChunk, byte(cur), flagHandOver, fill, 0, req.idx); err != nil {
					return err
				}
				handOver()
			}
			continue
		}
		if err := c.copyOut(r, r.mem[at:at+req.n], req, free, &cur, &fill, next, send, handOver); err != nil {
			return err
		}
	}
}

// takesFile says whether req is answered with r's payload file: the consumer takes one, the
// read is large enough, and its key reaches the whole file (a file answer hands the consumer the
// whole file, so a key narrowed to a part of it is served through the ring).
func (c *serverConn) takesFile(r *registration, req request) bool {
	if !req.file || r.file == nil || c.t.cfg.SingleCopyMin <= 0 || req.n < uint64(c.t.cfg.SingleCopyMin) {
		return false
	}
	k, err := parseKey(req.key)
	return err == nil && k.base == 0 && k.length == uint64(len(r.mem))
}

// check finds the live registration a request names and checks it was made for this consumer,
// for this access (write: a write grant's range; else a lease's), and covers the range; code is
// the error frame's code when not.
func (c *serverConn) check(req request, write bool) (*registration, uint64, byte) {
	k, err := parseKey(req.key)
	if err != nil {
		return nil, 0, codeRevoked
	}
	c.t.mu.Lock()
	r := c.t.regs[k.slot]
	closed := c.t.closed
	c.t.mu.Unlock()
	switch {
	case closed:
		return nil, 0, codeClosing
	case r == nil || r.token != k.token:
		return nil, 0, codeRevoked
	case r.peer != 0 && r.peer != c.peer:
		return nil, 0, codeNotYours
	case r.write != write:
		return nil, 0, codeAccess
	case k.base+k.length > uint64(len(r.mem)) || req.off > k.length || req.n > k.length-req.off || req.n == 0:
		return nil, 0, codeRange
	}
	if !r.begin() {
		return nil, 0, codeRevoked
	}
	return r, k.base + req.off, 0
}

// copyOut copies one request's bytes into the ring, piece by piece. The registration counts the
// read as in flight until its last byte left it, whatever the consumer does with the ring then.
func (c *serverConn) copyOut(r *registration, src []byte, req request, free []bool, cur, fill *int, next func() error,
	send func(kind byte, b, flags byte, off, n int, idx uint32) error, handOver func()) error {
	reading := true
	defer func() {
		if reading {
			r.end()
		}
	}()
	pos := 0
	for pos < len(src) {
		for !free[*cur] {
			if err := next(); err != nil {
				return err
			}
		}
		b := *cur
		m := copy(c.ring[b*c.chunk+*fill:(b+1)*c.chunk], src[pos:])
		at := *fill
		pos += m
		*fill += m
		if pos == len(src) {
			r.end()
			reading = false
		}
		var flags byte
		if *fill == c.chunk || (pos == len(src) && req.lastOne) {
			flags = flagHandOver
		}
		if err := send(frameChunk, byte(b), flags, at, m, req.idx); err != nil {
			return err
		}
		if flags != 0 {
			handOver()
		}
	}
	return nil
}

// write serves one write frame: the piece at the start of the buffer it names goes into the
// registration when check allows it, and the ack gives the buffer back with the outcome. The
// registration counts the write as in flight until the copy is done, so its Dead (the grant's end)
// waits for a copy under way and no copy starts after it.
func (c *serverConn) write(f []byte, send func(kind byte, b, flags byte, off, n int, idx uint32) error) error {
	req := parseRequest(f)
	b := int(f[1])
	if b >= c.slots || req.n > uint64(c.chunk) {
		return fmt.Errorf("%w: a write of %d bytes in buffer %d", errProtocol, req.n, b)
	}
	r, at, code := c.check(req, true)
	if code == 0 {
		copy(r.mem[at:at+req.n], c.ring[b*c.chunk:b*c.chunk+int(req.n)])
		r.end()
	}
	return send(frameAck, byte(b), code, 0, 0, req.idx)
}
