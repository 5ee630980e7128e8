#!/usr/bin/env bash
# Regenerates the sysfs and /dev fixture trees under verbs/testdata. The trees are committed; run this
# only to change them, then review the diff. Every file format below is the one the kernel prints:
# see README.md in this folder for the source of each.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

# w FILE CONTENT: write one sysfs attribute (the kernel ends every value with a newline).
w() { mkdir -p "$(dirname "$1")"; printf '%s\n' "$2" >"$1"; }
# lnk LINK TARGET: a relative symlink, as sysfs has them.
lnk() { mkdir -p "$(dirname "$1")"; ln -sfn "$2" "$1"; }
# touchdev FILE: a stand-in for a character device node (a regular, empty file).
touchdev() { mkdir -p "$(dirname "$1")"; : >"$1"; }

ZERO_GID=0000:0000:0000:0000:0000:0000:0000:0000

# pci_function ROOT BRIDGE BDF VENDOR DEVICE DRIVER NUMA CPUS
pci_function() {
	local root=$1 bridge=$2 bdf=$3 vendor=$4 device=$5 driver=$6 numa=$7 cpus=$8
	local d="$root/devices/$bridge/$bdf"
	w "$d/vendor" "$vendor"
	w "$d/device" "$device"
	w "$d/subsystem_vendor" "$vendor"
	w "$d/subsystem_device" "0x0020"
	w "$d/class" "0x020700"
	w "$d/numa_node" "$numa"
	w "$d/local_cpulist" "$cpus"
	mkdir -p "$root/bus/pci/drivers/$driver"
	: >"$root/bus/pci/drivers/$driver/bind"
	lnk "$d/driver" "../../../../bus/pci/drivers/$driver"
}

# ib_device ROOT BRIDGE BDF NAME NODE_GUID SYS_GUID FW HCA BOARD DESC
ib_device() {
	local root=$1 bridge=$2 bdf=$3 name=$4
	local d="$root/devices/$bridge/$bdf/infiniband/$name"
	w "$d/node_type" "1: CA"
	w "$d/node_guid" "$5"
	w "$d/sys_image_guid" "$6"
	w "$d/fw_ver" "$7"
	w "$d/hca_type" "$8"
	w "$d/hw_rev" "0x0"
	w "$d/board_id" "$9"
	w "$d/node_desc" "${10}"
	lnk "$d/device" "../../../$bdf"
	lnk "$root/class/infiniband/$name" "../../devices/$bridge/$bdf/infiniband/$name"
}

# port ROOT BRIDGE BDF NAME PORT STATE PHYS LINK RATE LID SMLID CAPMASK GIDLEN PKEYLEN
port() {
	local root=$1 bridge=$2 bdf=$3 name=$4 num=$5
	local p="$root/devices/$bridge/$bdf/infiniband/$name/ports/$num"
	w "$p/state" "$6"
	w "$p/phys_state" "$7"
	w "$p/link_layer" "$8"
	w "$p/rate" "$9"
	w "$p/lid" "${10}"
	w "$p/sm_lid" "${11}"
	w "$p/lid_mask_count" "0"
	w "$p/sm_sl" "0"
	w "$p/cap_mask" "${12}"
	local i
	for ((i = 0; i < ${13}; i++)); do w "$p/gids/$i" "$ZERO_GID"; done
	mkdir -p "$p/gid_attrs/types" "$p/gid_attrs/ndevs"
	for ((i = 0; i < ${14}; i++)); do w "$p/pkeys/$i" "0x0000"; done
}

# gid ROOT BRIDGE BDF NAME PORT INDEX GID TYPE [NDEV]: a populated GID table entry. Empty entries
# read as the zero GID and their gid_attrs files fail with EINVAL, so they are not written.
gid() {
	local p="$1/devices/$2/$3/infiniband/$4/ports/$5"
	w "$p/gids/$6" "$7"
	w "$p/gid_attrs/types/$6" "$8"
	if [ -n "${9:-}" ]; then w "$p/gid_attrs/ndevs/$6" "$9"; fi
}

# pkey ROOT BRIDGE BDF NAME PORT INDEX VALUE
pkey() { w "$1/devices/$2/$3/infiniband/$4/ports/$5/pkeys/$6" "$7"; }

# uverbs ROOT DEVROOT BRIDGE BDF NAME N
uverbs() {
	local root=$1 devroot=$2 bridge=$3 bdf=$4 name=$5 n=$6
	local u="$root/devices/$bridge/$bdf/infiniband_verbs/uverbs$n"
	w "$u/ibdev" "$name"
	w "$u/abi_version" "1"
	w "$u/dev" "231:$((192 + n))"
	lnk "$u/device" "../../../$bdf"
	lnk "$root/class/infiniband_verbs/uverbs$n" "../../devices/$bridge/$bdf/infiniband_verbs/uverbs$n"
	w "$root/class/infiniband_verbs/abi_version" "6"
	touchdev "$devroot/infiniband/uverbs$n"
}

