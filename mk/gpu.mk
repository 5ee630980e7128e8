# The GPU suite (test/gpu): built here, run on a machine with an NVIDIA GPU and no network.
#
#   make test-gpu-bundle  build every binary the suite runs, linked with the static UCX with CUDA
#                         (make ucx-static-cuda), into bin/gpu-bundle with its run script: copy
#                         that folder to the GPU machine and run ./run.sh there (no Go, no source)
#   make test-gpu         the bundle's run.sh on this machine: the suite where there is a GPU,
#                         within 10 minutes; without a GPU it prints why and exits 0 (a skip)
#
# The bundle: gpu.test (the two-process GPU suite), ucx.test (the ucx module's memory-type tests),
# extra-*.test (the test binaries of GPU_BUNDLE_EXTRA), ucx_info of the same UCX, the rdma-core
# libraries for a node without them (lib/), MANIFEST and run.sh. Results go to
# bin/gpu-bundle/results-<time>/ (VELO_GPU_OUT=dir elsewhere).
GPU_BUNDLE := $(CURDIR)/bin/gpu-bundle
# Test packages of module velo (relative to velo/) built into the bundle as extra-<name>.test,
# each as name=package, e.g. rendezvous=./rendezvous. The velo API for GPU memory adds its own.
GPU_BUNDLE_EXTRA ?=
GPU_RDMA_LIBS := libibverbs.so.1 libmlx5.so.1 librdmacm.so.1 libnl-3.so.200 libnl-route-3.so.200

.PHONY: test-gpu-bundle test-gpu

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
	@for l in $(GPU_RDMA_LIBS); do p=$$(ldconfig -p | sed -n "s|.*$$l ([^)]*x86-64[^)]*) => ||p" | head -1); \
		[ -n "$$p" ] || { echo "test-gpu-bundle: $$l not found here (make deps installs rdma-core)"; exit 1; }; cp -L "$$p" $(GPU_BUNDLE)/lib/; done
	@{ echo "velo GPU bundle $$(git rev-parse --short HEAD)$$([ -z "$$(git status --porcelain -- ucx test/gpu velo)" ] || echo +changes), built $$(date -u +%Y-%m-%dT%H:%M:%SZ); UCX $$(readlink third_party/ucx/build-cuda | sed -e 's/^build-//' -e 's/-cuda$$//'), CUDA 11.8 (Debian 12), go $$($(GO) env GOVERSION)"; \
	  echo "needs on the node: NVIDIA driver >= 520 (libcuda.so.1, libnvidia-ml.so.1), glibc >= $$(ldd --version | sed -n '1s/.* //p')"; \
	  (cd $(GPU_BUNDLE) && sha256sum *.test ucx_info run.sh lib/*); } >$(GPU_BUNDLE)/MANIFEST
	@echo "test-gpu-bundle: $(GPU_BUNDLE) ($$(du -sh $(GPU_BUNDLE) | cut -f1)); copy it to the GPU machine and run ./run.sh there"

test-gpu: test-gpu-bundle
	@$(GPU_BUNDLE)/run.sh
