// Package shm is velo's same-host path: one-sided reads (transport.RMA) between two instances
// of one host that move their bytes through shared memory instead of a network stack.
//
// What a consumer can reach is only what a lease names. The owner's arenas stay private
// anonymous mappings; nothing of them is ever mapped into another process. Instead, a consumer
// that wants to read opens a channel to the owner: it connects to the owner's Unix socket (a
// path in a directory of mode 0700, published in the owner's PeerInfo under "shm"), both sides
// check the other's credentials (SO_PEERCRED: the same uid, or one the owner allows), and, when
// the instance has a cluster secret, each proves the handshake with the key of its authenticated
// control-plane session with the other (transport.AuthGate), over a fresh nonce of each side.
// The owner then hands the consumer a memfd ring of Config.Slots buffers (SCM_RIGHTS). A read
// names a key (registration slot, token, range), an offset and a length; the owner checks them
// against a live registration made for that consumer, copies exactly those bytes into the ring, a
// buffer at a time, and the consumer copies each buffer out while the owner fills the next. The
// consumer never sees a byte its request did not name, and the ring holds at most Slots buffers
// of it.
//
// On an owner that sets Config.SingleCopyMin, a payload the registry stages in pinned memory
// (StageDataPinned) of at least that many bytes is the exception, read with one copy: it lives in a memfd of its own
// (MapPayload), sealed and never reused, and for a checked read of at least that size through a
// key that reaches all of it the owner hands the consumer a read-only descriptor of the file
// (SCM_RIGHTS), which the consumer reads straight into the caller's buffer and closes. Such a
// consumer can reach that payload's bytes, and only those, for as long as it keeps the descriptor;
// they never change and it cannot write them (see MapPayload).
//
// A push grant's range is registered for its writer alone and for writing only
// (RegisterMemoryWritableFor): the writer copies a piece into a ring buffer and names the key,
// offset and length; the owner checks that a live write registration made for that writer covers
// them and copies the piece in. A read through a write key, or a write through a lease's key, is
// refused, and Revoke stops writes as it stops reads.
//
// Same host is decided from facts, never from an address: the owner's address carries its host
// identity (the kernel's boot_id, or Config.HostID), and the consumer only takes the path once it
// has connected to the owner's socket and finished the handshake with it. Two instances in
// network namespaces that do not share the socket directory, or whose HostID differs, never do.
//
// Revocation follows the UCX transport: Revoke refuses reads that have not started, a read under
// way finishes, and Dead is closed once none is (the owner's copy out of the registration is what
// a read is, so a consumer that stalls after the last copy holds nothing). ForceClosePeer closes
// the consumer's channels, which ends any read stuck on a stalled consumer at once.
//
// Device memory takes CUDA IPC instead of the ring: for a consumer that opened a
// CUDA IPC channel (the same socket and handshake), a lease of device memory is exported (the
// handle of its whole allocation, given only in answer to a live key of that consumer), the
// consumer maps the allocation and copies on the GPU, and closes the mapping when its last key into
// the allocation ended, before the owner's registration is dead. The CUDA calls are the inner
// transport's (transport.CUDAIPC); this package builds and runs without CUDA.
//
// The Transport value is also a transport.Transport named "shm", so that its address travels in
// PeerInfo and RegisterPeer hands it over; it never carries a message (Reaches is false).
// Route puts it beside the UCX transport as the one RMA the rendezvous registry uses.
package shm
