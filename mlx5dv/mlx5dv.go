package mlx5dv

import (
	"fmt"
	"strings"
	"syscall"

	"github.com/velo-go/velo/verbs"
)

// IsMLX5 reports whether sysfs shows the device as driven by mlx5: its parent's kernel driver is
// mlx5_core (a device without a parent counts by its name, mlx5_*). It needs no cgo and no access
// to the device. A missing device is an error wrapping verbs.ErrNoDevice.
func IsMLX5(p verbs.Paths, name string) (bool, error) {
	d, err := verbs.LookupDevice(p, name)
	if err != nil {
		return false, err
	}
	if d.Driver != "" {
		return d.Driver == "mlx5_core", nil
	}
	return strings.HasPrefix(d.Name, "mlx5_"), nil
}

// Component is the part of the stack a DEVX failure points at.
type Component int

// Components.
const (
	ComponentUnknown    Component = iota
	ComponentNotMLX5              // the device is not an mlx5 device at all
	ComponentFirmware             // the adapter's firmware lacks user-context (UCTX) support
	ComponentKernel               // the kernel's mlx5_ib lacks DEVX
	ComponentRDMACore             // libmlx5 is missing or too old
	ComponentPermission           // the kernel refuses DEVX to this process
)

func (c Component) String() string {
	switch c {
	case ComponentNotMLX5:
		return "device"
	case ComponentFirmware:
		return "firmware"
	case ComponentKernel:
		return "kernel"
	case ComponentRDMACore:
		return "rdma-core"
	case ComponentPermission:
		return "permission"
	}
	return "unknown"
}

// DEVXError says why a DEVX context did not open.
type DEVXError struct {
	Device  string
	Errno   syscall.Errno // from mlx5dv_open_device; 0 when the failure was found before it
	Missing Component
	Detail  string
}

func (e *DEVXError) Error() string {
	s := "mlx5dv: DEVX does not open on " + e.Device
	if e.Errno != 0 {
		s += ": " + e.Errno.Error()
	}
	if e.Missing != ComponentUnknown {
		s += ": " + e.Missing.String() + " missing DEVX support"
	}
	return s + ": " + e.Detail
}

// Unwrap makes a definite answer read as verbs.ErrNotSupported (or verbs.ErrPermission), and
// keeps the errno reachable.
func (e *DEVXError) Unwrap() []error {
	var errs []error
	switch e.Missing {
	case ComponentPermission:
		errs = append(errs, verbs.ErrPermission)
	case ComponentUnknown:
	default:
		errs = append(errs, verbs.ErrNotSupported)
	}
	if e.Errno != 0 {
		errs = append(errs, e.Errno)
	}
	return errs
}

// devxError explains an errno of mlx5dv_open_device with MLX5DV_CONTEXT_FLAGS_DEVX. fw is the
// firmware version sysfs shows (may be empty), for the message.
func devxError(device string, errno syscall.Errno, fw string) *DEVXError {
	e := &DEVXError{Device: device, Errno: errno}
	fwNote := ""
	if fw != "" {
		fwNote = " (firmware " + fw + ")"
	}
	switch errno {
	case syscall.EINVAL:
		e.Missing = ComponentFirmware
		e.Detail = "the adapter's firmware" + fwNote + " reports no user-context (UCTX) support: update it with mlxfwmanager / mstflint"
	case syscall.EOPNOTSUPP, syscall.EPROTONOSUPPORT:
		e.Missing = ComponentKernel
		e.Detail = "the kernel's mlx5_ib refused the DEVX flag: it needs Linux 4.18 or later built with CONFIG_INFINIBAND_USER_ACCESS (or the vendor's MLNX_OFED kernel modules)"
	case syscall.EPERM, syscall.EACCES:
		e.Missing = ComponentPermission
		e.Detail = "the kernel refused DEVX to this process: kernels before 5.x require CAP_NET_RAW for it (run with CAP_NET_RAW, or upgrade the kernel)"
	case syscall.ENOMEM:
		e.Detail = "out of memory or adapter resources while opening the context"
	default:
		e.Detail = "unexpected error from mlx5dv_open_device; run with UCX_LOG_LEVEL=debug and compare with `ibv_devinfo -v`"
	}
	return e
}

