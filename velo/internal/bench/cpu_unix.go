//go:build unix

package main

import "syscall"

// cpuNow reads this process's CPU use from getrusage(2): every thread, user and system time.
func cpuNow() cpuUse {
	var ru syscall.Rusage
	check(syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	micros := func(tv syscall.Timeval) float64 { return float64(tv.Sec)*1e6 + float64(tv.Usec) }
	return cpuUse{CPUMicros: micros(ru.Utime) + micros(ru.Stime), Switches: float64(ru.Nvcsw + ru.Nivcsw),
		Faults: float64(ru.Minflt + ru.Majflt), GCs: gcCycles(), Alloc: allocBytes()}
}
