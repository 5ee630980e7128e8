// Registrations: memory the engine maps and serves to remote reads, and their revocation.

package ucx

import (
	"context"
	"fmt"
	"runtime"
	"unsafe"
)

// Registration is memory the engine mapped (ucp_mem_map) and serves to guarded GETs, and to
// guarded PUTs when it was made with write access. Each registration has its own remote key;
// Unregister kills it.
type Registration struct {
	e      *Engine
	addr   uint64
	length int
	access Access
	mem    MemoryType
	key    []byte
	done   chan struct{}
	pin    runtime.Pinner

	// Guarded by the engine's wmu.
	memh    *MemHandle
	slot    uint32
	revoked bool
	waiters []*Op
	err     error
}

// Register maps mem for remote reads. mem must stay valid until Done: mmap'd memory
// (AllocMemory) is the intended kind; Go memory is pinned for the registration's life.
func (e *Engine) Register(ctx context.Context, mem []byte) (*Registration, error) {
	regs, errs := e.RegisterMany(ctx, [][]byte{mem})
	return regs[0], errs[0]
}

// RegisterOptions configure RegisterWith.
type RegisterOptions struct {
	// Access is what the registration's key lets a peer do (default AccessRead). The engine
	// refuses a guarded GET through a key without AccessRead and a guarded PUT through one
	// without AccessWrite; on InfiniBand RC/DC the HCA does not look at it (see Access).
	Access Access
	// MemoryType is what the memory is (default MemoryHost). It goes to ucp_mem_map and the
	// owner's guarded replies send from the memory with it. MemoryCUDA takes a device pointer
	// viewed as a []byte (unsafe.Slice((*byte)(unsafe.Pointer(devptr)), n)), which nothing
	// but UCX and the CUDA driver may touch; only a binary built with -tags cuda,ucx_static
	// takes it (any other refuses it with ErrCUDANotBuilt, registering nothing). A binary with
	// CUDA asks the driver, when there is one, that every region is memory of this type.
	MemoryType MemoryType
	// Holder, when nonzero, binds the key to one peer: the engine's guard serves guarded GETs
	// and PUTs through it only when they arrive on an endpoint this engine connected with
	// ConnectOptions.Holder equal to it. A request on any other endpoint is refused
	// (ucx_engine_rma_refused_total{kind="holder"}); one on an endpoint the peer opened
	// before this engine connected back is refused with StatusNotConnected, which the reader
	// retries. Zero serves whoever presents the key. On InfiniBand RC and DC the HCA checks
	// key and range, not the requester: Holder binds the guarded lanes only.
	Holder uint64
}

// RegisterWith is Register with options: RegisterOptions{Access: AccessWrite} makes memory a
// peer may write (PutKey) and not read.
func (e *Engine) RegisterWith(ctx context.Context, mem []byte, opts RegisterOptions) (*Registration, error) {
	regs, errs := e.RegisterManyWith(ctx, [][]byte{mem}, opts)
	return regs[0], errs[0]
}

// RegisterMany is Register for many regions under one hold of the engine's lock: an owner that
// grants many leases at once (a batch of small blocks) waits for the worker once, not once per
// region behind a progressor that is busy serving reads. Each region gets its own registration
// and key, or its own error.
func (e *Engine) RegisterMany(ctx context.Context, mems [][]byte) ([]*Registration, []error) {
	return e.RegisterManyWith(ctx, mems, RegisterOptions{})
}

// RegisterManyWith is RegisterMany with options, the same for every region.
func (e *Engine) RegisterManyWith(ctx context.Context, mems [][]byte, opts RegisterOptions) ([]*Registration, []error) {
	access := opts.Access
	if access == 0 {
		access = AccessRead
	}
	regs := make([]*Registration, len(mems))
	errs := make([]error, len(mems))
	failAll := func(err error) ([]*Registration, []error) {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
		return regs, errs
	}
	for i, mem := range mems {
		if len(mem) == 0 {
			errs[i] = fmt.Errorf("ucx: Register: %w: empty region", StatusInvalidParam)
		}
	}
	if err := access.valid(); err != nil {
		return failAll(fmt.Errorf("ucx: Register: %w", err))
	}
	if err := opts.MemoryType.valid(); err != nil {
		return failAll(fmt.Errorf("ucx: Register: %w", err))
	}
	if opts.MemoryType == MemoryCUDA && !CUDAEnabled() {
		return failAll(fmt.Errorf("ucx: Register of %v memory: %w", opts.MemoryType, ErrCUDANotBuilt))
	}
	for i, mem := range mems {
		if errs[i] == nil {
			errs[i] = checkMemory("Register", uintptr(unsafe.Pointer(&mem[0])), len(mem), opts.MemoryType)
		}
	}
	if err := ctx.Err(); err != nil {
		return failAll(err)
	}
	if err := e.lockRunning(); err != nil {
		return failAll(err)
	}
	defer e.wmu.Unlock()
	for i, mem := range mems {
		if errs[i] == nil {
			regs[i], errs[i] = e.registerLocked(mem, access, opts.MemoryType, opts.Holder)
		}
	}
	return regs, errs
}

