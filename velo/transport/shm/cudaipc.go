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
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/transport"
)

// Device memory on the same-host path: CUDA IPC (docs/gpu.md, "Same host: CUDA IPC").
//
// A lease of device memory whose consumer runs on this host is exported instead of copied: the
// owner registers it here (RegisterMemoryOfFor through Route) and hands out a device key; the
// consumer asks the owner for the export behind the key on a channel of its own (a CUDA IPC
// channel: the same socket and handshake as the ring channels, credentials and the cluster
// secret's proof each way, and a hello magic of its own, so the proof covers the kind), maps the
// allocation (cuIpcOpenMemHandle, once per owner allocation) and copies out of it on the GPU,
// device to device or device to host. The frames are velo/internal/wire's CUDAIPCFrame.
//
// What a consumer can reach: a CUDA IPC handle names the whole allocation (cuMemAlloc or
// cudaMalloc) the leased range lies in, never a part of it, so while the consumer holds the
// mapping it can reach the whole allocation, not only the range. The owner answers an export only
// for a live key issued to that consumer, and only over its proven channel; the consumer keeps a
// mapping while it holds a live key into that allocation and closes it when the owner says the
// last such key ended (the owner's notice comes once no read of the key is under way; Dead waits
// for the consumer's answer, sent after the mapping is closed) or when the channel closes (the
// owner or the consumer went, or the owner closed a stalled consumer's channels with force).
//
// Nothing here calls CUDA: the driver calls are the inner transport's (transport.CUDAIPC, the UCX
// transport in a binary built with -tags cuda,ucx_static). A pair falls back to the inner
// transport, saying why, wherever a step fails: no CUDA IPC beside the path, a consumer whose
// driver sees no device (it opens no CUDA IPC channel), an export the driver refuses (the owner
// registers the lease with the inner transport), a handle the consumer cannot open (the read
// fails and the registry reads by chunks; the consumer closes its CUDA IPC channel, so the
// owner's next leases go to the inner transport).

var (
	cudaHelloMagic = [4]byte{'V', 'S', 'H', 'G'}
	devKeyMagic    = [4]byte{'V', 'S', 'H', 2}
)

// maxCUDAReads bounds the exports a consumer may hold unfinished reads of on one channel.
const maxCUDAReads = 4096

// cudaState is the transport's CUDA IPC state, guarded by Transport.mu.
type cudaState struct {
	ipc      transport.CUDAIPC // set by Route; nil: device memory stays with the inner transport
	regs     map[uint32]*devRegistration
	next     uint32
	clients  map[transport.InstanceID]*cudaClient
	why      map[transport.InstanceID]string // consumer: why reads from an owner do not take it
	ownWhy   map[transport.InstanceID]string // owner: why a consumer's device leases do not
	mapped   atomic.Int64                    // mappings open on the consumer's side
	fellBack atomic.Int64                    // device leases of same-host consumers given to inner
	// withoutDevice makes the consumer open its CUDA IPC channel even when its driver sees no
	// device: tests on machines without a GPU set it so that the owner's export meets the driver.
	withoutDevice bool
}

// IsDeviceKey reports whether b is a device key of the same-host path (CUDA IPC).
func IsDeviceKey(b []byte) bool { return len(b) == keyLen && [4]byte(b[:4]) == devKeyMagic }

func parseDevKey(b []byte) (key, error) {
	if !IsDeviceKey(b) {
		return key{}, fmt.Errorf("shm: a key of %d bytes that is not a same-host device key", len(b))
	}
	c := append([]byte(nil), b...)
	copy(c, keyMagic[:])
	return parseKey(c)
}

// setCUDA gives the transport the CUDA IPC of the transport beside it (Route).
func (t *Transport) setCUDA(ipc transport.CUDAIPC) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cuda.ipc = ipc
}

// ---------------------------------------------------------------------------- owner side

// devRegistration is one lease's device memory, exported for one consumer.
type devRegistration struct {
	t     *Transport
	slot  uint32
	token uint64
	n     int
	peer  transport.InstanceID
	exp   transport.CUDAExport

	mu       sync.Mutex
	revoked  bool
	notified bool                 // the consumers that hold it were told it ended
	reading  int                  // exports answered whose copy is not done
	holders  map[*cudaServer]bool // channels that were given the export and have not dropped it
	isDead   bool
	dead     chan struct{}
}

