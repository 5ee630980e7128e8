package ucx

import (
	"fmt"
	"unsafe"

	"github.com/velo-go/velo/ucx/internal/capi"
)

// Endpoint is a UCP endpoint (ucp_ep_h) to one remote worker. It belongs to its worker's
// thread.
//
// Buffers handed to SendAM, Get and Put must stay valid and unmoved until the returned
// request completes: mmap'd memory (AllocMemory), C memory, or Go memory pinned with
// runtime.Pinner. The Engine does that pinning for you.
type Endpoint struct {
	w      *Worker
	ep     capi.Ep
	failed error
	closed bool
}

// Connect creates an endpoint to the worker whose address is addr (ucp_ep_create).
// Wireup completes in the background; the first operation waits for it. With
// ErrorModePeer (the default) a failed peer triggers an EventEndpointError.
func (w *Worker) Connect(addr []byte, opts EndpointOptions) (*Endpoint, error) {
	if w.closed {
		return nil, ErrClosed
	}
	if len(addr) == 0 {
		return nil, fmt.Errorf("%w: empty address", ErrInvalidAddress)
	}
	ep, s := capi.UcpEpCreate(w.ring, addr, opts.ErrorMode == ErrorModePeer)
	if s != capi.OK {
		if Status(s) == StatusInvalidParam || Status(s) == StatusInvalidAddr {
			return nil, fmt.Errorf("ucx: ucp_ep_create: %w: %w (pass the bytes Worker.Address returned on the peer)", ErrInvalidAddress, Status(s))
		}
		return nil, statusErr("ucp_ep_create", Status(s))
	}
	e := &Endpoint{w: w, ep: ep}
	w.eps[ep.ID()] = e
	return e, nil
}

// ID is a stable identity of the endpoint while it is open.
func (e *Endpoint) ID() uint64 { return uint64(e.ep.ID()) }

// Worker is the endpoint's worker.
func (e *Endpoint) Worker() *Worker { return e.w }

// Err is the failure UCX reported for the endpoint, or nil.
func (e *Endpoint) Err() error { return e.failed }

func (e *Endpoint) usable() error {
	switch {
	case e.closed || e.w.closed:
		return ErrClosed
	case e.failed != nil:
		return fmt.Errorf("%w: %w", ErrEndpointFailed, e.failed)
	}
	return nil
}

// Info is ucp_ep_print_info: lanes, transports, thresholds.
func (e *Endpoint) Info() string {
	if e.usable() != nil {
		return ""
	}
	return capi.UcpEpPrintInfo(e.ep)
}

// SendAM sends an active message (ucp_am_send_nbx) with a contiguous payload.
func (e *Endpoint) SendAM(id uint16, header, payload []byte, flags AMFlags) (*Request, error) {
	if err := e.usable(); err != nil {
		return nil, err
	}
	if flags&AMReply != 0 && e.w.ctx.replyBroken {
		return nil, errReplyBroken()
	}
	r := e.w.newRequest()
	req, s := capi.UcpAmSendNbx(e.w.ring, e.ep, id, bufPtr(header), uintptr(len(header)),
		bufPtr(payload), uintptr(len(payload)), false, amFlags(flags), r.id)
	return e.w.started(r, req, s, "ucp_am_send_nbx", 0)
}

