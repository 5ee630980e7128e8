//go:build linux

package verbstest_test

import (
	"context"
	"fmt"

	"github.com/velo-go/velo/verbs/verbstest"
)

// Run a program as an unprivileged RDMA user would: no CAP_IPC_LOCK and a 1 MiB memlock limit.
func ExampleCommand() {
	cmd, err := verbstest.Command(context.Background(), verbstest.Constraints{MemlockSoft: 1 << 20}, "sh", "-c", "ulimit -l")
	if err != nil {
		fmt.Println(err)
		return
	}
	out, err := cmd.Output()
	fmt.Printf("%s%v\n", out, err)
	// Output:
	// 1024
	// <nil>
}