var _ transport.Registration = (*devRegistration)(nil)

func (r *devRegistration) Len() int              { return r.n }
func (r *devRegistration) Dead() <-chan struct{} { return r.dead }

// Key implements transport.Registration: a device key (slot, token, the whole registration).
func (r *devRegistration) Key() []byte {
	b := key{slot: r.slot, token: r.token, length: uint64(r.n)}.append(nil)
	copy(b, devKeyMagic[:])
	return b
}

// Revoke implements transport.Registration: later exports are refused; once no copy is under
// way the consumers that hold the export are told, and Dead is closed when each has answered
// that it no longer uses it (its mapping closed, when no other live key holds it), or its
// channel closed.
func (r *devRegistration) Revoke(context.Context) error {
	r.t.mu.Lock()
	if r.t.cuda.regs[r.slot] == r {
		delete(r.t.cuda.regs, r.slot)
	}
	r.t.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.revoked = true
	r.settle()
	return nil
}

// settle tells the holders a revoked registration ended once nothing reads it, and closes Dead
// once none holds it; r.mu is held.
func (r *devRegistration) settle() {
	if !r.revoked || r.reading > 0 {
		return
	}
	if !r.notified {
		r.notified = true
		for h := range r.holders {
			h.queue(wire.CUDAIPCFrame{Kind: wire.CUDAIPCRevoked, Slot: r.slot, Token: r.token})
		}
	}
	if len(r.holders) == 0 && !r.isDead {
		r.isDead = true
		close(r.dead)
	}
}

// release drops what channel h holds of r: reads unfinished, and the export itself.
func (r *devRegistration) release(h *cudaServer, reads int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reading -= reads
	delete(r.holders, h)
	r.settle()
}

// servesCUDA reports whether consumer holds a proven CUDA IPC channel to this instance.
func (t *Transport) servesCUDA(consumer transport.InstanceID) bool {
	for c := range t.inbound {
		if c.cuda && c.peer == consumer {
			return true
		}
	}
	return false
}

// registerDevice exports device memory mem for consumer: nil when the pair does not take CUDA
// IPC (the caller registers with the inner transport), the reason logged once per consumer and
// reason, and counted.
func (t *Transport) registerDevice(consumer transport.InstanceID, mem []byte) transport.Registration {
	t.mu.Lock()
	ipc, same, served := t.cuda.ipc, t.servesAny(consumer), t.servesCUDA(consumer)
	closed := t.closed
	t.mu.Unlock()
	if closed || !same {
		return nil // not a same-host pair: the inner transport's, as any other
	}
	why := ""
	var exp transport.CUDAExport
	switch {
	case ipc == nil:
		why = "the transport beside the same-host path has no CUDA IPC"
	case !served:
		why = "the consumer holds no CUDA IPC channel to this instance (its CUDA sees no device, or it opened none)"
	default:
		var err error
		if exp, err = ipc.ExportCUDA(mem); err != nil {
			why = "the export failed: " + err.Error()
		}
	}
	if why == "" {
		var tok [8]byte
		rand.Read(tok[:])
		r := &devRegistration{t: t, token: binary.LittleEndian.Uint64(tok[:]), n: len(mem), peer: consumer, exp: exp,
			holders: map[*cudaServer]bool{}, dead: make(chan struct{})}
		t.mu.Lock()
		if !t.closed {
			if t.cuda.regs == nil {
				t.cuda.regs = map[uint32]*devRegistration{}
			}
			for {
				t.cuda.next++
				if _, used := t.cuda.regs[t.cuda.next]; !used && t.cuda.next != 0 {
					break
				}
			}
			r.slot = t.cuda.next
			t.cuda.regs[r.slot] = r
			delete(t.cuda.ownWhy, consumer)
			t.mu.Unlock()
			return r
		}
		t.mu.Unlock()
		return nil
	}
	t.cuda.fellBack.Add(1)
	t.mu.Lock()
	if t.cuda.ownWhy == nil {
		t.cuda.ownWhy = map[transport.InstanceID]string{}
	}
	logIt := t.cuda.ownWhy[consumer] != why
	t.cuda.ownWhy[consumer] = why
	t.mu.Unlock()
	if logIt {
		t.log.Info("shm: device memory of a same-host consumer is read through UCX, not CUDA IPC", "peer", consumer, "why", why)
	}
	return nil
}

