package check

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/velo-go/velo/verbs/topo"
)

// The GPU checks judge whether a node can move GPU memory over RDMA without a copy through host
// memory (GPUDirect RDMA): NVIDIA GPUs on the nvidia driver, a way for the NIC to reach GPU
// memory (nvidia_peermem, or dma-buf with the open kernel module), a NIC near each GPU in the PCI
// tree, ACS that keeps peer-to-peer traffic inside the PCIe switch, and an IOMMU that does not
// translate the GPUs' and NICs' DMA. None of them fails: a host-memory velo job needs none of
// this. They warn, and --strict turns a warning into exit 1. On a node without an NVIDIA GPU each
// says so and is skipped.

// minDMABufDriver is the first NVIDIA driver branch whose open kernel module exports GPU memory
// as dma-buf for RDMA; minDMABufKernel the first Linux release whose RDMA core imports it
// (ib_umem_dmabuf, 5.12).
const (
	minDMABufDriver                            = 515
	minDMABufKernelMajor, minDMABufKernelMinor = 5, 12
)

// gpuView is what the GPU checks share: the PCI topology and its NVIDIA GPUs. It is read once.
type gpuView struct {
	loaded bool
	topo   *topo.Topology
	err    error
	nvidia []topo.GPU // NVIDIA GPUs, PCI order
	other  []topo.GPU // other vendors' GPUs (AMD)
}

func (r *run) gpus() *gpuView {
	v := &r.gpu
	if v.loaded {
		return v
	}
	v.loaded = true
	v.topo, v.err = topo.Load(r.cfg.Paths)
	if v.err != nil {
		return v
	}
	for _, g := range v.topo.GPUs {
		if g.PCI.VendorID == topo.VendorNVIDIA {
			v.nvidia = append(v.nvidia, g)
		} else {
			v.other = append(v.other, g)
		}
	}
	return v
}

// skipWithoutGPU is the result of a GPU check on a node without NVIDIA GPUs, or whose PCI tree
// could not be read (the gpu check reports that), and ok false; ok true means go on.
func (r *run) skipWithoutGPU(id string) (Result, bool) {
	v := r.gpus()
	res := Result{ID: id, Status: Skip}
	switch {
	case v.err != nil:
		res.Finding = "not judged: the PCI tree could not be read (see the gpu check)"
		return res, false
	case len(v.nvidia) == 0:
		res.Finding = "no GPU: nothing to check (see the gpu check)"
		return res, false
	}
	return res, true
}

func (r *run) sysfs() string { return r.cfg.Paths.SysfsRoot() }

