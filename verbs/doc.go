// Package verbs tells a program what RDMA hardware a node has and whether this process can use it,
// without cgo: devices, ports, GID and P_Key tables and the netdevs behind them come from sysfs,
// and the memlock limit from getrlimit and /proc/self/status.
//
// # Why sysfs first
//
// Everything a preflight needs — is the port ACTIVE, is it InfiniBand or RoCE, is this node a full
// member of the partition, can this user open the uverbs device — is published by the kernel under
// /sys/class/infiniband and /sys/class/infiniband_verbs. Reading it needs no libibverbs, no open
// device and no privileges, so the probes work in a static CGO_ENABLED=0 binary and in containers
// that lack the device nodes, and they run in tests against fixture trees. Operations that need a
// device context (registering memory, allocating a PD) live in the cgo package github.com/velo-go/velo/verbs/ibv, whose
// answers agree with these probes on real hardware.
//
// # Where the probes look
//
// Every probe takes a [Paths]: the sysfs root (normally /sys) and the device root (normally /dev).
// Under the sysfs root the probes read
//
//	class/infiniband/<dev>/{node_type,node_guid,sys_image_guid,fw_ver,hca_type,hw_rev,board_id,node_desc}
//	class/infiniband/<dev>/device            -> the parent (PCI) device: numa_node, driver, vendor, device
//	class/infiniband/<dev>/ports/<n>/{state,phys_state,link_layer,rate,lid,sm_lid,lid_mask_count,sm_sl,cap_mask}
//	class/infiniband/<dev>/ports/<n>/gids/<i>, gid_attrs/types/<i>, gid_attrs/ndevs/<i>, pkeys/<i>
//	class/infiniband_verbs/uverbs<k>/{ibdev,abi_version,dev}
//	class/net/<if>/{device,dev_port}         -> which netdev (IPoIB or Ethernet) sits on which port
//
// and under the device root infiniband/uverbs<k>. The fixture trees in testdata/ follow the same
// layout; testdata/README.md says where each file's format comes from.
//
// # Three answers
//
// Probes follow one convention, the one cilium/ebpf's features package uses: a nil error means the
// thing is available; an error for which errors.Is(err, [ErrNotSupported]) holds means it is
// definitely not available (no device, port not active, memlock too low); any other error means
// the probe could not tell (unreadable sysfs, not compiled in), and wraps the cause. Tools such as
// ibcheck print those three cases differently.
//
// # Memlock
//
// RDMA registration pins pages, and the kernel counts pinned pages against RLIMIT_MEMLOCK unless
// the process holds CAP_IPC_LOCK in the initial user namespace. [ReadMemlock] reports both,
// [CheckMemlock] says whether a registration of a given size fits and, when it does not, names the
// limit, the need and the fix, and [RaiseMemlock] lifts the soft limit to the hard one. The package
// github.com/velo-go/velo/verbs/verbstest runs a child process without CAP_IPC_LOCK and under a chosen limit, so that tests can
// exercise the failure for real.
package verbs
