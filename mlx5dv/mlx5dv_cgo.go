//go:build linux && cgo

package mlx5dv

/*
#cgo LDFLAGS: -lmlx5 -libverbs
#include <stdlib.h>
#include <infiniband/verbs.h>
#include <infiniband/mlx5dv.h>
*/
import "C"

import (
	"errors"
	"fmt"
	"syscall"
	"unsafe"

	"github.com/velo-go/velo/verbs"
	"github.com/velo-go/velo/verbs/ibv"
)

// requestedMask is every optional part of struct mlx5dv_context that Caps carries.
const requestedMask = MaskCQECompression | MaskSWParsing | MaskStridingRQ | MaskTunnelOffloads | MaskDynamicBFRegs |
	MaskClockInfoUpdate | MaskFlowActionFlags | MaskDCODPCaps | MaskNumLAGPorts

// withDevice runs fn on the device called name, found by verbs/ibv (ibv.WithDevice). When the
// device is not listed, its error says whether libibverbs has no devices at all or lacks this
// one; a device sysfs shows as mlx5 that libibverbs does not list means the mlx5 provider is
// missing, which is a DEVXError naming rdma-core.
func withDevice(op, name string, fn func(d *C.struct_ibv_device) error) error {
	if name == "" {
		return fmt.Errorf("mlx5dv: %s: %w: empty device name (want e.g. mlx5_0)", op, verbs.ErrInvalid)
	}
	found := false
	err := ibv.WithDevice(op, name, func(dev unsafe.Pointer) error {
		found = true
		return fn((*C.struct_ibv_device)(dev))
	})
	if found || err == nil {
		return err
	}
	if errors.Is(err, verbs.ErrNoDevice) {
		if mlx, serr := IsMLX5(verbs.Paths{}, name); serr == nil && mlx {
			return &DEVXError{Device: name, Missing: ComponentRDMACore, Detail: "sysfs shows the device but libibverbs does not list it: libmlx5, the provider from rdma-core's ibverbs-providers, is missing or too old"}
		}
	}
	return fmt.Errorf("mlx5dv: %s on %s: %w", op, name, err)
}

// Supported asks libmlx5 whether it drives the device (mlx5dv_is_supported): nil when it does, an
// error wrapping verbs.ErrNotSupported when the device is not mlx5, any other error when it could
// not tell.
func Supported(name string) error {
	return withDevice("mlx5dv_is_supported", name, func(d *C.struct_ibv_device) error {
		if !bool(C.mlx5dv_is_supported(d)) {
			return fmt.Errorf("mlx5dv: %w: %s is not an mlx5 device (mlx5dv_is_supported is false)", verbs.ErrNotSupported, name)
		}
		return nil
	})
}

// ProbeDEVX opens a DEVX context on the device and closes it again (mlx5dv_open_device with
// MLX5DV_CONTEXT_FLAGS_DEVX). It returns nil when DEVX works; a *DEVXError wrapping
// verbs.ErrNotSupported that names the missing part (firmware, kernel, rdma-core, or not an
// mlx5 device) when it does not; and any other error when the probe could not tell.
func ProbeDEVX(name string) error {
	return withDevice("mlx5dv_open_device", name, func(d *C.struct_ibv_device) error {
		if !bool(C.mlx5dv_is_supported(d)) {
			return &DEVXError{Device: name, Missing: ComponentNotMLX5, Detail: "DEVX exists only on mlx5 devices (ConnectX-4 and later, BlueField)"}
		}
		attr := (*C.struct_mlx5dv_context_attr)(C.calloc(1, C.sizeof_struct_mlx5dv_context_attr))
		if attr == nil {
			return fmt.Errorf("mlx5dv: out of memory")
		}
		defer C.free(unsafe.Pointer(attr))
		attr.flags = C.MLX5DV_CONTEXT_FLAGS_DEVX
		ctx, err := C.mlx5dv_open_device(d, attr)
		if ctx == nil {
			var en syscall.Errno
			if !errors.As(err, &en) {
				en = syscall.EIO
			}
			fw := ""
			if dev, err := verbs.LookupDevice(verbs.Paths{}, name); err == nil {
				fw = dev.FirmwareVersion
			}
			return devxError(name, en, fw)
		}
		C.ibv_close_device(ctx)
		return nil
	})
}