# rdma_cm ROOT DEVROOT: the connection manager's misc device.
rdma_cm() {
	w "$1/devices/virtual/misc/rdma_cm/dev" "10:58"
	lnk "$1/class/misc/rdma_cm" "../../devices/virtual/misc/rdma_cm"
	touchdev "$2/infiniband/rdma_cm"
}

# netdev ROOT BRIDGE BDF IFNAME TYPE ADDRESS DEV_PORT IFINDEX MTU OPERSTATE
netdev() {
	local root=$1 bridge=$2 bdf=$3 ifname=$4
	local n="$root/devices/$bridge/$bdf/net/$ifname"
	w "$n/type" "$5"
	w "$n/address" "$6"
	w "$n/addr_len" "$(($(tr -cd ':' <<<"$6" | wc -c) + 1))"
	w "$n/dev_port" "$7"
	w "$n/dev_id" "0x0"
	w "$n/ifindex" "$8"
	w "$n/mtu" "$9"
	w "$n/operstate" "${10}"
	if [ "${10}" = up ]; then w "$n/carrier" "1"; else w "$n/carrier" "0"; fi
	lnk "$n/device" "../../../$bdf"
	lnk "$root/class/net/$ifname" "../../devices/$bridge/$bdf/net/$ifname"
}

# virtio_netdev ROOT IFNAME: the plain virtual NIC every fixture node also has.
virtio_netdev() {
	local root=$1 ifname=$2
	local n="$root/devices/pci0000:00/0000:00:03.0/virtio0/net/$ifname"
	w "$n/type" "1"
	w "$n/address" "52:54:00:12:34:56"
	w "$n/addr_len" "6"
	w "$n/dev_port" "0"
	w "$n/dev_id" "0x0"
	w "$n/ifindex" "2"
	w "$n/mtu" "1500"
	w "$n/operstate" "up"
	w "$n/carrier" "1"
	lnk "$n/device" "../../../virtio0"
	lnk "$root/class/net/$ifname" "../../devices/pci0000:00/0000:00:03.0/virtio0/net/$ifname"
}

fresh() { rm -rf "$here/sysfs/$1" "$here/dev/$1"; mkdir -p "$here/sysfs/$1" "$here/dev/$1"; }

# ConnectX-7 (PCI 15b3:1021, hca_type MT4129), one port per PCI function as mlx5 exposes it.
CX7_BRIDGE=pci0000:16/0000:16:02.0
CX7_FW=28.39.1002
CX7_BOARD=MT_0000000838
IB_CAPMASK=0xa751e848
ROCE_CAPMASK=0x04010000

cx7_ib() { # cx7_ib NAME STATE PHYS RATE LID SMLID PKEY0 OPERSTATE
	local name=$1 r="$here/sysfs/$1" dv="$here/dev/$1"
	fresh "$name"
	pci_function "$r" "$CX7_BRIDGE" 0000:17:00.0 0x15b3 0x1021 mlx5_core 0 0-31
	ib_device "$r" "$CX7_BRIDGE" 0000:17:00.0 mlx5_0 b83f:d203:00a1:b2c4 b83f:d203:00a1:b2c4 "$CX7_FW" MT4129 "$CX7_BOARD" "node01 mlx5_0"
	port "$r" "$CX7_BRIDGE" 0000:17:00.0 mlx5_0 1 "$2" "$3" InfiniBand "$4" "$5" "$6" "$IB_CAPMASK" 8 128
	gid "$r" "$CX7_BRIDGE" 0000:17:00.0 mlx5_0 1 0 fe80:0000:0000:0000:b83f:d203:00a1:b2c4 "IB/RoCE v1"
	pkey "$r" "$CX7_BRIDGE" 0000:17:00.0 mlx5_0 1 0 "$7"
	uverbs "$r" "$dv" "$CX7_BRIDGE" 0000:17:00.0 mlx5_0 0
	rdma_cm "$r" "$dv"
	netdev "$r" "$CX7_BRIDGE" 0000:17:00.0 ibp23s0 32 00:00:10:87:fe:80:00:00:00:00:00:00:b8:3f:d2:03:00:a1:b2:c4 0 4 2044 "$8"
	virtio_netdev "$r" eth0
}

