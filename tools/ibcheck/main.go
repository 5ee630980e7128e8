// Command ibcheck is the node preflight operators run on every node before a velo job. It turns
// each step of the guide's "Prepare each node" and "Set the runtime environment", and each
// "Common failures" row that can be detected before a job runs, into a check with a verdict
// (PASS, WARN, FAIL; SKIP or N/C where that is the truth) and the fix in words.
//
//	ibcheck                    check this node and the UCX_* environment; exit 0, 1 or 2
//	ibcheck --json             the same as a versioned JSON document
//	ibcheck env                the export lines that pin UCX to the best port
//	ibcheck lanes -- cmd...    run cmd in a fresh cgroup; report its bytes per lane (eBPF) and
//	                           the RDMA port counters, and pass its exit status through
//	ibcheck topo               how near each GPU is to each RDMA NIC (nvidia-smi topo -m's
//	                           PIX ... SYS, from sysfs) and each GPU's UCX_NET_DEVICES
//	ibcheck --sysfs DIR        check a sysfs tree instead of /sys (fixtures, another node's copy)
//
// ibcheck links the same UCX as velo and asks it (in child processes of itself, so that the
// operator's environment cannot skew the answer), rather than trusting the system's ucx_info.
// Built with CGO_ENABLED=0 it is a static binary that runs the checks that need no C library and
// marks the rest "not compiled in". docs/ibcheck.md describes every check, the output and the
// JSON schema.
package main

import (
	"context"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/velo-go/velo/tools/ibcheck/internal/check"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == check.UCXProbeArg {
		os.Exit(check.UCXProbeMain(os.Args[2:], os.Stdout))
	}
	// The environment as the operator set it, before any library (UCX's defaults in the ucx
	// module) writes to it.
	env := snapshotEnv(os.Environ())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], env, os.Stdout, os.Stderr, check.Live())
	stop()
	os.Exit(code)
}

// snapshotEnv turns KEY=VALUE pairs into a lookup function over a private copy.
func snapshotEnv(kv []string) func(string) (string, bool) {
	m := make(map[string]string, len(kv))
	for _, e := range kv {
		if k, v, ok := strings.Cut(e, "="); ok {
			m[k] = v
		}
	}
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}
