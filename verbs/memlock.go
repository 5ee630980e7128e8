package verbs

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
)

// Unlimited is the value of a limit that is RLIM_INFINITY.
const Unlimited = ^uint64(0)

// capIPCLock is CAP_IPC_LOCK's bit in the capability sets (linux/capability.h).
const capIPCLock = 14

// Memlock is what decides whether this process may pin memory for RDMA.
//
// The kernel counts memory pinned by ibv_reg_mr (VmPin) and memory locked by mlock (VmLck)
// separately, each against RLIMIT_MEMLOCK, and waives the limit for a process that holds
// CAP_IPC_LOCK in the initial user namespace.
type Memlock struct {
	Soft uint64 // RLIMIT_MEMLOCK soft limit in bytes, or Unlimited
	Hard uint64 // RLIMIT_MEMLOCK hard limit in bytes, or Unlimited

	// CapIPCLock: CAP_IPC_LOCK is in the process's effective set (/proc/self/status CapEff).
	CapIPCLock bool
	// InitUserNS: the process runs in the initial user namespace, where the capability counts.
	// Inside a user namespace (rootless containers) CapIPCLock is shown but does not lift the
	// limit for RDMA registration.
	InitUserNS bool

	Locked uint64 // bytes locked now (VmLck)
	Pinned uint64 // bytes pinned now, mostly by RDMA registrations (VmPin)
}

// Bypassed reports whether the limit does not apply to this process.
func (m Memlock) Bypassed() bool { return m.CapIPCLock && m.InitUserNS }

// Available returns how many more bytes this process can pin before the soft limit stops it
// (Unlimited when the limit does not apply).
func (m Memlock) Available() uint64 {
	if m.Bypassed() || m.Soft == Unlimited {
		return Unlimited
	}
	used := max(m.Locked, m.Pinned)
	if used >= m.Soft {
		return 0
	}
	return m.Soft - used
}

// pageSize is the granularity the kernel counts locked memory in. The check rounds the need up to
// it; 4 KiB is the smallest page on every Linux platform RDMA runs on, so the rounding never
// makes a fitting request look too big.
const pageSize = 4096

// Check says whether need more bytes can be pinned: nil when they can, and otherwise an error
// wrapping ErrMemlock that states the limit, the need, what is already pinned, and the fix.
func (m Memlock) Check(need uint64) error {
	avail := m.Available()
	if avail == Unlimited {
		return nil
	}
	rounded := (need + pageSize - 1) / pageSize * pageSize
	if need > Unlimited-pageSize {
		rounded = need
	}
	if rounded <= avail {
		return nil
	}
	used := max(m.Locked, m.Pinned)
	var b strings.Builder
	fmt.Fprintf(&b, "pinning %s needs more than RLIMIT_MEMLOCK allows: soft limit %s (hard %s), %s already locked or pinned, %s left",
		FormatBytes(need), FormatBytes(m.Soft), FormatBytes(m.Hard), FormatBytes(used), FormatBytes(avail))
	switch {
	case m.CapIPCLock && !m.InitUserNS:
		b.WriteString("; CAP_IPC_LOCK is held but only inside a user namespace, where it does not lift the limit")
	case !m.CapIPCLock:
		b.WriteString("; the process does not hold CAP_IPC_LOCK")
	}
	if m.Hard > m.Soft && (m.Hard == Unlimited || m.Hard > used && m.Hard-used >= rounded) {
		b.WriteString("; the hard limit allows it: raise the soft limit (verbs.RaiseMemlock, or `ulimit -l " + ulimitArg(m.Hard) + "`)")
	} else {
		b.WriteString("; fix: run `ulimit -l unlimited` as root before starting the process (systemd: LimitMEMLOCK=infinity; /etc/security/limits.conf: memlock unlimited), or in a container grant IPC_LOCK (docker run --cap-add=IPC_LOCK --ulimit memlock=-1, Kubernetes securityContext.capabilities.add: [IPC_LOCK])")
	}
	return fmt.Errorf("%w: %s", ErrMemlock, b.String())
}

func ulimitArg(v uint64) string {
	if v == Unlimited {
		return "unlimited"
	}
	return strconv.FormatUint(v/1024, 10) // ulimit -l counts KiB
}

// FormatBytes prints a byte count with a binary unit ("8 MiB", "1.5 GiB"), or "unlimited".
func FormatBytes(v uint64) string {
	if v == Unlimited {
		return "unlimited"
	}
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	i, f := 0, float64(v)
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%d B", v)
	}
	s := strconv.FormatFloat(f, 'f', 1, 64)
	return strings.TrimSuffix(s, ".0") + " " + units[i]
}

// procStatus is what the memlock probe takes from /proc/self/status.
type procStatus struct {
	capEff uint64
	vmLck  uint64 // bytes
	vmPin  uint64 // bytes
}

// parseProcStatus decodes the fields of /proc/<pid>/status the memlock probe needs (proc(5)):
// "CapEff:\t<16 hex digits>", and "VmLck:" / "VmPin:" as "<n> kB". CapEff must be present; the Vm
// lines are absent for kernel threads and then read as zero.
func parseProcStatus(text string) (procStatus, error) {
	var st procStatus
	haveCap := false
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		val = strings.TrimSpace(val)
		switch key {
		case "CapEff":
			v, err := strconv.ParseUint(val, 16, 64)
			if err != nil {
				return procStatus{}, malformed("CapEff", val)
			}
			st.capEff, haveCap = v, true
		case "VmLck", "VmPin":
			num, unit, _ := strings.Cut(val, " ")
			v, err := strconv.ParseUint(strings.TrimSpace(num), 10, 64)
			if err != nil || strings.TrimSpace(unit) != "kB" || v > Unlimited/1024 {
				return procStatus{}, malformed(key, val)
			}
			if key == "VmLck" {
				st.vmLck = v * 1024
			} else {
				st.vmPin = v * 1024
			}
		}
	}
	if !haveCap {
		return procStatus{}, fmt.Errorf("%w: no CapEff line in /proc/self/status", ErrMalformed)
	}
	return st, nil
}

// parseUIDMap reports whether a /proc/<pid>/uid_map describes the initial user namespace: the
// single identity line "0 0 4294967295" (user_namespaces(7)).
func parseUIDMap(text string) (bool, error) {
	var lines [][]string
	for _, l := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(l)
		if len(f) != 3 {
			return false, malformed("uid_map line", l)
		}
		for _, x := range f {
			if _, err := strconv.ParseUint(x, 10, 32); err != nil {
				return false, malformed("uid_map line", l)
			}
		}
		lines = append(lines, f)
	}
	return len(lines) == 1 && lines[0][0] == "0" && lines[0][1] == "0" && lines[0][2] == "4294967295", nil
}
