package ibv_test

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/velo-go/velo/verbs/ibv"
)

// Register one 64 MiB arena the way velo does, and report why it fails if it does. (Needs an RDMA
// device; without one, Open says so.)
func ExampleOpen() {
	ctx, err := ibv.Open("mlx5_0")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ctx.Close()
	pd, err := ctx.AllocPD()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pd.Dealloc()
	arena, err := unix.Mmap(-1, 0, 64<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer unix.Munmap(arena)
	mr, err := pd.RegMR(arena, ibv.AccessLocalWrite|ibv.AccessRemoteRead)
	if err != nil {
		fmt.Println(err) // e.g. wraps verbs.ErrMemlock and names the limit and the fix
		return
	}
	defer mr.Dereg()
	fmt.Printf("registered %d bytes, rkey %#x\n", mr.Len(), mr.RKey())
}
