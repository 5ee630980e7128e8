//go:build linux

package shm

import (
	"context"
	"errors"
	"sync"

	"github.com/velo-go/velo/velo/internal/fanout"
	"github.com/velo-go/velo/velo/transport"
)

// Route is the one place that decides a pair's path: the RMA the rendezvous registry uses when
// the same-host path is on. It registers a lease's region here when its consumer holds a proven
// channel to this instance (RegisterMemoryFor), and with inner (UCX) otherwise; it reads a key
// here when it is a same-host key, and with inner otherwise, so each side follows what the owner
// chose. It names inner's backend in offers, so instances with and without the path still agree.
// Device memory of a consumer that holds a CUDA IPC channel to this instance is exported by CUDA
// IPC when inner has it (transport.CUDAIPC), and registered with inner otherwise. A
// push grant's host memory is registered here for its writer when the writer holds a proven
// channel to this instance (RegisterMemoryWritableFor), and a write through a same-host key goes
// here; other writes, device memory for writes and the registrations made without a peer stay
// with inner.
//
// The value returned implements what inner does of transport.MemoryRMA, transport.RMAWriter and
// transport.MemoryRMAWriter when inner implements all three (the UCX transport), and none of them
// otherwise; it always implements ManyReader, PeerRegisterer, RunRegisterer and PayloadMapper (a
// pinned payload of at least Config.SingleCopyMin in a file of its own, which a consumer of this
// host reads with one copy).
func Route(inner transport.RMA, s *Transport) transport.RMA {
	r := &route{inner: inner, s: s}
	// A binary without CUDA has CUDA IPC calls that all answer errors.ErrUnsupported: the lane then
	// has none, and says so (cuda_ipc off) instead of a reason per peer.
	if c, ok := inner.(transport.CUDAIPC); ok && !errors.Is(c.CUDAReady(), errors.ErrUnsupported) {
		s.setCUDA(c)
	}
	_, m := inner.(transport.MemoryRMA)
	_, w := inner.(transport.MemoryRMAWriter)
	if m && w {
		return &routeFull{route: r}
	}
	return r
}

// SameHost is the transport behind a Route (nil for any other RMA).
func SameHost(rma transport.RMA) *Transport {
	switch r := rma.(type) {
	case *route:
		return r.s
	case *routeFull:
		return r.s
	}
	return nil
}

type route struct {
	inner transport.RMA
	s     *Transport
}

var (
	_ transport.ManyReader     = (*route)(nil)
	_ transport.PeerRegisterer = (*route)(nil)
	_ transport.RunRegisterer  = (*route)(nil)
	_ transport.PathRefuser    = (*route)(nil)
	_ transport.PayloadMapper  = (*route)(nil)
)

func (r *route) RMABackend() string { return r.inner.RMABackend() }

// SameHostKey reports whether key is one of the same-host path's (the registry's path label).
func (r *route) SameHostKey(key []byte) bool { return IsKey(key) || IsDeviceKey(key) }

// PayloadMin implements transport.PayloadMapper: payloads from this size get a file of their own
// (payload.go), which UCX registers as any other memory and this lane reads with one copy.
func (r *route) PayloadMin() int { return r.s.PayloadMin() }

// MapPayload implements transport.PayloadMapper.
func (r *route) MapPayload(size int) ([]byte, func() error, error) { return r.s.MapPayload(size) }

func (r *route) RegisterMemory(mem []byte) (transport.Registration, error) {
	return r.inner.RegisterMemory(mem)
}

// RegisterMemoryFor registers here when peer holds a proven channel to this instance.
func (r *route) RegisterMemoryFor(peer transport.InstanceID, mems [][]byte) ([]transport.Registration, []error) {
	if r.s.Serves(peer) {
		return r.s.RegisterMemoryFor(peer, mems)
	}
	if pr, ok := r.inner.(transport.PeerRegisterer); ok {
		return pr.RegisterMemoryFor(peer, mems)
	}
	return transport.RegisterEach(r.inner, mems)
}

func (r *route) RegistersRuns() bool {
	rr, ok := r.inner.(transport.RunRegisterer)
	return ok && rr.RegistersRuns()
}