// checkGPU finds the NVIDIA GPUs and the driver they are bound to.
func (r *run) checkGPU(context.Context) Result {
	res := Result{ID: "gpu"}
	v := r.gpus()
	if v.err != nil {
		res.Status, res.Probe = Warn, Inconclusive
		res.Finding = couldNotTell(v.err)
		return res
	}
	if len(v.nvidia) == 0 {
		res.Status, res.Probe = Skip, NotAvailable
		res.Finding = "no GPU: this node shows no NVIDIA GPU in sysfs (bus/pci/devices: no vendor 0x10de VGA or 3D controller), so GPUDirect RDMA does not apply and the other GPU checks skip"
		if len(v.other) > 0 {
			var names []string
			for _, g := range v.other {
				names = append(names, fmt.Sprintf("%s %s (%s)", g.Name(), g.PCI.Address, g.Vendor()))
			}
			res.Finding = "no NVIDIA GPU: this node's GPUs are " + strings.Join(names, ", ") + "; velo's GPU memory is CUDA memory, so the GPU checks skip"
		}
		return res
	}
	drv, err := readModule(r.sysfs(), "nvidia")
	if err != nil {
		res.Status, res.Probe = Warn, Inconclusive
		res.Finding = couldNotTell(err)
		return res
	}
	models := map[string]int{}
	var order []string
	var unbound []string
	for _, g := range v.nvidia {
		id := fmt.Sprintf("10de:%04x", g.PCI.DeviceID)
		if models[id] == 0 {
			order = append(order, id)
		}
		models[id]++
		d := pciDriver(r.sysfs(), g.PCI.Address)
		bound := d
		if bound == "" {
			bound = "no driver"
		}
		res.fact(g.Name(), fmt.Sprintf("%s %s NUMA %s driver %s", g.PCI.Address, id, numaOf(g.PCI.NUMANode), bound))
		if d != "nvidia" {
			unbound = append(unbound, fmt.Sprintf("%s (%s) has %s", g.Name(), g.PCI.Address, bound))
		}
	}
	var kinds []string
	for _, id := range order {
		kinds = append(kinds, fmt.Sprintf("%d× %s", models[id], id))
	}
	what := fmt.Sprintf("%s (%s)", plural(len(v.nvidia), "NVIDIA GPU"), strings.Join(kinds, ", "))
	if drv.Loaded {
		res.fact("nvidia_driver", drv.Version)
		res.fact("nvidia_kernel_module", moduleFlavour(drv))
	}
	switch {
	case !drv.Loaded:
		res.Status, res.Probe = Warn, NotAvailable
		res.Finding = what + ", and the NVIDIA kernel driver is not loaded (no /sys/module/nvidia): CUDA sees no device"
		res.Fix = "install the NVIDIA driver and load it (modprobe nvidia); nvidia-smi must list every GPU"
	case len(unbound) > 0:
		res.Status, res.Probe = Warn, NotAvailable
		res.Finding = what + ", but " + strings.Join(unbound, ", ") + " instead of nvidia: CUDA does not see it"
		res.Fix = "bind the GPU to the nvidia driver (a GPU on vfio-pci belongs to a virtual machine, one on nouveau to the display driver: blacklist nouveau and reload nvidia)"
	default:
		res.Status, res.Probe = Pass, Available
		res.Finding = fmt.Sprintf("%s on the nvidia driver %s (%s)", what, orNoVersion(drv.Version), moduleFlavour(drv))
	}
	return res
}

// moduleFlavour says which of NVIDIA's two kernel modules is loaded, from its taint.
func moduleFlavour(m kmod) string {
	if m.Proprietary() {
		return "the proprietary kernel module"
	}
	return "the open kernel module"
}