// ContextFlags are the MLX5DV_CONTEXT_FLAGS_* bits of mlx5dv_query_device.
type ContextFlags uint64

// Context flags.
const (
	FlagCQEv1                 ContextFlags = 1 << 0
	FlagMPWAllowed            ContextFlags = 1 << 2
	FlagEnhancedMPW           ContextFlags = 1 << 3
	FlagCQE128BComp           ContextFlags = 1 << 4
	FlagCQE128BPad            ContextFlags = 1 << 5
	FlagPacketBasedCreditMode ContextFlags = 1 << 6
	FlagRealTimeTS            ContextFlags = 1 << 7
)

var flagNames = []struct {
	f    ContextFlags
	name string
}{
	{FlagCQEv1, "CQE_V1"}, {1 << 1, "OBSOLETE"}, {FlagMPWAllowed, "MPW_ALLOWED"}, {FlagEnhancedMPW, "ENHANCED_MPW"},
	{FlagCQE128BComp, "CQE_128B_COMP"}, {FlagCQE128BPad, "CQE_128B_PAD"},
	{FlagPacketBasedCreditMode, "PACKET_BASED_CREDIT_MODE"}, {FlagRealTimeTS, "REAL_TIME_TS"},
}

// String lists the flags, e.g. "CQE_V1|ENHANCED_MPW".
func (f ContextFlags) String() string {
	var parts []string
	rest := f
	for _, n := range flagNames {
		if f&n.f != 0 {
			parts = append(parts, n.name)
			rest &^= n.f
		}
	}
	if rest != 0 {
		parts = append(parts, fmt.Sprintf("0x%x", uint64(rest)))
	}
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, "|")
}

// Caps is struct mlx5dv_context (mlx5dv_query_device). Optional parts are filled only when the
// provider set their bit in CompMask; see the Mask constants.
type Caps struct {
	Version  uint8
	Flags    ContextFlags
	CompMask uint64

	CQECompMaxNum           uint32 // MaskCQECompression
	CQECompSupportedFormats uint32
	SWParsingOffloads       uint32 // MaskSWParsing
	SWParsingQPTs           uint32
	StridingRQ              StridingRQCaps // MaskStridingRQ
	TunnelOffloads          uint32         // MaskTunnelOffloads
	MaxDynamicBFRegs        uint32         // MaskDynamicBFRegs
	MaxClockInfoUpdateNsec  uint64         // MaskClockInfoUpdate
	FlowActionFlags         uint32         // MaskFlowActionFlags
	DCODPCaps               uint32         // MaskDCODPCaps
	NumLAGPorts             uint8          // MaskNumLAGPorts
}

// StridingRQCaps is struct mlx5dv_striding_rq_caps.
type StridingRQCaps struct {
	MinLogStrideBytes, MaxLogStrideBytes uint32
	MinLogNumStrides, MaxLogNumStrides   uint32
	SupportedQPTs                        uint32
}

// Comp-mask bits of struct mlx5dv_context (MLX5DV_CONTEXT_MASK_*) that QueryDevice asks for.
const (
	MaskCQECompression  uint64 = 1 << 0
	MaskSWParsing       uint64 = 1 << 1
	MaskStridingRQ      uint64 = 1 << 2
	MaskTunnelOffloads  uint64 = 1 << 3
	MaskDynamicBFRegs   uint64 = 1 << 4
	MaskClockInfoUpdate uint64 = 1 << 5
	MaskFlowActionFlags uint64 = 1 << 6
	MaskDCODPCaps       uint64 = 1 << 7
	MaskNumLAGPorts     uint64 = 1 << 9
)