func (r *route) Get(ctx context.Context, peer transport.InstanceID, key []byte, offset uint64, dst []byte) error {
	if IsKey(key) {
		return r.s.Get(ctx, peer, key, offset, dst)
	}
	if IsDeviceKey(key) {
		return r.s.getDevice(ctx, peer, key, offset, dst, transport.MemoryHost)
	}
	return r.inner.Get(ctx, peer, key, offset, dst)
}

func (r *route) CanGet(peer transport.InstanceID) bool {
	return r.s.CanGet(peer) || r.inner.CanGet(peer)
}

// PathRefusal implements transport.PathRefuser with inner's reason (release_mismatch, no_ucx_lane,
// software_lanes) for a pair the same-host path does not serve: one it serves has no reason.
func (r *route) PathRefusal(peer transport.InstanceID) string {
	if r.s.CanGet(peer) || r.s.Serves(peer) {
		return ""
	}
	if pr, ok := r.inner.(transport.PathRefuser); ok {
		return pr.PathRefusal(peer)
	}
	return ""
}

func (r *route) ForceClosePeer(peer transport.InstanceID) error {
	serr := r.s.ForceClosePeer(peer)
	ierr := r.inner.ForceClosePeer(peer)
	if serr == nil && r.s.Endpoints(peer) == 0 && errors.Is(ierr, transport.ErrUnknownPeer) {
		return nil // a same-host-only consumer: nothing of it is left on inner
	}
	return errors.Join(serr, ierr)
}

// ReadMany reads the same-host keys here (batched on channels) and hands the others to inner, both
// at once.
func (r *route) ReadMany(ctx context.Context, peer transport.InstanceID, reads []transport.Read, window int, done func(i int, err error)) {
	here, rest, report := byKey(len(reads), func(i int) []byte { return reads[i].Key }, done)
	var there, dev []int
	for _, i := range rest {
		if IsDeviceKey(reads[i].Key) {
			dev = append(dev, i)
		} else {
			there = append(there, i)
		}
	}
	var wg sync.WaitGroup
	if len(dev) > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fanout.Each(len(dev), max(window, 1), func(j int) {
				rd := reads[dev[j]]
				err := ctx.Err()
				if err == nil {
					err = r.s.getDevice(ctx, peer, rd.Key, rd.Offset, rd.Dst, rd.Memory)
				}
				report(dev[j], err)
			})
		}()
	}
	if len(there) > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr := pick(reads, there)
			if mr, ok := r.inner.(transport.ManyReader); ok {
				mr.ReadMany(ctx, peer, tr, window, func(j int, err error) { report(there[j], err) })
				return
			}
			fanout.Each(len(tr), max(window, 1), func(j int) {
				err := ctx.Err()
				if err == nil {
					err = r.inner.Get(ctx, peer, tr[j].Key, tr[j].Offset, tr[j].Dst)
				}
				report(there[j], err)
			})
		}()
	}
	if len(here) > 0 {
		r.s.ReadMany(ctx, peer, pick(reads, here), window, func(j int, err error) { report(here[j], err) })
	}
	wg.Wait()
}

// routeFull is a Route over a transport that also registers device memory and writes.
type routeFull struct {
	*route
}

var (
	_ transport.MemoryRMA            = (*routeFull)(nil)
	_ transport.MemoryRMAWriter      = (*routeFull)(nil)
	_ transport.PeerMemoryRegisterer = (*routeFull)(nil)
)

func (r *routeFull) CheckMemory(mem []byte, t transport.MemoryType, device int) error {
	return r.inner.(transport.MemoryRMA).CheckMemory(mem, t, device)
}

func (r *routeFull) RegisterMemoryOf(mem []byte, t transport.MemoryType) (transport.Registration, error) {
	return r.inner.(transport.MemoryRMA).RegisterMemoryOf(mem, t)
}

// RegisterMemoryOfFor implements transport.PeerMemoryRegisterer: device memory leased to a
// consumer of this host is exported by CUDA IPC when the pair can take it, and registered with
// inner otherwise (the reason is logged and counted).
func (r *routeFull) RegisterMemoryOfFor(peer transport.InstanceID, mem []byte, t transport.MemoryType) (transport.Registration, error) {
	if t == transport.MemoryCUDA {
		if reg := r.s.registerDevice(peer, mem); reg != nil {
			return reg, nil
		}
	}
	return r.RegisterMemoryOf(mem, t)
}

