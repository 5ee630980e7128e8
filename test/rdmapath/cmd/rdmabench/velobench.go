package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
)

// velobenchBin is -velobench: a velobench binary whose get point runs beside this bench's own
// RDMA gets, round by round, so that velobench's overhead over the same measurement is one
// command's figure (make bench-velobench-overhead).
var velobenchBin string

// velobenchRate runs velobench's get point for n bytes, iters gets after its warm-up, as a command
// of its own (its own two processes, with --lanes off and --perftest off: nothing beside the
// gets), and returns its figure in MiB/s: the same bytes over the summed time of the same calls
// as velorate's.
func velobenchRate(n, iters int) (float64, error) {
	dir, err := os.MkdirTemp("", "rdmabench-velobench-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	js := filepath.Join(dir, "point.json")
	it := strconv.Itoa(iters)
	cmd := exec.Command(velobenchBin, "local", "--ops", "get", "--blocks", strconv.Itoa(n), "--bytes", strconv.Itoa(n*iters),
		"--min-iters", it, "--max-iters", it, "--point-time", "10m", "--perftest", "off", "--lanes", "off", "--progress", "off", "--json", js)
	cmd.Env = os.Environ()
	if out, err := cmd.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("%s: %v\n%s", velobenchBin, err, out)
	}
	b, err := os.ReadFile(js)
	if err != nil {
		return 0, err
	}
	var rep struct {
		Points []struct {
			Op         string  `json:"op"`
			Operations int     `json:"operations"`
			GBps       float64 `json:"gb_per_s"`
		} `json:"points"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		return 0, fmt.Errorf("velobench's report: %w", err)
	}
	if len(rep.Points) != 1 || rep.Points[0].Op != "get" {
		return 0, fmt.Errorf("velobench's report holds %d points, want its one get", len(rep.Points))
	}
	return rep.Points[0].GBps * 1e9 / (1 << 20), nil
}
