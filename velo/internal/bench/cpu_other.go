//go:build !unix

package main

// cpuNow has no CPU source outside unix: the CPU table then shows zeros; the heap figures remain.
func cpuNow() cpuUse { return cpuUse{GCs: gcCycles(), Alloc: allocBytes()} }