// servesAny reports whether consumer holds any proven channel to this instance; t.mu is held.
func (t *Transport) servesAny(consumer transport.InstanceID) bool {
	for c := range t.inbound {
		if c.peer == consumer {
			return true
		}
	}
	return false
}

// cudaServer is the owner's side of one CUDA IPC channel.
type cudaServer struct {
	t     *Transport
	sc    *serverConn
	reads map[uint32]*devRegistration // by request: exports answered, copy not done
	held  map[uint32]*devRegistration // by slot: exports given and not dropped

	mu   sync.Mutex
	out  []wire.CUDAIPCFrame
	kick chan struct{}
}

// queue hands a frame to the channel's writer (never blocks: a revocation may call it).
func (h *cudaServer) queue(f wire.CUDAIPCFrame) {
	h.mu.Lock()
	h.out = append(h.out, f)
	h.mu.Unlock()
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// write sends the queued frames until stop closes; a failed write closes the channel.
func (h *cudaServer) write(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-h.kick:
		}
		h.mu.Lock()
		out := h.out
		h.out = nil
		h.mu.Unlock()
		for _, f := range out {
			if err := writeCUDAFrame(h.sc.c, f); err != nil {
				h.sc.close()
				return
			}
		}
	}
}

func writeCUDAFrame(c *net.UnixConn, f wire.CUDAIPCFrame) error {
	b, err := wire.AppendCUDAIPCFrame(make([]byte, 0, wire.CUDAIPCFrameLen), f)
	if err != nil {
		return err
	}
	c.SetWriteDeadline(time.Now().Add(handshakeTimeout))
	_, err = c.Write(b)
	return err
}

func readCUDAFrame(c *net.UnixConn, buf []byte) (wire.CUDAIPCFrame, error) {
	if _, err := io.ReadFull(c, buf); err != nil {
		return wire.CUDAIPCFrame{}, err
	}
	return wire.DecodeCUDAIPCFrame(buf)
}

// serveCUDA runs the owner's side of a CUDA IPC channel until it fails or closes; then every
// read and export the consumer held of it is released.
func (t *Transport) serveCUDA(sc *serverConn) {
	h := &cudaServer{t: t, sc: sc, reads: map[uint32]*devRegistration{}, held: map[uint32]*devRegistration{}, kick: make(chan struct{}, 1)}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		h.write(stop)
	}()
	defer func() {
		sc.close()
		close(stop)
		wg.Wait()
		reads := map[*devRegistration]int{}
		for _, r := range h.reads {
			reads[r]++
		}
		for _, r := range h.held {
			r.release(h, reads[r])
			delete(reads, r)
		}
		for r, n := range reads {
			r.release(h, n)
		}
	}()
	buf := make([]byte, wire.CUDAIPCFrameLen)
	for {
		f, err := readCUDAFrame(sc.c, buf)
		if err == nil {
			err = h.handle(f)
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				t.log.Info("shm: closing a consumer's CUDA IPC channel", "peer", sc.peer, "err", err)
			}
			return
		}
	}
}

