package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/velo-go/velo/velo"
)

// The initiator drives; the target answers these velo requests (JSON in both directions). Every
// payload the sweep measures is staged by the target and read by the initiator, so the owner and
// the consumer sit on two nodes as in a job.
const (
	hHello    = "velobench.hello"    // helloReq -> helloResp
	hStage    = "velobench.stage"    // stageReq -> stageResp
	hFree     = "velobench.free"     // freeReq -> {}
	hStats    = "velobench.stats"    // {} -> statsResp
	hEcho     = "velobench.echo"     // the request operation: the payload comes back
	hPerftest = "velobench.perftest" // perftestReq -> perftestResp
	hBye      = "velobench.bye"      // the initiator is done
)

type helloReq struct {
	Version  string `json:"version"`
	Protocol int    `json:"protocol"`
	Name     string `json:"name"`
	// ControlPort is the initiator's control-plane port: the target's lane counter tells the
	// control plane's sockets from UCX's by it.
	ControlPort int `json:"control_port"`
}

type helloResp struct {
	Role     string `json:"role"` // "target"
	Name     string `json:"name"`
	Version  string `json:"version"`
	Protocol int    `json:"protocol"`
	Host     string `json:"host"` // the address it advertised, for ucx_perftest's client
	PID      int    `json:"pid"`
	Memory   int64  `json:"memory"` // its --memory: the most it stages at once
	// ControlPort is the target's control-plane port (for the initiator's lane counter).
	ControlPort int         `json:"control_port"`
	Env         Environment `json:"env"`
}

// stageReq asks the target to stage Count payloads of Size bytes: in pinned memory (the RDMA
// path), or plain memory (Plain: the chunked path). Byte i of payload k holds pattern(k, i).
type stageReq struct {
	ID    uint64 `json:"id"`
	Count int    `json:"count"`
	Size  int64  `json:"size"`
	Plain bool   `json:"plain"`
	// Grant asks instead for Count pinned regions of Size bytes, each granted to the initiator
	// for writing (the put operations); the answer's Grants name them.
	Grant bool `json:"grant"`
}

type stageResp struct {
	Handles []velo.Handle      `json:"handles"`
	Grants  []velo.GrantHandle `json:"grants,omitempty"`
}

// freeReq ends a stage. For granted regions it carries what the initiator wrote: Notified
// notifications in all, and Blocks of Block bytes from the start of each region, which the
// target checks before it revokes the grants.
type freeReq struct {
	ID       uint64 `json:"id"`
	Notified int    `json:"notified,omitempty"`
	Block    int64  `json:"block,omitempty"`
	Blocks   int    `json:"blocks,omitempty"`
}

// freeResp says whether the granted regions held what was written and every notification came.
type freeResp struct {
	Err string `json:"err,omitempty"`
}

// statsResp is the target's own account: CPU time of its process (getrusage) and its owner-side
// path counts.
type statsResp struct {
	CPUNanos int64              `json:"cpu_ns"`
	Paths    map[string]float64 `json:"paths"`
	// Lanes are the target's socket bytes by lane so far; LanesWhy says why there are none.
	Lanes    LaneBytes `json:"lanes"`
	LanesWhy string    `json:"lanes_why,omitempty"`
	// Rails are the target's bytes per rail so far (velo_rails_bytes_total), with --rails.
	Rails map[string]float64 `json:"rails,omitempty"`
}

// perftestReq asks the target to start a ucx_perftest server for one client run; its answer is
// the port, or why there is none.
type perftestReq struct {
	TimeoutSec int `json:"timeout_s"`
}

type perftestResp struct {
	Port    int    `json:"port"`
	Version string `json:"version"`
	Err     string `json:"err,omitempty"`
}

// call sends req to the target's handler and decodes its JSON answer into resp (nil: ignore it).
func call(ctx context.Context, v *velo.Velo, peer velo.InstanceID, name string, req, resp any) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	out, err := v.Request(ctx, peer, name, b)
	if err != nil {
		return err
	}
	if resp == nil {
		return nil
	}
	if err := json.Unmarshal(out, resp); err != nil {
		return fmt.Errorf("the answer to %s: %w", name, err)
	}
	return nil
}

// pattern is the byte at offset i of payload k: both sides compute it, so the initiator checks a
// few bytes of every block it reads without the target sending them.
func pattern(k int, i int64) byte { return byte(i*7) + byte(k*13+1) }

// fill writes payload k's pattern into b, which starts at offset off of the payload.
func fill(b []byte, k int, off int64) {
	const tile = 256 // pattern repeats every 256 bytes
	n := min(len(b), tile)
	for i := 0; i < n; i++ {
		b[i] = pattern(k, off+int64(i))
	}
	for i := n; i < len(b); i *= 2 {
		copy(b[i:], b[:i])
	}
}

// checkBytes looks at the first, middle and last byte of b, read from offset off of payload k.
func checkBytes(b []byte, k int, off int64) error {
	if len(b) == 0 {
		return nil
	}
	for _, i := range []int{0, len(b) / 2, len(b) - 1} {
		if b[i] != pattern(k, off+int64(i)) {
			return fmt.Errorf("byte %d of payload %d is %#x, want %#x: the data arrived wrong", off+int64(i), k, b[i], pattern(k, off+int64(i)))
		}
	}
	return nil
}
