//go:build !linux

package lanes

import (
	"errors"
	"os/exec"
)

// DefaultParent is the folder under the cgroup v2 mount where counters make their cgroups.
const DefaultParent = "velo-lanes"

// Options configure a Counter.
type Options struct {
	Parent   string
	MaxFlows int
}

// Counter needs Linux (cgroup v2 and eBPF).
type Counter struct{}

// New fails: lane counting needs Linux.
func New(Options) (*Counter, error) {
	return nil, errors.Join(ErrNotSupported, errors.New("lanes: cgroup v2 and eBPF need Linux"))
}

func (c *Counter) Cgroup() string                               { return "" }
func (c *Counter) Command(name string, arg ...string) *exec.Cmd { return exec.Command(name, arg...) }
func (c *Counter) Place(*exec.Cmd)                              {}
func (c *Counter) Read() ([]Flow, error)                        { return nil, ErrNotSupported }
func (c *Counter) Close() error                                 { return nil }
