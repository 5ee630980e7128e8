//go:build linux && cgo

package ibv

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/velo-go/velo/verbs"
)

// skipWithDevices skips the "no device" expectations on a machine that has RDMA devices.
func skipWithDevices(t *testing.T) {
	t.Helper()
	if os.Getenv("VELO_TEST_RDMA_DEVICE") != "" {
		t.Skip("VELO_TEST_RDMA_DEVICE is set: this machine has a device, the no-device behaviour cannot be observed")
	}
	if devs, err := verbs.Devices(verbs.Paths{}); err == nil && len(devs) > 0 {
		t.Skip("this machine has RDMA devices")
	}
}

// On this machine (no RDMA hardware, no kernel RDMA) every call must fail cleanly.
func TestNoDeviceDevices(t *testing.T) {
	skipWithDevices(t)
	devs, err := Devices()
	if len(devs) != 0 || !errors.Is(err, verbs.ErrNoDevice) || !errors.Is(err, verbs.ErrNotSupported) {
		t.Fatalf("Devices() = %v, %v; want none and ErrNoDevice", devs, err)
	}
	var e *Error
	if !errors.As(err, &e) || e.Op != "ibv_get_device_list" {
		t.Fatalf("error %v is not an *Error from ibv_get_device_list", err)
	}
	if !strings.Contains(err.Error(), "ib_uverbs") && !strings.Contains(err.Error(), "no RDMA devices") {
		t.Errorf("error does not say what is missing: %v", err)
	}
	t.Logf("Devices(): %v", err)
}

func TestNoDeviceOpen(t *testing.T) {
	skipWithDevices(t)
	c, err := Open("mlx5_0")
	if c != nil || !errors.Is(err, verbs.ErrNoDevice) {
		t.Fatalf("Open(mlx5_0) = %v, %v; want ErrNoDevice", c, err)
	}
	if _, err := Open(""); !errors.Is(err, verbs.ErrInvalid) {
		t.Errorf("Open(\"\") = %v, want ErrInvalid", err)
	}
}

// TestNilAndReleasedObjects: methods on nil objects return ErrClosed instead of crashing.
func TestNilAndReleasedObjects(t *testing.T) {
	var c *Context
	var pd *PD
	var mr *MR
	calls := map[string]error{
		"Close":            c.Close(),
		"QueryDevice":      second(c.QueryDevice()),
		"QueryPort":        second(c.QueryPort(1)),
		"QueryPKey":        second(c.QueryPKey(1, 0)),
		"QueryGID":         second(c.QueryGID(1, 0)),
		"QueryGIDEx":       second(c.QueryGIDEx(1, 0)),
		"AllocPD":          second(c.AllocPD()),
		"Dealloc":          pd.Dealloc(),
		"RegMR":            second(pd.RegMR(make([]byte, 4096), AccessLocalWrite)),
		"Dereg":            mr.Dereg(),
		"closed Close":     (&Context{}).Close(),
		"closed QueryPort": second((&Context{name: "mlx5_0"}).QueryPort(1)),
		"released Dealloc": (&PD{}).Dealloc(),
		"released Dereg":   (&MR{}).Dereg(),
	}
	for name, err := range calls {
		if !errors.Is(err, verbs.ErrClosed) {
			t.Errorf("%s on a nil/released object: %v, want ErrClosed", name, err)
		}
	}
	if c.Name() != "" || mr.LKey() != 0 || mr.RKey() != 0 || mr.Addr() != 0 || mr.Len() != 0 || mr.Access() != 0 {
		t.Error("getters on nil objects are not zero")
	}
}

func second[T any](_ T, err error) error { return err }

func TestConstantsMatchVerbsH(t *testing.T) {
	c := cConstants()
	want := map[string]uint64{
		"LOCAL_WRITE": uint64(AccessLocalWrite), "REMOTE_WRITE": uint64(AccessRemoteWrite), "REMOTE_READ": uint64(AccessRemoteRead),
		"REMOTE_ATOMIC": uint64(AccessRemoteAtomic), "MW_BIND": uint64(AccessMWBind), "ZERO_BASED": uint64(AccessZeroBased),
		"ON_DEMAND": uint64(AccessOnDemand), "HUGETLB": uint64(AccessHugeTLB), "RELAXED_ORDERING": uint64(AccessRelaxedOrdering),
		"PORT_ACTIVE": uint64(verbs.PortActive), "PORT_DOWN": uint64(verbs.PortDown),
		"LINK_LAYER_IB": uint64(verbs.LinkLayerInfiniBand), "LINK_LAYER_ETH": uint64(verbs.LinkLayerEthernet),
		"GID_TYPE_IB": uint64(verbs.GIDTypeIB), "GID_TYPE_ROCE_V1": uint64(verbs.GIDTypeRoCEv1), "GID_TYPE_ROCE_V2": uint64(verbs.GIDTypeRoCEv2),
		"NODE_CA": uint64(verbs.NodeCA), "NODE_RNIC": uint64(verbs.NodeRNIC), "MTU_4096": 5,
	}
	for k, v := range want {
		if c[k] != v {
			t.Errorf("%s: Go %d, verbs.h %d", k, v, c[k])
		}
	}
	if len(c) != len(want) {
		t.Errorf("cConstants has %d entries, the test checks %d", len(c), len(want))
	}
}