// registerLocked maps mem, packs its key and enters it in the guard table. The caller holds wmu.
func (e *Engine) registerLocked(mem []byte, access Access, mt MemoryType, holder uint64) (*Registration, error) {
	r := &Registration{e: e, addr: uint64(uintptr(unsafe.Pointer(&mem[0]))), length: len(mem), access: access, mem: mt, done: make(chan struct{})}
	r.pin.Pin(&mem[0]) // does nothing for memory that is not Go's (mmap, C, device memory)
	memh, err := e.ctx.mapMemory(mem, mt.ucs())
	if err != nil {
		r.pin.Unpin()
		return nil, err
	}
	packed, err := memh.PackRemoteKey()
	if err != nil {
		memh.Unmap()
		r.pin.Unpin()
		return nil, err
	}
	token := e.tokens.Uint64()
	slot, err := e.w.guardAddAccess(token, r.addr, uint64(r.length), access)
	if err != nil {
		memh.Unmap()
		r.pin.Unpin()
		return nil, err
	}
	e.w.guardSetMemType(slot, mt.ucs())
	e.w.guardSetHolder(slot, holder)
	r.memh, r.slot = memh, slot
	r.key = AppendSealedKey(nil, SealedKey{Slot: slot, Token: token, Base: r.addr, Length: uint64(r.length), Access: access, UCXKey: packed})
	e.regs[r] = struct{}{}
	return r, nil
}

// Addr is the registered region's address, the base a remote Get names.
func (r *Registration) Addr() uint64 { return r.addr }

// Len is the registered length.
func (r *Registration) Len() int { return r.length }

// Access is what the registration's key lets a peer do.
func (r *Registration) Access() Access { return r.access }

// MemoryType is the registered memory's type (RegisterOptions.MemoryType).
func (r *Registration) MemoryType() MemoryType { return r.mem }

// RemoteKey is the sealed key a peer passes to Conn.Get. Every registration has its own.
func (r *Registration) RemoteKey() []byte { return append([]byte(nil), r.key...) }

// RangeKey is a sealed key for the n bytes at off of the region: the registration's own key (its
// guard slot, token and UCX key) with the part's base and length. A reader given it reads that
// part as it would a region of its own, and it dies with the registration. It narrows what a
// reader asks for, not what the key reaches: the owner's guard checks every read against the
// whole registered range (and on InfiniBand the NIC against the whole memory region), so hand
// parts of one registration only to one reader, who may read all of them.
func (r *Registration) RangeKey(off, n int) ([]byte, error) {
	if off < 0 || n <= 0 || off > r.length-n {
		return nil, fmt.Errorf("ucx: RangeKey: %w: [%d, +%d) is not inside the registration's %d bytes", StatusInvalidParam, off, n, r.length)
	}
	k, err := ParseSealedKey(r.key)
	if err != nil {
		return nil, fmt.Errorf("ucx: RangeKey: the registration's own key: %w", err)
	}
	k.Base, k.Length = r.addr+uint64(off), uint64(n)
	return AppendSealedKey(nil, k), nil
}

// Done is closed once the registration is gone from UCX and no reply reads its memory:
// from then on the memory may be freed.
func (r *Registration) Done() <-chan struct{} { return r.done }

// Unregister revokes the key at once (later guarded GETs with it fail without reading a
// byte), waits for replies that are already reading the region, then unmaps it
// (ucp_mem_unmap). If ctx ends first it returns ctx.Err() and the unmap still happens;
// wait for Done before freeing the memory.
func (r *Registration) Unregister(ctx context.Context) error {
	e := r.e
	e.lock()
	if e.state == stateClosed {
		e.wmu.Unlock()
		<-r.done // the engine unmapped every registration as it closed
		return nil
	}
	res := newOp()
	e.revoke(r, res)
	e.wmu.Unlock()
	if err := e.await(ctx, res.done); err != nil {
		return err
	}
	return res.err
}

// Revoke revokes the key at once, like Unregister, but returns without waiting for replies
// that are already reading the region: later guarded GETs with the key are refused from the
// moment it returns. Done says when the memory may be freed.
func (r *Registration) Revoke(ctx context.Context) error {
	e := r.e
	e.lock()
	defer e.wmu.Unlock()
	if e.state != stateClosed {
		e.revoke(r, nil)
	}
	return nil
}

func (e *Engine) revoke(r *Registration, waiter *Op) {
	if waiter != nil {
		select {
		case <-r.done:
			waiter.finish(r.err, 0)
			return
		default:
		}
		r.waiters = append(r.waiters, waiter)
	}
	if r.revoked {
		return
	}
	r.revoked = true
	delete(e.regs, r)
	e.w.guardRevoke(r.slot)
	e.unmapping = append(e.unmapping, r)
	e.finishUnmaps()
}

// finishUnmaps unmaps revoked registrations whose replies have all completed.
func (e *Engine) finishUnmaps() {
	keep := e.unmapping[:0]
	for _, r := range e.unmapping {
		if e.w.guardInflight(r.slot) > 0 {
			keep = append(keep, r)
			continue
		}
		err := r.memh.Unmap()
		e.w.guardRelease(r.slot)
		r.finish(err)
	}
	clear(e.unmapping[len(keep):])
	e.unmapping = keep
}

func (r *Registration) finish(err error) {
	r.err = err
	r.pin.Unpin()
	close(r.done)
	for _, w := range r.waiters {
		w.finish(err, 0)
	}
	r.waiters = nil
}
