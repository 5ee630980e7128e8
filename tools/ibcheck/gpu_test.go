package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/velo-go/velo/tools/ibcheck/internal/check"
	"github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/verbs"
)

// The GPU checks (GPUDirect RDMA readiness) and ucx_cuda over the GPU node trees of
// testdata/sysfs (gpufixtures_test.go writes them) and the topology trees of verbs/topo.

func gpuTree(name string) []string {
	return []string{"--sysfs", filepath.Join(gpuFixturesDir, "sysfs", name)}
}

// ucxCUDA is velo's static UCX built with CUDA on a node whose driver sees eight GPUs.
var ucxCUDA = func() check.UCXInfo {
	info := ucxV2Guarded
	info.CUDA = &check.UCXCUDA{Built: true, Transports: []string{"cuda_copy/cuda", "cuda_ipc/cuda"},
		MemoryTypes: []string{"host", "cuda"}, Devices: 8}
	return info
}()

// ucxCUDAStub is the same build where libcuda.so.1 is the toolkit's stub (no driver).
var ucxCUDAStub = func() check.UCXInfo {
	info := ucxV2Guarded
	info.CUDA = &check.UCXCUDA{Built: true, MemoryTypes: []string{"host"},
		DevicesErr: "ucx: cuInit/cuDeviceGetCount: CUDA_ERROR_STUB_LIBRARY (34): the libcuda.so.1 loaded is the CUDA toolkit's stub, not the NVIDIA driver's (no driver on this machine)"}
	return info
}()

// withCUDADevices is info with the driver reporting n devices.
func withCUDADevices(info check.UCXInfo, n int) check.UCXInfo {
	c := *info.CUDA
	c.Devices = n
	info.CUDA = &c
	return info
}

func setKernel(release string) func(*check.System) {
	return func(s *check.System) {
		s.KernelRelease = func(verbs.Paths) (string, error) { return release, nil }
	}
}

var gpuPassAll = map[string]check.Status{
	"gpu": check.Pass, "gpudirect": check.Pass, "gpu_nic_path": check.Pass, "gpu_acs": check.Pass, "gpu_iommu": check.Pass,
}

func TestGoldenGPU(t *testing.T) {
	for _, sc := range []scenario{
		{name: "gpu-dgx-gpudirect", args: gpuTree("dgx-h100-gpudirect"), env: pinnedEnv, exit: 0,
			want:    merge(gpuPassAll, map[string]check.Status{"uverbs": check.Pass, "ucx_cuda": check.NotCompiled}),
			mention: map[string]string{"gpudirect": "nvidia_peermem 550.90.07 is loaded", "ucx_cuda": "this ibcheck was built without CUDA support"}},
		{name: "gpu-dgx-gpudirect-cuda", args: gpuTree("dgx-h100-gpudirect"), env: pinnedEnv, sys: setUCX(ucxCUDA), exit: 0,
			want:    merge(gpuPassAll, map[string]check.Status{"ucx_cuda": check.Pass}),
			mention: map[string]string{"ucx_cuda": "cuda_copy/cuda"}},
		{name: "gpu-dgx-no-peermem", args: gpuTree("dgx-h100-no-peermem"), env: pinnedEnv, exit: 0,
			want: map[string]check.Status{"gpu": check.Pass, "gpudirect": check.Warn, "gpu_nic_path": check.Pass,
				"gpu_acs": check.Warn, "gpu_iommu": check.Warn},
			mention: map[string]string{"gpudirect": "modprobe nvidia_peermem", "gpu_acs": "(RR CR) on all 16 PCIe switch ports",
				"gpu_iommu": "GPU0-GPU7, mlx5_0-mlx5_7 (group type DMA-FQ)"}},
		{name: "gpu-dgx-no-peermem-strict", args: append([]string{"--strict"}, gpuTree("dgx-h100-no-peermem")...), env: pinnedEnv, exit: 1},
		{name: "gpu-l40s-dmabuf", args: gpuTree("l40s-dmabuf-user-copy"), exit: 0,
			want: map[string]check.Status{"gpu": check.Pass, "gpudirect": check.Pass, "gpu_nic_path": check.Pass,
				"gpu_acs": check.Skip, "gpu_iommu": check.Pass},
			mention: map[string]string{"gpudirect": "dma-buf: the NVIDIA driver 560.35.03 is the open kernel module", "gpu_acs": "the kernel shows it only to root"}},
		{name: "gpu-dgx-cuda-stub", args: gpuTree("dgx-h100-gpudirect"), env: pinnedEnv, sys: setUCX(ucxCUDAStub), exit: 0,
			want: map[string]check.Status{"ucx_cuda": check.Warn}, mention: map[string]string{"ucx_cuda": "CUDA_ERROR_STUB_LIBRARY"}},
		{name: "gpu-dgx-cuda-sees-fewer", args: gpuTree("dgx-h100-gpudirect"), env: pinnedEnv, sys: setUCX(withCUDADevices(ucxCUDA, 7)), exit: 0,
			want: map[string]check.Status{"ucx_cuda": check.Warn}, mention: map[string]string{"ucx_cuda": "sees 7 of the 8 NVIDIA GPUs"}},
		{name: "gpu-none", args: []string{"--sysfs", fixtureSysfs("cx7-ib-active")}, env: pinnedEnv, exit: 0,
			want: map[string]check.Status{"gpu": check.Skip, "gpudirect": check.Skip, "gpu_nic_path": check.Skip,
				"gpu_acs": check.Skip, "gpu_iommu": check.Skip, "ucx_cuda": check.Skip},
			mention: map[string]string{"gpu": "no GPU", "ucx_cuda": "this ibcheck was built without CUDA support"}},
		{name: "gpu-none-cuda-stub", args: []string{"--sysfs", fixtureSysfs("cx7-ib-active")}, env: pinnedEnv, sys: setUCX(ucxCUDAStub), exit: 0,
			want: map[string]check.Status{"gpu": check.Skip, "ucx_cuda": check.Skip}, mention: map[string]string{"ucx_cuda": "CUDA_ERROR_STUB_LIBRARY"}},
	} {
		t.Run(sc.name, func(t *testing.T) { runGolden(t, sc) })
	}
}

