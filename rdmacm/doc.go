// Package rdmacm answers "which RDMA device and port carry this IP address" — the question behind
// UCX_NET_DEVICES when an operator knows a node by its address, and behind ibcheck --ip.
//
// # Two ways to the answer
//
// The authoritative answer comes from the RDMA connection manager: bind a cm_id to the address
// (rdma_bind_addr) and read the device and port the kernel attached it to. That needs cgo,
// librdmacm and the /dev/infiniband/rdma_cm device, which containers often lack. So [Resolve]
// falls back to sysfs, which any process can read:
//
//   - RoCE: the kernel fills a port's GID table from its netdev's addresses (an IPv4 address as
//     ::ffff:a.b.c.d), so the address itself names the port. RoCE v2 entries are preferred.
//   - IPoIB and anything else: find the interface that holds the address, then the port that
//     interface belongs to (a GID entry naming it, or its parent device and dev_port).
//
// Interface addresses are not in sysfs; they come from the kernel through the net package
// ([SystemInterfaces]), or from Options.Interfaces for another network namespace or a fixture.
//
// # Answers
//
// As in package verbs: a [Location] and nil when a device carries the address; an error wrapping
// verbs.ErrNoDevice (and so verbs.ErrNotSupported) when none does, saying where the address is
// (or that it is on no interface at all); any other error when neither way could tell.
package rdmacm
