package check

// Meta describes one check for people: the table groups by Group, and the documentation lists
// every check from here.
type Meta struct {
	ID    string
	Group string // "node", "gpu", "environment" or "ucx"
	What  string // the question the check answers
}

// Groups of checks, in report order.
const (
	GroupNode = "node"
	GroupGPU  = "gpu"
	GroupEnv  = "environment"
	GroupUCX  = "ucx"
)

// Checks lists every check in the order Run runs them. The IDs are part of the JSON schema: a
// check may be added, but an ID never changes meaning.
var Checks = []Meta{
	{"devices", GroupNode, "Does the node have RDMA devices?"},
	{"port", GroupNode, "Is the checked port PORT_ACTIVE, and is its link layer InfiniBand (an active Ethernet port is RoCE)?"},
	{"uverbs", GroupNode, "Can this process open the device's /dev/infiniband/uverbs node, as libibverbs must?"},
	{"pkey", GroupNode, "Is the node a full member of the partition UCX will use, or is UCX_IB_PKEY set as a partial member needs?"},
	{"memlock", GroupNode, "Does RLIMIT_MEMLOCK cover velo's registered-bytes budget plus one arena, and is CAP_IPC_LOCK hiding a low limit?"},
	{"registration", GroupNode, "Does a real registration of one velo arena (ibv_reg_mr) succeed on the device?"},
	{"devx", GroupNode, "Does a DEVX context open on an mlx5 device, so that UCX gets its mlx5 memory domain?"},
	{"ip", GroupNode, "Which device and port carry the address given with --ip?"},
	{"gpu", GroupGPU, "Does the node have NVIDIA GPUs (sysfs PCI: vendor 0x10de, VGA or 3D controller), bound to the loaded nvidia driver?"},
	{"gpudirect", GroupGPU, "Can the RDMA NICs reach GPU memory directly: nvidia_peermem loaded, or dma-buf (the open NVIDIA kernel module on Linux 5.12 or later)?"},
	{"gpu_nic_path", GroupGPU, "Does each GPU have an active RDMA port behind a PCIe switch it shares (PIX, PXB), rather than through the CPU (PHB, NODE) or across the sockets (SYS)?"},
	{"gpu_acs", GroupGPU, "Do the PCIe switch ports between each GPU and its NIC leave ACS peer-to-peer redirect off, so that GPUDirect RDMA traffic stays in the switch?"},
	{"gpu_iommu", GroupGPU, "Does the IOMMU leave the GPUs' and NICs' DMA untranslated (off, or passthrough), as GPUDirect RDMA needs?"},
	{"ucx_net_devices", GroupEnv, "Is UCX_NET_DEVICES set, and does it name PORT_ACTIVE InfiniBand ports?"},
	{"ucx_gpu_rails", GroupEnv, "Does UCX_NET_DEVICES name the ports nearest the job's GPUs (CUDA_VISIBLE_DEVICES), not a NIC across the socket from them?"},
	{"ucx_tls", GroupEnv, "Is UCX_TLS pinned, with a UD transport beside every RC one?"},
	{"ucx_proto_enable", GroupEnv, "Does UCX_PROTO_ENABLE leave RMA working on the linked UCX?"},
	{"ucx_max_rma_rails", GroupEnv, "With several ports in UCX_NET_DEVICES, may a GET use them all?"},
	{"ucx_rcache", GroupEnv, "Are UCX_RCACHE_ENABLE and UCX_MEM_EVENTS left off, as velo wants?"},
	{"kill_switch", GroupEnv, "Is the RDMA path switched off by VELO_RDMA_RENDEZVOUS_DISABLE?"},
	{"ucx_version", GroupUCX, "Which UCX is linked into this binary (not the system's ucx_info), and is it new enough?"},
	{"ucx_build", GroupUCX, "Does the linked UCX have verbs, mlx5, DEVX and rdmacm compiled in?"},
	{"ucx_rma_guard", GroupUCX, "Does the linked UCX refuse software-emulated RMA and tcp PUT requests (velo's guard patch set), so that velo's UCX transport starts without trusting the network?"},
	{"ucx_tcp_listen", GroupUCX, "Where does a UCX worker of this binary listen over tcp with this environment (UCX_TLS, UCX_NET_DEVICES): nowhere, loopback only, or interfaces beyond the node?"},
	{"ucx_cuda", GroupUCX, "Does the linked UCX have its CUDA transports and take CUDA memory (a binary built with -tags cuda,ucx_static), and does the CUDA driver see the GPUs?"},
}

// GroupOf returns the group of a check ID.
func GroupOf(id string) string {
	for _, m := range Checks {
		if m.ID == id {
			return m.Group
		}
	}
	return ""
}
