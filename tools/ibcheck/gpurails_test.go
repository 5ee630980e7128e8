package main

import (
	"path/filepath"
	"testing"

	"github.com/velo-go/velo/tools/ibcheck/internal/check"
)

// The preflight's ucx_gpu_rails check over the 8-GPU, 8-NIC fixture of verbs/topo: a pinned
// UCX_NET_DEVICES judged against the GPUs in CUDA_VISIBLE_DEVICES. (The fixture has no device
// root, so uverbs fails in every run here; the check under test does not depend on it.)

var dgxArgs = []string{"--sysfs", filepath.Join(topoFixturesDir, "dgx-h100-like")}

func TestGoldenGPURails(t *testing.T) {
	for _, sc := range []scenario{
		{name: "gpu-rails-across-socket", args: dgxArgs, exit: 1,
			env:     map[string]string{"UCX_NET_DEVICES": "mlx5_4:1", "CUDA_VISIBLE_DEVICES": "0", "UCX_TLS": "rc_mlx5,ud_mlx5,self"},
			want:    map[string]check.Status{"ucx_gpu_rails": check.Warn, "ucx_net_devices": check.Pass},
			mention: map[string]string{"ucx_gpu_rails": "mlx5_4:1 is across the socket from GPU0 (SYS); nearer: mlx5_0:1,mlx5_1:1 (PIX)"}},
		{name: "gpu-rails-nearest", args: dgxArgs, exit: 1,
			env:     map[string]string{"UCX_NET_DEVICES": "mlx5_2:1,mlx5_3:1", "CUDA_VISIBLE_DEVICES": "2,3", "UCX_TLS": "rc_mlx5,ud_mlx5,self"},
			want:    map[string]check.Status{"ucx_gpu_rails": check.Pass},
			mention: map[string]string{"ucx_gpu_rails": "mlx5_2:1 PIX to GPU2, mlx5_3:1 PIX to GPU2"}},
	} {
		t.Run(sc.name, func(t *testing.T) { runGolden(t, sc) })
	}
}

func TestGPURailsCases(t *testing.T) {
	for _, sc := range []scenario{
		// The other switch of the GPU's socket: not across it, but farther than its own switch.
		{name: "node", args: dgxArgs, exit: 1, env: map[string]string{"UCX_NET_DEVICES": "mlx5_2:1", "CUDA_VISIBLE_DEVICES": "0"},
			want:    map[string]check.Status{"ucx_gpu_rails": check.Warn},
			mention: map[string]string{"ucx_gpu_rails": "mlx5_2:1 is NODE to GPU0; nearer: mlx5_0:1,mlx5_1:1 (PIX)"}},
		// Two GPUs of two switches, one switch's NIC named: the other GPU has none of its own.
		{name: "second-gpu-uncovered", args: dgxArgs, exit: 1, env: map[string]string{"UCX_NET_DEVICES": "mlx5_0:1", "CUDA_VISIBLE_DEVICES": "0,2"},
			want:    map[string]check.Status{"ucx_gpu_rails": check.Warn},
			mention: map[string]string{"ucx_gpu_rails": "names none of GPU2's nearest ports mlx5_2:1,mlx5_3:1 (PIX)"}},
		{name: "no-cuda-visible-devices", args: dgxArgs, exit: 1, env: map[string]string{"UCX_NET_DEVICES": "mlx5_0:1"},
			want:    map[string]check.Status{"ucx_gpu_rails": check.Skip},
			mention: map[string]string{"ucx_gpu_rails": "cannot tell which of the node's 8 GPUs"}},
		{name: "uuid", args: dgxArgs, exit: 1, env: map[string]string{"UCX_NET_DEVICES": "mlx5_0:1", "CUDA_VISIBLE_DEVICES": "GPU-8e0c6d2a"},
			want:    map[string]check.Status{"ucx_gpu_rails": check.Warn},
			mention: map[string]string{"ucx_gpu_rails": "could not tell"}},
		{name: "index-out-of-range", args: dgxArgs, exit: 1, env: map[string]string{"UCX_NET_DEVICES": "mlx5_0:1", "CUDA_VISIBLE_DEVICES": "8"},
			want:    map[string]check.Status{"ucx_gpu_rails": check.Warn},
			mention: map[string]string{"ucx_gpu_rails": "GPU0 to GPU7"}},
		{name: "tcp-only", args: dgxArgs, exit: 1, env: map[string]string{"UCX_NET_DEVICES": "eth0", "CUDA_VISIBLE_DEVICES": "0"},
			want: map[string]check.Status{"ucx_gpu_rails": check.Skip}},
		{name: "unset", args: dgxArgs, exit: 1, env: map[string]string{"CUDA_VISIBLE_DEVICES": "0"},
			want: map[string]check.Status{"ucx_gpu_rails": check.Skip}},
		{name: "no-gpu", args: []string{"--sysfs", fixtureSysfs("cx7-ib-active")}, exit: 0,
			env:     envWith(map[string]string{"CUDA_VISIBLE_DEVICES": "0"}),
			want:    map[string]check.Status{"ucx_gpu_rails": check.Skip},
			mention: map[string]string{"ucx_gpu_rails": "shows no GPU"}},
	} {
		t.Run(sc.name, func(t *testing.T) { runScenario(t, sc) })
	}
}
