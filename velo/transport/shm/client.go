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
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/velo-go/velo/velo/internal/fanout"
	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/transport"
)

// clientConn is one channel of the consumer to an owner.
type clientConn struct {
	c     *net.UnixConn
	ring  []byte
	chunk int
	slots int
	once  sync.Once
	oob   []byte // control messages of a read (a file answer's descriptor)
	fds   []int  // descriptors received and not yet taken by a file answer

	// While the channel is idle a watcher reads it: the owner never sends on an idle channel, so
	// anything it reads (an EOF, when the owner went) means the channel is dead, and it is closed
	// then rather than at the next read. watched is closed when the watcher returned; dead says
	// it found the channel dead (guarded by Transport.mu).
	watched chan struct{}
	dead    bool
}

// close closes the socket and unmaps the ring; the caller holds the channel alone.
func (c *clientConn) close() {
	c.once.Do(func() {
		c.c.Close()
		unix.Munmap(c.ring)
	})
}

// take returns an idle channel to p, or opens one when fewer than ConnsPerPeer are open, or
// waits for one to come back.
func (t *Transport) take(ctx context.Context, p *peer) (*clientConn, error) {
	for {
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			return nil, fmt.Errorf("shm: %w", transport.ErrClosed)
		}
		if n := len(p.idle); n > 0 {
			c := p.idle[n-1]
			p.idle = p.idle[:n-1]
			t.mu.Unlock()
			if c.unwatch(t) {
				return c, nil
			}
			t.mu.Lock()
			p.open--
			t.mu.Unlock()
			c.close()
			continue
		}
		if p.open < t.cfg.ConnsPerPeer {
			p.open++
			t.mu.Unlock()
			c, err := t.dial(ctx, p, false)
			if err != nil {
				t.mu.Lock()
				p.open--
				p.why = err.Error()
				p.ready = false
				t.signal(p)
				t.mu.Unlock()
				return nil, err
			}
			return c, nil
		}
		wait := p.waitCh
		t.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// put gives a channel back: kept idle when it worked (ok) and its peer is still current, else
// closed.
func (t *Transport) put(p *peer, c *clientConn, ok bool) {
	t.mu.Lock()
	keep := ok && !t.closed && t.peers[p.id] == p
	if keep {
		p.idle = append(p.idle, c)
		p.ready, p.why = true, ""
		t.watch(p, c)
	} else {
		p.open--
		if p.open == 0 && t.peers[p.id] == p {
			t.reprobe(p)
		}
	}
	t.signal(p)
	t.mu.Unlock()
	if !keep {
		c.close()
	}
}

// reprobeAfter is how long a peer whose last channel died waits before it is probed again.
const reprobeAfter = 200 * time.Millisecond

// reprobe opens a new channel to p a moment after its last one died (the owner restarted its
// side, or closed a stalled consumer's channels with force): without it, a pair that lost its
// channels would stay off the path until the peer is registered again. A failed probe leaves the
// path off and says why; t.mu is held.
func (t *Transport) reprobe(p *peer) {
	if p.probing || t.closed {
		return
	}
	p.probing = true
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		select {
		case <-time.After(reprobeAfter):
		case <-t.stop:
		}
		ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
		defer cancel()
		c, err := t.take(ctx, p)
		t.mu.Lock()
		p.probing = false
		t.mu.Unlock()
		if err != nil {
			return
		}
		t.put(p, c, true)
	}()
}

// watch starts the watcher of an idle channel; t.mu is held.
func (t *Transport) watch(p *peer, c *clientConn) {
	c.watched = make(chan struct{})
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		defer close(c.watched)
		var b [1]byte
		_, err := c.c.Read(b[:])
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return // unwatch interrupted it: the channel is being taken
		}
		t.mu.Lock()
		c.dead = true
		for i, x := range p.idle {
			if x == c {
				p.idle = append(p.idle[:i], p.idle[i+1:]...)
				p.open--
				if p.open == 0 {
					p.ready, p.why = false, "the owner closed the channel (it went, or closed it with force)"
					t.reprobe(p)
				}
				t.signal(p)
				t.mu.Unlock()
				c.close()
				return
			}
		}
		t.mu.Unlock() // taken meanwhile: unwatch sees dead
	}()
}

// unwatch stops the watcher of a channel just taken from the idle list and reports whether the
// channel is still alive.
func (c *clientConn) unwatch(t *Transport) bool {
	c.c.SetReadDeadline(time.Unix(1, 0))
	<-c.watched
	c.c.SetReadDeadline(time.Time{})
	t.mu.Lock()
	defer t.mu.Unlock()
	return !c.dead
}

