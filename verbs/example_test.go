package verbs_test

import (
	"errors"
	"fmt"

	"github.com/velo-go/velo/verbs"
)

// List the RDMA devices and ports of a node. On a live system pass verbs.Paths{}.
func ExampleDevices() {
	devs, err := verbs.Devices(verbs.Paths{Sysfs: "testdata/sysfs/cx3-vpi-two-port", Dev: "testdata/dev/cx3-vpi-two-port"})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, d := range devs {
		fmt.Printf("%s %s fw %s numa %d uverbs openable: %v\n", d.Name, d.HCAType, d.FirmwareVersion, d.NUMANode, d.Uverbs.Openable())
		for _, p := range d.Ports {
			m, _ := p.DefaultPartition()
			fmt.Printf("  %s %s %s %s netdevs %v default partition %s\n", p.Spec(), p.State, p.LinkLayer, p.Rate, p.Netdevs, m)
		}
	}
	// Output:
	// mlx4_0 MT4099 fw 2.42.5000 numa -1 uverbs openable: true
	//   mlx4_0:1 PORT_ACTIVE InfiniBand 56 Gb/sec (4X FDR) netdevs [ib0] default partition full
	//   mlx4_0:2 PORT_DOWN Ethernet 40 Gb/sec (4X QDR) netdevs [enp3s0d1] default partition full
}

// The preflight question for one port, with its three answers.
func ExampleCheckPort() {
	for _, fx := range []string{"cx7-ib-active", "cx7-ib-port-down", "no-devices"} {
		p := verbs.Paths{Sysfs: "testdata/sysfs/" + fx, Dev: "testdata/dev/" + fx}
		_, err := verbs.CheckPort(p, "mlx5_0:1")
		switch {
		case err == nil:
			fmt.Println(fx, "usable")
		case errors.Is(err, verbs.ErrNotSupported):
			fmt.Println(fx, "not usable:", err)
		default:
			fmt.Println(fx, "could not tell:", err)
		}
	}
	// Output:
	// cx7-ib-active usable
	// cx7-ib-port-down not usable: RDMA port not active: mlx5_0:1 is PORT_DOWN (physical state Polling): check the cable and the switch, and that a subnet manager runs on the fabric (InfiniBand)
	// no-devices not usable: no RDMA device: no device "mlx5_0": testdata/sysfs/no-devices/class/infiniband has no entries (no RDMA driver is loaded)
}

// What the guide's "ibv_reg_mr fails at 32 MiB" looks like before it happens.
func ExampleMemlock_Check() {
	m := verbs.Memlock{Soft: 8 << 20, Hard: 8 << 20, InitUserNS: true}
	fmt.Println(m.Check(32 << 20))
	// Output:
	// memlock limit too low: pinning 32 MiB needs more than RLIMIT_MEMLOCK allows: soft limit 8 MiB (hard 8 MiB), 0 B already locked or pinned, 8 MiB left; the process does not hold CAP_IPC_LOCK; fix: run `ulimit -l unlimited` as root before starting the process (systemd: LimitMEMLOCK=infinity; /etc/security/limits.conf: memlock unlimited), or in a container grant IPC_LOCK (docker run --cap-add=IPC_LOCK --ulimit memlock=-1, Kubernetes securityContext.capabilities.add: [IPC_LOCK])
}

func ExamplePKey_Membership() {
	for _, k := range []verbs.PKey{0xffff, 0x7fff, 0x8001, 0x0000} {
		fmt.Printf("%v partition %#04x %v\n", k, k.Partition(), k.Membership())
	}
	// Output:
	// 0xffff partition 0x7fff full
	// 0x7fff partition 0x7fff partial
	// 0x8001 partition 0x0001 full
	// 0x0000 partition 0x0000 none
}
