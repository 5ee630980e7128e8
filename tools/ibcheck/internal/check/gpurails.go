package check

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/velo-go/velo/verbs"
	"github.com/velo-go/velo/verbs/topo"
)

// checkNetDevicesGPU judges UCX_NET_DEVICES against the GPUs the job will use (the indices in
// CUDA_VISIBLE_DEVICES, which ibcheck reads from the job's environment): a port across the socket
// from every one of them moves each byte over the interconnect between sockets, and nothing in a
// transfer says so. It warns for such a port, and for a port farther than the nearest the GPU has,
// naming the nearer ones (what ibcheck topo recommends).
func (r *run) checkNetDevicesGPU(context.Context) Result {
	res := Result{ID: "ucx_gpu_rails"}
	v, set := r.env("UCX_NET_DEVICES")
	if !set || strings.TrimSpace(v) == "" || strings.EqualFold(strings.TrimSpace(v), "all") {
		res.Status = Skip
		res.Finding = "UCX_NET_DEVICES is " + orUnsetValue(set, v) + ": no port is pinned to judge against the GPUs (ibcheck topo prints each GPU's nearest ports)"
		return res
	}
	res.fact("UCX_NET_DEVICES", v)
	var named []string
	for _, e := range splitList(v) {
		if name, _, err := verbs.ParsePortSpec(e); err == nil && name != "" {
			named = append(named, e)
		}
	}
	if len(named) == 0 {
		res.Status = Skip
		res.Finding = "UCX_NET_DEVICES=" + v + " names no RDMA port: nothing to judge against the GPUs"
		return res
	}
	t, err := topo.Load(r.cfg.Paths)
	if err != nil {
		res.Status, res.Probe = Warn, Inconclusive
		res.Finding = couldNotTell(err)
		return res
	}
	if len(t.GPUs) == 0 {
		res.Status = Skip
		res.Finding = "this node shows no GPU in sysfs: no GPU to be near"
		return res
	}
	cvd, ok := r.env("CUDA_VISIBLE_DEVICES")
	if !ok || strings.TrimSpace(cvd) == "" {
		res.Status = Skip
		res.Finding = "CUDA_VISIBLE_DEVICES is unset: ibcheck cannot tell which of the node's " + strconv.Itoa(len(t.GPUs)) + " GPUs the job uses"
		res.Fix = "run ibcheck with the job's CUDA_VISIBLE_DEVICES (indices in PCI order, as nvidia-smi numbers the GPUs)"
		return res
	}
	res.fact("CUDA_VISIBLE_DEVICES", cvd)
	var gpus []topo.GPU
	for _, e := range splitList(cvd) {
		i, err := strconv.Atoi(e)
		if err != nil || i < 0 || i >= len(t.GPUs) {
			res.Status, res.Probe = Warn, Inconclusive
			res.Finding = fmt.Sprintf("could not tell: CUDA_VISIBLE_DEVICES entry %q is not a GPU index of this node (GPU0 to GPU%d); UUIDs need nvidia-smi to map to a PCI address", e, len(t.GPUs)-1)
			res.Fix = "give indices: nvidia-smi --query-gpu=index,uuid --format=csv maps a UUID to its index"
			return res
		}
		gpus = append(gpus, t.GPUs[i])
	}
	ranked := make([][]topo.Ranked, len(gpus))
	recs := make([]topo.Recommendation, len(gpus))
	for k, g := range gpus {
		ranked[k], _ = t.NearestPorts(g.Index, 0) // the index is in range
		recs[k], _ = t.Recommend(g.Index)
	}
	var across, farther, unknown, near []string
	for _, e := range named {
		name, num, _ := verbs.ParsePortSpec(e)
		// The nearest of the job's GPUs to this port, and how near.
		best, bestGPU := topo.Link{Relation: topo.SYS + 1}, -1
		for k := range gpus {
			for _, p := range ranked[k] {
				if p.Device == name && (num == 0 || p.Number == num) && p.Link.Less(best) {
					best, bestGPU = p.Link, k
				}
			}
		}
		if bestGPU < 0 {
			unknown = append(unknown, e)
			continue
		}
		g, rec := gpus[bestGPU], recs[bestGPU]
		res.fact(e, fmt.Sprintf("%s to %s", best.Relation, g.Name()))
		switch {
		case rec.Relation != 0 && best.Relation == topo.SYS && rec.Relation < topo.SYS:
			across = append(across, fmt.Sprintf("%s is across the socket from %s (SYS); nearer: %s (%s)", e, g.Name(), rec.UCXNetDevices(), rec.Relation))
		case rec.Relation != 0 && best.Relation > rec.Relation:
			farther = append(farther, fmt.Sprintf("%s is %s to %s; nearer: %s (%s)", e, best.Relation, g.Name(), rec.UCXNetDevices(), rec.Relation))
		default:
			near = append(near, fmt.Sprintf("%s %s to %s", e, best.Relation, g.Name()))
		}
	}
	// Each GPU should have at least one of its nearest ports named.
	var missing []string
	for k, g := range gpus {
		if len(recs[k].Ports) == 0 {
			continue
		}
		hit := false
		for _, p := range recs[k].Ports {
			hit = hit || containsFold(named, p.Spec()) || containsFold(named, p.Device)
		}
		if !hit {
			missing = append(missing, fmt.Sprintf("%s's nearest ports %s (%s)", g.Name(), recs[k].UCXNetDevices(), recs[k].Relation))
		}
	}
	recFix := func() string {
		var specs []string
		for _, rec := range recs {
			for _, p := range rec.Ports {
				if !containsFold(specs, p.Spec()) {
					specs = append(specs, p.Spec())
				}
			}
		}
		return "export UCX_NET_DEVICES=" + strings.Join(specs, ",") + " (the nearest active ports of the job's GPUs; ibcheck topo shows the matrix)"
	}
	switch {
	case len(across) > 0:
		res.Status, res.Probe = Warn, Available
		res.Finding = "UCX_NET_DEVICES=" + v + ": " + strings.Join(across, "; ") + ": every byte of that rail crosses the interconnect between sockets"
		res.Fix = recFix()
	case len(farther) > 0 || len(missing) > 0:
		res.Status, res.Probe = Warn, Available
		parts := farther
		if len(missing) > 0 {
			parts = append(parts, "it names none of "+strings.Join(missing, ", "))
		}
		res.Finding = "UCX_NET_DEVICES=" + v + ": " + strings.Join(parts, "; ")
		res.Fix = recFix()
	case len(near) == 0:
		res.Status, res.Probe = Warn, Inconclusive
		res.Finding = "could not tell: UCX_NET_DEVICES=" + v + " names no RDMA port this node's topology shows (" + strings.Join(unknown, ", ") + ")"
	default:
		res.Status, res.Probe = Pass, Available
		res.Finding = "UCX_NET_DEVICES=" + v + " names the nearest ports of the job's GPUs: " + strings.Join(near, ", ")
	}
	return res
}