// SendAMParts sends an active message whose payload is the concatenation of parts,
// without copying them together (an iov datatype; the iov array lives in C memory until
// the request completes).
func (e *Endpoint) SendAMParts(id uint16, header []byte, parts [][]byte, flags AMFlags) (*Request, error) {
	if err := e.usable(); err != nil {
		return nil, err
	}
	if flags&AMReply != 0 && e.w.ctx.replyBroken {
		return nil, errReplyBroken()
	}
	nonEmpty := 0
	for _, p := range parts {
		if len(p) > 0 {
			nonEmpty++
		}
	}
	if nonEmpty <= 1 {
		var payload []byte
		for _, p := range parts {
			if len(p) > 0 {
				payload = p
			}
		}
		return e.SendAM(id, header, payload, flags)
	}
	// Zeroed: the Go stores below read each slot's old value (capi.Calloc).
	iov := capi.Calloc(uintptr(nonEmpty * capi.IOVSize))
	if iov == nil {
		return nil, statusErr("iov", StatusNoMemory)
	}
	entries := unsafe.Slice((*capi.IOV)(iov), nonEmpty)
	i := 0
	for _, p := range parts {
		if len(p) > 0 {
			// Storing a Go pointer in C memory: the caller pinned p (cgocheck2 verifies).
			entries[i] = capi.IOV{Buffer: unsafe.Pointer(&p[0]), Length: uintptr(len(p))}
			i++
		}
	}
	r := e.w.newRequest()
	r.release = func() { capi.Free(iov) }
	req, s := capi.UcpAmSendNbx(e.w.ring, e.ep, id, bufPtr(header), uintptr(len(header)),
		iov, uintptr(nonEmpty), true, amFlags(flags), r.id)
	return e.w.started(r, req, s, "ucp_am_send_nbx", 0)
}

func amFlags(f AMFlags) uint32 {
	var out uint32
	if f&AMReply != 0 {
		out |= capi.AMSendFlagReply
	}
	if f&AMEager != 0 {
		out |= capi.AMSendFlagEager
	}
	if f&AMRendezvous != 0 {
		out |= capi.AMSendFlagRndv
	}
	return out
}

// Get reads len(dst) bytes at remoteAddr of the peer into dst (ucp_get_nbx).
//
// This is UCX's GET, unguarded. Over transports without hardware RMA (tcp) UCX emulates
// it in software and the peer serves any address, whatever the key: see the package
// documentation. Engine.Get guards it.
func (e *Endpoint) Get(dst []byte, remoteAddr uint64, rk *RemoteKey) (*Request, error) {
	return e.get(dst, remoteAddr, rk, capi.MemTypeUnset)
}

// get is Get with the destination's memory type (capi.MemTypeUnset: UCX detects it).
func (e *Endpoint) get(dst []byte, remoteAddr uint64, rk *RemoteKey, memType int) (*Request, error) {
	if err := e.usable(); err != nil {
		return nil, err
	}
	if err := rk.usableOn(e); err != nil {
		return nil, err
	}
	r := e.w.newRequest()
	req, s := capi.UcpGetNbx(e.w.ring, e.ep, bufPtr(dst), uintptr(len(dst)), remoteAddr, rk.rk, memType, r.id)
	return e.w.started(r, req, s, "ucp_get_nbx", len(dst))
}

// Put writes src to remoteAddr of the peer (ucp_put_nbx). Completion means src may be
// reused; Flush makes the data visible at the target. Unguarded, like Get.
func (e *Endpoint) Put(src []byte, remoteAddr uint64, rk *RemoteKey) (*Request, error) {
	if err := e.usable(); err != nil {
		return nil, err
	}
	if err := rk.usableOn(e); err != nil {
		return nil, err
	}
	r := e.w.newRequest()
	req, s := capi.UcpPutNbx(e.w.ring, e.ep, bufPtr(src), uintptr(len(src)), remoteAddr, rk.rk, r.id)
	return e.w.started(r, req, s, "ucp_put_nbx", 0)
}

// AtomicOp is a remote atomic operation (ucp_atomic_op_t).
type AtomicOp uint32

// The operations of Endpoint.Atomic, in ucp_atomic_op_t's order.
const (
	AtomicAdd AtomicOp = iota
	AtomicSwap
	AtomicCSwap
	AtomicAnd
	AtomicOr
	AtomicXor
)

