package check

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/velo-go/velo/mlx5dv"
	"github.com/velo-go/velo/rdmacm"
	"github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/verbs"
	"github.com/velo-go/velo/verbs/ibv"
)

// System is everything the checks learn from outside the sysfs tree and the environment: this
// process's memlock state, the libraries compiled into the binary, the network interfaces. Live
// returns the real one. Tests replace a part whose answer depends on the machine (the linked UCX's
// version, this box's memlock limit) or needs hardware (a DEVX context, a registration); each real
// part is also tested for real, on this machine, in ibcheck's and its module's tests.
type System struct {
	// CGO reports whether this binary was built with cgo (libibverbs, libmlx5, librdmacm, UCX).
	CGO bool
	// Memlock reads this process's memlock limits and capabilities.
	Memlock func() (verbs.Memlock, error)
	// RegisterArena registers size bytes of fresh mmap'd memory on device for real and undoes it.
	RegisterArena func(ctx context.Context, device string, size uint64) error
	// ProbeDEVX opens and closes a DEVX context on device (mlx5dv.ProbeDEVX).
	ProbeDEVX func(device string) error
	// UCX asks the linked UCX (see ProbeUCX).
	UCX func(ctx context.Context, protoValues []string, withResources bool) UCXInfo
	// HardwareMatchesSysfs says that RegisterArena and ProbeDEVX reach the node that a sysfs tree
	// other than /sys describes. Live leaves it false: libibverbs and libmlx5 always see this
	// machine, so on a fixture tree those checks are skipped. Tests that pair a fixture with
	// fake hardware answers set it.
	HardwareMatchesSysfs bool
	// KernelRelease is the release of the kernel running the node that paths describe
	// ("6.8.0-45-generic"), for the dma-buf verdict; Live answers for /sys (this machine) and says
	// that it cannot tell for any other tree. Nil: unknown.
	KernelRelease func(paths verbs.Paths) (string, error)
	// Interfaces lists the node's network interfaces and addresses, for --ip; nil means the
	// live system's.
	Interfaces func() ([]rdmacm.Interface, error)
}

// Live is the running system.
func Live() System {
	return System{
		CGO:           cgoEnabled,
		Memlock:       verbs.ReadMemlock,
		RegisterArena: registerArena,
		ProbeDEVX:     mlx5dv.ProbeDEVX,
		UCX:           ProbeUCX,
		KernelRelease: liveKernelRelease,
	}
}

// registerArena proves that registration works the way velo will do it: it maps size bytes of
// anonymous memory (pre-faulted, like an arena), opens the device, allocates a protection domain
// and registers the memory for local write and remote read (what a GET needs), then undoes each
// step. Errors from libibverbs arrive from package ibv already explained (ErrMemlock, ErrPermission
// ...).
func registerArena(ctx context.Context, device string, size uint64) (err error) {
	if size > uint64(^uint(0)>>1) {
		return fmt.Errorf("%w: registration size %d does not fit this platform", verbs.ErrInvalid, size)
	}
	dev, err := ibv.Open(device)
	if err != nil {
		return err
	}
	defer closeInto(&err, dev.Close)
	pd, err := dev.AllocPD()
	if err != nil {
		return err
	}
	defer closeInto(&err, pd.Dealloc)
	mem, err := ucx.AllocMemory(int(size), ucx.MemoryOptions{})
	if err != nil {
		return fmt.Errorf("mapping %s to register: %w", verbs.FormatBytes(size), err)
	}
	defer closeInto(&err, mem.Free)
	if err := ctx.Err(); err != nil {
		return err
	}
	mr, err := pd.RegMR(mem.Bytes(), ibv.AccessLocalWrite|ibv.AccessRemoteRead)
	if err != nil {
		return err
	}
	return mr.Dereg()
}

// closeInto runs a release step and keeps its error when nothing failed before it.
func closeInto(err *error, release func() error) {
	if e := release(); e != nil && *err == nil {
		*err = e
	}
}

// liveKernelRelease reads this machine's kernel release, for the live tree only: a copy of
// another node's sysfs does not say which kernel wrote it.
func liveKernelRelease(p verbs.Paths) (string, error) {
	if p.SysfsRoot() != "/sys" {
		return "", fmt.Errorf("%s is not this machine's /sys, and a sysfs tree does not hold the kernel release", p.SysfsRoot())
	}
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}
