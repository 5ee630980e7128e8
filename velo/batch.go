package velo

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/rendezvous"
	"github.com/velo-go/velo/velo/rendezvous/rdma"
)

// DefaultBatchWindow is how many reads or pulls a ReadRanges call, or a part of a GetBatch, keeps
// in flight unless WithBatchWindow says otherwise.
const DefaultBatchWindow = rendezvous.DefaultBatchWindow

// DefaultBatchInlineMax is the largest payload a GetBatch entry receives inside the owner's answer
// to its acquire unless WithBatchInlineMax says otherwise.
const DefaultBatchInlineMax = rendezvous.DefaultBatchInlineMax

// MaxBatchInline is the largest limit WithBatchInlineMax accepts.
const MaxBatchInline = rendezvous.MaxBatchInline

// GetRequest is one entry of GetBatch: a handle, and optionally the buffer its payload goes to.
// GetRequestInto fills one for device memory.
type GetRequest struct {
	// Handle names the payload.
	Handle Handle
	// Into receives the payload and must be exactly Handle.Size bytes; nil fetches into a new
	// buffer, allocated once the owner confirmed the size (bounded by WithMaxGetSize, like Get).
	Into []byte
	// IntoMemory is what Into is (zero: host memory); GetRequestInto sets it. Device memory is read
	// with its type on the RDMA path and through host bounce buffers on the chunked path (reason
	// device_bounce).
	IntoMemory rendezvous.Memory
}

// GetResult is the outcome of one GetRequest.
type GetResult struct {
	// Index is the entry's place in the requests given to GetBatch.
	Index int
	// Lease holds the entry's payload (Lease.Bytes) when Err is nil; end it with Release or
	// Detach, or many at once with ReleaseLeases or DetachLeases.
	Lease *Lease
	// Err is the error of this entry alone.
	Err error
}

// GetRequest and GetResult are package rendezvous's types under the names and documentation of
// this package: each pair has one underlying type, which the conversions below prove at compile
// time, so a slice of one is a slice of the other and GetBatch passes its requests and results
// through without a copy.
var (
	_ = rendezvous.GetRequest(GetRequest{})
	_ = GetResult(rendezvous.GetResult{})
)

func rendezvousRequests(reqs []GetRequest) []rendezvous.GetRequest {
	return unsafe.Slice((*rendezvous.GetRequest)(unsafe.Pointer(unsafe.SliceData(reqs))), len(reqs))
}

func getResults(out []rendezvous.GetResult) []GetResult {
	return unsafe.Slice((*GetResult)(unsafe.Pointer(unsafe.SliceData(out))), len(out))
}

// RangeLease is a lease taken for ranged reads of one payload (Acquire): one descriptor and one
// remote key, on the RDMA path, for every read of its life. The owner's lease TTL is renewed by
// the reads themselves (each call renews it at most once per half TTL), so a lease that is used
// stays valid. End it with Release or Detach like any lease; the embedded Lease is what
// ReleaseLeases and DetachLeases take.
type RangeLease struct {
	*Lease
	rl *rendezvous.RangeLease
}

// Size is the payload's size.
func (l *RangeLease) Size() uint64 { return l.rl.Size() }

// Release ends the lease and drops the handle's reference (see Lease.Release).
func (l *RangeLease) Release(ctx context.Context) error { return l.rl.Release(ctx) }

// Detach ends the lease and keeps the payload staged (see Lease.Detach).
func (l *RangeLease) Detach(ctx context.Context) error { return l.rl.Detach(ctx) }

// ReadRanges reads every range, with up to WithBatchWindow reads in flight: on the RDMA path one
// GET per range with the lease's key, on the chunked path pipelined pulls. A range that is empty,
// reaches past the payload (ErrRange) or has a Dst shorter than its Length (ErrBufferSize) fails
// before anything is posted; each range's outcome is in its Err, and one range's failure fails
// only that range. The error returned is nil when every range was read, and otherwise says how
// many failed and wraps the first failure. ReadRanges returns once nothing writes any Dst.
//
// A GET that fails makes the lease fall back to the chunked path, as Get does, and the failed
// ranges (and all later reads of the lease) are pulled. The path metric counts each call once:
// rdma/ok, get_failed after such a fallback, or the reason the lease is chunked.
//
// Consistency: a read returns the bytes the owner's memory holds while the read runs. A reader
// sees everything the owner wrote before it announced the range (staged the region, or sent the
// message naming the range); the owner must not write a range from the time it announced it
// until its readers are done with it (docs/velo.md, "Regions").
func (l *RangeLease) ReadRanges(ctx context.Context, ranges []Range) error {
	return l.rl.ReadRanges(ctx, rendezvousRanges(ranges))
}