// Atomic applies op with operand to the word of len(operand) bytes (4 or 8) at remoteAddr
// of the peer (ucp_atomic_op_nbx); the context needs FeatureAMO. With result non-nil (as
// long as operand) the word's previous value lands there when the request completes. A
// compare-and-swap compares the word with operand and, when equal, stores the value it
// reads from result (UCX's convention). Both buffers belong to the request until it
// completes, as for Get. Unguarded, like Get: over transports without
// hardware atomics UCX emulates them in software at the target.
func (e *Endpoint) Atomic(op AtomicOp, operand, result []byte, remoteAddr uint64, rk *RemoteKey) (*Request, error) {
	if err := e.usable(); err != nil {
		return nil, err
	}
	if err := rk.usableOn(e); err != nil {
		return nil, err
	}
	if n := len(operand); n != 4 && n != 8 {
		return nil, fmt.Errorf("ucx: Atomic: %w: an operand of %d bytes (want 4 or 8)", StatusInvalidParam, n)
	}
	if result != nil && len(result) != len(operand) {
		return nil, fmt.Errorf("ucx: Atomic: %w: a result of %d bytes for an operand of %d", StatusInvalidParam, len(result), len(operand))
	}
	if op > AtomicXor || (op == AtomicCSwap && result == nil) {
		return nil, fmt.Errorf("ucx: Atomic: %w: operation %d (a compare-and-swap needs its result buffer)", StatusInvalidParam, op)
	}
	r := e.w.newRequest()
	var reply unsafe.Pointer
	if result != nil {
		reply = bufPtr(result)
	}
	req, s := capi.UcpAtomicOpNbx(e.w.ring, e.ep, uint32(op), bufPtr(operand), reply, uintptr(len(operand)), remoteAddr, rk.rk, r.id)
	return e.w.started(r, req, s, "ucp_atomic_op_nbx", len(operand))
}

// Flush completes every RMA operation issued on the endpoint, at the origin and the
// target (ucp_ep_flush_nbx).
func (e *Endpoint) Flush() (*Request, error) {
	if err := e.usable(); err != nil {
		return nil, err
	}
	r := e.w.newRequest()
	req, s := capi.UcpEpFlushNbx(e.w.ring, e.ep, r.id)
	return e.w.started(r, req, s, "ucp_ep_flush_nbx", 0)
}

// Close starts closing the endpoint (ucp_ep_close_nbx). The endpoint is unusable at once;
// the returned request (nil when done at once) completes when UCX released it. A failed
// endpoint can still (and must) be closed; CloseForce is the right mode for it.
func (e *Endpoint) Close(mode CloseMode) (*Request, error) {
	if e.closed || e.w.closed {
		return nil, nil
	}
	e.closed = true
	r := e.w.newRequest()
	id := e.ep.ID()
	r.release = func() { delete(e.w.eps, id) }
	req, s := capi.UcpEpCloseNbx(e.w.ring, e.ep, mode == CloseForce, r.id)
	if s != capi.OK && s != capi.InProgress {
		// The endpoint is released even when the close reports the peer's failure.
		r.done = true
		r.release()
		return nil, statusErr("ucp_ep_close_nbx", Status(s))
	}
	return e.w.started(r, req, s, "ucp_ep_close_nbx", 0)
}

// RemoteKey is a remote key unpacked on an endpoint (ucp_rkey_h).
type RemoteKey struct {
	ep        *Endpoint
	rk        capi.RKey
	destroyed bool
}

// UnpackRemoteKey checks that packed is a complete UCX packed key (ucp_ep_rkey_unpack
// takes no length and reads whatever the bytes claim) and unpacks it on the endpoint.
func (e *Endpoint) UnpackRemoteKey(packed []byte) (*RemoteKey, error) {
	if err := e.usable(); err != nil {
		return nil, err
	}
	if err := validateUCXKey(packed, capi.MemoryTypeLimit); err != nil {
		return nil, err
	}
	return e.unpackChecked(packed)
}

