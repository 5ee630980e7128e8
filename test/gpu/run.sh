#!/bin/sh
# run.sh: velo's GPU suite, as make test-gpu-bundle packed it. Runs on the GPU machine with nothing
# but this folder: no Go, no network, no source tree. Usage:
#
#   ./run.sh                 everything (within 10 minutes); results in ./results-<UTC time>/
#   VELO_GPU_OUT=dir ./run.sh   results in dir
#
# Without an NVIDIA GPU and driver it prints why and exits 0 (a skip, never a pass). Otherwise its
# exit status is the suite's. What the binaries need from the node: the NVIDIA driver
# (libcuda.so.1, libnvidia-ml.so.1, driver 520 or later) and glibc 2.36 or later (Debian 12's, which
# built them); the rdma-core libraries come with the bundle for a node that lacks them.
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${VELO_GPU_OUT:-$here/results-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
start=$(date +%s)

say() { echo "test-gpu: $*"; echo "$*" >>"$out/summary.txt"; }
skip() {
	say "SKIPPED: $* (nothing was run; this is not a pass)"
	exit 0
}

say "bundle: $(sed -n 1p "$here/MANIFEST" 2>/dev/null)"
say "node: $(hostname) $(uname -r)"

# A GPU and the driver: device nodes, then the driver's libraries.
if ! [ -e /dev/nvidiactl ] && ! ls /dev/nvidia[0-9]* >/dev/null 2>&1; then
	skip "no NVIDIA GPU on $(hostname): no /dev/nvidiactl or /dev/nvidia<N>"
fi
for lib in libcuda.so.1 libnvidia-ml.so.1; do
	if ! ldconfig -p 2>/dev/null | grep -q "$lib "; then
		found=""
		for d in $(echo "${LD_LIBRARY_PATH:-}" | tr ':' ' '); do [ -e "$d/$lib" ] && found=1; done
		[ -n "$found" ] || skip "the NVIDIA driver's $lib is not installed (ldconfig -p, LD_LIBRARY_PATH)"
	fi
done
if command -v nvidia-smi >/dev/null 2>&1; then
	nvidia-smi >"$out/nvidia-smi.txt" 2>&1
	nvidia-smi topo -m >>"$out/nvidia-smi.txt" 2>&1
	say "GPUs: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | tr '\n' ';')"
fi

# rdma-core: the node's own libraries when it has them, else the bundle's copies.
for lib in libibverbs.so.1 libmlx5.so.1 librdmacm.so.1; do
	if ! ldconfig -p 2>/dev/null | grep -q "$lib "; then
		LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
		export LD_LIBRARY_PATH
		say "using the bundle's rdma-core libraries ($lib is not installed)"
		break
	fi
done

# What the linked UCX sees: its CUDA transports and memory types.
if [ -x "$here/ucx_info" ]; then
	{
		"$here/ucx_info" -v
		"$here/ucx_info" -b | grep -E 'uct_MODULES|HAVE_CUDA'
		"$here/ucx_info" -d
	} >"$out/ucx_info.txt" 2>&1
	for tl in cuda_copy cuda_ipc; do
		if grep -q "Transport: $tl" "$out/ucx_info.txt"; then say "ucx_info -d lists $tl"; else say "ucx_info -d does not list $tl"; fi
	done
fi

ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
[ -n "$ngpu" ] || ngpu=0
rc=0
run() { # name, timeout in seconds, then the command
	name=$1
	limit=$2
	shift 2
	say "running $name"
	t0=$(date +%s)
	timeout "$limit" "$@" >"$out/$name.txt" 2>&1
	r=$?
	say "$name: exit $r in $(($(date +%s) - t0)) s; $(grep -c -- '--- PASS' "$out/$name.txt") passed, $(grep -c -- '--- FAIL' "$out/$name.txt") failed, $(grep -c -- '--- SKIP' "$out/$name.txt") skipped"
	grep -E -- '--- (FAIL|SKIP)' "$out/$name.txt" | head -20 | sed 's/^/  /'
	[ "$r" -eq 0 ] || rc=1
}
cd "$here"
# ucx: the CUDA build's own checks (memory types through the typed paths, the CUDA calls).
run ucx-memtypes 60 ./ucx.test -test.v -test.count=1 -test.timeout=55s -test.run 'MemoryType|MemoryHost|CUDA'
# The two-process suite over tcp and cuda_copy, then over cuda_ipc between two GPUs if there are two.
# The limits add up to under 10 minutes with one extra test binary (60 + 300 + 100 + 100 s).
VELO_GPU_TLS=tcp,cuda_copy
export VELO_GPU_TLS
run gpu-tcp-cuda_copy 300 ./gpu.test -test.v -test.count=1 -test.timeout=290s
# This node has a GPU and the driver: a suite that skipped everything found something wrong.
if ! grep -q -- '--- PASS' "$out/gpu-tcp-cuda_copy.txt"; then
	say "FAILED: the GPU suite passed nothing on a node with a GPU (see $out/gpu-tcp-cuda_copy.txt for why it skipped)"
	rc=1
fi
if [ "$ngpu" -ge 2 ]; then
	VELO_GPU_TLS=tcp,cuda_copy,cuda_ipc
	run gpu-cuda_ipc 100 ./gpu.test -test.v -test.count=1 -test.timeout=95s -test.run 'TestGetAcrossMemoryTypes/gpu0-to-gpu1'
fi
VELO_GPU_TLS=tcp,cuda_copy
for extra in "$here"/extra-*.test; do
	[ -x "$extra" ] || continue
	n=$(basename "$extra" .test)
	run "$n" 100 "$extra" -test.v -test.count=1 -test.timeout=95s
done
say "done in $(($(date +%s) - start)) s, exit $rc; results in $out"
exit $rc
