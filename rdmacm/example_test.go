package rdmacm_test

import (
	"fmt"
	"net/netip"

	"github.com/velo-go/velo/rdmacm"
	"github.com/velo-go/velo/verbs"
)

// Which port carries an address? On a live node pass rdmacm.Options{}; here a RoCE fixture,
// where the address is in the port's GID table.
func ExampleResolve() {
	opts := rdmacm.Options{
		Paths:      verbs.Paths{Sysfs: "../verbs/testdata/sysfs/cx7-roce-active", Dev: "../verbs/testdata/dev/cx7-roce-active"},
		Interfaces: func() ([]rdmacm.Interface, error) { return nil, nil },
	}
	loc, err := rdmacm.Resolve(netip.MustParseAddr("192.168.60.11"), opts)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("UCX_NET_DEVICES=%s (netdev %s, GID index %d, from %s)\n", loc.Spec(), loc.Netdev, loc.GIDIndex, loc.Source)
	// Output:
	// UCX_NET_DEVICES=mlx5_0:1 (netdev ens1f0np0, GID index 3, from sysfs)
}