// handle serves one frame of the consumer.
func (h *cudaServer) handle(f wire.CUDAIPCFrame) error {
	switch f.Kind {
	case wire.CUDAIPCOpen:
		if _, dup := h.reads[f.Req]; dup || len(h.reads) >= maxCUDAReads {
			return fmt.Errorf("%w: request %d is a duplicate, or more than %d reads are unfinished", errProtocol, f.Req, maxCUDAReads)
		}
		r, at, code := h.check(f.Key[:])
		if code != 0 {
			h.queue(wire.CUDAIPCFrame{Kind: wire.CUDAIPCExport, Req: f.Req, Code: code})
			return nil
		}
		h.reads[f.Req] = r
		h.held[r.slot] = r
		h.queue(wire.CUDAIPCFrame{Kind: wire.CUDAIPCExport, Req: f.Req, Slot: r.slot, Token: r.token, AllocID: r.exp.AllocID,
			AllocSize: r.exp.AllocSize, Offset: r.exp.Offset + at.base, Length: at.length, Device: r.exp.Device, Handle: r.exp.Handle})
	case wire.CUDAIPCDone:
		r := h.reads[f.Req]
		if r == nil {
			return fmt.Errorf("%w: done for request %d, which is not under way", errProtocol, f.Req)
		}
		delete(h.reads, f.Req)
		r.mu.Lock()
		r.reading--
		r.settle()
		r.mu.Unlock()
	case wire.CUDAIPCDropped:
		r := h.held[f.Slot]
		if r == nil || r.token != f.Token {
			return nil // a key this channel never held: nothing to release
		}
		for _, x := range h.reads {
			if x == r {
				return fmt.Errorf("%w: dropped a key with a read under way", errProtocol)
			}
		}
		delete(h.held, f.Slot)
		r.release(h, 0)
	default:
		return fmt.Errorf("%w: a %q frame from a consumer", errProtocol, f.Kind)
	}
	return nil
}

