// Package rdma is the RDMA registry of a velo instance: the pinned memory that rendezvous slots
// live in, the budget on how much of it the process may pin, and the per-lease registrations
// that let exactly one consumer read exactly one slot (or a run of its slots, leased in one batch)
// by a one-sided GET.
//
// It is written against transport.RMA (register, GET, can-GET), which the UCX transport
// implements; it never touches UCX itself, so it is pure Go and its unit tests can run on an
// in-process RMA (package rdmatest) while the same behaviour is tested again over real UCX in
// module test.
//
// # Why arenas
//
// Velo tells UCX not to cache registrations (UCX_RCACHE_ENABLE=n, UCX_MEM_EVENTS=n), so each
// registration is a fresh pin of the pages, and a NIC can only read memory that stays where it
// is. Go heap memory moves nothing today but is owned by the garbage collector; an RDMA path
// that hands its address to a peer needs memory whose lifetime velo controls. So the registry
// maps arenas of its own (mmap, pre-faulted, mlocked; 64 MiB by default), carves slots out of
// them page by page, and copies payloads in (StageDataPinned, and transparent staging of
// large messages once an arena exists). Every mapped byte counts against RegisteredBytesBudget;
// over it, staging falls back to plain memory and the transfer to the chunked path, never to an
// error.
//
// # Why single-use keys
//
// A remote key that outlives the transfer it was made for is a hazard: a consumer holding a
// stale descriptor could read whatever the owner put in that memory next, and on InfiniBand a
// GET with a stale key kills the reading process. So nothing is registered up front. When an
// owner grants a lease on the RDMA path it registers exactly the slot's pages (slots start on a
// page and own every byte up to the next page boundary, zeroed, so a registration never exposes
// a neighbour's bytes), sends that key in the lease's descriptor, and revokes the registration
// when the lease ends, however it ends: release, detach, TTL, consumer down, or shutdown (the
// rendezvous store runs one hook for all of them). A slot goes back to its arena only after its
// registration is gone, and an arena is unmapped only when no slot is left in it.
//
// One batch answer may lease many slots that sit side by side in an arena (blocks staged one
// after another) to one consumer. Those are registered once, as a run, and each lease's key names
// its own slot; the run is revoked when the last of its leases ends. A run's key reaches the run
// (the owner checks reads against the registration, not the part a key names), which is all
// that consumer's, and nothing else; its pages stay out of use until it is dead. On InfiniBand a
// run is one memory registration where it would have been one per block.
//
// # What it decides
//
// The registry answers the rendezvous path decision (docs/architecture.md) where it owns the
// facts: the kill switch (VELO_RDMA_RENDEZVOUS_DISABLE, read once, or Config.Disabled), whether
// staging got pinned memory (pool_exhausted when no arena is mapped or the arena is full for a
// stager that may not grow the pool; budget when the budget is spent), and whether the per-lease
// registration fits the budget and succeeds (budget). Registrations count against the budget too:
// on verbs hardware each one pins the slot's pages again, apart from the arena's mlock.
package rdma
