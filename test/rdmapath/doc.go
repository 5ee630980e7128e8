// Package rdma tests the rendezvous RDMA path end to end over the real UCX transport: every path
// reason seen from both sides, single-use keys revoked on every way a lease ends (a killed
// consumer process included), the memlock fallback in a child without CAP_IPC_LOCK, and the
// two-process example run as its users run it — on one host, with the kill switch, and across two
// network namespaces where the kernel's byte counts show that the payload did not cross velo's
// TCP control plane.
//
// The in-process tests set UCX_TLS=tcp in the transport's Config; the environment wins, so
//
//	UCX_TLS=rc_mlx5,ud_mlx5,self UCX_NET_DEVICES=mlx5_2:1 make test-rendezvous-rdma
//
// runs the same tests on InfiniBand. The namespace test pins UCX_NET_DEVICES to its veth pair and
// needs root (it skips, saying why, without it).
package rdmapath