// checkGPUDirect judges the two ways a NIC reaches GPU memory: the peer-memory module, which UCX
// detects by the files it reads here, and dma-buf.
func (r *run) checkGPUDirect(context.Context) Result {
	res, ok := r.skipWithoutGPU("gpudirect")
	if !ok {
		return res
	}
	sysfs := r.sysfs()
	for _, name := range []string{"nvidia_peermem", "nv_peer_mem"} {
		m, err := readModule(sysfs, name)
		if err != nil {
			res.Status, res.Probe = Warn, Inconclusive
			res.Finding = couldNotTell(err)
			return res
		}
		if m.Loaded && m.Version == "" {
			res.fact(name, "loaded, no version file")
			res.Status, res.Probe = Warn, NotAvailable
			res.Finding = fmt.Sprintf("%s is loaded but has no /sys/module/%s/version, the file UCX's ib memory domain looks for: UCX will not register CUDA memory on the NICs", name, name)
			res.Fix = "load the nvidia_peermem that ships with the running NVIDIA driver (modprobe -r " + name + "; modprobe nvidia_peermem)"
			return res
		}
		if m.Loaded {
			res.fact(name, orNoVersion(m.Version))
			res.Status, res.Probe = Pass, Available
			res.Finding = fmt.Sprintf("%s %s is loaded: the RDMA NICs can register GPU memory (peer memory), and UCX's ib memory domains, which look for the same module, take CUDA memory", name, orNoVersion(m.Version))
			return res
		}
	}
	if ver, ok, err := readAttrFile(filepath.Join(sysfs, "kernel", "mm", "memory_peers", "nv_mem", "version")); err == nil && ok {
		res.fact("memory_peers/nv_mem", ver)
		res.Status, res.Probe = Pass, Available
		res.Finding = "the nv_mem peer-memory client " + ver + " is registered (kernel/mm/memory_peers/nv_mem): the RDMA NICs can register GPU memory, and UCX's ib memory domains take CUDA memory"
		return res
	}
	res.fact("nvidia_peermem", "not loaded")
	drv, err := readModule(sysfs, "nvidia")
	if err != nil {
		res.Status, res.Probe = Warn, Inconclusive
		res.Finding = couldNotTell(err)
		return res
	}
	peermemFix := "modprobe nvidia_peermem (it ships with the NVIDIA driver since 470 and needs an RDMA stack with peer-memory support, MLNX_OFED or DOCA-OFED), and list it in /etc/modules-load.d/ so that it loads at boot"
	if !drv.Loaded {
		res.Status, res.Probe = Warn, NotAvailable
		res.Finding = "no way for the NICs to reach GPU memory: the NVIDIA driver is not loaded (see the gpu check), so neither nvidia_peermem nor dma-buf can work"
		res.Fix = "load the NVIDIA driver, then " + peermemFix
		return res
	}
	res.fact("nvidia_driver", orNoVersion(drv.Version))
	res.fact("nvidia_taint", orNone(drv.Taint))
	dmabufFix := fmt.Sprintf("or use dma-buf: the open GPU kernel modules (nvidia-open, %d or later) on Linux %d.%d or later, with UCX 1.14 or later", minDMABufDriver, minDMABufKernelMajor, minDMABufKernelMinor)
	if drv.Proprietary() {
		res.Status, res.Probe = Warn, NotAvailable
		res.Finding = fmt.Sprintf("no way for the NICs to reach GPU memory: nvidia_peermem is not loaded, and the NVIDIA driver %s is the proprietary kernel module (P in /sys/module/nvidia/taint), which exports no dma-buf for RDMA; UCX moves GPU memory through host memory (cuda_copy) instead", orNoVersion(drv.Version))
		res.Fix = peermemFix + "; " + dmabufFix
		return res
	}
	if major := majorVersion(drv.Version); major >= 0 && major < minDMABufDriver {
		res.Status, res.Probe = Warn, NotAvailable
		res.Finding = fmt.Sprintf("no way for the NICs to reach GPU memory: nvidia_peermem is not loaded, and the open kernel module %s is older than %d, the first to export GPU memory as dma-buf", drv.Version, minDMABufDriver)
		res.Fix = peermemFix + "; or update the NVIDIA driver to " + strconv.Itoa(minDMABufDriver) + " or later for dma-buf"
		return res
	}
	rel, err := r.kernelRelease()
	if err != nil {
		res.Status, res.Probe = Warn, Inconclusive
		res.Finding = fmt.Sprintf("could not tell: nvidia_peermem is not loaded; the NVIDIA driver %s is the open kernel module, which exports GPU memory as dma-buf, but the kernel release, which must be %d.%d or later for the RDMA core to import it, is unknown: %v", orNoVersion(drv.Version), minDMABufKernelMajor, minDMABufKernelMinor, err)
		return res
	}
	res.fact("kernel", rel)
	okKernel, err := kernelAtLeast(rel, minDMABufKernelMajor, minDMABufKernelMinor)
	switch {
	case err != nil:
		res.Status, res.Probe = Warn, Inconclusive
		res.Finding = couldNotTell(err)
	case !okKernel:
		res.Status, res.Probe = Warn, NotAvailable
		res.Finding = fmt.Sprintf("no way for the NICs to reach GPU memory: nvidia_peermem is not loaded, and Linux %s is older than %d.%d, whose RDMA core first imports dma-buf", rel, minDMABufKernelMajor, minDMABufKernelMinor)
		res.Fix = peermemFix + fmt.Sprintf("; or boot Linux %d.%d or later for dma-buf", minDMABufKernelMajor, minDMABufKernelMinor)
	default:
		res.Status, res.Probe = Pass, Available
		res.Finding = fmt.Sprintf("dma-buf: the NVIDIA driver %s is the open kernel module (no P in /sys/module/nvidia/taint) on Linux %s, so the NICs register GPU memory through dma-buf (UCX 1.14 or later with rdma-core 34 or later); nvidia_peermem is not loaded and not needed", orNoVersion(drv.Version), rel)
	}
	return res
}

// kernelRelease is the release of the kernel the sysfs tree belongs to.
func (r *run) kernelRelease() (string, error) {
	if r.sys.KernelRelease == nil {
		return "", fmt.Errorf("this run has no way to read the kernel release")
	}
	return r.sys.KernelRelease(r.cfg.Paths)
}