// QueryDevice returns the device's mlx5-specific capabilities (ibv_open_device, then
// mlx5dv_query_device). A device that is not mlx5 yields an error wrapping verbs.ErrNotSupported.
func QueryDevice(name string) (Caps, error) {
	var caps Caps
	err := withDevice("mlx5dv_query_device", name, func(d *C.struct_ibv_device) error {
		if !bool(C.mlx5dv_is_supported(d)) {
			return fmt.Errorf("mlx5dv: %w: %s is not an mlx5 device", verbs.ErrNotSupported, name)
		}
		ctx, err := C.ibv_open_device(d)
		if ctx == nil {
			return fmt.Errorf("mlx5dv: %w", ibv.ErrnoError("ibv_open_device", name, err))
		}
		defer C.ibv_close_device(ctx)
		// C memory: the provider may store pointers (the core clock page) into this struct.
		dv := (*C.struct_mlx5dv_context)(C.calloc(1, C.sizeof_struct_mlx5dv_context))
		if dv == nil {
			return fmt.Errorf("mlx5dv: out of memory")
		}
		defer C.free(unsafe.Pointer(dv))
		dv.comp_mask = C.uint64_t(requestedMask)
		if rc := C.mlx5dv_query_device(ctx, dv); rc != 0 {
			return fmt.Errorf("mlx5dv: mlx5dv_query_device on %s: %w", name, syscall.Errno(rc))
		}
		caps = Caps{
			Version:                 uint8(dv.version),
			Flags:                   ContextFlags(dv.flags),
			CompMask:                uint64(dv.comp_mask),
			CQECompMaxNum:           uint32(dv.cqe_comp_caps.max_num),
			CQECompSupportedFormats: uint32(dv.cqe_comp_caps.supported_format),
			SWParsingOffloads:       uint32(dv.sw_parsing_caps.sw_parsing_offloads),
			SWParsingQPTs:           uint32(dv.sw_parsing_caps.supported_qpts),
			StridingRQ: StridingRQCaps{
				MinLogStrideBytes: uint32(dv.striding_rq_caps.min_single_stride_log_num_of_bytes),
				MaxLogStrideBytes: uint32(dv.striding_rq_caps.max_single_stride_log_num_of_bytes),
				MinLogNumStrides:  uint32(dv.striding_rq_caps.min_single_wqe_log_num_of_strides),
				MaxLogNumStrides:  uint32(dv.striding_rq_caps.max_single_wqe_log_num_of_strides),
				SupportedQPTs:     uint32(dv.striding_rq_caps.supported_qpts),
			},
			TunnelOffloads:         uint32(dv.tunnel_offloads_caps),
			MaxDynamicBFRegs:       uint32(dv.max_dynamic_bfregs),
			MaxClockInfoUpdateNsec: uint64(dv.max_clock_info_update_nsec),
			FlowActionFlags:        uint32(dv.flow_action_flags),
			DCODPCaps:              uint32(dv.dc_odp_caps),
			NumLAGPorts:            uint8(dv.num_lag_ports),
		}
		return nil
	})
	return caps, err
}

// cConstants returns the C values this package mirrors, for a test (test files cannot use cgo).
func cConstants() map[string]uint64 {
	return map[string]uint64{
		"CQE_V1":                   C.MLX5DV_CONTEXT_FLAGS_CQE_V1,
		"MPW_ALLOWED":              C.MLX5DV_CONTEXT_FLAGS_MPW_ALLOWED,
		"ENHANCED_MPW":             C.MLX5DV_CONTEXT_FLAGS_ENHANCED_MPW,
		"CQE_128B_COMP":            C.MLX5DV_CONTEXT_FLAGS_CQE_128B_COMP,
		"CQE_128B_PAD":             C.MLX5DV_CONTEXT_FLAGS_CQE_128B_PAD,
		"PACKET_BASED_CREDIT_MODE": C.MLX5DV_CONTEXT_FLAGS_PACKET_BASED_CREDIT_MODE,
		"REAL_TIME_TS":             C.MLX5DV_CONTEXT_FLAGS_REAL_TIME_TS,
		"MASK_CQE_COMPRESION":      C.MLX5DV_CONTEXT_MASK_CQE_COMPRESION,
		"MASK_SWP":                 C.MLX5DV_CONTEXT_MASK_SWP,
		"MASK_STRIDING_RQ":         C.MLX5DV_CONTEXT_MASK_STRIDING_RQ,
		"MASK_TUNNEL_OFFLOADS":     C.MLX5DV_CONTEXT_MASK_TUNNEL_OFFLOADS,
		"MASK_DYN_BFREGS":          C.MLX5DV_CONTEXT_MASK_DYN_BFREGS,
		"MASK_CLOCK_INFO_UPDATE":   C.MLX5DV_CONTEXT_MASK_CLOCK_INFO_UPDATE,
		"MASK_FLOW_ACTION_FLAGS":   C.MLX5DV_CONTEXT_MASK_FLOW_ACTION_FLAGS,
		"MASK_DC_ODP_CAPS":         C.MLX5DV_CONTEXT_MASK_DC_ODP_CAPS,
		"MASK_NUM_LAG_PORTS":       C.MLX5DV_CONTEXT_MASK_NUM_LAG_PORTS,
		"FLAGS_DEVX":               C.MLX5DV_CONTEXT_FLAGS_DEVX,
	}
}
