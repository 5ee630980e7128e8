package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/velo-go/velo/lanes"
)

// Lanes: the bytes the kernel saw on each side's sockets during a point, split into velo's TCP
// control plane, UCX's own sockets and the rest, counted by the lanes module (a fresh cgroup v2
// per process with two eBPF programs on it). It is the witness that does not depend on velo's
// own accounting: a get on the RDMA path over UCX_TLS=tcp moves its payload on UCX's sockets and
// next to nothing on the control plane, a chunked get the reverse, and on RDMA hardware the
// payload crosses no socket at all.
//
// A socket counts in the cgroup it was made in, so each velobench process (initiator, target)
// makes its counter and moves itself into the counter's cgroup before it opens its first socket,
// and moves back out before it removes the cgroup. Children it starts (the local target,
// ucx_perftest) start in that cgroup too: the local target moves into its own at once, and
// ucx_perftest runs between points, outside what a point counts.

// Lane names as velobench reports them.
const (
	laneControl = "control" // velo's TCP control plane: the two sides' listening ports
	laneUCX     = "ucx"     // every other TCP socket: UCX's own over UCX_TLS=tcp (and its wireup)
	laneOther   = "other"   // the rest: discovery's etcd connections, UDP, ...
)

// LaneBytes are one side's socket bytes during a point, by lane and direction (IP headers
// included, as the kernel counts them at the socket).
type LaneBytes struct {
	ControlOut uint64 `json:"control_out"`
	ControlIn  uint64 `json:"control_in"`
	UCXOut     uint64 `json:"ucx_out"`
	UCXIn      uint64 `json:"ucx_in"`
	OtherOut   uint64 `json:"other_out"`
	OtherIn    uint64 `json:"other_in"`
}

// Control is the control plane's bytes both ways; UCX the same for UCX's sockets.
func (l LaneBytes) Control() uint64 { return l.ControlOut + l.ControlIn }
func (l LaneBytes) UCX() uint64     { return l.UCXOut + l.UCXIn }

// sub is l minus an earlier reading (counters only grow; a flow that vanished counts as 0).
func (l LaneBytes) sub(b LaneBytes) LaneBytes {
	d := func(a, b uint64) uint64 {
		if a < b {
			return 0
		}
		return a - b
	}
	return LaneBytes{d(l.ControlOut, b.ControlOut), d(l.ControlIn, b.ControlIn), d(l.UCXOut, b.UCXOut), d(l.UCXIn, b.UCXIn),
		d(l.OtherOut, b.OtherOut), d(l.OtherIn, b.OtherIn)}
}

// laneCounter is this process's counter, or why there is none.
type laneCounter struct {
	c      *lanes.Counter
	why    string // set when c is nil: what the point's lane columns say instead of a number
	origin string // the cgroup folder this process came from, to go back to before Close
	nested string // the folder made inside an outer counter's cgroup, removed after Close

	mu       sync.Mutex
	own      uint16 // this side's control-plane port
	peer     uint16 // the other side's, once known
	etcdPort uint16 // discovery's, with --etcd
}

// laneModes are the values of --lanes.
var laneModes = []string{"auto", "on", "off"}

func checkLaneMode(m string) error {
	for _, x := range laneModes {
		if m == x {
			return nil
		}
	}
	return usageErr("--lanes %q: want auto (count where the kernel and the rights allow, else say why), on (fail without them) or off", m)
}

// startLanes makes this process's counter and moves the process into its cgroup. It must run
// before the process opens a socket. With mode auto a counter that cannot be made is a reason in
// the report; with on it is an error.
func startLanes(mode string) (*laneCounter, error) {
	if mode == "off" {
		return &laneCounter{why: "not counted (--lanes off)"}, nil
	}
	lc, err := newLaneCounter()
	if err != nil {
		if mode == "on" {
			return nil, fmt.Errorf("--lanes on: %w (run as root, or with CAP_BPF, CAP_NET_ADMIN and a delegated cgroup v2 subtree; or give --lanes auto)", err)
		}
		return &laneCounter{why: "not counted: " + shortReason(err)}, nil
	}
	return lc, nil
}

func newLaneCounter() (*laneCounter, error) {
	origin, err := ownCgroup()
	if err != nil {
		return nil, err
	}
	// A process that is already counted by an outer counter (ibcheck lanes -- velobench ...)
	// makes its cgroup inside the outer one: programs attached to a cgroup count the sockets of
	// its descendants too, so both keep counting. Otherwise it goes beside the other counters'.
	parent := lanes.DefaultParent
	if strings.HasPrefix(origin, "/"+lanes.DefaultParent+"/") {
		parent = strings.TrimPrefix(origin, "/") + "/velobench"
	}
	c, err := lanes.New(lanes.Options{Parent: parent})
	if err != nil {
		return nil, err
	}
	// The counter's cgroup is <mount>/<parent>/<name>; this process's is <mount><origin>.
	mount := strings.TrimSuffix(filepath.Dir(c.Cgroup()), "/"+parent)
	lc := &laneCounter{c: c, origin: filepath.Join(mount, origin)}
	if parent != lanes.DefaultParent {
		lc.nested = filepath.Join(mount, parent)
	}
	if err := writeProcs(c.Cgroup()); err != nil {
		c.Close()
		return nil, fmt.Errorf("moving this process into the counter's cgroup %s: %w", c.Cgroup(), err)
	}
	return lc, nil
}

