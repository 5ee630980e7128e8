// Package procstat reads what a process costs from /proc (Linux): its CPU time, its resident
// memory and its open descriptors, for the scale benchmarks, which watch other processes (a real
// etcd, velo instances) from outside rather than trusting their own accounts.
package procstat

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, what /proc counts CPU time in: 100 on Linux.
const clockTicks = 100

// CPU is process pid's user and system CPU so far (/proc/<pid>/stat); 0 when it cannot be read.
func CPU(pid int) time.Duration {
	f := stat(pid)
	if len(f) < 15 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[13], 10, 64)
	st, _ := strconv.ParseInt(f[14], 10, 64)
	return time.Duration((ut + st) * int64(time.Second) / clockTicks)
}

// RSS is process pid's resident set in bytes (VmRSS of /proc/<pid>/status, which counts the
// pages mapped now, locked arenas included); 0 when it cannot be read.
func RSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// FDs is the number of descriptors process pid holds open (/proc/<pid>/fd); -1 when it cannot
// be read.
func FDs(pid int) int {
	es, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return -1
	}
	return len(es)
}

// stat is the fields of /proc/<pid>/stat, numbered from 0 as proc(5) numbers them from 1.
func stat(pid int) []string {
	if pid == 0 {
		return nil
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	// The command name is in parentheses and may hold spaces; the fields after it are plain.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil
	}
	return append([]string{"pid", "comm"}, strings.Fields(string(b[i+1:]))...)
}

// Sizes reads a comma-separated list of positive numbers from the environment variable name,
// or returns def when it is unset.
func Sizes(name string, def []int) ([]int, error) {
	s := os.Getenv(name)
	if s == "" {
		return def, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%s=%q: want a comma-separated list of positive numbers", name, s)
		}
		out = append(out, n)
	}
	return out, nil
}
