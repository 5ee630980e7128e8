// Command velobench is the benchmark an operator runs to decide whether velo is fast enough on
// their fabric: an initiator on one node reads what a target on another stages, through the same
// discovery, transports and UCX environment a job uses, and sweeps operation, block size, batch
// size and concurrent callers.
//
//	velobench target    --dir DIR | --etcd URL [--name target] [--once]
//	velobench initiator --dir DIR | --etcd URL [sweep flags] [--json F] [--csv F] [--plot F.svg]
//	velobench local     [sweep flags] [outputs]    both sides on this host, two processes
//	velobench compare A.json B.json                B over A for every common point
//	velobench version
//
// The operations read what the target stages (get, batch, ranged, chunked), ask it (request) or
// write into regions it grants (put, putbatch; chunkedput into plain memory, by chunks). Each point reports GB/s, operations per second,
// latency p50/p99/p99.9, the CPU seconds per GB of each process, the path each transfer took
// (velo's own path metrics, on both sides), the bytes the kernel saw on each side's sockets by
// lane (control plane, UCX, the rest; where the lanes module may count them), the bytes per rail
// with --rails, the same point measured by ucx_perftest of the linked UCX release where one
// exists, and the fraction of the port's line rate where the port is known. Every output carries the run's environment (UCX
// release and variables, RDMA ports, CPU, kernel, Go, velobench), so two runs can be compared.
//
// Why it exists beside the make bench-* targets: those print regression tables for this project,
// on one host, from a checkout. An operator has a binary and two nodes. docs/velobench.md has a
// worked example, the two-node steps and how to read the figures against line rate.
//
// Exit codes: 0 the sweep finished; 1 it failed (the points measured so far are written); 2 the
// command line is wrong; 130 interrupted (SIGINT or SIGTERM; the points so far are written).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/velo-go/velo/ucx"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const usage = `usage: velobench COMMAND [flags]

  target      the owner side of a two-node run: stages what the initiator reads
  initiator   the measuring side: finds the target, sweeps, writes the results
  local       both sides on this host, in two processes
  compare     velobench compare A.json B.json: B over A per point
  version     print velobench's version and the UCX it links

The initiator and the target meet through --dir DIR (a directory both see) or --etcd URL.
velobench COMMAND -h lists a command's flags; docs/velobench.md explains the output.
`

// Main runs one command and returns the exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "target":
		err = runTarget(ctx, args[1:], stdout, stderr)
	case "initiator":
		err = runInitiator(ctx, args[1:], stdout, stderr)
	case "local":
		err = runLocal(ctx, args[1:], stdout, stderr)
	case "compare":
		err = runCompare(args[1:], stdout, stderr)
	case "version", "--version", "-version":
		fmt.Fprintf(stdout, "velobench %s (schema %s, protocol %d), %s, %s\n", velobenchVersion(), schemaVersion, protocol, linkedUCX(), runtime.Version())
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "velobench: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	switch {
	case err == nil || errors.Is(err, errHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "velobench %s: %v\n", args[0], err)
		return 2
	case errors.Is(err, errInterrupted) || ctx.Err() != nil:
		fmt.Fprintf(stderr, "velobench %s: %v\n", args[0], err)
		return 130
	default:
		fmt.Fprintf(stderr, "velobench %s: %v\n", args[0], err)
		return 1
	}
}

// linkedUCX names the UCX this binary links, and whether it is velo's guarded static build.
func linkedUCX() string {
	g, err := ucx.SoftwareRMAGuard()
	if err != nil {
		return "UCX: " + err.Error()
	}
	if g.Enforced {
		return fmt.Sprintf("UCX %s (velo's static build, %s)", g.UCX, g.Version)
	}
	return fmt.Sprintf("UCX %s (without velo's guard: VELO_UCX_TRUST_NETWORK=1 needed)", ucx.Version().String)
}