// check finds the live device registration a key names, issued to this channel's consumer, and
// counts a read of it; code is the refusal's code when not.
func (h *cudaServer) check(kb []byte) (*devRegistration, key, byte) {
	k, err := parseDevKey(kb)
	if err != nil {
		return nil, key{}, codeRevoked
	}
	h.t.mu.Lock()
	r := h.t.cuda.regs[k.slot]
	closed := h.t.closed
	h.t.mu.Unlock()
	switch {
	case closed:
		return nil, k, codeClosing
	case r == nil || r.token != k.token:
		return nil, k, codeRevoked
	case r.peer != h.sc.peer:
		return nil, k, codeNotYours
	case k.length == 0 || k.base+k.length > uint64(r.n):
		return nil, k, codeRange
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.revoked {
		return nil, k, codeRevoked
	}
	r.reading++
	r.holders[h] = true
	return r, k, 0
}

// ---------------------------------------------------------------------------- consumer side

type slotToken struct {
	slot  uint32
	token uint64
}

// cudaMap is one owner allocation mapped here, and how many live keys hold it.
type cudaMap struct {
	m    transport.CUDAMapping
	id   uint64
	keys int
}

// cudaClient is the consumer's CUDA IPC channel to one owner, and the owner's allocations it
// mapped.
type cudaClient struct {
	t  *Transport
	p  *peer
	cc *clientConn

	wmu sync.Mutex

	mu      sync.Mutex
	closed  bool
	next    uint32
	pending map[uint32]chan wire.CUDAIPCFrame
	maps    map[uint64]*cudaMap    // by the owner's allocation ID
	keys    map[slotToken]*cudaMap // live keys the consumer used, and their mapping
}

// openCUDAChannel opens the consumer's CUDA IPC channel to p once a ring channel to it was proven,
// when this process's CUDA sees a device; otherwise it records why.
func (t *Transport) openCUDAChannel(ctx context.Context, p *peer) {
	t.mu.Lock()
	ipc, anyway := t.cuda.ipc, t.cuda.withoutDevice
	t.mu.Unlock()
	if ipc == nil {
		return
	}
	if err := ipc.CUDAReady(); err != nil && !anyway {
		t.setCUDAWhy(p.id, "this process's CUDA cannot open IPC handles: "+err.Error())
		return
	}
	cc, err := t.dial(ctx, p, true)
	if err != nil {
		t.setCUDAWhy(p.id, "opening the CUDA IPC channel: "+err.Error())
		return
	}
	cl := &cudaClient{t: t, p: p, cc: cc, pending: map[uint32]chan wire.CUDAIPCFrame{}, maps: map[uint64]*cudaMap{}, keys: map[slotToken]*cudaMap{}}
	t.mu.Lock()
	if t.closed || t.peers[p.id] != p {
		t.mu.Unlock()
		cc.c.Close()
		return
	}
	if t.cuda.clients == nil {
		t.cuda.clients = map[transport.InstanceID]*cudaClient{}
	}
	old := t.cuda.clients[p.id]
	t.cuda.clients[p.id] = cl
	delete(t.cuda.why, p.id)
	t.wg.Add(1)
	t.mu.Unlock()
	if old != nil {
		old.shut("replaced by a new channel")
	}
	go func() {
		defer t.wg.Done()
		cl.read()
	}()
}

func (t *Transport) setCUDAWhy(id transport.InstanceID, why string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cuda.why == nil {
		t.cuda.why = map[transport.InstanceID]string{}
	}
	t.cuda.why[id] = why
}

// dropCUDAClient closes the CUDA IPC channel to p (the peer went or was replaced).
func (t *Transport) dropCUDAClient(p *peer) {
	t.mu.Lock()
	cl := t.cuda.clients[p.id]
	t.mu.Unlock()
	if cl != nil && cl.p == p {
		cl.shut("the peer went")
	}
}

// closeCUDA closes every CUDA IPC channel to owners and revokes every device registration (the
// transport closes; the owner's channels close with the other inbound ones).
func (t *Transport) closeCUDA() {
	t.mu.Lock()
	var cls []*cudaClient
	for _, cl := range t.cuda.clients {
		cls = append(cls, cl)
	}
	var regs []*devRegistration
	for _, r := range t.cuda.regs {
		regs = append(regs, r)
	}
	t.mu.Unlock()
	for _, cl := range cls {
		cl.shut("the transport closed")
	}
	for _, r := range regs {
		r.Revoke(context.Background())
	}
}

// shut closes the channel: reads waiting for an export fail, and every mapping is closed.
func (cl *cudaClient) shut(why string) {
	cl.mu.Lock()
	if cl.closed {
		cl.mu.Unlock()
		return
	}
	cl.closed = true
	for req, ch := range cl.pending {
		close(ch)
		delete(cl.pending, req)
	}
	maps := cl.maps
	cl.maps, cl.keys = map[uint64]*cudaMap{}, map[slotToken]*cudaMap{}
	cl.mu.Unlock()
	cl.cc.c.Close()
	for _, m := range maps {
		cl.unmap(m)
	}
	t := cl.t
	t.mu.Lock()
	if t.cuda.clients[cl.p.id] == cl {
		delete(t.cuda.clients, cl.p.id)
		if t.cuda.why == nil {
			t.cuda.why = map[transport.InstanceID]string{}
		}
		t.cuda.why[cl.p.id] = "the CUDA IPC channel closed: " + why
	}
	t.mu.Unlock()
}

func (cl *cudaClient) unmap(m *cudaMap) {
	cl.t.cuda.mapped.Add(-1)
	if err := m.m.Close(); err != nil {
		cl.t.log.Warn("shm: closing a CUDA IPC mapping failed", "peer", cl.p.id, "err", err)
	}
}

func (cl *cudaClient) send(f wire.CUDAIPCFrame) error {
	cl.wmu.Lock()
	defer cl.wmu.Unlock()
	return writeCUDAFrame(cl.cc.c, f)
}

// read takes the owner's frames until the channel fails or closes.
func (cl *cudaClient) read() {
	buf := make([]byte, wire.CUDAIPCFrameLen)
	why := "the owner closed it"
	for {
		f, err := readCUDAFrame(cl.cc.c, buf)
		if err == nil {
			err = cl.handle(f)
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				why = err.Error()
			}
			break
		}
	}
	cl.shut(why)
}

func (cl *cudaClient) handle(f wire.CUDAIPCFrame) error {
	switch f.Kind {
	case wire.CUDAIPCExport:
		cl.mu.Lock()
		ch := cl.pending[f.Req]
		delete(cl.pending, f.Req)
		cl.mu.Unlock()
		if ch != nil {
			ch <- f
			return nil
		}
		if f.Code == 0 {
			// Its read gave up (its context ended): the owner still counts it.
			return cl.send(wire.CUDAIPCFrame{Kind: wire.CUDAIPCDone, Req: f.Req})
		}
	case wire.CUDAIPCRevoked:
		st := slotToken{f.Slot, f.Token}
		cl.mu.Lock()
		m := cl.keys[st]
		delete(cl.keys, st)
		var last *cudaMap
		if m != nil {
			if m.keys--; m.keys == 0 {
				delete(cl.maps, m.id)
				last = m
			}
		}
		cl.mu.Unlock()
		if last != nil {
			cl.unmap(last) // before the answer: the owner's Dead follows the unmapping
		}
		return cl.send(wire.CUDAIPCFrame{Kind: wire.CUDAIPCDropped, Slot: f.Slot, Token: f.Token})
	default:
		return fmt.Errorf("%w: a %q frame from the owner", errProtocol, f.Kind)
	}
	return nil
}