# 1. InfiniBand port active, full membership of the default partition.
cx7_ib cx7-ib-active "4: ACTIVE" "5: LinkUp" "400 Gb/sec (4X NDR)" 0x1b 0x1 0xffff up
# 2. InfiniBand port with no link: cable in, no partner or no SM yet.
cx7_ib cx7-ib-port-down "1: DOWN" "2: Polling" "10 Gb/sec (4X SDR)" 0xffff 0x0 0xffff lowerlayerdown
# 3. InfiniBand port active, but the SM gave this node only limited membership (0x7fff).
cx7_ib cx7-ib-partial-pkey "4: ACTIVE" "5: LinkUp" "400 Gb/sec (4X NDR)" 0x1c 0x1 0x7fff up

# 4. The same card with its port in Ethernet mode: RoCE. GIDs come from the netdev's addresses.
name=cx7-roce-active r="$here/sysfs/$name" dv="$here/dev/$name"
fresh "$name"
pci_function "$r" "$CX7_BRIDGE" 0000:17:00.0 0x15b3 0x1021 mlx5_core 0 0-31
ib_device "$r" "$CX7_BRIDGE" 0000:17:00.0 mlx5_0 9803:9b03:001a:2b3c 9803:9b03:001a:2b3c "$CX7_FW" MT4129 "$CX7_BOARD" "node01 mlx5_0"
port "$r" "$CX7_BRIDGE" 0000:17:00.0 mlx5_0 1 "4: ACTIVE" "5: LinkUp" Ethernet "400 Gb/sec (4X NDR)" 0x0 0x0 "$ROCE_CAPMASK" 255 1
gid "$r" "$CX7_BRIDGE" 0000:17:00.0 mlx5_0 1 0 fe80:0000:0000:0000:9a03:9bff:fe1a:2b3c "IB/RoCE v1" ens1f0np0
gid "$r" "$CX7_BRIDGE" 0000:17:00.0 mlx5_0 1 1 fe80:0000:0000:0000:9a03:9bff:fe1a:2b3c "RoCE v2" ens1f0np0
gid "$r" "$CX7_BRIDGE" 0000:17:00.0 mlx5_0 1 2 0000:0000:0000:0000:0000:ffff:c0a8:3c0b "IB/RoCE v1" ens1f0np0
gid "$r" "$CX7_BRIDGE" 0000:17:00.0 mlx5_0 1 3 0000:0000:0000:0000:0000:ffff:c0a8:3c0b "RoCE v2" ens1f0np0
gid "$r" "$CX7_BRIDGE" 0000:17:00.0 mlx5_0 1 4 fd00:0060:0000:0000:0000:0000:0000:0011 "IB/RoCE v1" ens1f0np0
gid "$r" "$CX7_BRIDGE" 0000:17:00.0 mlx5_0 1 5 fd00:0060:0000:0000:0000:0000:0000:0011 "RoCE v2" ens1f0np0
pkey "$r" "$CX7_BRIDGE" 0000:17:00.0 mlx5_0 1 0 0xffff
uverbs "$r" "$dv" "$CX7_BRIDGE" 0000:17:00.0 mlx5_0 0
rdma_cm "$r" "$dv"
netdev "$r" "$CX7_BRIDGE" 0000:17:00.0 ens1f0np0 1 98:03:9b:1a:2b:3c 0 4 9000 up
virtio_netdev "$r" eth0

