//go:build linux

package rdmacm

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// inNetns runs fn on an OS thread that has entered the network namespace at path. The thread is
// retired afterwards unless it could be moved back, so no other goroutine ever runs in it.
func inNetns(t *testing.T, path string, fn func()) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		defer unix.Close(orig)
		target, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		defer unix.Close(target)
		if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns: %w", err)
			return
		}
		fn()
		if unix.Setns(orig, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- nil
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %v: %v\n%s", args, err, out)
	}
}

// TestResolveInANetworkNamespace gives an interface the name and address of the IPoIB netdev of
// the cx7-ib-active fixture inside a fresh network namespace, reads the interfaces there for
// real, and resolves the address against the fixture's sysfs.
func TestResolveInANetworkNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a network namespace")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs the ip command (iproute2)")
	}
	ns := fmt.Sprintf("velo-rdmacm-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Skipf("cannot create a network namespace here: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	ipCmd(t, "-n", ns, "link", "add", "ibp23s0", "type", "veth", "peer", "name", "velo-peer0")
	ipCmd(t, "-n", ns, "addr", "add", "192.168.50.11/24", "dev", "ibp23s0")

	var ifcs []Interface
	var listErr error
	inNetns(t, "/run/netns/"+ns, func() { ifcs, listErr = SystemInterfaces() })
	if listErr != nil {
		t.Fatal(listErr)
	}
	ip := netip.MustParseAddr("192.168.50.11")
	if ifc, ok := holder(ifcs, ip); !ok || ifc.Name != "ibp23s0" {
		t.Fatalf("the namespace's interfaces do not show 192.168.50.11 on ibp23s0: %+v", ifcs)
	}
	opts := fixture("cx7-ib-active")
	opts.Interfaces = func() ([]Interface, error) { return ifcs, nil }
	loc, err := Resolve(ip, opts)
	if err != nil || loc.Spec() != "mlx5_0:1" || loc.Netdev != "ibp23s0" {
		t.Fatalf("Resolve in the namespace = %+v, %v", loc, err)
	}
	// The same address is unknown outside the namespace.
	host, err := SystemInterfaces()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := holder(host, ip); ok {
		t.Error("192.168.50.11 leaked out of the namespace")
	}
}