// signal wakes the takers waiting on p; t.mu is held.
func (t *Transport) signal(p *peer) {
	close(p.waitCh)
	p.waitCh = make(chan struct{})
}

// dial opens and proves a channel to p: the control plane authenticates the owner first when
// the instance has a secret, then the handshake checks the owner's credentials, identity, host
// and proof, and maps the ring it hands over.
func (t *Transport) dial(ctx context.Context, p *peer, cuda bool) (*clientConn, error) {
	auth := t.gate != nil && t.gate.AuthRequired()
	if auth {
		if err := t.gate.Authenticate(ctx, p.id); err != nil {
			return nil, fmt.Errorf("shm: authenticating %016x on the control plane: %w", uint64(p.id), err)
		}
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", p.sock)
	if err != nil {
		return nil, fmt.Errorf("shm: the owner's socket is not reachable from here: %w", err)
	}
	c := nc.(*net.UnixConn)
	cc, err := t.handshakeConsumer(ctx, c, p, auth, cuda)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("shm: handshake with %016x: %w", uint64(p.id), err)
	}
	return cc, nil
}

// With cuda the channel is a CUDA IPC channel (cudaipc.go): the owner hands over no ring.
func (t *Transport) handshakeConsumer(ctx context.Context, c *net.UnixConn, p *peer, auth, cuda bool) (*clientConn, error) {
	dl := time.Now().Add(handshakeTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	c.SetDeadline(dl)
	uid, err := peerUID(c)
	if err != nil {
		return nil, err
	}
	if !t.allow[uid] {
		return nil, fmt.Errorf("the socket belongs to a process of uid %d, not one this instance allows (Config.AllowUIDs)", uid)
	}
	g, fd, err := readMsg(c, 1024)
	if fd >= 0 {
		unix.Close(fd)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the owner's greeting: %w", err)
	}
	if len(g) == 5 && [4]byte(g[:4]) == acceptMagic {
		return nil, errors.New("the owner refused this process (its uid)")
	}
	if len(g) < 4+8+8+16+2 || [4]byte(g[:4]) != greetMagic {
		return nil, fmt.Errorf("%w: a malformed greeting", errProtocol)
	}
	oid := transport.InstanceID(binary.LittleEndian.Uint64(g[4:]))
	oinc := binary.LittleEndian.Uint64(g[12:])
	nonceO := g[20:36]
	hl := int(binary.LittleEndian.Uint16(g[36:]))
	if len(g) != 38+hl {
		return nil, fmt.Errorf("%w: a malformed greeting", errProtocol)
	}
	if oid != p.id || (p.inc != 0 && oinc != p.inc) {
		return nil, fmt.Errorf("the socket is served by instance %016x (incarnation %x), not the peer", uint64(oid), oinc)
	}
	if !t.equalHost(g[38:]) {
		return nil, fmt.Errorf("the owner runs on host %q, this instance on %q", g[38:], t.hostID)
	}
	var nonceC [16]byte
	rand.Read(nonceC[:])
	magic := helloMagic
	if cuda {
		magic = cudaHelloMagic
	}
	h := append([]byte{}, magic[:]...)
	h = binary.LittleEndian.AppendUint64(h, uint64(t.host.LocalID()))
	h = binary.LittleEndian.AppendUint64(h, t.host.Incarnation())
	h = binary.LittleEndian.AppendUint64(h, uint64(oid))
	h = binary.LittleEndian.AppendUint64(h, oinc)
	h = append(h, nonceO...)
	h = append(h, nonceC[:]...)
	msgC := append(append([]byte{}, helloDomain...), h...)
	var proof []byte
	if auth {
		if proof, err = t.gate.HelloProof(oid, msgC); err != nil {
			return nil, err
		}
	}
	h = binary.LittleEndian.AppendUint16(h, uint16(len(proof)))
	h = append(h, proof...)
	if err := writeMsg(c, h, -1); err != nil {
		return nil, err
	}
	a, fd, err := readMsg(c, 1024)
	closeFD := func() {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	defer closeFD()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("the owner closed the channel during the handshake (it refused this instance's uid or proof)")
		}
		return nil, fmt.Errorf("reading the owner's answer: %w", err)
	}
	if len(a) < 5 || [4]byte(a[:4]) != acceptMagic {
		return nil, fmt.Errorf("%w: a malformed answer", errProtocol)
	}
	if a[4] != 0 {
		return nil, errors.New("the owner refused this instance (no valid proof of the cluster secret)")
	}
	if len(a) < 12 {
		return nil, fmt.Errorf("%w: a malformed answer", errProtocol)
	}
	chunk, slots := int(binary.LittleEndian.Uint32(a[5:])), int(a[9])
	pl := int(binary.LittleEndian.Uint16(a[10:]))
	if len(a) != 12+pl || chunk < 4096 || chunk > 256<<20 || slots < 2 || slots > maxSlots {
		return nil, fmt.Errorf("%w: a malformed answer", errProtocol)
	}
	if auth {
		if _, ok := t.gate.HelloKey(oid, oinc, append(append([]byte{}, acceptDomain...), msgC...), a[12:]); !ok {
			return nil, errors.New("the owner did not prove its answer with the control-plane session key: the socket is not the peer's")
		}
	}
	if cuda {
		if fd >= 0 {
			return nil, fmt.Errorf("%w: a ring on a CUDA IPC channel", errProtocol)
		}
		c.SetDeadline(time.Time{})
		return &clientConn{c: c, chunk: chunk}, nil
	}
	if fd < 0 {
		return nil, fmt.Errorf("%w: the answer carried no ring", errProtocol)
	}
	// Writable: a write (push) hands its bytes over in the ring. The ring is this channel's alone,
	// so what the consumer writes there reaches the owner's memory only through a checked write.
	ring, err := mapRing(fd, slots*chunk, unix.PROT_READ|unix.PROT_WRITE)
	if err != nil {
		return nil, fmt.Errorf("mapping the ring: %w", err)
	}
	c.SetDeadline(time.Time{})
	return &clientConn{c: c, ring: ring, chunk: chunk, slots: slots, oob: make([]byte, unix.CmsgSpace(4*4))}, nil
}

