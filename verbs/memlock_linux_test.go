//go:build linux

package verbs

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestReadMemlockLive compares the probe with the kernel's own answers through other calls.
func TestReadMemlockLive(t *testing.T) {
	m, err := ReadMemlock()
	if err != nil {
		t.Fatal(err)
	}
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim); err != nil {
		t.Fatal(err)
	}
	if m.Soft != rlim(lim.Cur) || m.Hard != rlim(lim.Max) {
		t.Errorf("ReadMemlock limits %d/%d, getrlimit %d/%d", m.Soft, m.Hard, lim.Cur, lim.Max)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		t.Fatal(err)
	}
	if has := data[0].Effective&(1<<capIPCLock) != 0; has != m.CapIPCLock {
		t.Errorf("ReadMemlock CapIPCLock %v, capget says %v", m.CapIPCLock, has)
	}
	if _, err := os.Stat("/proc/self/ns/user"); err == nil {
		t.Logf("memlock: soft %s hard %s CAP_IPC_LOCK %v init userns %v locked %s pinned %s",
			FormatBytes(m.Soft), FormatBytes(m.Hard), m.CapIPCLock, m.InitUserNS, FormatBytes(m.Locked), FormatBytes(m.Pinned))
	}
	// The live check agrees with the state it reads.
	if err := CheckMemlock(1); err != nil && m.Available() >= pageSize {
		t.Errorf("CheckMemlock(1) = %v with %d bytes available", err, m.Available())
	}
}
