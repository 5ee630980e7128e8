// Package lanes is a witness of where a process's bytes went that does not depend on the code
// that moved them. A Counter makes a fresh cgroup v2, attaches two small eBPF programs to it
// (cgroup_skb egress and ingress, written with cilium/ebpf's asm package, so no compiler is
// needed) that count bytes and packets per socket — local port, remote port, IP protocol,
// direction, and the socket's local address, which names the interface (the rail, on a host with
// several NICs) — for every process started inside the cgroup, and reads the counts from an eBPF
// map.
// `ibcheck lanes` puts the RDMA ports' own counters (verbs.ReadPortCounters) beside them, so one
// report shows what crossed the IP stack and what crossed the NICs.
//
// A process must start inside the cgroup (Counter.Command uses CLONE_INTO_CGROUP): sockets keep
// the cgroup they were created in, so a process moved in later counts nothing. What is counted is
// what passes the kernel's IP layer at the socket: loopback traffic between two processes of the
// cgroup shows twice (the sender's egress, the receiver's ingress), a GSO super-packet counts as
// one packet of its full length, and IP headers are included in the bytes. The IP version, and so
// where the protocol byte sits, is read from each packet rather than taken from the socket's
// family, so a dual-stack listener's IPv4 connections count as TCP over IPv4; an IPv6 packet whose
// first extension header is Hop-by-Hop (BIG TCP's jumbo packets) is looked through to the protocol
// behind it, other extension headers are not.
//
// Everything the Counter creates goes away on every exit path: Close detaches the programs
// (bpf_link, so a killed process's attachments go with its file descriptors), removes the map and
// the cgroup. For a process killed outright (a cgroup directory cannot remove itself), each
// Counter runs a reaper — the same program started again outside the cgroup — that removes the
// cgroup as soon as the counter's process is gone; should the reaper be killed too, the next
// Counter made under the same parent removes what was left.
//
// Without the rights or the kernel for it, New fails with an error wrapping ErrNotSupported that
// says what is missing: no cgroup v2 mount, no permission to make a cgroup or load a program
// (CAP_BPF and CAP_NET_ADMIN, or root), or the verifier's log when it rejects the program.
package lanes