// GetMemory reads a device key by CUDA IPC (into memory of either type), a same-host key into
// host memory directly and into device memory through a host buffer of the read's size.
func (r *routeFull) GetMemory(ctx context.Context, peer transport.InstanceID, key []byte, offset uint64, dst []byte, t transport.MemoryType) error {
	mr := r.inner.(transport.MemoryRMA)
	if IsDeviceKey(key) {
		return r.s.getDevice(ctx, peer, key, offset, dst, t)
	}
	if !IsKey(key) {
		return mr.GetMemory(ctx, peer, key, offset, dst, t)
	}
	if t == transport.MemoryHost {
		return r.s.Get(ctx, peer, key, offset, dst)
	}
	buf := make([]byte, len(dst))
	if err := r.s.Get(ctx, peer, key, offset, buf); err != nil {
		return err
	}
	return mr.CopyMemory(dst, t, buf, transport.MemoryHost)
}

func (r *routeFull) CopyMemory(dst []byte, dt transport.MemoryType, src []byte, st transport.MemoryType) error {
	return r.inner.(transport.MemoryRMA).CopyMemory(dst, dt, src, st)
}

// ReadsTypedMany is false: a batch's reads into device memory go one GetMemory each, which
// routes each by its key.
func (r *routeFull) ReadsTypedMany() bool { return false }

func (r *routeFull) RegisterMemoryWritable(mem []byte) (transport.Registration, error) {
	return r.inner.(transport.RMAWriter).RegisterMemoryWritable(mem)
}

func (r *routeFull) RegisterMemoryWritableOf(mem []byte, t transport.MemoryType) (transport.Registration, error) {
	return r.inner.(transport.MemoryRMAWriter).RegisterMemoryWritableOf(mem, t)
}

// RegisterMemoryWritableFor registers a push grant's range of host memory here, bound to writer,
// when writer holds a proven channel to this instance, and with inner otherwise, bound to writer
// where the UCX transport can bind it (transport.PeerWriteRegisterer).
func (r *routeFull) RegisterMemoryWritableFor(writer transport.InstanceID, mem []byte) (transport.Registration, error) {
	if r.s.Serves(writer) {
		return r.s.RegisterMemoryWritableFor(writer, mem)
	}
	if pw, ok := r.inner.(transport.PeerWriteRegisterer); ok {
		return pw.RegisterMemoryWritableFor(writer, mem)
	}
	return r.inner.(transport.RMAWriter).RegisterMemoryWritable(mem)
}

// WriteMany writes through same-host keys here and hands the others to inner, both at once.
func (r *routeFull) WriteMany(ctx context.Context, peer transport.InstanceID, writes []transport.Write, window int, done func(i int, err error)) {
	here, there, report := byKey(len(writes), func(i int) []byte { return writes[i].Key }, done)
	if len(here) == 0 {
		r.inner.(transport.RMAWriter).WriteMany(ctx, peer, writes, window, done)
		return
	}
	var wg sync.WaitGroup
	if len(there) > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.inner.(transport.RMAWriter).WriteMany(ctx, peer, pick(writes, there), window, func(j int, err error) { report(there[j], err) })
		}()
	}
	r.s.WriteMany(ctx, peer, pick(writes, here), window, func(j int, err error) { report(here[j], err) })
	wg.Wait()
}

// byKey parts n operations into those whose key is a same-host one (here) and the others, and
// gives done back as report, called one call at a time (the two lanes report at once).
func byKey(n int, key func(i int) []byte, done func(i int, err error)) (here, there []int, report func(i int, err error)) {
	for i := range n {
		if IsKey(key(i)) {
			here = append(here, i)
		} else {
			there = append(there, i)
		}
	}
	var mu sync.Mutex
	return here, there, func(i int, err error) {
		mu.Lock()
		defer mu.Unlock()
		if done != nil {
			done(i, err)
		}
	}
}

// pick is the entries idx names, in that order.
func pick[T any](xs []T, idx []int) []T {
	out := make([]T, len(idx))
	for j, i := range idx {
		out[j] = xs[i]
	}
	return out
}
