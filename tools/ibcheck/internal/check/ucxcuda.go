package check

import (
	"context"
	"fmt"
	"strings"

	"github.com/velo-go/velo/ucx"
)

// UCXCUDA is what the linked UCX and this binary say about CUDA.
type UCXCUDA struct {
	// Built: this binary was built with CUDA (-tags cuda,ucx_static; ucx.CUDAEnabled), so its
	// UCX has the CUDA transports and velo takes CUDA memory.
	Built bool
	// Transports are the linked UCX's transports for CUDA memory, "<transport>/<device>" from its
	// resource list (components cuda_cpy, cuda_ipc, gdr_copy): empty when UCX has none, or when
	// their memory domains found no driver or device.
	Transports []string `json:",omitempty"`
	// MemoryTypes are the memory types the linked UCX moves: host, and cuda with a CUDA
	// transport.
	MemoryTypes []string `json:",omitempty"`
	// Devices is the number of CUDA devices the driver reports; DevicesErr says why it could not
	// count them (no driver, the toolkit's stub library, no device).
	Devices    int
	DevicesErr string `json:",omitempty"`
}

// cudaNotBuilt is what an ibcheck without CUDA says of itself.
const cudaNotBuilt = "this ibcheck was built without CUDA support: build it with make ucx-static-cuda and go build -tags cuda,ucx_static (see docs/gpu.md)"

// cudaInfo is the CUDA part of the probe child's answer: the CUDA transports in the resource list
// (nil when the list could not be read) and the driver's device count.
func cudaInfo(res *ucx.Resources) *UCXCUDA {
	out := &UCXCUDA{Built: ucx.CUDAEnabled(), MemoryTypes: []string{ucx.MemoryHost.String()}}
	if res != nil {
		for _, c := range res.Components {
			for _, d := range c.MemoryDomains {
				for _, t := range d.Transports {
					if t.Err == nil && isCUDATransport(c.Name, t) {
						out.Transports = append(out.Transports, t.Name+"/"+t.Device)
					}
				}
			}
		}
	}
	if len(out.Transports) > 0 {
		out.MemoryTypes = append(out.MemoryTypes, ucx.MemoryCUDA.String())
	}
	if out.Built {
		n, err := ucx.CUDADeviceCount()
		out.Devices = n
		if err != nil {
			out.DevicesErr = err.Error()
		}
	}
	return out
}

// isCUDATransport: a transport of one of UCX's CUDA components, or on an accelerator device.
func isCUDATransport(component string, t ucx.Transport) bool {
	return strings.HasPrefix(component, "cuda") || strings.HasPrefix(component, "gdr") || t.DeviceType == ucx.DeviceAcc && strings.Contains(t.Name, "cuda")
}

// checkUCXCUDA judges the CUDA in the linked UCX against the node's GPUs.
func (r *run) checkUCXCUDA(context.Context) Result {
	res := Result{ID: "ucx_cuda"}
	if r.ucx.Err != nil {
		return r.ucxUnknown(res)
	}
	v := r.gpus()
	hasGPU := v.err == nil && len(v.nvidia) > 0
	c := r.ucx.CUDA
	if c == nil {
		c = &UCXCUDA{}
	}
	res.fact("cuda_build", map[bool]string{true: "yes", false: "no"}[c.Built])
	if !c.Built {
		res.Finding = cudaNotBuilt
		if !hasGPU {
			res.Status, res.Probe = Skip, NotAvailable
			res.Finding += "; this node has no GPU, so there is nothing for it to look at"
			return res
		}
		res.Status, res.Probe = NotCompiled, NotAvailable
		res.Finding += ": it cannot tell whether velo's UCX moves this node's GPU memory"
		res.Fix = "build ibcheck with CUDA like the job's programs (make ucx-static-cuda, then -tags cuda,ucx_static) and run it again"
		return res
	}
	tl := listOr(c.Transports, "none")
	res.fact("transports", tl)
	res.fact("memory_types", strings.Join(c.MemoryTypes, ","))
	if c.DevicesErr != "" {
		res.fact("cuda_devices", c.DevicesErr)
	} else {
		res.fact("cuda_devices", fmt.Sprint(c.Devices))
	}
	driver := fmt.Sprintf("the CUDA driver sees %s", plural(c.Devices, "device"))
	if c.DevicesErr != "" {
		driver = "the CUDA driver answers: " + c.DevicesErr
	}
	switch {
	case !hasGPU:
		res.Status, res.Probe = Skip, NotAvailable
		res.Finding = fmt.Sprintf("no GPU on this node; this ibcheck has CUDA (CUDA transports of the linked UCX: %s; %s)", tl, driver)
	case c.DevicesErr != "" || c.Devices == 0:
		res.Status, res.Probe = Warn, NotAvailable
		res.Finding = fmt.Sprintf("the node has %s, but %s: velo cannot register GPU memory", plural(len(v.nvidia), "NVIDIA GPU"), driver)
		res.Fix = "load the NVIDIA driver (see the gpu check), and run with the driver's libcuda.so.1 on the library path, not the toolkit's stubs"
	case c.Devices < len(v.nvidia) && !r.cudaVisibleSet():
		res.Status, res.Probe = Warn, Available
		res.Finding = fmt.Sprintf("the CUDA driver sees %d of the %s in sysfs, and CUDA_VISIBLE_DEVICES is unset: a GPU the driver lost (fallen off the bus, an Xid error) or one it cannot use", c.Devices, plural(len(v.nvidia), "NVIDIA GPU"))
		res.Fix = "nvidia-smi lists the GPUs the driver has; dmesg | grep -i xid says what happened to a missing one (a reset or a reboot brings it back)"
	case len(c.Transports) == 0:
		res.Status, res.Probe = Warn, NotAvailable
		res.Finding = "the linked UCX lists no CUDA transport (cuda_copy): its CUDA memory domain did not open, so UCX cannot move GPU memory although " + driver
		res.Fix = "rebuild UCX with CUDA (make ucx-static-cuda) and relink; ucx_info -d of a UCX built the same way lists cuda_copy"
	default:
		res.Status, res.Probe = Pass, Available
		res.Finding = fmt.Sprintf("the linked UCX moves %s memory (CUDA transports %s), and %s", strings.Join(c.MemoryTypes, " and "), tl, driver)
	}
	return res
}

// cudaVisibleSet: the job limits the GPUs CUDA shows (the probe child inherits it).
func (r *run) cudaVisibleSet() bool {
	_, ok := r.env("CUDA_VISIBLE_DEVICES")
	return ok
}
