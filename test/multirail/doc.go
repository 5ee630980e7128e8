// Package multirail tests velo's rail sets (velo/transport/rails, velo.WithRails with Slice) over
// real UCX transports, one per rail: two hosts in network namespaces joined by several veth pairs
// on subnets of their own, each shaped with tc to a rate, UCX_TLS=tcp, every rail one veth
// interface (UCX_NET_DEVICES per UCX context), and velo's TCP control plane on a veth pair of its
// own. The kernel's per-interface counters show where the bytes of one large GET went; a link set
// down mid-GET shows the failover. The hosts are railnode processes (cmd/railnode) driven one
// command a line (test/internal/linecmd). Needs root and iproute2 (the tests skip, saying why,
// without them); it adds network interfaces, so make test runs it alone (TEST_ALONE).
package multirail