// Get implements transport.RMA: len(dst) bytes at offset of the region key names, copied out of
// the ring of a channel to peer as the owner fills it. If ctx ends first the channel is closed,
// and Get returns once nothing writes dst (this goroutine is the only writer).
func (t *Transport) Get(ctx context.Context, id transport.InstanceID, kb []byte, offset uint64, dst []byte) error {
	var err error
	t.ReadMany(ctx, id, []transport.Read{{Key: kb, Offset: offset, Dst: dst}}, 1, func(_ int, e error) { err = e })
	return err
}

// maxBatch bounds the requests of one batch on a channel: their frames, and the owner's answers,
// stay well inside the socket's buffers, so neither side blocks writing while the other does.
const maxBatch = 256

// ReadMany implements transport.ManyReader: the reads go in batches of up to maxBatch, each
// batch's requests at once on one channel, up to window channels at a time (at most
// ConnsPerPeer). The owner packs small reads into one ring buffer, so a batch of small blocks
// costs one round trip per batch, not per block. done runs once per read, one call at a time.
func (t *Transport) ReadMany(ctx context.Context, id transport.InstanceID, reads []transport.Read, window int, done func(i int, err error)) {
	var mu sync.Mutex
	report := func(i int, err error) {
		if err != nil {
			err = fmt.Errorf("shm: GET of %d bytes from %016x: %w", len(reads[i].Dst), uint64(id), err)
		}
		mu.Lock()
		defer mu.Unlock()
		if done != nil {
			done(i, err)
		}
	}
	var idx []int // the reads that go to the owner
	for i, r := range reads {
		switch _, err := parseKey(r.Key); {
		case err != nil:
			report(i, err)
		case r.Memory != transport.MemoryHost:
			report(i, fmt.Errorf("%w: the same-host path reads into host memory only", errors.ErrUnsupported))
		case len(r.Dst) == 0:
			report(i, nil)
		default:
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return
	}
	files := fileReads{on: !t.ringOnly, hook: t.fileHook, byMap: t.copyByMap}
	t.onChannels(ctx, id, idx, window, report, func(c *clientConn, batch []int) ([]error, bool) {
		errs, broken, n := c.readMany(ctx, reads, batch, files)
		t.fileRead.Add(uint64(n))
		return errs, broken
	})
}

// onChannels runs the operations idx (indexes into the caller's list) in batches of up to
// maxBatch, each on a channel to id, up to window channels at a time (at most ConnsPerPeer); op
// runs one batch on its channel and says whether the channel broke. report hears of each
// operation once.
func (t *Transport) onChannels(ctx context.Context, id transport.InstanceID, idx []int, window int, report func(int, error),
	op func(c *clientConn, batch []int) ([]error, bool)) {
	t.mu.Lock()
	p := t.peers[id]
	t.mu.Unlock()
	if p == nil || !p.same {
		for _, i := range idx {
			report(i, fmt.Errorf("%w: the peer is not on this host's same-host path", transport.ErrUnknownPeer))
		}
		return
	}
	var batches [][]int
	for len(idx) > 0 {
		n := min(len(idx), maxBatch)
		batches, idx = append(batches, idx[:n]), idx[n:]
	}
	fanout.Each(len(batches), max(1, min(window, t.cfg.ConnsPerPeer)), func(b int) {
		batch := batches[b]
		c, err := t.take(ctx, p)
		if err != nil {
			for _, i := range batch {
				report(i, err)
			}
			return
		}
		errs, broken := op(c, batch)
		t.put(p, c, !broken)
		for k, i := range batch {
			report(i, errs[k])
		}
	})
}

// exchange runs one batch's exchange on the channel: ctx's end interrupts it (the channel is of
// no more use then), and a failure of the channel fails every operation of the batch not yet
// failed alone, with ctx's error or one that says the owner went. what names the operation.
func (c *clientConn) exchange(ctx context.Context, n int, what string, run func(errs []error) error) (errs []error, broken bool) {
	errs = make([]error, n)
	stop := context.AfterFunc(ctx, func() { c.c.SetDeadline(time.Unix(1, 0)) })
	err := run(errs)
	if !stop() && ctx.Err() != nil {
		broken = true // the deadline was set
	}
	if err == nil {
		return errs, broken
	}
	if ctx.Err() != nil {
		err = ctx.Err()
	} else if errors.Is(err, io.EOF) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
		err = fmt.Errorf("%w: the owner closed the channel mid-%s", transport.ErrPeerUnreachable, what)
	}
	for k := range errs {
		if errs[k] == nil {
			errs[k] = err
		}
	}
	return errs, true
}

