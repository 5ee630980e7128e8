package rendezvous

import (
	"context"

	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/transport"
)

// The RDMA path plugs in through the interfaces of this file: a server and a client, one per
// side, and the pool of pinned memory whose slots the server registers (PinnedMemory is the one
// typed value that travels from the pool through the store back to the server). All are nil
// until an RDMA registry exists (velo.WithUCXTransport). With them nil the acquire decision
// still runs and reports not_configured, so the wire format, the metric series and the lease
// hooks that the RDMA path needs are already exercised by the chunked path.

// RDMAServer is the owner side of the RDMA path.
type RDMAServer interface {
	// Backend names the RMA backend whose offers this server answers ("ucx").
	Backend() string
	// KillSwitch reports whether the RDMA path is switched off on this owner.
	KillSwitch() bool
	// Serve makes exactly the slot's bytes readable for one lease, given the consumer's offer blob.
	// On success it returns the descriptor sent to the consumer and a hook the store runs when the
	// lease ends, however it ends (the registration is revoked there). On refusal it returns the
	// reason (budget, pool_exhausted) and a nil hook; the lease then serves chunks.
	Serve(ctx context.Context, slot Slot, offer []byte) (descriptor []byte, onLeaseEnd func(), reason metrics.Reason, err error)
}

// RDMAManyServer is an RDMAServer that serves the leases of one batch together (the RDMA
// registry is one): each slot gets a key of its own, the transport is asked once for all of
// them, and slots that are neighbours in memory may share one registration (each onLeaseEnd
// then ends its own lease's share of it; the registration goes with the last).
type RDMAManyServer interface {
	RDMAServer
	// ServeMany is Serve for each slot, with the same offer; one result per slot, in order.
	ServeMany(ctx context.Context, slots []Slot, offer []byte) []Served
}

// Served is one slot's outcome of ServeMany: what Serve returns.
type Served struct {
	Descriptor []byte
	OnLeaseEnd func()
	Reason     metrics.Reason
	Err        error
}

// PathRefuser is an RDMAClient or RDMAServer that can say why the pair has no RDMA path (the
// RMA transport refused the peer's address: release_mismatch; every lane of the pair's endpoint
// is a software one: software_lanes); "" when it has no reason to give. Both sides ask it on
// every transfer before they offer or serve RDMA.
type PathRefuser interface {
	PathRefusal(peer transport.InstanceID) metrics.Reason
}

// RDMAClient is the consumer side of the RDMA path.
type RDMAClient interface {
	// Backend names the RMA backend this client reads with; it goes in the offer.
	Backend() string
	// KillSwitch reports whether the RDMA path is switched off on this consumer.
	KillSwitch() bool
	// CanGet reports whether owner is registered on the RMA transport.
	CanGet(owner transport.InstanceID) bool
	// Offer returns the backend-specific part of an offer to owner.
	Offer(owner transport.InstanceID) ([]byte, error)
	// Get reads the bytes the descriptor names into dst (len(dst) == the payload size). It
	// returns only once nothing writes dst any more.
	Get(ctx context.Context, owner transport.InstanceID, descriptor []byte, dst []byte) error
	// GetMany reads every entry (any mix of descriptors of one owner) with up to window reads in
	// flight, none waiting for another before it is posted. done(i, err) runs once per read as
	// it completes, one call at a time; one read's failure fails only that read. GetMany returns
	// once nothing writes any Dst.
	GetMany(ctx context.Context, owner transport.InstanceID, reads []RemoteRead, window int, done func(i int, err error))
}

// PathReporter is an optional extension of RDMAServer and RDMAClient whose registry reads through
// more than one backend (the same-host path beside UCX). The wire says only "rdma": the owner
// answered with a descriptor, which is all the consumer needs to read it. PathOf names the lane
// that descriptor's key takes, for the path label on both sides (metrics.PathSameHost or
// metrics.PathRDMA).
type PathReporter interface {
	PathOf(descriptor []byte) metrics.Path
}

// RemoteRead is one read of RDMAClient.GetMany: len(Dst) bytes at Offset of the payload a
// lease's descriptor names.
type RemoteRead struct {
	Descriptor []byte
	Offset     uint64
	Dst        []byte
	// Memory is what Dst is (zero: host memory). A typed read is handed only to an
	// RDMAMemoryClient, which reads it with its type.
	Memory Memory
}

// PinnedMemory is memory a PinnedPool handed out, as the store carries it back to the pool's
// RDMAServer in Slot.Opts.Pinned.
type PinnedMemory interface {
	// PinnedRegion is the page-aligned memory around the payload: what one registration for a
	// lease covers.
	PinnedRegion() []byte
}

// PinnedPool hands out pinned memory to stage payloads in; the RDMA registry implements it. The
// owner stages a copy there (StageDataPinned, and transparent staging of large messages) so
// that RDMAServer.Serve can register exactly the slot for one lease.
type PinnedPool interface {
	// Pin returns memory for an n-byte payload and the options to stage it with (Pinned,
	// OnFree). mayMap allows mapping a new arena; the transparent stager passes false, so a message
	// send never waits for a large pin. When there is no memory to give, mem is nil and
	// opts.Reason says why (kill_switch, pool_exhausted, budget); the payload is then staged in
	// plain memory and that reason is what an RDMA offer for it is answered with.
	Pin(n int, mayMap bool) (mem []byte, opts StageOptions)
}
