package main

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// parseSize reads a byte count for --need-memlock: a whole number with an optional unit. K, M, G
// and T (also written KiB, MiB, GiB, TiB, KB, MB, GB, TB; any case) are powers of 1024, as ulimit
// and UCX count memory.
func parseSize(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("--need-memlock %q: want a byte count such as 1073741824, 1536M or 2G", s)
	}
	shift := map[string]uint{"": 0, "b": 0, "k": 10, "kb": 10, "kib": 10, "m": 20, "mb": 20, "mib": 20, "g": 30, "gb": 30, "gib": 30, "t": 40, "tb": 40, "tib": 40}
	sh, ok := shift[unit]
	if !ok {
		return 0, fmt.Errorf("--need-memlock %q: unknown unit %q (use K, M, G or T)", s, t[i:])
	}
	if n == 0 {
		return 0, fmt.Errorf("--need-memlock %q: the need must be more than zero", s)
	}
	if sh > 0 && bits.LeadingZeros64(n) < int(sh) {
		return 0, fmt.Errorf("--need-memlock %q: too large", s)
	}
	return n << sh, nil
}