// checkGPUNICPath judges each GPU's nearest active RDMA port by where their paths meet in the
// PCI tree.
func (r *run) checkGPUNICPath(context.Context) Result {
	res, ok := r.skipWithoutGPU("gpu_nic_path")
	if !ok {
		return res
	}
	v := r.gpus()
	t := v.topo
	if len(t.NICs) == 0 {
		res.Status, res.Probe = Warn, NotAvailable
		res.Finding = "no RDMA NIC: the GPUs have no NIC to reach their memory directly"
		res.Fix = "see the devices check"
		return res
	}
	byRel := map[topo.Relation][]string{}
	var noPort []string
	for _, g := range v.nvidia {
		rec, _ := t.Recommend(g.Index) // the index is in range
		if len(rec.Ports) == 0 {
			noPort = append(noPort, g.Name())
			res.fact(g.Name(), "no active port")
			continue
		}
		res.fact(g.Name(), rec.UCXNetDevices()+" "+rec.Relation.String())
		byRel[rec.Relation] = append(byRel[rec.Relation], g.Name())
	}
	list := func(rels ...topo.Relation) []string {
		var parts []string
		for _, rel := range rels {
			if gs := byRel[rel]; len(gs) > 0 {
				parts = append(parts, fmt.Sprintf("%s (%s)", gpuList(gs), rel))
			}
		}
		return parts
	}
	near := list(topo.PIX, topo.PXB)
	far := list(topo.PHB, topo.NODE)
	across := list(topo.SYS)
	switch {
	case len(noPort) > 0:
		res.Status, res.Probe = Warn, NotAvailable
		res.Finding = fmt.Sprintf("%s %s no active RDMA port at all", gpuList(noPort), hasHave(len(noPort)))
		res.Fix = "bring a port up (see the port check and ibcheck topo)"
	case len(across) > 0:
		res.Status, res.Probe = Warn, Available
		res.Finding = "the nearest active RDMA port of " + strings.Join(across, ", ") + " is across the sockets: GPUDirect RDMA traffic crosses the interconnect between the CPUs, slower than staging through host memory on many machines, and some platforms refuse peer-to-peer across it"
		if rest := append(near, far...); len(rest) > 0 {
			res.Finding += "; " + strings.Join(rest, ", ") + " nearer"
		}
		res.Fix = "give those GPUs' work to GPUs with a NIC on their own socket, or fit a NIC there; ibcheck topo shows the matrix"
	case len(far) > 0:
		res.Status, res.Probe = Warn, Available
		res.Finding = "no PCIe switch between " + strings.Join(far, ", ") + " and its nearest active RDMA port: GPUDirect RDMA traffic goes through the CPU's root complex, which on many CPUs carries peer-to-peer at a fraction of the link rate"
		if len(near) > 0 {
			res.Finding += "; " + strings.Join(near, ", ") + " behind a switch with theirs"
		}
		res.Fix = "expect less than line rate for those GPUs, or use GPUs that share a PCIe switch with a NIC; ibcheck topo shows the matrix"
	default:
		res.Status, res.Probe = Pass, Available
		res.Finding = "every GPU has an active RDMA port behind a PCIe switch it shares: " + strings.Join(near, ", ") + "; GPUDirect RDMA traffic stays in the switch (ibcheck topo prints each GPU's UCX_NET_DEVICES)"
	}
	return res
}