// ownCgroup is this process's cgroup v2 path ("0::/path" in /proc/self/cgroup).
func ownCgroup() (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Errorf("%w: reading /proc/self/cgroup: %v", lanes.ErrNotSupported, err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok && strings.HasPrefix(p, "/") {
			return strings.TrimSuffix(p, " (deleted)"), nil
		}
	}
	return "", fmt.Errorf("%w: this process is in no cgroup v2 (no 0:: line in /proc/self/cgroup)", lanes.ErrNotSupported)
}

func writeProcs(dir string) error {
	return os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0)
}

// shortReason is the first line of err, short enough for a CSV cell.
func shortReason(err error) string {
	s := firstLine(err.Error())
	if len(s) > 240 {
		s = s[:237] + "..."
	}
	return s
}

// setPorts tells the counter which ports are the control plane's: this side's listening port,
// and the other side's once known (0: unchanged).
func (lc *laneCounter) setPorts(own, peer, etcd int) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if own > 0 {
		lc.own = uint16(own)
	}
	if peer > 0 {
		lc.peer = uint16(peer)
	}
	if etcd > 0 {
		lc.etcdPort = uint16(etcd)
	}
}

// read is this side's bytes by lane so far, or why there are none.
func (lc *laneCounter) read() (LaneBytes, string) {
	if lc == nil {
		return LaneBytes{}, "not counted (no counter)"
	}
	if lc.c == nil {
		return LaneBytes{}, lc.why
	}
	flows, err := lc.c.Read()
	if err != nil && flows == nil {
		return LaneBytes{}, "not counted: " + shortReason(err)
	}
	lc.mu.Lock()
	own, peer, etcdPort := lc.own, lc.peer, lc.etcdPort
	lc.mu.Unlock()
	// A control-plane socket is one accepted on this side's port or dialled to the other side's.
	control := lanes.LaneMatch{Name: laneControl, Match: func(f lanes.Flow) bool {
		return f.Protocol == lanes.ProtoTCP && ((own != 0 && f.LocalPort == own) || (peer != 0 && f.RemotePort == peer))
	}}
	discovery := lanes.LaneMatch{Name: laneOther, Match: func(f lanes.Flow) bool { return etcdPort != 0 && f.RemotePort == etcdPort }}
	var b LaneBytes
	for _, l := range lanes.Classify(flows, laneOther, control, discovery, lanes.ProtocolLane(laneUCX, lanes.ProtoTCP)) {
		switch l.Name {
		case laneControl:
			b.ControlOut, b.ControlIn = b.ControlOut+l.BytesOut, b.ControlIn+l.BytesIn
		case laneUCX:
			b.UCXOut, b.UCXIn = b.UCXOut+l.BytesOut, b.UCXIn+l.BytesIn
		default:
			b.OtherOut, b.OtherIn = b.OtherOut+l.BytesOut, b.OtherIn+l.BytesIn
		}
	}
	if err != nil { // the map filled: later flows were not counted
		return LaneBytes{}, "not counted: " + shortReason(err)
	}
	return b, ""
}

// describe is the environment's word on this side's lanes.
func (lc *laneCounter) describe() string {
	if lc == nil || lc.c == nil {
		if lc == nil {
			return "not counted"
		}
		return lc.why
	}
	return "counted (cgroup v2 + eBPF, cgroup " + lc.c.Cgroup() + ")"
}

// close moves the process back where it came from and removes the counter. The counter's Close
// kills what is left in its cgroup, so a process that cannot move out keeps its counter (the
// reaper removes the cgroup once the process is gone).
func (lc *laneCounter) close() error {
	if lc == nil || lc.c == nil {
		return nil
	}
	c := lc.c
	lc.c, lc.why = nil, "not counted (closed)"
	if err := writeProcs(lc.origin); err != nil {
		return fmt.Errorf("lanes: moving back to the cgroup %s: %w (its counter's cgroup is removed once this process exits)", lc.origin, err)
	}
	err := c.Close()
	if lc.nested != "" {
		// The outer counter removes its cgroup only once nothing is inside; another velobench
		// process still counting there keeps the folder, and removes it in its turn.
		_ = os.Remove(lc.nested)
	}
	return err
}

// laneDelta is after minus before for one side, or the reason either reading gave.
func laneDelta(before, after LaneBytes, whyBefore, whyAfter string) (*LaneBytes, string) {
	if whyBefore != "" {
		return nil, whyBefore
	}
	if whyAfter != "" {
		return nil, whyAfter
	}
	d := after.sub(before)
	return &d, ""
}