// unpackChecked unpacks a key that validateUCXKey accepted against capi.MemoryTypeLimit.
func (e *Endpoint) unpackChecked(packed []byte) (*RemoteKey, error) {
	if err := e.usable(); err != nil {
		return nil, err
	}
	rk, s := capi.UcpEpRkeyUnpack(e.ep, packed)
	if s != capi.OK {
		return nil, fmt.Errorf("ucx: ucp_ep_rkey_unpack: %w: %w", ErrInvalidRemoteKey, Status(s))
	}
	return &RemoteKey{ep: e, rk: rk}, nil
}

func (k *RemoteKey) usableOn(e *Endpoint) error {
	switch {
	case k == nil || k.destroyed:
		return fmt.Errorf("%w: remote key destroyed", ErrInvalidRemoteKey)
	case k.ep != e:
		return fmt.Errorf("%w: remote key was unpacked on another endpoint", ErrInvalidRemoteKey)
	}
	return nil
}

// Destroy releases the unpacked key (ucp_rkey_destroy). Destroy keys before closing
// their endpoint. A key whose worker is already destroyed went with it: Destroy then only
// marks it.
func (k *RemoteKey) Destroy() {
	if k == nil || k.destroyed {
		return
	}
	k.destroyed = true
	if k.ep != nil && k.ep.w != nil && k.ep.w.closed {
		return
	}
	capi.UcpRkeyDestroy(k.rk)
}

// MemHandle is memory registered with a context (ucp_mem_h).
type MemHandle struct {
	c        *Context
	m        capi.MemH
	addr     uint64
	length   int
	unmapped bool
}

// MapMemory registers mem with every memory domain of the context (ucp_mem_map of
// existing memory). mem must outlive the handle and must not move: use AllocMemory (or
// other mmap'd memory), never a Go heap slice.
func (c *Context) MapMemory(mem []byte) (*MemHandle, error) {
	return c.mapMemory(mem, capi.MemTypeUnset)
}

// mapMemory is MapMemory with the memory's type (capi.MemTypeUnset: UCX detects it).
func (c *Context) mapMemory(mem []byte, memType int) (*MemHandle, error) {
	if c.isClosed() {
		return nil, ErrClosed
	}
	if len(mem) == 0 {
		return nil, fmt.Errorf("ucx: MapMemory: %w: empty region", StatusInvalidParam)
	}
	m, s := capi.UcpMemMap(c.c, unsafe.Pointer(&mem[0]), uintptr(len(mem)), 0, memType)
	if s != capi.OK {
		return nil, fmt.Errorf("ucx: ucp_mem_map of %d bytes: %w (on InfiniBand: is RLIMIT_MEMLOCK large enough? 'ulimit -l unlimited')", len(mem), Status(s))
	}
	return &MemHandle{c: c, m: m, addr: uint64(uintptr(unsafe.Pointer(&mem[0]))), length: len(mem)}, nil
}

// Addr is the registered region's start address, the base a remote Get names.
func (m *MemHandle) Addr() uint64 { return m.addr }

// Len is the registered length.
func (m *MemHandle) Len() int { return m.length }

// PackRemoteKey returns the packed remote key of the region (ucp_rkey_pack). It is
// ucp_rkey_pack on purpose: ucp_memh_pack, in newer UCX, aborts the process unless the
// handle was mapped with the export flag.
func (m *MemHandle) PackRemoteKey() ([]byte, error) {
	if m.unmapped {
		return nil, ErrClosed
	}
	b, s := capi.UcpRkeyPack(m.c.c, m.m)
	if s != capi.OK {
		return nil, statusErr("ucp_rkey_pack", Status(s))
	}
	return b, nil
}

// Unmap deregisters the region (ucp_mem_unmap). On InfiniBand its remote keys die with
// it; over tcp remote keys were never checked (see the package documentation).
func (m *MemHandle) Unmap() error {
	if m.unmapped {
		return nil
	}
	m.unmapped = true
	return statusErr("ucp_mem_unmap", Status(capi.UcpMemUnmap(m.c.c, m.m)))
}
