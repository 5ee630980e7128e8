# The GPU suite (test/gpu): built here, run on a machine with an NVIDIA GPU and no network.
#
#   make test-gpu-bundle  build every binary the suite runs, linked with the static UCX with CUDA
#                         (make ucx-static-cuda), into bin/gpu-bundle with its run script: copy
#                         that folder to the GPU machine and run ./run.sh there (no Go, no source)
#   make test-gpu         the bundle's run.sh on this machine: the suite where there is a GPU, then
#                         the benchmark if time is left, within 10 minutes; without a GPU it
#                         prints why and exits 0 (a skip)
#   make bench-gpu        the bundle's benchmark alone (run.sh bench): velo's GPU→GPU, host→host,
#                         host→GPU and GPU→host gets of 8, 64 and 256 MiB beside ucx_perftest -m
#                         cuda of the same UCX, ratios printed (docs/performance.md, "GPU");
#                         without a GPU it prints why and exits 0 before building anything
#
# The bundle: gpu.test (the two-process GPU suite and its benchmark), ucx.test (the ucx module's
# memory-type tests), extra-*.test (the test binaries of GPU_BUNDLE_EXTRA), ucx_info and
# ucx_perftest of the same UCX (this perftest with its CUDA memory allocator linked in), the
# rdma-core and OpenMP libraries for a node without them (lib/), MANIFEST and run.sh. Results go
# to bin/gpu-bundle/results-<time>/ (VELO_GPU_OUT=dir elsewhere).
GPU_BUNDLE := $(CURDIR)/bin/gpu-bundle
# Test packages of module velo (relative to velo/) built into the bundle as extra-<name>.test,
# each as name=package, e.g. rendezvous=./rendezvous. The velo API for GPU memory adds its own.
GPU_BUNDLE_EXTRA ?=
GPU_RDMA_LIBS := libibverbs.so.1 libmlx5.so.1 librdmacm.so.1 libnl-3.so.200 libnl-route-3.so.200 libgomp.so.1
# ucx_perftest -m cuda needs perftest's CUDA memory allocator, which UCX builds as a loadable
# module (libucx_perftest_cuda, src/tools/perf/cuda) that a static link never loads, so the
# recipe's build-cuda/bin/ucx_perftest answers -m cuda with "Unsupported memory types". The
# bundle's perftest is the same link from the same objects (third_party/ucx/ucx-static.sh,
# build_tools) with that allocator's one source, cuda_alloc.c, compiled from the CUDA build's tree
# and linked in, with the CUDA runtime it calls (the sysroot's libcudart_static.a): its
# constructor registers the allocator as the module's would. Nothing of the recipe's trees
# changes; the object goes to bin/gpu-bundle-obj.
GPU_PERFTEST_OBJ := $(CURDIR)/bin/gpu-bundle-obj

.PHONY: test-gpu-bundle test-gpu bench-gpu
BENCH_TARGETS += bench-gpu

