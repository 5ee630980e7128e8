package topo_test

import (
	"fmt"

	"github.com/velo-go/velo/verbs"
	"github.com/velo-go/velo/verbs/topo"
)

// Each GPU's relation to each NIC, and the UCX_NET_DEVICES value for its nearest active ports,
// on the fixture of a node where one GPU sits across the socket from the only NIC.
func Example() {
	t, err := topo.Load(verbs.Paths{Sysfs: "testdata/sysfs/nic-across-socket"}) // verbs.Paths{} reads /sys
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, g := range t.GPUs {
		for _, n := range t.NICs {
			fmt.Printf("%s %s %s: %s\n", g.Name(), g.PCI.Address, n.Device.Name, t.Link(g, n).Relation)
		}
		rec, _ := t.Recommend(g.Index)
		fmt.Printf("  UCX_NET_DEVICES=%s (%s)\n", rec.UCXNetDevices(), rec.Relation)
	}
	// Output:
	// GPU0 0000:19:00.0 mlx5_0: PIX
	//   UCX_NET_DEVICES=mlx5_0:1 (PIX)
	// GPU1 0000:af:00.0 mlx5_0: SYS
	//   UCX_NET_DEVICES=mlx5_0:1 (SYS)
}