// call sends an open request and waits for its answer.
func (cl *cudaClient) call(ctx context.Context, key []byte) (wire.CUDAIPCFrame, error) {
	ch := make(chan wire.CUDAIPCFrame, 1)
	cl.mu.Lock()
	if cl.closed {
		cl.mu.Unlock()
		return wire.CUDAIPCFrame{}, fmt.Errorf("%w: the CUDA IPC channel closed", transport.ErrPeerUnreachable)
	}
	cl.next++
	req := cl.next
	cl.pending[req] = ch
	cl.mu.Unlock()
	f := wire.CUDAIPCFrame{Kind: wire.CUDAIPCOpen, Req: req}
	copy(f.Key[:], key)
	if err := cl.send(f); err != nil {
		cl.shut("writing to the owner: " + err.Error())
		return wire.CUDAIPCFrame{}, fmt.Errorf("%w: %w", transport.ErrPeerUnreachable, err)
	}
	select {
	case g, ok := <-ch:
		if !ok {
			return wire.CUDAIPCFrame{}, fmt.Errorf("%w: the CUDA IPC channel closed mid-read", transport.ErrPeerUnreachable)
		}
		return g, nil
	case <-ctx.Done():
		cl.mu.Lock()
		_, waiting := cl.pending[req]
		delete(cl.pending, req)
		cl.mu.Unlock()
		if !waiting {
			// The answer came meanwhile: give its read back to the owner.
			if g, ok := <-ch; ok && g.Code == 0 {
				cl.send(wire.CUDAIPCFrame{Kind: wire.CUDAIPCDone, Req: g.Req})
			}
		}
		return wire.CUDAIPCFrame{}, ctx.Err()
	}
}

// mapping is the mapping of the export f answered, opened when this channel has none of its
// allocation; f's key holds it from now on.
func (cl *cudaClient) mapping(ipc transport.CUDAIPC, f wire.CUDAIPCFrame, near []byte, nearType transport.MemoryType) (transport.CUDAMapping, error) {
	st := slotToken{f.Slot, f.Token}
	hold := func() (transport.CUDAMapping, bool) {
		if m := cl.keys[st]; m != nil {
			return m.m, true
		}
		if m := cl.maps[f.AllocID]; m != nil {
			cl.keys[st] = m
			m.keys++
			return m.m, true
		}
		return nil, false
	}
	cl.mu.Lock()
	if m, ok := hold(); ok || cl.closed {
		cl.mu.Unlock()
		if !ok {
			return nil, fmt.Errorf("%w: the CUDA IPC channel closed", transport.ErrPeerUnreachable)
		}
		return m, nil
	}
	cl.mu.Unlock()
	mm, err := ipc.OpenCUDA(transport.CUDAExport{Handle: f.Handle, AllocID: f.AllocID, AllocSize: f.AllocSize, Offset: f.Offset, Device: f.Device}, near, nearType)
	if err != nil {
		return nil, err
	}
	cl.mu.Lock()
	if m, ok := hold(); ok || cl.closed {
		cl.mu.Unlock()
		mm.Close() // opened twice at once, or the channel closed meanwhile
		if !ok {
			return nil, fmt.Errorf("%w: the CUDA IPC channel closed", transport.ErrPeerUnreachable)
		}
		return m, nil
	}
	m := &cudaMap{m: mm, id: f.AllocID, keys: 1}
	cl.maps[f.AllocID] = m
	cl.keys[st] = m
	cl.t.cuda.mapped.Add(1)
	cl.mu.Unlock()
	return mm, nil
}

