//go:build linux && cgo

package rdmacm

import (
	"errors"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/velo-go/velo/verbs"
)

// On a machine without /dev/infiniband/rdma_cm the librdmacm path must say what is missing and
// stay inconclusive, so Resolve falls back to sysfs.
func TestLibrdmacmWithoutDevice(t *testing.T) {
	if _, err := os.Stat(rdmaCMDevice); err == nil {
		t.Skipf("%s exists on this machine", rdmaCMDevice)
	}
	_, err := ResolveLibrdmacm(netip.MustParseAddr("127.0.0.1"))
	if err == nil || errors.Is(err, verbs.ErrNotSupported) || !strings.Contains(err.Error(), "rdma_ucm") || !strings.Contains(err.Error(), rdmaCMDevice) {
		t.Errorf("ResolveLibrdmacm without %s: %v", rdmaCMDevice, err)
	}
}

// TestCreateEventChannelWithoutDevices calls rdma_create_event_channel for real on a machine
// without RDMA devices: a clean error, no crash.
func TestCreateEventChannelWithoutDevices(t *testing.T) {
	if os.Getenv("VELO_TEST_RDMA_DEVICE") != "" {
		t.Skip("VELO_TEST_RDMA_DEVICE is set: this machine has a device")
	}
	if devs, err := verbs.Devices(verbs.Paths{}); err == nil && len(devs) > 0 {
		t.Skip("this machine has RDMA devices")
	}
	ch, err := createEventChannel()
	if ch != nil || err == nil {
		t.Fatalf("rdma_create_event_channel succeeded without devices")
	}
	if !errors.Is(err, verbs.ErrNoDevice) && !strings.Contains(err.Error(), rdmaCMDevice) {
		t.Errorf("error does not say what is missing: %v", err)
	}
	t.Logf("rdma_create_event_channel: %v", err)
}

// Hardware: VELO_TEST_RDMA_IP names an address on the port VELO_TEST_RDMA_DEVICE names; librdmacm
// and the sysfs fallback must both find that port.
func TestHardwareResolve(t *testing.T) {
	spec, ipText := os.Getenv("VELO_TEST_RDMA_DEVICE"), os.Getenv("VELO_TEST_RDMA_IP")
	if spec == "" || ipText == "" {
		t.Skip("hardware test: set VELO_TEST_RDMA_DEVICE=<device>:<port> and VELO_TEST_RDMA_IP=<an address on that port's netdev> to run it")
	}
	ip, err := netip.ParseAddr(ipText)
	if err != nil {
		t.Fatal(err)
	}
	cm, err := ResolveLibrdmacm(ip)
	if err != nil {
		t.Fatal(err)
	}
	sys, err := ResolveSysfs(ip, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if cm.Spec() != spec || sys.Spec() != spec {
		t.Errorf("librdmacm says %s, sysfs %s, expected %s", cm.Spec(), sys.Spec(), spec)
	}
	full, err := Resolve(ip, Options{})
	if err != nil || full.Source != SourceLibrdmacm || full.Spec() != spec {
		t.Errorf("Resolve = %+v, %v", full, err)
	}
}
