// Package proc drives faultnode processes (test/faults/cmd/faultnode) for the fault suite and the
// soak: it builds and starts them and speaks their commands (info, peer, stats, stage, quit) over
// the suites' line protocol client (test/internal/linecmd/driver). It returns errors rather than
// failing a test, so the soak command uses it as the tests do.
package proc

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/velo-go/velo/test/internal/gobuild"
	"github.com/velo-go/velo/test/internal/linecmd/driver"
)

// Build compiles faultnode into a new temporary folder and returns the binary's path; remove its
// folder when done. It links the UCX the go command's flags pick (GOFLAGS=-tags=ucx_static: velo's
// static UCX).
func Build() (string, error) { return build(nil) }

// BuildStock is Build linking the system's UCX instead of the static one (gobuild.StockUCX); it
// fails when the suite links the system's UCX itself.
func BuildStock() (string, error) {
	env, err := gobuild.StockUCX()
	if err != nil {
		return "", err
	}
	return build(append(os.Environ(), env...))
}

func build(env []string) (string, error) {
	dir, err := os.MkdirTemp("", "velo-faultnode-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "faultnode")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/velo-go/velo/test/faults/cmd/faultnode")
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("go build faultnode: %v\n%s", err, out)
	}
	return bin, nil
}

// Node is one faultnode process: the protocol's client (driver.Proc: Do, OK, Send, Read, Stop,
// Resume, Kill, Close...) with the faultnode's own commands.
type Node struct {
	*driver.Proc
	// ReadyAt is when the instance was up, as its ready line says (zero when it does not): a
	// member found through discovery has published its record by then.
	ReadyAt time.Time
}

// Start starts cmd (a faultnode) and waits until it says it is ready (driver.Start: UCX_TLS=tcp
// unless this process or cmd.Env names transports).
func Start(name string, cmd *exec.Cmd) (*Node, error) {
	p, err := driver.Start(name, cmd, 60*time.Second)
	if err != nil {
		return nil, err
	}
	n := &Node{Proc: p}
	if at, ok := p.Ready["at"].(float64); ok {
		n.ReadyAt = time.Unix(0, int64(at))
	}
	return n, nil
}

// Info is the node's PeerInfo as JSON.
func (n *Node) Info() (string, error) {
	r, err := n.OK("info", time.Minute)
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(r["info"])
	return string(b), err
}

// Pair registers a and b with each other.
func Pair(a, b *Node) error {
	for _, x := range [][2]*Node{{a, b}, {b, a}} {
		info, err := x[1].Info()
		if err != nil {
			return err
		}
		if _, err := x[0].OK("peer "+info, time.Minute); err != nil {
			return err
		}
	}
	return nil
}

// Stats is a node's RDMA registry and staging state.
type Stats struct {
	Arenas, Slots, LeaseRegistrations, Quarantined, HeldSlots, StagedSlots, OpenLeases int
	ArenaBytes, LeaseBytes, QuarantinedBytes, PinnedBytes                              int64
}

func statsOf(v any) (Stats, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return Stats{}, fmt.Errorf("stats: %v is not an object", v)
	}
	i := func(k string) int {
		f, _ := m[k].(float64)
		return int(f)
	}
	return Stats{Arenas: i("arenas"), Slots: i("slots"), LeaseRegistrations: i("lease_registrations"), Quarantined: i("quarantined"),
		HeldSlots: i("held_slots"), StagedSlots: i("staged_slots"), OpenLeases: i("open_leases"),
		ArenaBytes: int64(i("arena_bytes")), LeaseBytes: int64(i("lease_bytes")), QuarantinedBytes: int64(i("quarantined_bytes")),
		PinnedBytes: int64(i("pinned_bytes"))}, nil
}

// Stats reads the node's state.
func (n *Node) Stats() (Stats, error) {
	r, err := n.OK("stats", time.Minute)
	if err != nil {
		return Stats{}, err
	}
	return statsOf(r["stats"])
}

// WaitStats polls the node's stats until cond holds or timeout passes.
func (n *Node) WaitStats(timeout time.Duration, cond func(Stats) bool) (Stats, error) {
	deadline := time.Now().Add(timeout)
	for {
		st, err := n.Stats()
		if err != nil {
			return st, err
		}
		if cond(st) {
			return st, nil
		}
		if time.Now().After(deadline) {
			return st, fmt.Errorf("%s: not reached within %v: %+v", n.Name, timeout, st)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Staged is a payload an owner staged.
type Staged struct {
	Handle, SHA256 string
}

// Stage has the node stage a deterministic payload of size bytes (pinned or plain).
func (n *Node) Stage(size int, seed uint64, pinned bool) (Staged, error) {
	cmd := "stage"
	if !pinned {
		cmd = "stage-plain"
	}
	r, err := n.OK(fmt.Sprintf("%s %d %d", cmd, size, seed), 5*time.Minute)
	if err != nil {
		return Staged{}, err
	}
	h, _ := r["handle"].(string)
	sum, _ := r["sha256"].(string)
	return Staged{Handle: h, SHA256: sum}, nil
}

// Quit closes the instance and returns its final stats; the process must exit 0 within.
func (n *Node) Quit(within time.Duration) (Stats, error) {
	r, err := n.Do("quit", within)
	if err != nil {
		return Stats{}, err
	}
	if r["closed"] != true {
		return Stats{}, fmt.Errorf("%s: quit answered %v", n.Name, r)
	}
	if e, _ := r["err"].(string); e != "" {
		return Stats{}, fmt.Errorf("%s: Close: %s", n.Name, e)
	}
	select {
	case <-n.Exited():
	case <-time.After(within):
		return Stats{}, fmt.Errorf("%s did not exit within %v of quit", n.Name, within)
	}
	if code := n.Cmd.ProcessState.ExitCode(); code != 0 {
		return Stats{}, fmt.Errorf("%s exited with status %d", n.Name, code)
	}
	return statsOf(r["stats"])
}

// ErrLoss marks a payload reported delivered with other bytes than were staged.
var ErrLoss = errors.New("payload delivered with other bytes")
