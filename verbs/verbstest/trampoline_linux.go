//go:build linux

package verbstest

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// init runs before any other package initialisation of the importing program has a chance to
// start goroutines that matter, and only acts when the program was started by Command.
func init() {
	if len(os.Args) != 3 || os.Args[1] != marker {
		return
	}
	if err := trampoline(os.Args[2]); err != nil {
		fmt.Fprintf(os.Stderr, "verbstest: %v\n", err)
		os.Exit(127)
	}
}

// trampoline applies the spec to this thread and execs the target. Capabilities are per thread
// and execve takes the calling thread's, so everything happens on one locked thread.
func trampoline(encoded string) error {
	raw, err := base64.StdEncoding.DecodeString(encoded)
	if err != nil {
		return fmt.Errorf("decoding the child spec: %w", err)
	}
	var s spec
	if err := json.Unmarshal(raw, &s); err != nil {
		return fmt.Errorf("decoding the child spec: %w", err)
	}
	runtime.LockOSThread()
	if s.MemlockSoft != 0 || s.MemlockHard != 0 {
		lim := unix.Rlimit{Cur: s.MemlockSoft, Max: s.MemlockHard}
		if err := unix.Setrlimit(unix.RLIMIT_MEMLOCK, &lim); err != nil {
			return fmt.Errorf("setrlimit(RLIMIT_MEMLOCK, soft %d, hard %d): %w (raising the hard limit needs CAP_SYS_RESOURCE)", s.MemlockSoft, s.MemlockHard, err)
		}
	}
	if err := dropCapabilities(s.Drop); err != nil {
		return err
	}
	return unix.Exec(s.Path, s.Args, os.Environ())
}

func dropCapabilities(caps []int) error {
	if len(caps) == 0 {
		return nil
	}
	root := unix.Geteuid() == 0
	for _, c := range caps {
		// The bounding set limits what execve can grant; root gets its whole bounding set back at
		// exec, so a capability dropped only from the effective set would return.
		err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0)
		if err != nil && !(errors.Is(err, unix.EINVAL) || (errors.Is(err, unix.EPERM) && !root)) {
			return fmt.Errorf("dropping capability %d from the bounding set: %w (root needs CAP_SETPCAP for that)", c, err)
		}
	}
	// Ambient capabilities survive execve for non-root programs; clear them all.
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("clearing ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	for _, c := range caps {
		bit := uint32(1) << (uint(c) % 32)
		d := &data[c/32]
		d.Effective &^= bit
		d.Permitted &^= bit
		d.Inheritable &^= bit
	}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}
