// Command ucxstatic-probe reports what the statically linked UCX of third_party/ucx sees: its
// version, the mark and counters of velo's patch set (velo_ucx_guard_version), the UCT
// components whose constructors ran, the tcp transport resources, a ucp_init over the configured
// transports, and the order of the IB memory-domain implementations.
//
// Build it with `go build -tags ucx_static` after `make ucx-static`. On an RDMA node, run it with
// UCX_LOG_LEVEL=debug and UCX_NET_DEVICES=<port> and look for the "md open by" line: that line
// comes from this binary's own UCX, unlike the system's ucx_info.
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/velo-go/velo/test/ucxstatic"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "ucxstatic-probe:", err)
		os.Exit(1)
	}
}

func run() error {
	comps, err := ucxstatic.Components()
	if err != nil {
		return err
	}
	fmt.Printf("version: %s\n", ucxstatic.Version())
	if g := ucxstatic.GuardVersion(); g != "" {
		fmt.Printf("guard: %s counters %v\n", g, ucxstatic.GuardCounters())
	} else {
		fmt.Printf("guard: none (this UCX was built without velo's patch set)\n")
	}
	fmt.Printf("components: %s\n", strings.Join(comps, " "))
	tcp, err := ucxstatic.TransportResources("tcp")
	if err != nil {
		return err
	}
	fmt.Printf("tcp resources: %s\n", strings.Join(tcp, " "))
	rep, err := ucxstatic.InitTCP()
	if err != nil {
		return err
	}
	fmt.Printf("ucp_init: ok tls=%s worker-address=%dB\n", rep.TLS, rep.WorkerAddressBytes)
	ops, err := ucxstatic.IBMDOpsOrder()
	if err != nil {
		return err
	}
	names := make([]string, len(ops))
	for i, o := range ops {
		names[i] = o.Name
	}
	fmt.Printf("ib md ops: %s\n", strings.Join(names, " "))
	return nil
}