// Range is one read of ReadRanges (Velo's, or RangeLease's). RangeInto fills one for device
// memory.
type Range struct {
	// Offset and Length are the bytes of the payload to read.
	Offset uint64
	Length uint64
	// Dst receives them, in Dst[:Length].
	Dst []byte
	// Err is this read's outcome once ReadRanges returned.
	Err error
	// DstMemory is what Dst is (zero: host memory); RangeInto sets it. Device memory is read with
	// its type on the RDMA path and through host bounce buffers on the chunked path (reason
	// device_bounce).
	DstMemory rendezvous.Memory
}

// Range is package rendezvous's type under this package's name and documentation, like
// GetRequest: ReadRanges hands its ranges over without a copy, and the reads write their Err in
// place.
var _ = rendezvous.Range(Range{})

func rendezvousRanges(ranges []Range) []rendezvous.Range {
	return unsafe.Slice((*rendezvous.Range)(unsafe.Pointer(unsafe.SliceData(ranges))), len(ranges))
}

// Region is memory an owner writes in place and stages without a copy (NewRegion,
// WrapRegion, WrapRegionMemory; StageRegion stages it, GrantWrite lets a writer put into
// it). Methods:
//
//   - Bytes() []byte: the memory, for the owner to write.
//   - Pinned() bool: whether consumers read it by RDMA; Reason() says why not ("" when pinned).
//   - Memory(): what the memory is (host or device).
//   - Free(): ends the region; the memory goes back once its last staging was freed.
//   - Done() <-chan struct{}: closed once the region is over and no remote read of it can run.
//   - Stage(): the options package rendezvous stages it with (StageRegion calls it).
type Region = rdma.Region

// GetBatch fetches many payloads at once and returns one result per request, in order. The
// handles of one owner are leased together (a few hundred per round trip); a payload of at most
// WithBatchInlineMax bytes (4 KiB by default) comes inside the owner's answer (path "inline": no
// registration, no read), the others' RDMA reads are posted without waiting for each other and
// chunked payloads are pulled with many pulls in flight: WithBatchWindow per part of up to 256
// entries, four parts of an owner moving at once. Each entry fails alone (a released, foreign or
// repeated handle, a wrong-sized Into, a context that ended before it was done), and what a failed
// entry took — its lease, and with it the owner's registration of its memory — is given back before
// GetBatch returns. each, when not nil, is called once per entry as it completes, one call at a
// time. The path metric counts every entry. End the leases of the successful results with Release
// or Detach, as after Get.
func (v *Velo) GetBatch(ctx context.Context, reqs []GetRequest, each func(GetResult)) []GetResult {
	wrap := func(r GetResult) GetResult {
		if r.Err != nil {
			r.Err = v.ownerGone(reqs[r.Index].Handle, r.Err)
		}
		return r
	}
	var inner func(rendezvous.GetResult)
	if each != nil {
		inner = func(r rendezvous.GetResult) { each(wrap(GetResult(r))) }
	}
	out := getResults(v.rv.GetBatch(ctx, rendezvousRequests(reqs), inner))
	for i := range out {
		out[i] = wrap(out[i])
	}
	return out
}

// ReleaseLeases ends many leases as Lease.Release ends one (each handle's reference is spent),
// in one message per owner for up to 4096 of its leases, a few messages in flight (an owner of
// an earlier release gets one message per lease). It returns one error per lease, in order: nil
// where the lease ended; a lease already ended, nil, or taken by another instance fails alone.
// The leases of a GetBatch are ended this way in a fraction of the round trips of ending them
// one by one.
func (v *Velo) ReleaseLeases(ctx context.Context, leases []*Lease) []error {
	return v.rv.EndLeases(ctx, leases, true)
}