// getDevice reads len(dst) bytes at offset of the device memory a device key names into dst
// (memory of type dt): the owner's export, mapped here, copied out on the GPU.
func (t *Transport) getDevice(ctx context.Context, id transport.InstanceID, kb []byte, offset uint64, dst []byte, dt transport.MemoryType) error {
	if _, err := parseDevKey(kb); err != nil {
		return err
	}
	if len(dst) == 0 {
		return nil
	}
	t.mu.Lock()
	cl, ipc, why := t.cuda.clients[id], t.cuda.ipc, t.cuda.why[id]
	t.mu.Unlock()
	if cl == nil || ipc == nil {
		if why == "" {
			why = "none was opened"
		}
		return fmt.Errorf("shm: %w: no CUDA IPC channel to %016x (%s)", transport.ErrUnknownPeer, uint64(id), why)
	}
	f, err := cl.call(ctx, kb)
	if err != nil {
		return fmt.Errorf("shm: CUDA IPC read of %d bytes from %016x: %w", len(dst), uint64(id), err)
	}
	if f.Code != 0 {
		return fmt.Errorf("shm: CUDA IPC read of %d bytes from %016x: %w", len(dst), uint64(id), codeErr(f.Code))
	}
	// The owner counts the read until it hears it is done: only then may it end the key.
	done := func() {
		if err := cl.send(wire.CUDAIPCFrame{Kind: wire.CUDAIPCDone, Req: f.Req}); err != nil {
			cl.shut("writing to the owner: " + err.Error())
		}
	}
	if offset > f.Length || uint64(len(dst)) > f.Length-offset {
		done()
		return fmt.Errorf("shm: %w: a read of %d bytes at %d of a device key of %d bytes", errKeyRefused, len(dst), offset, f.Length)
	}
	m, err := cl.mapping(ipc, f, dst, dt)
	if err != nil {
		// This process cannot map the owner's memory: later leases go through the inner
		// transport (the owner sees the channel close), and this read fails to the chunked path.
		done()
		err = fmt.Errorf("shm: opening %016x's CUDA IPC handle: %w", uint64(id), err)
		cl.shut(err.Error())
		return err
	}
	err = m.CopyTo(dst, dt, f.Offset+offset)
	done()
	if err != nil {
		return fmt.Errorf("shm: CUDA IPC read of %d bytes from %016x: %w", len(dst), uint64(id), err)
	}
	return nil
}

// CUDAPathTo says whether reads of owner's device memory take CUDA IPC, and why not.
func (t *Transport) CUDAPathTo(owner transport.InstanceID) (bool, string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cuda.ipc == nil {
		return false, "the transport beside the same-host path has no CUDA IPC"
	}
	if t.cuda.clients[owner] != nil {
		return true, ""
	}
	if why := t.cuda.why[owner]; why != "" {
		return false, why
	}
	return false, "no CUDA IPC channel to the peer (not a same-host peer, or not probed yet)"
}

// describeCUDA adds the CUDA IPC state to Describe's map; t.mu is held.
func (t *Transport) describeCUDA(d map[string]string) {
	if t.cuda.ipc == nil {
		d["cuda_ipc"] = "off"
		return
	}
	var on, off, own []string
	for id := range t.cuda.clients {
		on = append(on, id.String())
	}
	for id, why := range t.cuda.why {
		off = append(off, id.String()+" ("+why+")")
	}
	for id, why := range t.cuda.ownWhy {
		own = append(own, id.String()+" ("+why+")")
	}
	sort.Strings(on)
	sort.Strings(off)
	sort.Strings(own)
	d["cuda_ipc"] = "on"
	d["cuda_owners"] = strings.Join(on, ",")
	d["cuda_not_taken"] = strings.Join(off, ",")
	d["cuda_consumers_not_taken"] = strings.Join(own, ",")
	d["cuda_exports"] = strconv.Itoa(len(t.cuda.regs))
	d["cuda_mappings"] = strconv.FormatInt(t.cuda.mapped.Load(), 10)
	d["cuda_fallbacks"] = strconv.FormatInt(t.cuda.fellBack.Load(), 10)
}
