package rendezvous

import (
	"context"
	"errors"
	"fmt"

	"github.com/velo-go/velo/velo/internal/errfam"

	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/transport"
)

// Device memory (docs/gpu.md). A payload or a destination in device memory is carried as a
// []byte that views it; the CPU never reads or writes it. The RDMA path hands it to the
// transport with its memory type (RDMAMemoryClient, and the registry's typed registrations);
// the chunked path copies it, chunk by chunk, through a bounded host bounce buffer with
// Config.CopyMemory, and counts the transfer under reason device_bounce.

// Memory is what a staged payload or a destination is: its memory type, and whether the chunked
// path copies it through a host bounce buffer (always for memory that is not host memory; Bounce
// asks for it for host memory too, which is how the tests run the device path on a machine
// without a GPU).
type Memory struct {
	Type transport.MemoryType
	// Device is the CUDA device ordinal of device memory.
	Device int
	Bounce bool
}

// Typed reports whether m takes the typed paths: the bounce buffer on the chunked path and the
// typed read on the RDMA path.
func (m Memory) Typed() bool { return m.Bounce || m.Type != transport.MemoryHost }

// ErrUnsupportedMemory: memory of a type this instance cannot move (no transport of it handles
// the type). It matches errors.ErrUnsupported.
var ErrUnsupportedMemory = errfam.New("memory type not supported", errors.ErrUnsupported)

// CopyMemoryFunc copies len(src) bytes between two memories of the types given (len(dst) ==
// len(src)) and returns once they are at dst.
type CopyMemoryFunc func(dst []byte, dt transport.MemoryType, src []byte, st transport.MemoryType) error

// RDMAMemoryClient is an RDMAClient that reads into memory of any type the transport supports
// (the RDMA registry over the UCX transport). A consumer offers RDMA for a typed destination
// only to a client that is one.
type RDMAMemoryClient interface {
	RDMAClient
	// GetMemory is Get into a destination of type mt.
	GetMemory(ctx context.Context, owner transport.InstanceID, descriptor []byte, dst []byte, mt transport.MemoryType) error
}

// RDMAOfferTracker is an RDMAClient that offers an owner an older offer once that owner refused
// the current one (an owner of an earlier release answers an offer version it does not know with
// decode_error): OfferRefused tells it so.
type RDMAOfferTracker interface {
	OfferRefused(owner transport.InstanceID)
}

// offerRefused passes an owner's decode_error answer to the client.
func (r *Rendezvous) offerRefused(client RDMAClient, owner transport.InstanceID, reason metrics.Reason) {
	if reason != metrics.ReasonDecodeError {
		return
	}
	if t, ok := client.(RDMAOfferTracker); ok {
		t.OfferRefused(owner)
	}
}

// offerFor is offer for a destination of memory m: a typed destination is offered only to a
// client that reads typed memory.
func (r *Rendezvous) offerFor(owner transport.InstanceID, m Memory) ([]byte, metrics.Reason, RDMAClient) {
	offer, reason, client := r.offer(owner)
	if offer != nil && m.Typed() {
		if _, ok := client.(RDMAMemoryClient); !ok {
			return nil, metrics.ReasonDeviceBounce, nil
		}
	}
	return offer, reason, client
}

// rdmaGet reads a lease's bytes into dst, typed when m is.
func rdmaGet(ctx context.Context, client RDMAClient, owner transport.InstanceID, desc, dst []byte, m Memory) error {
	if m.Typed() {
		return client.(RDMAMemoryClient).GetMemory(ctx, owner, desc, dst, m.Type)
	}
	return client.Get(ctx, owner, desc, dst)
}

// checkMemory checks a typed buffer with Config.CheckMemory before anything is asked of an owner;
// without one, memory that is not host memory is refused.
func (r *Rendezvous) checkMemory(b []byte, m Memory) error {
	if !m.Typed() {
		return nil
	}
	if r.cfg.CheckMemory != nil {
		return r.cfg.CheckMemory(b, m)
	}
	if m.Type != transport.MemoryHost {
		return fmt.Errorf("rendezvous: %w: no transport of this instance handles %v memory (add the UCX transport built with -tags cuda,ucx_static)", ErrUnsupportedMemory, m.Type)
	}
	return nil
}

// copyMemory copies with Config.CopyMemory; without one only host memory can be copied.
func (r *Rendezvous) copyMemory(dst []byte, dt transport.MemoryType, src []byte, st transport.MemoryType) error {
	if r.cfg.CopyMemory != nil {
		return r.cfg.CopyMemory(dst, dt, src, st)
	}
	if dt != transport.MemoryHost || st != transport.MemoryHost {
		return fmt.Errorf("rendezvous: %w: no transport of this instance copies %v memory (add the UCX transport built with -tags cuda,ucx_static)", ErrUnsupportedMemory, dt)
	}
	copy(dst, src)
	return nil
}

// chunkedReason is what a side counts for a transfer it moves by chunks: device_bounce when its
// memory is typed, else the reason it has.
func chunkedReason(m Memory, reason metrics.Reason) metrics.Reason {
	if m.Typed() {
		return metrics.ReasonDeviceBounce
	}
	return reason
}

// bounceChunk copies a device slot's chunk into a host buffer for a pull's answer. The owner
// holds at most maxBounce such buffers at once (a pull waits for one); done gives it back.
func (r *Rendezvous) bounceChunk(ctx context.Context, src []byte, st transport.MemoryType) ([]byte, func(), error) {
	select {
	case r.bounceSem <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
	buf := r.bounceBufs.Get().(*[]byte)
	if cap(*buf) < len(src) {
		*buf = make([]byte, len(src))
	}
	b := (*buf)[:len(src)]
	release := func() {
		r.bounceBufs.Put(buf)
		<-r.bounceSem
	}
	if err := r.copyMemory(b, transport.MemoryHost, src, st); err != nil {
		release()
		return nil, nil, fmt.Errorf("rendezvous: copying a %d-byte chunk of %v memory to the bounce buffer: %w", len(src), st, err)
	}
	return b, release, nil
}

// maxBounce bounds the owner's host bounce buffers for device slots: this many chunks
// (Config.ChunkSize each) answer pulls at once.
const maxBounce = 8

// getMany is client.GetMany with the typed reads kept from a client that cannot read typed
// memory: those fail at once (ErrUnsupportedMemory), and the caller's fallback moves them by
// chunks through bounce buffers.
func getMany(ctx context.Context, client RDMAClient, owner transport.InstanceID, reads []RemoteRead, window int, done func(i int, err error)) {
	if _, ok := client.(RDMAMemoryClient); ok {
		client.GetMany(ctx, owner, reads, window, done)
		return
	}
	var plain []RemoteRead
	var at []int
	for i, rd := range reads {
		if rd.Memory.Typed() {
			done(i, fmt.Errorf("rendezvous: %w: the RDMA client cannot read into %v memory", ErrUnsupportedMemory, rd.Memory.Type))
			continue
		}
		plain, at = append(plain, rd), append(at, i)
	}
	if len(plain) == len(reads) {
		client.GetMany(ctx, owner, reads, window, done)
		return
	}
	if len(plain) > 0 {
		client.GetMany(ctx, owner, plain, window, func(k int, err error) { done(at[k], err) })
	}
}
