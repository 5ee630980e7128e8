package main

import (
	"fmt"
	"os"
	"runtime/pprof"
	"runtime/trace"
)

// profileEnv carries -profile to the echo process, so that both sides of the latency
// benchmark write a CPU profile and an execution trace.
const profileEnv = "UCX_BENCH_RMA_PROFILE"

// profilePrefix is -profile: when set, each process writes <prefix>.<role>.cpu.pprof and
// <prefix>.<role>.trace. `go tool pprof -top` reads the first; `go tool trace -pprof=sched`
// turns the second into the time goroutines waited to run (docs/ucx.md, "Where a round trip
// went").
var profilePrefix string

// startProfile starts both profiles for role and returns the function that ends them.
func startProfile(role string) (func(), error) {
	if profilePrefix == "" {
		return func() {}, nil
	}
	cpu, err := os.Create(fmt.Sprintf("%s.%s.cpu.pprof", profilePrefix, role))
	if err != nil {
		return nil, err
	}
	tr, err := os.Create(fmt.Sprintf("%s.%s.trace", profilePrefix, role))
	if err != nil {
		cpu.Close()
		return nil, err
	}
	if err := pprof.StartCPUProfile(cpu); err != nil {
		cpu.Close()
		tr.Close()
		return nil, err
	}
	if err := trace.Start(tr); err != nil {
		pprof.StopCPUProfile()
		cpu.Close()
		tr.Close()
		return nil, err
	}
	return func() {
		trace.Stop()
		pprof.StopCPUProfile()
		tr.Close()
		cpu.Close()
	}, nil
}
