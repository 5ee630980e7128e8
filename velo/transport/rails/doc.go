// Package rails joins several transports, one per NIC (a rail), into the one UCX transport velo
// reads remote memory with, and spreads each large read over all of them.
//
// A GPU node has several RDMA NICs; one UCX transport restricted to one of them moves a payload
// at that NIC's rate while the others idle, and one that fails takes every transfer with it. A
// Transport holds one member transport per rail, each with its own UCX context and worker
// restricted to its device (UCX_NET_DEVICES per context; UCX 1.22 runs several contexts in one
// process). velo sees one transport named like the first rail ("ucx"):
//
//   - Messages go over the first rail only; the others carry reads.
//   - Addresses: the first rail's address is the transport's Address, so a peer of an earlier
//     release reads it as a plain UCX address and uses that rail alone; the others are published
//     in the PeerInfo as "ucx.rail1", "ucx.rail2", ... (transport.RailAddresser). Rail i of one
//     side reads from rail i of the other; the rails two instances share are those both published.
//   - Keys: an owner registers a lease's region on every rail it shares with the consumer, each
//     with its own key, and hands out one rail-set key that carries them all. Every key
//     dies with the lease, as a single key does: revoking the registration revokes each rail's,
//     and it is dead only when all are. A consumer that shares only the first rail gets that
//     rail's plain key (transport.PeerRegisterer).
//   - Reads: a read above Config.SplitAbove is cut into slices of Config.SliceSize; the slices of
//     one Get, or of all the reads of one ReadMany (GetBatch, ReadRanges), are pulled by the
//     rails' workers, each keeping up to Config.Window reads in flight, so a rail takes more
//     slices the faster it finishes them and a slow rail does not hold the fast ones. A smaller
//     read goes whole over one rail.
//
// # Failures
//
// A slice that fails on a rail is read again over a rail it has not failed on. The rail is paused
// (it takes no read) for Config.CoolDown, doubling with each failure in a row up to
// Config.MaxCoolDown (30 s to 5 min by default, as Mooncake's transfer engine does), when the
// failure is the rail's: the slice outlived the rail's slice timeout (eight times its recent read
// time, within 1 s and 30 s), or the same bytes then came over another rail. A slice that fails on
// every rail (a key the owner revoked fails everywhere) fails its read and pauses nothing; nor
// does a peer that a rail other than the first loses (a peer that closed or died is no fault of
// the NIC; a rail that loses a live peer shows it in its reads). Once a pause ends the rail is
// probing: the next transfer gives it one slice, which takes it back up or pauses it again; only
// the probe does (a read that was in flight when the rail was paused proves nothing). When no
// rail is left, the read fails and the rendezvous falls back to the chunked path (reason
// get_failed), as a failed GET always has.
//
// A read that timed out on a rail is read again only once the rail's read returned, so no two
// reads ever write the same bytes at the same time. The UCX transport gives up at once a read
// still waiting for its reply, but a read whose bytes are arriving is UCX's until UCX ends it,
// which over a link that went down is the endpoint's own timeout (many seconds). So when a timed
// out read has not returned within a short grace, the rail's endpoints to that peer are closed
// with force (transport.RMA.ForceClosePeer): the stalled reads end, their slices go to the other
// rails, and the rail's next read, its probe, opens a new endpoint. The loss that close reports
// stays with the rail, the first rail's included.
//
// # Observing it
//
// Per rail: velo_rails_bytes_total, velo_rails_reads_total, velo_rails_failures_total and
// velo_rails_paused (labels rail and device); the members' own families carry a rail label.
// Status reports each rail's state, counts and last error; HealthReasons names a paused rail;
// Describe puts the rails on velo's introspection page; RailsTo says which rails a peer shares.
package rails
