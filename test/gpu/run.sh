#!/bin/sh
# run.sh: velo's GPU suite and benchmark, as make test-gpu-bundle packed them. Runs on the GPU
# machine with nothing but this folder: no Go, no network, no source tree. Usage:
#
#   ./run.sh                 the suite, then the benchmark if time is left (all within 10 minutes);
#                            results in ./results-<UTC time>/
#   ./run.sh bench           the benchmark alone (make bench-gpu)
#   ./run.sh check [name]    only whether this node can run them (exit 0), or why not (exit 2),
#                            printed under name (make bench-gpu asks before it builds anything)
#   VELO_GPU_OUT=dir ./run.sh   results in dir
#
# Without an NVIDIA GPU and driver it prints why and exits 0 (a skip, never a pass). Otherwise its
# exit status is the suite's (and the benchmark's). What the binaries need from the node: the NVIDIA
# driver (libcuda.so.1, libnvidia-ml.so.1, driver 520 or later) and glibc 2.36 or later (Debian
# 12's, which built them); the rdma-core and OpenMP libraries come with the bundle for a node that
# lacks them.
set -u
here=$(cd "$(dirname "$0")" && pwd)
mode=${1:-all}
case "$mode" in
all) what=test-gpu ;;
bench) what=bench-gpu ;;
check) what=${2:-gpu-check} ;;
*)
	echo "usage: $0 [bench|check]" >&2
	exit 2
	;;
esac
start=$(date +%s)
# The whole command's limit: the suite's own limits add up to under it, and the benchmark takes
# what is left.
total=${VELO_GPU_TOTAL_S:-600}
out=""
# The benchmark's transports: the caller's VELO_GPU_TLS, else the suite's tcp,cuda_copy.
bench_tls=${VELO_GPU_TLS:-tcp,cuda_copy}

say() {
	echo "$what: $*"
	[ -z "$out" ] || echo "$*" >>"$out/summary.txt"
}
skip() {
	say "SKIPPED: $* (nothing was run; this is not a pass)"
	[ "$mode" = check ] && exit 2
	exit 0
}

# The results folder (not for check, which only answers).
if [ "$mode" != check ]; then
	out=${VELO_GPU_OUT:-$here/results-$(date -u +%Y%m%dT%H%M%SZ)}
	mkdir -p "$out"
	say "bundle: $(sed -n 1p "$here/MANIFEST" 2>/dev/null)"
	say "node: $(hostname) $(uname -r)"
fi

# A GPU and the driver: device nodes, then the driver's libraries. VELO_GPU_BENCH_MEM=host runs
# the benchmark's harness with host memory in place of GPU memory, on any machine (the binaries
# still need a libcuda.so.1: the sysroot's stub, third_party/cuda/root/run, on LD_LIBRARY_PATH).
if [ "$mode" = bench ] && [ "${VELO_GPU_BENCH_MEM:-}" = host ]; then
	say "VELO_GPU_BENCH_MEM=host: host memory in place of GPU memory, no GPU needed; the figures say nothing about GPUs"
elif ! [ -e /dev/nvidiactl ] && ! ls /dev/nvidia[0-9]* >/dev/null 2>&1; then
	skip "no NVIDIA GPU on $(hostname): no /dev/nvidiactl or /dev/nvidia<N>"
else
	for lib in libcuda.so.1 libnvidia-ml.so.1; do
		if ! ldconfig -p 2>/dev/null | grep -q "$lib "; then
			found=""
			for d in $(echo "${LD_LIBRARY_PATH:-}" | tr ':' ' '); do [ -e "$d/$lib" ] && found=1; done
			[ -n "$found" ] || skip "the NVIDIA driver's $lib is not installed (ldconfig -p, LD_LIBRARY_PATH)"
		fi
	done
fi
if [ "$mode" = check ]; then
	say "$(hostname) has an NVIDIA GPU and the driver's libraries"
	exit 0
fi
if command -v nvidia-smi >/dev/null 2>&1; then
	nvidia-smi >"$out/nvidia-smi.txt" 2>&1
	nvidia-smi topo -m >>"$out/nvidia-smi.txt" 2>&1
	say "GPUs: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | tr '\n' ';')"
fi

# rdma-core and OpenMP (ucx_perftest's): the node's own libraries when it has them, else the
# bundle's copies.
for lib in libibverbs.so.1 libmlx5.so.1 librdmacm.so.1 libgomp.so.1; do
	if ! ldconfig -p 2>/dev/null | grep -q "$lib "; then
		LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
		export LD_LIBRARY_PATH
		say "using the bundle's libraries ($lib is not installed)"
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
# The benchmark: velo's gets between GPU and host memory beside ucx_perftest of the same UCX (the
# bundle's, which FindTool picks through VELO_UCX_TOOLS). Its table goes to bench-table.txt. It
# takes the time the suite left, less a margin; with under 90 s left it is not started.
bench() {
	left=$((total - ($(date +%s) - start) - 20))
	if [ "$left" -lt 90 ]; then
		say "benchmark not run: $left s of the $total s left after the suite (it needs 90); run ./run.sh bench"
		return
	fi
	[ "$left" -gt 400 ] && left=400
	run gpu-bench "$left" env VELO_GPU_TLS="$bench_tls" VELO_GPU_BENCH=1 VELO_UCX_TOOLS="$here" \
		VELO_GPU_BENCH_OUT="$out/bench-table.txt" VELO_GPU_BENCH_BUDGET=$((left - 60)) \
		./gpu.test -test.v -test.count=1 -test.timeout="$((left - 5))s" -test.run '^TestGPUBench$'
	if [ -s "$out/bench-table.txt" ]; then
		sed 's/^/  /' "$out/bench-table.txt"
		cat "$out/bench-table.txt" >>"$out/summary.txt"
	fi
}
VELO_GPU_TLS=tcp,cuda_copy
export VELO_GPU_TLS
if [ "$mode" = bench ]; then
	bench
	say "done in $(($(date +%s) - start)) s, exit $rc; results in $out"
	exit $rc
fi
# ucx: the CUDA build's own checks (memory types through the typed paths, the CUDA calls).
run ucx-memtypes 60 ./ucx.test -test.v -test.count=1 -test.timeout=55s -test.run 'MemoryType|MemoryHost|CUDA'
# The two-process suite over tcp and cuda_copy, then over cuda_ipc between two GPUs if there are two.
# The limits add up to under 10 minutes with one extra test binary (60 + 300 + 100 + 100 s).
run gpu-tcp-cuda_copy 300 ./gpu.test -test.v -test.count=1 -test.timeout=290s -test.skip '^TestGPUBench$'
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
bench
say "done in $(($(date +%s) - start)) s, exit $rc; results in $out"
exit $rc