// readMany sends the requests of batch (indexes into reads) at once and copies each piece out of
// the ring as the owner announces it, or a whole read out of the payload file the owner answers it
// with (files: the requests say the consumer takes one; payload.go). broken says the channel is
// out of step (it is closed then); a refused key leaves it in step. nfiles counts the reads
// answered with a file.
func (c *clientConn) readMany(ctx context.Context, reads []transport.Read, batch []int, files fileReads) (errs []error, broken bool, nfiles int) {
	defer c.dropFDs()
	errs, broken = c.exchange(ctx, len(batch), "read", func(errs []error) error {
		req := make([]byte, frameLen*len(batch))
		for k, i := range batch {
			f := req[k*frameLen : (k+1)*frameLen]
			f[0] = frameRead
			if k == len(batch)-1 {
				f[2] = flagLast
			}
			if files.on {
				f[2] |= flagFile
			}
			copy(f[4:], reads[i].Key)
			binary.LittleEndian.PutUint64(f[36:], reads[i].Offset)
			binary.LittleEndian.PutUint64(f[44:], uint64(len(reads[i].Dst)))
			binary.LittleEndian.PutUint32(f[52:], uint32(k))
		}
		if _, err := c.c.Write(req); err != nil {
			return err
		}
		pos := make([]int, len(batch))
		left := len(batch) // requests not yet complete or refused
		pending := false   // pieces in a buffer the owner has not handed over yet
		var f [frameLen]byte
		for left > 0 || pending {
			if err := c.readFrame(f[:]); err != nil {
				return err
			}
			k := int(binary.LittleEndian.Uint32(f[12:]))
			if k >= len(batch) {
				return (fmt.Errorf("%w: an answer for request %d of %d", errProtocol, k, len(batch)))
			}
			if len(c.fds) > 0 && f[0] != wire.SHMFileRead {
				return fmt.Errorf("%w: a descriptor with a frame %q", errProtocol, f[0])
			}
			switch f[0] {
			case frameError:
				if errs[k] == nil && pos[k] < len(reads[batch[k]].Dst) {
					errs[k] = codeErr(f[1])
					left--
				}
				continue
			case wire.SHMFileRead:
				dst := reads[batch[k]].Dst
				if !files.on || pos[k] != 0 || errs[k] != nil {
					return fmt.Errorf("%w: a file answer for request %d, which it does not answer", errProtocol, k)
				}
				if err := c.readFile(f[:], dst, files); err != nil {
					return err
				}
				pos[k] = len(dst)
				left--
				nfiles++
				continue
			case frameChunk:
			default:
				return (fmt.Errorf("%w: frame %q during a read", errProtocol, f[0]))
			}
			b, n, at := int(f[1]), int(binary.LittleEndian.Uint32(f[4:])), int(binary.LittleEndian.Uint32(f[8:]))
			dst := reads[batch[k]].Dst
			if b >= c.slots || at > c.chunk || n > c.chunk-at || n > len(dst)-pos[k] || (n > 0 && errs[k] != nil) {
				return (fmt.Errorf("%w: a piece of %d bytes at %d of buffer %d", errProtocol, n, at, b))
			}
			if n > 0 {
				copy(dst[pos[k]:pos[k]+n], c.ring[b*c.chunk+at:b*c.chunk+at+n])
				pos[k] += n
				pending = true
				if pos[k] == len(dst) {
					left--
				}
			}
			if f[2]&flagHandOver != 0 {
				pending = false
				var fr [frameLen]byte
				fr[0], fr[1] = frameFree, byte(b)
				if _, err := c.c.Write(fr[:]); err != nil {
					return err
				}
			}
		}
		if len(c.fds) > 0 {
			return fmt.Errorf("%w: a descriptor with no file answer", errProtocol)
		}
		return nil
	})
	return errs, broken, nfiles
}

