package lanes

import (
	"io"
	"os"
	"os/exec"
)

// A cgroup directory cannot remove itself, and a process killed with SIGKILL runs no Close. So
// every Counter starts a reaper: this same program, started again outside the cgroup with
// reaperEnv naming the cgroup and a pipe from the counter's process on its standard input. When
// that pipe closes — Close, or the counter's process dying however it dies — the reaper kills
// what is left in the cgroup and removes it. (The counter's programs need no reaper: they are
// attached through bpf_link file descriptors, which the kernel closes with the process.)
const reaperEnv = "VELO_LANES_REAPER"

func init() {
	dir := os.Getenv(reaperEnv)
	if dir == "" {
		return
	}
	_, _ = io.Copy(io.Discard, os.Stdin) // until the counter's process closes the pipe or dies
	if removeCgroup(dir) != nil {
		os.Exit(1)
	}
	os.Exit(0)
}

// reaper is the running reaper of one cgroup.
type reaper struct {
	cmd  *exec.Cmd
	pipe io.WriteCloser
}

// startReaper starts the reaper of dir; nil when this program cannot be started again (the
// cgroup is then removed by Close, or by the next counter's sweep).
func startReaper(dir string) *reaper {
	self, err := os.Executable()
	if err != nil {
		return nil
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), reaperEnv+"="+dir)
	pipe, err := cmd.StdinPipe()
	if err != nil {
		return nil
	}
	if err := cmd.Start(); err != nil {
		return nil
	}
	return &reaper{cmd: cmd, pipe: pipe}
}

// stop lets the reaper go (the cgroup is already removed, or it removes it) and waits for it.
func (r *reaper) stop() {
	if r == nil {
		return
	}
	r.pipe.Close()
	_ = r.cmd.Wait()
}