# 5. A dual-port ConnectX-7: mlx5 makes one RDMA device per PCI function, so two devices of one
#    port each that share a system image GUID. Port of function 0 active, function 1 disabled.
name=cx7-dual-port-one-active r="$here/sysfs/$name" dv="$here/dev/$name"
fresh "$name"
pci_function "$r" "$CX7_BRIDGE" 0000:17:00.0 0x15b3 0x1021 mlx5_core 1 32-63
pci_function "$r" "$CX7_BRIDGE" 0000:17:00.1 0x15b3 0x1021 mlx5_core 1 32-63
ib_device "$r" "$CX7_BRIDGE" 0000:17:00.0 mlx5_0 b83f:d203:00a1:c0d0 b83f:d203:00a1:c0d0 "$CX7_FW" MT4129 "$CX7_BOARD" "node02 mlx5_0"
ib_device "$r" "$CX7_BRIDGE" 0000:17:00.1 mlx5_1 b83f:d203:00a1:c0d1 b83f:d203:00a1:c0d0 "$CX7_FW" MT4129 "$CX7_BOARD" "node02 mlx5_1"
port "$r" "$CX7_BRIDGE" 0000:17:00.0 mlx5_0 1 "4: ACTIVE" "5: LinkUp" InfiniBand "200 Gb/sec (2X NDR)" 0x2a 0x1 "$IB_CAPMASK" 8 128
port "$r" "$CX7_BRIDGE" 0000:17:00.1 mlx5_1 1 "1: DOWN" "3: Disabled" InfiniBand "10 Gb/sec (4X SDR)" 0xffff 0x0 "$IB_CAPMASK" 8 128
gid "$r" "$CX7_BRIDGE" 0000:17:00.0 mlx5_0 1 0 fe80:0000:0000:0000:b83f:d203:00a1:c0d0 "IB/RoCE v1"
gid "$r" "$CX7_BRIDGE" 0000:17:00.1 mlx5_1 1 0 fe80:0000:0000:0000:b83f:d203:00a1:c0d1 "IB/RoCE v1"
pkey "$r" "$CX7_BRIDGE" 0000:17:00.0 mlx5_0 1 0 0xffff
pkey "$r" "$CX7_BRIDGE" 0000:17:00.1 mlx5_1 1 0 0xffff
uverbs "$r" "$dv" "$CX7_BRIDGE" 0000:17:00.0 mlx5_0 0
uverbs "$r" "$dv" "$CX7_BRIDGE" 0000:17:00.1 mlx5_1 1
rdma_cm "$r" "$dv"
netdev "$r" "$CX7_BRIDGE" 0000:17:00.0 ibp23s0f0 32 00:00:10:87:fe:80:00:00:00:00:00:00:b8:3f:d2:03:00:a1:c0:d0 0 4 2044 up
netdev "$r" "$CX7_BRIDGE" 0000:17:00.1 ibp23s0f1 32 00:00:10:87:fe:80:00:00:00:00:00:00:b8:3f:d2:03:00:a1:c0:d1 0 5 2044 down
virtio_netdev "$r" eth0

# 6. A ConnectX-3 VPI (mlx4, PCI 15b3:1003): one RDMA device with two ports, port 1 InfiniBand
#    active, port 2 Ethernet down. The only fixture with more than one port per device, and the
#    only one that is not mlx5. The firmware reports no NUMA node.
M4_BRIDGE=pci0000:00/0000:00:02.0
name=cx3-vpi-two-port r="$here/sysfs/$name" dv="$here/dev/$name"
fresh "$name"
pci_function "$r" "$M4_BRIDGE" 0000:03:00.0 0x15b3 0x1003 mlx4_core -1 0-7
ib_device "$r" "$M4_BRIDGE" 0000:03:00.0 mlx4_0 0002:c903:0010:a1b0 0002:c903:0010:a1b3 2.42.5000 MT4099 MT_1090120019 "node03 mlx4_0"
port "$r" "$M4_BRIDGE" 0000:03:00.0 mlx4_0 1 "4: ACTIVE" "5: LinkUp" InfiniBand "56 Gb/sec (4X FDR)" 0x7 0x1 0x02514868 128 128
port "$r" "$M4_BRIDGE" 0000:03:00.0 mlx4_0 2 "1: DOWN" "3: Disabled" Ethernet "40 Gb/sec (4X QDR)" 0x0 0x0 0x04010000 128 1
gid "$r" "$M4_BRIDGE" 0000:03:00.0 mlx4_0 1 0 fe80:0000:0000:0000:0002:c903:0010:a1b1 "IB/RoCE v1"
gid "$r" "$M4_BRIDGE" 0000:03:00.0 mlx4_0 2 0 fe80:0000:0000:0000:0202:c9ff:fe10:a1b2 "IB/RoCE v1" enp3s0d1
gid "$r" "$M4_BRIDGE" 0000:03:00.0 mlx4_0 2 1 fe80:0000:0000:0000:0202:c9ff:fe10:a1b2 "RoCE v2" enp3s0d1
pkey "$r" "$M4_BRIDGE" 0000:03:00.0 mlx4_0 1 0 0xffff
pkey "$r" "$M4_BRIDGE" 0000:03:00.0 mlx4_0 2 0 0xffff
uverbs "$r" "$dv" "$M4_BRIDGE" 0000:03:00.0 mlx4_0 0
rdma_cm "$r" "$dv"
netdev "$r" "$M4_BRIDGE" 0000:03:00.0 ib0 32 80:00:02:08:fe:80:00:00:00:00:00:00:00:02:c9:03:00:10:a1:b1 0 3 2044 up
netdev "$r" "$M4_BRIDGE" 0000:03:00.0 enp3s0d1 1 00:02:c9:10:a1:b2 1 4 1500 down
virtio_netdev "$r" eth0

# 7. A node without RDMA: no class/infiniband at all (no RDMA driver loaded), one virtio NIC.
name=no-devices r="$here/sysfs/$name"
fresh "$name"
virtio_netdev "$r" eth0
rmdir "$here/dev/$name"

echo "fixtures written under $here/sysfs and $here/dev"
