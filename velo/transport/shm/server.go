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
	"sync"
	"time"

	"golang.org/x/sys/unix"

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

	mu      sync.Mutex
	revoked bool
	reading int
	dead    chan struct{}
}

var (
	_ transport.Registration = (*registration)(nil)
	_ transport.RangeKeyer   = (*registration)(nil)
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
	return t.register(mem, 0)
}

// RegisterMemoryFor implements transport.PeerRegisterer: each region is readable by peer alone.
func (t *Transport) RegisterMemoryFor(peer transport.InstanceID, mems [][]byte) ([]transport.Registration, []error) {
	regs := make([]transport.Registration, len(mems))
	errs := make([]error, len(mems))
	for i, m := range mems {
		regs[i], errs[i] = t.register(m, peer)
	}
	return regs, errs
}

func (t *Transport) register(mem []byte, peer transport.InstanceID) (transport.Registration, error) {
	if len(mem) == 0 {
		return nil, errors.New("shm: RegisterMemory: empty region")
	}
	var tok [8]byte
	rand.Read(tok[:])
	r := &registration{t: t, token: binary.LittleEndian.Uint64(tok[:]), mem: mem, peer: peer, dead: make(chan struct{})}
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
	return r, nil
}

// serverConn is one consumer's channel on the owner's side.
type serverConn struct {
	t     *Transport
	c     *net.UnixConn
	peer  transport.InstanceID
	ring  []byte
	chunk int
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
	var f [frameLen]byte
	for {
		if _, err := io.ReadFull(c, f[:]); err != nil {
			return
		}
		if f[0] != frameRead {
			t.log.Info("shm: a consumer broke the protocol; closing its channel", "peer", sc.peer, "frame", f[0])
			return
		}
		if err := sc.read(f[4:4+keyLen], binary.LittleEndian.Uint64(f[36:]), binary.LittleEndian.Uint64(f[44:])); err != nil {
			return
		}
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
	if len(h) < fixed+2 || [4]byte(h[:4]) != helloMagic {
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
	size := 2 * t.cfg.ChunkSize
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
	a := append([]byte{}, acceptMagic[:]...)
	a = append(a, 0)
	a = binary.LittleEndian.AppendUint32(a, uint32(t.cfg.ChunkSize))
	a = binary.LittleEndian.AppendUint16(a, uint16(len(proofO)))
	a = append(a, proofO...)
	if err := writeMsg(c, a, mfd); err != nil {
		unix.Munmap(ring)
		return nil, err
	}
	c.SetDeadline(time.Time{})
	return &serverConn{t: t, c: c, peer: cid, ring: ring, chunk: t.cfg.ChunkSize}, nil
}

func keys(m map[int]bool) []int {
	var out []int
	for k := range m {
		out = append(out, k)
	}
	return out
}

// read serves one read: it checks the key against a live registration made for this consumer
// and the range against the key, then copies the bytes through the ring. A refused read is
// answered with an error frame and the channel goes on; an error return closes the channel.
func (c *serverConn) read(kb []byte, off, n uint64) error {
	var f [frameLen]byte
	refuse := func(code byte) error {
		f[0], f[1] = frameError, code
		_, err := c.c.Write(f[:])
		return err
	}
	k, err := parseKey(kb)
	if err != nil {
		return refuse(codeRevoked)
	}
	c.t.mu.Lock()
	r := c.t.regs[k.slot]
	closed := c.t.closed
	c.t.mu.Unlock()
	switch {
	case closed:
		return refuse(codeClosing)
	case r == nil || r.token != k.token:
		return refuse(codeRevoked)
	case r.peer != 0 && r.peer != c.peer:
		return refuse(codeNotYours)
	case k.base+k.length > uint64(len(r.mem)) || off > k.length || n > k.length-off || n == 0:
		return refuse(codeRange)
	}
	if !r.begin() {
		return refuse(codeRevoked)
	}
	src := r.mem[k.base+off : k.base+off+n]
	reading := true
	defer func() {
		if reading {
			r.end()
		}
	}()
	free := [2]bool{true, true}
	next, pos, out := 0, 0, 0
	for pos < len(src) || out > 0 {
		if pos < len(src) && free[next] {
			m := copy(c.ring[next*c.chunk:(next+1)*c.chunk], src[pos:])
			pos += m
			if pos == len(src) {
				// The registration is not touched again: the read no longer holds it, whatever
				// the consumer does with the ring.
				r.end()
				reading = false
			}
			f[0], f[1] = frameChunk, byte(next)
			binary.LittleEndian.PutUint32(f[4:], uint32(m))
			if _, err := c.c.Write(f[:]); err != nil {
				return err
			}
			free[next] = false
			out++
			next ^= 1
			continue
		}
		if _, err := io.ReadFull(c.c, f[:]); err != nil {
			return err
		}
		if f[0] != frameFree || f[1] > 1 || free[f[1]] {
			return fmt.Errorf("%w: frame %q while serving a read", errProtocol, f[0])
		}
		free[f[1]] = true
		out--
	}
	return nil
}
