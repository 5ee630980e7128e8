//go:build linux && cgo

package mlx5dv

import (
	"errors"
	"os"
	"testing"

	"github.com/velo-go/velo/verbs"
)

func noDeviceHere(t *testing.T) {
	t.Helper()
	if os.Getenv("VELO_TEST_RDMA_DEVICE") != "" {
		t.Skip("VELO_TEST_RDMA_DEVICE is set: the no-device behaviour cannot be observed on this machine")
	}
	if devs, err := verbs.Devices(verbs.Paths{}); err == nil && len(devs) > 0 {
		t.Skip("this machine has RDMA devices")
	}
}

// Without RDMA devices every call fails cleanly with verbs.ErrNoDevice.
func TestNoDevice(t *testing.T) {
	noDeviceHere(t)
	for name, err := range map[string]error{
		"Supported":   Supported("mlx5_0"),
		"ProbeDEVX":   ProbeDEVX("mlx5_0"),
		"QueryDevice": second(QueryDevice("mlx5_0")),
	} {
		if !errors.Is(err, verbs.ErrNoDevice) {
			t.Errorf("%s(mlx5_0) = %v, want ErrNoDevice", name, err)
		}
		t.Logf("%s: %v", name, err)
	}
	for name, err := range map[string]error{"Supported": Supported(""), "ProbeDEVX": ProbeDEVX(""), "QueryDevice": second(QueryDevice(""))} {
		if !errors.Is(err, verbs.ErrInvalid) {
			t.Errorf("%s(\"\") = %v, want ErrInvalid", name, err)
		}
	}
}

func second[T any](_ T, err error) error { return err }

func TestConstantsMatchMlx5dvH(t *testing.T) {
	c := cConstants()
	want := map[string]uint64{
		"CQE_V1": uint64(FlagCQEv1), "MPW_ALLOWED": uint64(FlagMPWAllowed), "ENHANCED_MPW": uint64(FlagEnhancedMPW),
		"CQE_128B_COMP": uint64(FlagCQE128BComp), "CQE_128B_PAD": uint64(FlagCQE128BPad),
		"PACKET_BASED_CREDIT_MODE": uint64(FlagPacketBasedCreditMode), "REAL_TIME_TS": uint64(FlagRealTimeTS),
		"MASK_CQE_COMPRESION": MaskCQECompression, "MASK_SWP": MaskSWParsing, "MASK_STRIDING_RQ": MaskStridingRQ,
		"MASK_TUNNEL_OFFLOADS": MaskTunnelOffloads, "MASK_DYN_BFREGS": MaskDynamicBFRegs, "MASK_CLOCK_INFO_UPDATE": MaskClockInfoUpdate,
		"MASK_FLOW_ACTION_FLAGS": MaskFlowActionFlags, "MASK_DC_ODP_CAPS": MaskDCODPCaps, "MASK_NUM_LAG_PORTS": MaskNumLAGPorts,
		"FLAGS_DEVX": 1,
	}
	for k, v := range want {
		if c[k] != v {
			t.Errorf("%s: Go %#x, mlx5dv.h %#x", k, v, c[k])
		}
	}
	if len(c) != len(want) {
		t.Errorf("cConstants has %d entries, the test checks %d", len(c), len(want))
	}
}

// Hardware: VELO_TEST_RDMA_DEVICE=mlx5_0:1 (or any device:port).
func TestHardware(t *testing.T) {
	spec := os.Getenv("VELO_TEST_RDMA_DEVICE")
	if spec == "" {
		t.Skip("hardware test: set VELO_TEST_RDMA_DEVICE=<device>:<port> (e.g. mlx5_0:1) on a node with an RDMA adapter to run it")
	}
	name, _, err := verbs.ParsePortSpec(spec)
	if err != nil {
		t.Fatal(err)
	}
	sysMLX5, err := IsMLX5(verbs.Paths{}, name)
	if err != nil {
		t.Fatal(err)
	}
	err = Supported(name)
	if sysMLX5 != (err == nil) {
		t.Fatalf("sysfs says mlx5=%v, libmlx5 says %v", sysMLX5, err)
	}
	devx := ProbeDEVX(name)
	if !sysMLX5 {
		var de *DEVXError
		if !errors.As(devx, &de) || de.Missing != ComponentNotMLX5 {
			t.Errorf("DEVX on a non-mlx5 device: %v", devx)
		}
		return
	}
	if devx != nil {
		// Not every node has DEVX; what must hold is that the answer names the missing part.
		var de *DEVXError
		if !errors.As(devx, &de) || de.Missing == ComponentUnknown {
			t.Errorf("DEVX failed without naming the missing part: %v", devx)
		}
		t.Logf("DEVX: %v", devx)
	}
	caps, err := QueryDevice(name)
	if err != nil {
		t.Fatal(err)
	}
	if caps.Version == 0 || caps.CompMask&^requestedMask != 0 {
		t.Errorf("caps: version %d comp_mask %#x (asked %#x)", caps.Version, caps.CompMask, requestedMask)
	}
	t.Logf("%s: mlx5dv version %d flags %v comp_mask %#x lag ports %d", name, caps.Version, caps.Flags, caps.CompMask, caps.NumLAGPorts)
}