// DetachLeases ends many leases as Lease.Detach ends one (the payloads stay staged for another
// Get), batched as ReleaseLeases batches.
func (v *Velo) DetachLeases(ctx context.Context, leases []*Lease) []error {
	return v.rv.EndLeases(ctx, leases, false)
}

// Acquire takes a lease on h for ranged reads without moving a byte: on the RDMA path the owner
// registers the payload once for the lease, and each range is then one GET with that key. Read
// with RangeLease.ReadRanges, as often as needed; end the lease with Release or Detach.
func (v *Velo) Acquire(ctx context.Context, h Handle) (*RangeLease, error) {
	l, err := v.rv.Acquire(ctx, h)
	if err != nil {
		return nil, v.ownerGone(h, err)
	}
	return &RangeLease{Lease: l.Lease, rl: l}, nil
}

// ReadRanges reads many ranges of h's payload in one call, with one lease (one descriptor, one
// remote key): Acquire, ReadRanges, Detach. Each range's outcome is in its Err; ranges outside the
// payload, empty ones and ones whose Dst is too short fail before anything is posted. The handle's
// reference is kept (the lease is detached), so the payload stays for later reads.
func (v *Velo) ReadRanges(ctx context.Context, h Handle, ranges []Range) error {
	l, err := v.Acquire(ctx, h)
	if err != nil {
		for i := range ranges {
			ranges[i].Err = err
		}
		return err
	}
	rerr := l.ReadRanges(ctx, ranges)
	if err := l.Detach(context.WithoutCancel(ctx)); err != nil && rerr == nil {
		v.log.Debug("velo: detaching after ReadRanges failed; the owner's reaper ends the lease", "err", err)
	}
	return rerr
}

// NewRegion returns size bytes of this instance's pinned memory for the caller to write in place
// and stage without a copy (StageRegion), as often and for as long as it likes. Staging 1 GiB this
// way costs 1 GiB of memory, not the 2 GiB of a copy (StageDataPinned). When no pinned memory
// can be had — no RDMA registry (WithUCXTransport), the kill switch, the budget, the memlock limit —
// the region is plain memory, consumers read it by chunks, and Region.Reason says why; the error
// is for a size below one byte. Free the region when done with it: it is the application's, so
// Close does not free it (it logs the pinned regions still allocated) and StagedCounts does not
// count it.
func (v *Velo) NewRegion(size int) (*Region, error) {
	if size <= 0 {
		return nil, fmt.Errorf("velo: NewRegion(%d): a region holds at least one byte", size)
	}
	if v.rdma == nil {
		return rdma.PlainRegion(make([]byte, size), metrics.ReasonNotConfigured), nil
	}
	g, err := v.rdma.NewRegion(size)
	if err == nil && g.Pinned() {
		v.regions.add(g)
	}
	return g, err
}

// WrapRegion wraps memory the caller already has as a region, without copying it and without
// staging it (StageRegion does that, StageData for plain bytes): once staged, it is read by
// RDMA (each lease registers it once, with its own key) or, without an RDMA registry, by chunks.
// mem must stay valid and unmoved until Region.Done is closed (after Free and the end of
// every staging and of every read); memory outside the Go heap is the intended kind.
func (v *Velo) WrapRegion(mem []byte) (*Region, error) {
	if len(mem) == 0 {
		return nil, fmt.Errorf("velo: WrapRegion: an empty region")
	}
	if v.rdma == nil {
		return rdma.PlainRegion(mem, metrics.ReasonNotConfigured), nil
	}
	return v.rdma.WrapRegion(mem)
}

// StageRegion stages the whole region, without a copy, and returns its handle (one reference, as
// every staging). The owner keeps writing the region as it likes; a consumer sees what was written
// before the handle (or a message naming a range of it) reached it. Stage the same region as often
// as needed: each staging is its own handle on the same memory.
func (v *Velo) StageRegion(ctx context.Context, g *Region) (Handle, error) {
	if err := ctx.Err(); err != nil {
		return Handle{}, err
	}
	if g == nil {
		return Handle{}, fmt.Errorf("velo: StageRegion(nil)")
	}
	o, err := g.Stage()
	if err != nil {
		return Handle{}, fmt.Errorf("velo: StageRegion: %w", err)
	}
	h, err := v.rv.Stage(g.Bytes(), o)
	if err != nil {
		o.OnFree()
		return Handle{}, err
	}
	return h, nil
}