func TestGPUCases(t *testing.T) {
	topoTree := func(name string) []string { return []string{"--sysfs", filepath.Join(topoFixturesDir, name)} }
	for _, sc := range []scenario{
		{name: "old-kernel-no-dmabuf", args: gpuTree("l40s-dmabuf-user-copy"), sys: setKernel("5.10.0-28-amd64"), exit: 0,
			want: map[string]check.Status{"gpudirect": check.Warn}, mention: map[string]string{"gpudirect": "Linux 5.10.0-28-amd64 is older than 5.12"}},
		{name: "kernel-unknown", args: gpuTree("l40s-dmabuf-user-copy"),
			sys: func(s *check.System) { s.KernelRelease = check.Live().KernelRelease }, exit: 0,
			want: map[string]check.Status{"gpudirect": check.Warn}, mention: map[string]string{"gpudirect": "could not tell"}},
		// The topology trees have GPUs but no nvidia module loaded, and no device root.
		{name: "driver-not-loaded", args: topoTree("dgx-h100-like"), exit: 1,
			want:    map[string]check.Status{"gpu": check.Warn, "gpudirect": check.Warn, "gpu_acs": check.Skip},
			mention: map[string]string{"gpu": "not loaded (no /sys/module/nvidia)", "gpu_acs": "no readable config file"}},
		{name: "across-socket", args: topoTree("nic-across-socket"), exit: 1,
			want:    map[string]check.Status{"gpu_nic_path": check.Warn},
			mention: map[string]string{"gpu_nic_path": "GPU1 (SYS) is across the sockets"}},
		{name: "host-bridge", args: topoTree("workstation-single-nic"), exit: 1,
			want:    map[string]check.Status{"gpu_nic_path": check.Warn, "gpu_acs": check.Skip},
			mention: map[string]string{"gpu_nic_path": "no PCIe switch between GPU0 (PHB)", "gpu_acs": "matters only inside a switch"}},
		{name: "nearest-port-down", args: topoTree("port-down"), exit: 1,
			want: map[string]check.Status{"gpu_nic_path": check.Warn}},
		// With CUDA_VISIBLE_DEVICES set the job chose fewer GPUs: nothing to warn about.
		{name: "cuda-visible-devices", args: gpuTree("dgx-h100-gpudirect"), env: envWith(map[string]string{"CUDA_VISIBLE_DEVICES": "0,1"}),
			sys: setUCX(withCUDADevices(ucxCUDA, 2)), exit: 0, want: map[string]check.Status{"ucx_cuda": check.Pass}},
		{name: "cgo-off", args: gpuTree("dgx-h100-gpudirect"), env: pinnedEnv, sys: func(s *check.System) {
			s.CGO = false
			s.UCX = func(context.Context, []string, bool) check.UCXInfo { return check.UCXInfo{Err: ucxNotCompiled} }
		}, exit: 0, want: merge(gpuPassAll, map[string]check.Status{"ucx_cuda": check.NotCompiled})},
	} {
		t.Run(sc.name, func(t *testing.T) { runScenario(t, sc) })
	}
}

// TestGPUOnThisMachine runs the checks on the live system. This machine has no GPU: the GPU
// checks must say so and skip, never fail or warn.
func TestGPUOnThisMachine(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep := check.Run(ctx, check.Config{Env: envOf(nil)}, check.Live())
	res, ok := rep.Result("gpu")
	require.True(t, ok)
	if res.Status != check.Skip {
		t.Skipf("this machine has a GPU (%s: %s); the GPU-less assertions do not apply", res.Status, res.Finding)
	}
	assert.Contains(t, res.Finding, "no GPU")
	for _, id := range []string{"gpudirect", "gpu_nic_path", "gpu_acs", "gpu_iommu", "ucx_cuda"} {
		r, ok := rep.Result(id)
		require.True(t, ok, id)
		assert.Contains(t, []check.Status{check.Skip, check.NotCompiled}, r.Status, "%s: %s", id, r.Finding)
	}
	r, _ := rep.Result("ucx_cuda")
	switch {
	case !check.Live().CGO:
		assert.Equal(t, check.NotCompiled, r.Status, r.Finding)
	case ucx.CUDAEnabled():
		// A CUDA build (-tags cuda,ucx_static) on this machine: the driver, or its stub, answers.
		assert.Equal(t, check.Skip, r.Status, r.Finding)
		assert.Contains(t, r.Finding, "this ibcheck has CUDA")
		assert.Contains(t, r.Facts, check.Fact{Key: "cuda_build", Value: "yes"})
	default:
		assert.Equal(t, check.Skip, r.Status, r.Finding)
		assert.Contains(t, r.Finding, "this ibcheck was built without CUDA support")
	}
}

func merge(a, b map[string]check.Status) map[string]check.Status {
	out := map[string]check.Status{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}
