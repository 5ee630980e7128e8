package check_test

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/velo-go/velo/tools/ibcheck/internal/check"
	"github.com/velo-go/velo/verbs"
)

// Run checks a node: here a fixture tree with a partial P_Key, and an environment that pins the
// port and the transports. The live system would be check.Live(); the linked UCX is left out of
// this example (its answer depends on the machine), so the UCX checks say "could not tell".
func ExampleRun() {
	root := filepath.Join("..", "..", "..", "..", "verbs", "testdata")
	env := map[string]string{"UCX_NET_DEVICES": "mlx5_0:1", "UCX_TLS": "rc_mlx5,ud_mlx5,self"}
	sys := check.Live()
	sys.UCX = func(context.Context, []string, bool) check.UCXInfo {
		return check.UCXInfo{Err: fmt.Errorf("not asked in this example")}
	}
	rep := check.Run(context.Background(), check.Config{
		Paths: verbs.Paths{Sysfs: filepath.Join(root, "sysfs", "cx7-ib-partial-pkey"), Dev: filepath.Join(root, "dev", "cx7-ib-partial-pkey")},
		Env:   func(k string) (string, bool) { v, ok := env[k]; return v, ok },
	}, sys)
	for _, id := range []string{"port", "pkey", "ucx_tls"} {
		r, _ := rep.Result(id)
		fmt.Println(id, r.Status)
	}
	pkey, _ := rep.Result("pkey")
	fmt.Println(pkey.Fix)
	// Output:
	// port PASS
	// pkey FAIL
	// ucx_tls PASS
	// export UCX_IB_PKEY=0x7fff (ibcheck env prints it); a partial member reaches only full members, so the peers must be full members
}