// WriteMany implements transport.RMAWriter: each write goes in pieces of at most one ring buffer
// on a channel to peer, the writes split into batches of up to maxBatch over up to window channels
// (at most ConnsPerPeer). A write is done once the owner acknowledged its last piece, so its bytes
// are in the owner's memory; done runs once per write, one call at a time.
func (t *Transport) WriteMany(ctx context.Context, id transport.InstanceID, writes []transport.Write, window int, done func(i int, err error)) {
	var mu sync.Mutex
	report := func(i int, err error) {
		if err != nil {
			err = fmt.Errorf("shm: PUT of %d bytes to %016x: %w", len(writes[i].Src), uint64(id), err)
		}
		mu.Lock()
		defer mu.Unlock()
		if done != nil {
			done(i, err)
		}
	}
	var idx []int
	for i, w := range writes {
		switch _, err := parseKey(w.Key); {
		case err != nil:
			report(i, err)
		case len(w.Src) == 0:
			report(i, nil)
		default:
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return
	}
	t.onChannels(ctx, id, idx, window, report, func(c *clientConn, batch []int) ([]error, bool) { return c.writeMany(ctx, writes, batch) })
}

// writeMany writes the entries of batch (indexes into writes) piece by piece through the two ring
// buffers: it fills a free buffer, names it in a write frame, and fills the other while the owner
// copies the first out. A refused piece fails its write (its later pieces are not sent) and
// leaves the channel in step; broken says it is out of step (it is closed then).
func (c *clientConn) writeMany(ctx context.Context, writes []transport.Write, batch []int) ([]error, bool) {
	return c.exchange(ctx, len(batch), "write", func(errs []error) error {
		// The owner acknowledges pieces in the order they were sent, so the buffers are used in
		// turn: next is the one the next piece goes in, once the owner gave it back.
		free := make([]bool, c.slots)
		for b := range free {
			free[b] = true
		}
		next, inFlight := 0, 0
		// ack waits for one ack frame: its buffer is free again, and a refusal fails its write.
		ack := func() error {
			var f [frameLen]byte
			if _, err := io.ReadFull(c.c, f[:]); err != nil {
				return err
			}
			k, b := int(binary.LittleEndian.Uint32(f[12:])), int(f[1])
			if f[0] != frameAck || b >= c.slots || free[b] || k >= len(batch) {
				return fmt.Errorf("%w: frame %q for buffer %d during a write", errProtocol, f[0], b)
			}
			free[b] = true
			inFlight--
			if f[2] != 0 && errs[k] == nil {
				errs[k] = codeErr(f[2])
			}
			return nil
		}
		for k, i := range batch {
			w := writes[i]
			for pos := 0; pos < len(w.Src) && errs[k] == nil; {
				for !free[next] {
					if err := ack(); err != nil {
						return err
					}
				}
				if errs[k] != nil {
					break // the owner refused an earlier piece of this write
				}
				b := next
				next = (next + 1) % c.slots
				n := copy(c.ring[b*c.chunk:(b+1)*c.chunk], w.Src[pos:])
				var f [frameLen]byte
				f[0], f[1] = frameWrite, byte(b)
				copy(f[4:], w.Key)
				binary.LittleEndian.PutUint64(f[36:], w.Offset+uint64(pos))
				binary.LittleEndian.PutUint64(f[44:], uint64(n))
				binary.LittleEndian.PutUint32(f[52:], uint32(k))
				if _, err := c.c.Write(f[:]); err != nil {
					return err
				}
				free[b] = false
				inFlight++
				pos += n
			}
		}
		for inFlight > 0 {
			if err := ack(); err != nil {
				return err
			}
		}
		return nil
	})
}