test-gpu-bundle: ucx-static-cuda-tools
	@rm -rf $(GPU_BUNDLE); mkdir -p $(GPU_BUNDLE)/lib
	cd test && $(CUDA_GO) $(GO) vet -tags $(CUDA_TAGS) ./gpu
	cd test && $(CUDA_GO) $(GO) test -c -tags $(CUDA_TAGS) -o $(GPU_BUNDLE)/gpu.test ./gpu
	cd ucx && $(CUDA_GO) $(GO) test -c -tags $(CUDA_TAGS) -o $(GPU_BUNDLE)/ucx.test .
	@for e in $(GPU_BUNDLE_EXTRA); do \
		echo "test-gpu-bundle: extra-$${e%%=*}.test from velo/$${e#*=}"; \
		(cd velo && $(CUDA_GO) $(GO) test -c -tags $(CUDA_TAGS) -o $(GPU_BUNDLE)/extra-$${e%%=*}.test $${e#*=}) || exit 1; \
	done
	@cp third_party/ucx/build-cuda/bin/ucx_info test/gpu/run.sh $(GPU_BUNDLE)/
	@set -e; obj=third_party/ucx/work/cuda/obj-$$(readlink third_party/ucx/build-cuda | sed 's/^build-//'); perf=$$obj/src/tools/perf; \
	src=$$(sed -n 's/^abs_top_srcdir = //p' $$obj/Makefile); \
	[ -f $$perf/lib/.libs/libucxperf.a ] && [ -f $$src/src/tools/perf/cuda/cuda_alloc.c ] || { echo "test-gpu-bundle: no perftest objects in $$perf or no $$src/src/tools/perf/cuda/cuda_alloc.c (make ucx-static-cuda-tools)"; exit 1; }; \
	rm -rf $(GPU_PERFTEST_OBJ); mkdir -p $(GPU_PERFTEST_OBJ); \
	$(CC) -O3 -g -DHAVE_CONFIG_H -I$$obj -I$$obj/src -I$$src/src -I$(CUDA_ROOT)/include -c $$src/src/tools/perf/cuda/cuda_alloc.c -o $(GPU_PERFTEST_OBJ)/cuda_alloc.o; \
	$(CC) -fopenmp -o $(GPU_BUNDLE)/ucx_perftest $$perf/ucx_perftest-*.o $(GPU_PERFTEST_OBJ)/cuda_alloc.o $$perf/lib/.libs/libucxperf.a \
		third_party/ucx/build-cuda/lib/libvelo_ucx.a $(CUDA_ROOT)/lib/libcudart_static.a -L$(CUDA_ROOT)/lib/stubs -lcuda -lnvidia-ml \
		-libverbs -lmlx5 -lrdmacm -lpthread -ldl -lrt -lm -lstdc++; \
	syms=$$(nm $(GPU_BUNDLE)/ucx_perftest); for f in ucx_perf_cuda_init cudaGetDeviceCount; do \
		grep -qE " [Tt] $$f$$" <<<"$$syms" || { echo "test-gpu-bundle: the bundle's ucx_perftest lacks $$f (perftest's CUDA allocator or the CUDA runtime it calls)"; exit 1; }; done
	@for l in $(GPU_RDMA_LIBS); do p=$$(ldconfig -p | sed -n "s|.*$$l ([^)]*x86-64[^)]*) => ||p" | head -1); \
		[ -n "$$p" ] || { echo "test-gpu-bundle: $$l not found here (make deps installs rdma-core and gcc's libgomp1)"; exit 1; }; cp -L "$$p" $(GPU_BUNDLE)/lib/; done
	@{ echo "velo GPU bundle $$(git rev-parse --short HEAD)$$([ -z "$$(git status --porcelain -- ucx test/gpu velo)" ] || echo +changes), built $$(date -u +%Y-%m-%dT%H:%M:%SZ); UCX $$(readlink third_party/ucx/build-cuda | sed -e 's/^build-//' -e 's/-cuda$$//'), CUDA 11.8 (Debian 12), go $$($(GO) env GOVERSION)"; \
	  echo "needs on the node: NVIDIA driver >= 520 (libcuda.so.1, libnvidia-ml.so.1), glibc >= $$(ldd --version | sed -n '1s/.* //p')"; \
	  (cd $(GPU_BUNDLE) && sha256sum *.test ucx_info ucx_perftest run.sh lib/*); } >$(GPU_BUNDLE)/MANIFEST
	@echo "test-gpu-bundle: $(GPU_BUNDLE) ($$(du -sh $(GPU_BUNDLE) | cut -f1)); copy it to the GPU machine and run ./run.sh there"

test-gpu: test-gpu-bundle
	@$(GPU_BUNDLE)/run.sh

# The benchmark alone. The GPU check comes first (run.sh check), so that make bench on a machine
# without a GPU skips it without building the CUDA UCX and the bundle.
bench-gpu:
	@if test/gpu/run.sh check bench-gpu; then $(MAKE) --no-print-directory test-gpu-bundle && $(GPU_BUNDLE)/run.sh bench; fi