// checkGPUACS reads ACS on the switch ports between each GPU and its nearest NICs.
func (r *run) checkGPUACS(context.Context) Result {
	res, ok := r.skipWithoutGPU("gpu_acs")
	if !ok {
		return res
	}
	v := r.gpus()
	t := v.topo
	var ports []string // the switch ports on the GPU-NIC paths, in the order met
	for _, g := range v.nvidia {
		rec, _ := t.Recommend(g.Index)
		if rec.Relation != topo.PIX && rec.Relation != topo.PXB {
			continue
		}
		for _, p := range rec.Ports {
			for _, b := range bridgesBetween(g.PCI.Chain, t.NICs[p.NIC].PCI.Chain) {
				if !slices.Contains(ports, b) {
					ports = append(ports, b)
				}
			}
		}
	}
	if len(ports) == 0 {
		res.Status = Skip
		res.Finding = "no GPU shares a PCIe switch with an active RDMA port (see gpu_nic_path): ACS redirect matters only inside a switch"
		return res
	}
	sort.Strings(ports)
	var short, missing, redirect, redirectBits []string
	for _, b := range ports {
		st, err := readACS(r.sysfs(), b)
		switch {
		case err != nil:
			missing = append(missing, b)
			res.fact(b, "configuration space not readable: "+err.Error())
		case !st.Readable:
			short = append(short, b)
			res.fact(b, "configuration space shows no extended capabilities (an unprivileged read stops at 64 bytes)")
		case !st.Present:
			res.fact(b, "no ACS capability")
		default:
			res.fact(b, "ACS control "+acsControlText(st.Control))
			if st.Redirects() {
				redirect = append(redirect, b)
				bits := acsControlText(st.Control & (acsCtrlReqRedir | acsCtrlCplRedir | acsCtrlEgressCtl))
				if !slices.Contains(redirectBits, bits) {
					redirectBits = append(redirectBits, bits)
				}
			}
		}
	}
	unread := append(short, missing...)
	switch {
	case len(redirect) > 0:
		res.Status, res.Probe = Warn, Available
		of := fmt.Sprintf("%d of the %d", len(redirect), len(ports))
		if len(redirect) == len(ports) {
			of = fmt.Sprintf("all %d", len(ports))
		}
		res.Finding = fmt.Sprintf("ACS redirects peer-to-peer traffic (%s) on %s PCIe switch ports between the GPUs and their NICs (%s): GPUDirect RDMA traffic goes up to the root complex and back instead of across the switch", strings.Join(redirectBits, "; "), of, strings.Join(redirect, ", "))
		res.Fix = "switch P2P redirect off on those ports at each boot, as NVIDIA's GPUDirect guides do: setpci -s <port> ECAP_ACS+0x6.w=0000 for each, or turn ACS off in the firmware setup. The kernel switches it on when the IOMMU isolates devices (see gpu_iommu); a node that passes devices to virtual machines needs it"
	case len(unread) > 0:
		res.Status, res.Probe = Skip, Inconclusive
		why := "the kernel shows it only to root"
		if len(short) == 0 {
			why = "this tree has no readable config file for them"
		}
		res.Fix = "sudo lspci -vvv -s " + unread[0] + " | grep ACSCtl (RR+ or CR+ redirects)"
		if r.cfg.Paths.Live() {
			res.Fix = "run ibcheck as root, or " + res.Fix
		}
		res.Finding = fmt.Sprintf("not read: ACS sits in the PCIe extended configuration space (bus/pci/devices/<port>/config past byte 256), and %s: %s", why, strings.Join(unread, ", "))
	default:
		res.Status, res.Probe = Pass, Available
		res.Finding = fmt.Sprintf("ACS leaves peer-to-peer traffic in the switch on all %d PCIe switch ports between the GPUs and their NICs (no P2P request or completion redirect)", len(ports))
	}
	return res
}

// bridgesBetween are the bridges below the point where two functions' paths meet: the switch
// ports their peer-to-peer traffic passes.
func bridgesBetween(a, b []string) []string {
	if len(a) < 2 || len(b) < 2 {
		return nil
	}
	ca, cb := a[:len(a)-1], b[:len(b)-1]
	k := 0
	for k < len(ca) && k < len(cb) && ca[k] == cb[k] {
		k++
	}
	return append(append([]string(nil), ca[k:]...), cb[k:]...)
}

