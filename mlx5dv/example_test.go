package mlx5dv_test

import (
	"errors"
	"fmt"

	"github.com/velo-go/velo/mlx5dv"
	"github.com/velo-go/velo/verbs"
)

// Is the device mlx5? Answered from sysfs, so it works without cgo and on fixture trees.
func ExampleIsMLX5() {
	for _, fx := range []struct{ tree, dev string }{{"cx7-ib-active", "mlx5_0"}, {"cx3-vpi-two-port", "mlx4_0"}} {
		p := verbs.Paths{Sysfs: "../verbs/testdata/sysfs/" + fx.tree}
		ok, err := mlx5dv.IsMLX5(p, fx.dev)
		fmt.Println(fx.dev, ok, err)
	}
	// Output:
	// mlx5_0 true <nil>
	// mlx4_0 false <nil>
}

// The DEVX preflight, with its three answers.
func ExampleProbeDEVX() {
	err := mlx5dv.ProbeDEVX("mlx5_0")
	var devx *mlx5dv.DEVXError
	switch {
	case err == nil:
		fmt.Println("DEVX opens: UCX can use the mlx5 memory domain")
	case errors.As(err, &devx) && errors.Is(err, verbs.ErrNotSupported):
		fmt.Println("no DEVX, missing:", devx.Missing, "-", devx.Detail)
	case errors.Is(err, verbs.ErrNotSupported):
		fmt.Println("no DEVX:", err) // e.g. no such device
	default:
		fmt.Println("could not tell:", err) // e.g. not compiled in
	}
}
