//go:build linux

package verbs

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// ReadMemlock returns the memlock limits and the capability state of this process.
func ReadMemlock() (Memlock, error) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim); err != nil {
		return Memlock{}, fmt.Errorf("verbs: getrlimit(RLIMIT_MEMLOCK): %w", err)
	}
	m := Memlock{Soft: rlim(lim.Cur), Hard: rlim(lim.Max)}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return Memlock{}, fmt.Errorf("verbs: reading capabilities: %w", err)
	}
	st, err := parseProcStatus(string(status))
	if err != nil {
		return Memlock{}, fmt.Errorf("verbs: /proc/self/status: %w", err)
	}
	m.CapIPCLock = st.capEff&(1<<capIPCLock) != 0
	m.Locked, m.Pinned = st.vmLck, st.vmPin
	uidMap, err := os.ReadFile("/proc/self/uid_map")
	if err != nil {
		return Memlock{}, fmt.Errorf("verbs: reading user namespace: %w", err)
	}
	if m.InitUserNS, err = parseUIDMap(string(uidMap)); err != nil {
		return Memlock{}, fmt.Errorf("verbs: /proc/self/uid_map: %w", err)
	}
	return m, nil
}

func rlim(v uint64) uint64 {
	if v == unix.RLIM_INFINITY {
		return Unlimited
	}
	return v
}

// CheckMemlock says whether this process can pin need more bytes: nil when it can; an error
// wrapping ErrMemlock (and so ErrNotSupported) that names the limit, the need and the fix when it
// cannot; any other error when the limits could not be read.
func CheckMemlock(need uint64) error {
	m, err := ReadMemlock()
	if err != nil {
		return err
	}
	return m.Check(need)
}

// RaiseMemlock lifts the soft RLIMIT_MEMLOCK to the hard limit, which any process may do, and
// returns the state afterwards. Raising the hard limit itself needs CAP_SYS_RESOURCE and is left
// to the operator (ulimit -l, systemd LimitMEMLOCK).
func RaiseMemlock() (Memlock, error) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim); err != nil {
		return Memlock{}, fmt.Errorf("verbs: getrlimit(RLIMIT_MEMLOCK): %w", err)
	}
	if lim.Cur != lim.Max {
		lim.Cur = lim.Max
		if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &lim); err != nil {
			return Memlock{}, fmt.Errorf("verbs: setrlimit(RLIMIT_MEMLOCK) to the hard limit %s: %w", FormatBytes(rlim(lim.Max)), err)
		}
	}
	return ReadMemlock()
}