// checkGPUIOMMU reads the IOMMU group type of the GPUs and the NICs.
func (r *run) checkGPUIOMMU(context.Context) Result {
	res, ok := r.skipWithoutGPU("gpu_iommu")
	if !ok {
		return res
	}
	v := r.gpus()
	units, err := iommuUnits(r.sysfs())
	if err != nil {
		res.Status, res.Probe = Warn, Inconclusive
		res.Finding = couldNotTell(err)
		return res
	}
	res.fact("class/iommu", orNone(strings.Join(units, " ")))
	type dev struct{ name, bdf string }
	var devs []dev
	for _, g := range v.nvidia {
		devs = append(devs, dev{g.Name(), g.PCI.Address})
	}
	for _, n := range v.topo.NICs {
		if n.PCI.Address != "" {
			devs = append(devs, dev{n.Device.Name, n.PCI.Address})
		}
	}
	byType := map[string][]string{}
	var typeOrder []string
	for _, d := range devs {
		g, err := readIOMMUGroup(r.sysfs(), d.bdf)
		if err != nil {
			res.Status, res.Probe = Warn, Inconclusive
			res.Finding = couldNotTell(err)
			return res
		}
		typ := g.Type
		switch {
		case g.Group == "":
			typ = "none"
			res.fact(d.name, "no IOMMU group")
		case typ == "":
			typ = "unknown"
			res.fact(d.name, "group "+g.Group)
		default:
			res.fact(d.name, "group "+g.Group+" "+typ)
		}
		if byType[typ] == nil {
			typeOrder = append(typeOrder, typ)
		}
		byType[typ] = append(byType[typ], d.name)
	}
	var translated, unknown []string
	for _, typ := range typeOrder {
		switch typ {
		case "none", "identity":
		case "unknown":
			unknown = append(unknown, byType[typ]...)
		default:
			translated = append(translated, fmt.Sprintf("%s (group type %s)", gpuList(byType[typ]), typ))
		}
	}
	switch {
	case len(translated) > 0:
		res.Status, res.Probe = Warn, Available
		res.Finding = "the IOMMU translates DMA for " + strings.Join(translated, ", ") + ": a NIC's peer-to-peer reads and writes of GPU memory pass IOMMU mappings that GPUDirect RDMA expects not to be there, and fail or crawl (and the kernel turns ACS redirect on, see gpu_acs)"
		res.Fix = "boot with iommu=pt (passthrough; it keeps intel_iommu=on or amd_iommu=on for what needs it) or switch the IOMMU off, as NVIDIA's GPUDirect RDMA documentation asks; a device on vfio-pci (unmanaged) belongs to a virtual machine"
	case len(unknown) > 0:
		res.Status, res.Probe = Warn, Inconclusive
		res.Finding = "could not tell: " + strings.Join(unknown, ", ") + " sit in IOMMU groups whose type the kernel does not show (kernel/iommu_groups/<n>/type needs Linux 5.11)"
		res.Fix = "look at the kernel command line (cat /proc/cmdline): iommu=pt or the IOMMU off is what GPUDirect RDMA needs"
	case len(byType["identity"]) > 0:
		res.Status, res.Probe = Pass, Available
		res.Finding = "the IOMMU passes the GPUs' and NICs' DMA through untranslated (iommu_groups type identity: iommu=pt), as GPUDirect RDMA needs"
	default:
		res.Status, res.Probe = Pass, Available
		res.Finding = "no IOMMU translates the GPUs' or NICs' DMA (none of them has an iommu_group), as GPUDirect RDMA needs"
	}
	return res
}

func numaOf(n int) string {
	if n < 0 {
		return "unknown"
	}
	return strconv.Itoa(n)
}

// orNoVersion is a module's version, or says it has none.
func orNoVersion(s string) string {
	if s == "" {
		return "(version unknown)"
	}
	return s
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// plural is "1 NVIDIA GPU", "8 NVIDIA GPUs".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

// gpuList joins names, folding a run of three or more consecutive ones with one prefix
// ("GPU0-GPU3, GPU6", "mlx5_0-mlx5_7").
func gpuList(names []string) string {
	var out []string
	for i := 0; i < len(names); {
		j := i
		for j+1 < len(names) && follows(names[j], names[j+1]) {
			j++
		}
		if j-i >= 2 {
			out = append(out, names[i]+"-"+names[j])
		} else {
			out = append(out, names[i:j+1]...)
		}
		i = j + 1
	}
	return strings.Join(out, ", ")
}

// follows: b is a's prefix with a's number plus one ("GPU3", "GPU4").
func follows(a, b string) bool {
	pa, na, oka := splitNumber(a)
	pb, nb, okb := splitNumber(b)
	return oka && okb && pa == pb && nb == na+1
}

func splitNumber(s string) (string, int, bool) {
	i := len(s)
	for i > 0 && s[i-1] >= '0' && s[i-1] <= '9' {
		i--
	}
	n, err := strconv.Atoi(s[i:])
	return s[:i], n, err == nil
}

func hasHave(n int) string {
	if n == 1 {
		return "has"
	}
	return "have"
}
