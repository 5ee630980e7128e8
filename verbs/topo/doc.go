// Package topo tells how near each GPU of a node is to each RDMA port, from sysfs alone (no cgo,
// no NVML, no driver): the GPUs, the RDMA devices with their ports and netdevs, the NUMA nodes
// with their CPUs, and for every GPU and NIC the relation nvidia-smi topo -m would print. A GPU
// that moves data over a NIC across the socket pays for the crossing on every byte, and a node
// whose GPUs all pick the same NIC leaves the others idle; both are invisible until someone looks
// at the PCI tree, which is what this package reads.
//
// # What it reads
//
// Under the sysfs root of a [verbs.Paths] (normally /sys):
//
//	bus/pci/devices/<bdf>                 -> ../../../devices/pci<domain>:<bus>/.../<bdf>
//	devices/.../<bdf>/{class,vendor,device,numa_node,local_cpulist}
//	class/infiniband/<dev>/device          -> the RDMA device's PCI function (read by package verbs)
//	class/net/<if>/device, class/net/<if>/bonding/slaves
//	devices/system/node/node<N>/cpulist
//
// A GPU is a PCI function whose class is a VGA controller (0x0300xx) or a 3D controller
// (0x0302xx) and whose vendor is NVIDIA (0x10de) or AMD (0x1002); other display functions (a
// BMC's or the CPU's integrated graphics) are not GPUs here. GPUs are numbered in PCI address
// order, which is nvidia-smi's order and CUDA's under CUDA_DEVICE_ORDER=PCI_BUS_ID. RDMA devices
// and ports come from [verbs.Devices]; a NIC is one RDMA device, so a dual-port ConnectX that mlx5
// shows as two devices is two NICs, and a bonded pair (mlx5_bond_0) is one.
//
// # The PCI chain
//
// Each PCI function's symlink is resolved to its directory under devices/, and the path below
// devices/ is its chain: the root bus first (pci0000:16, the host bridge), then every PCI function
// on the way down, the function itself last:
//
//	pci0000:16 / 0000:16:02.0 (root port) / 0000:17:00.0 (switch upstream port) /
//	0000:18:01.0 (switch downstream port) / 0000:19:00.0 (the GPU)
//
// The functions between the root bus and the function itself are its bridges. Where two
// functions' paths meet is the last element of the longest common prefix of their chains without
// the functions themselves: a root bus, or their lowest shared bridge. Chains with different
// first elements meet nowhere in PCI: they are under different host bridges. A path component
// that is neither a root bus nor a PCI address makes the chain an error, except a nested root
// bus (Intel VMD's pci10000:e0), which acts as a host bridge for what is below it; components
// after the last PCI address (an mlx5 sub-function, mlx5_core.sf.2) are dropped, so such a device
// counts as its PCI function.
//
// # Relations
//
// For functions a and b, with da and db the bridges each has below the point where they meet:
//
//   - [PIX]: they meet at a bridge, and da ≤ 1 and db ≤ 1. Each sits at most one bridge below
//     the lowest bridge they share: on two downstream ports of one switch (the switch's upstream
//     port is the shared bridge, each downstream port the one bridge of its own), below one
//     downstream port or root port (functions of one card), or one on the switch's internal bus
//     and one on a downstream port.
//   - [PXB]: they meet at a bridge, and da ≥ 2 or db ≥ 2: the path goes through several switches
//     (a switch behind a switch) without reaching the host bridge.
//   - [PHB]: they meet at a root bus: under two root ports of one root complex, both directly on
//     the root bus as in most virtual machines, or under two root ports of one VMD domain.
//     nvidia-smi has this class too; it sits between PXB and NODE.
//   - [NODE]: they meet nowhere (different root buses), and both are on the same NUMA node: the
//     path crosses between host bridges inside one socket (two PCIe stacks of one CPU).
//   - [SYS]: different root buses on different NUMA nodes, across the interconnect between
//     sockets (or between the sub-NUMA clusters of one socket, which cost the same kind of hop).
//     Also every pair where a NUMA node is unknown and the root buses differ, and every pair where
//     one side has no PCI function at all: nothing shows that they are near. An RDMA device
//     without a PCI parent takes the PCI function of its first netdev (or bond member) that has
//     one (soft-RoCE on a physical NIC); one on a virtual netdev, or whose parent is a platform
//     device, has none.
//
// The order of nearness is PIX < PXB < PHB < NODE < SYS. Each pair also has a PCI distance, the
// number of links on the path through the tree, one from each element of a chain to the next: up
// from each function to where they meet and down again (da + db + 2 when they meet at a bridge);
// across root buses, both chains' depths plus 2 (one hop out of each host bridge). NVLink and
// xGMI are not PCI and not seen here: two GPUs are never related, only a GPU and a NIC, or a NUMA
// node and a NIC.
//
// # NUMA nodes
//
// A function's NUMA node is its numa_node file when that holds a node (≥ 0). When it holds -1
// (the firmware did not say, or the kernel has no NUMA) or is missing: on a machine whose
// devices/system/node lists at most one node with CPUs, the function is on that node (node 0
// when none is listed), which is what -1 means there; otherwise the node is taken from
// local_cpulist, the one node whose cpulist holds every CPU listed there. When neither settles it
// (local_cpulist missing, or spanning several nodes as it does when the kernel does not know),
// the node stays unknown (-1), and every relation of the function across root buses is SYS.
// Each fallback on a multi-node machine is recorded in [Topology.Notes]; a numa_node that is not
// a number is an error wrapping [verbs.ErrMalformed].
//
// # Nearest ports
//
// [Topology.NearestPorts] ranks every port for a GPU: PORT_ACTIVE ports first (an inactive port
// moves nothing, however near), then by relation (PIX < PXB < PHB < NODE < SYS), then by PCI
// distance, then by name in the order package verbs lists devices (mlx5_2 before mlx5_10) and
// port number. [Topology.NearestPortsForNUMA] ranks the same way for a CPU-only process on a NUMA
// node: a port whose NIC is on the node is NODE, any other SYS, and the distance is the NIC's
// depth below its root bus. [Topology.Recommend] keeps the active ports of the best relation the
// GPU has (all of them: two NICs on the GPU's switch are both PIX, and UCX may use both as rails),
// and [UCXNetDevices] writes them in UCX_NET_DEVICES form.
package topo
