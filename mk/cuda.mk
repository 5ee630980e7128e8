# CUDA: the CUDA 11.8 sysroot from Debian 12's non-free packages (third_party/cuda), the static UCX
# built with it (its cuda_copy and cuda_ipc transports), and the ucx module's build tag cuda.
#
#   make cuda-sysroot     fetch nvidia-cuda-dev, libcudart11.0 and libnvidia-ml-dev by name and pinned
#                         version from bookworm non-free (apt, signature checked, private state; the
#                         machine's apt configuration is not touched), check their SHA-256, extract
#                         the headers, libcudart_static.a and the driver stubs into
#                         third_party/cuda/root (cached by a stamp; see third_party/cuda/README.md)
#   make ucx-static-cuda  the static UCX of make ucx-static, same source and patch set, configured
#                         --with-cuda against that sysroot, into third_party/ucx/build-<ver>-cuda,
#                         linked as build-cuda (what -tags cuda,ucx_static links); cached by a stamp
#   make ucx-static-cuda-tools  its ucx_info and ucx_perftest (build-cuda/bin)
#   make test-cuda        the cuda-tagged build: compiles, links and vets the ucx and velo modules
#                         and the GPU suite (test/gpu) with -tags cuda,ucx_static, runs the
#                         ucx module's memory-type tests under cgocheck2 (host memory through the
#                         typed paths; the CUDA calls answer the stub driver's error) and the tests
#                         of CUDA_VELO_PKGS and ibcheck's CUDA report, checks that -tags cuda without ucx_static is refused
#                         by name (make test runs it)
#
# Nothing of the default build needs any of this: only the targets above and the cuda tag do.
CUDA_SYSROOT_RECIPE := third_party/cuda/cuda-sysroot.sh
CUDA_ROOT := $(CURDIR)/third_party/cuda/root
CUDA_TAGS := cuda,ucx_static

# The ucx module's tests test-cuda runs (a go test -run pattern): everything that takes a memory
# type, and the twins of the CUDA wrappers.
CUDA_UCX_TESTS ?= MemoryType|MemoryHost|MemoryCUDA|CUDA|Twin
# velo packages (relative to velo/, e.g. ./rendezvous/...) whose tests also run under the tag, and
# their -run pattern: the velo API's memory-type tests (velo/memory*_test.go: host memory through
# the device path, refusals, two processes over the real UCX transport), and the same-host path's
# CUDA IPC (velo/transport/shm: the protocol, and the stub driver's refusals falling back to UCX;
# the CUDA IPC frames of velo/internal/wire). Extend both as the GPU API grows.
CUDA_VELO_PKGS ?= . ./rendezvous/... ./internal/wire ./transport/ucxtransport ./transport/shm
CUDA_VELO_TESTS ?= Memory|RDMADescriptor|RDMAOffer|PublicErrorsMatchTheirSentinels|ErrorFamiliesHaveOneRoot|CUDAIPC

.PHONY: cuda-sysroot ucx-static-cuda ucx-static-cuda-tools test-cuda
TEST_TARGETS += test-cuda

# As UCX_STATIC_GO (mk/ucx-static.mk), with the CUDA build's stamp: a rebuilt UCX relinks. The
# binaries need libcuda.so.1 to start; on a machine without the NVIDIA driver the sysroot's run/
# folder supplies the toolkit's stub, and every CUDA call then fails with CUDA_ERROR_STUB_LIBRARY.
CUDA_GO = CGO_CPPFLAGS="$${CGO_CPPFLAGS:-} -DVELO_UCX_BUILD=$$(sha256sum $(CURDIR)/third_party/ucx/build-cuda/.velo-ucx-stamp | cut -c1-16)"
CUDA_RUN_ENV = env $$(ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 ' || echo LD_LIBRARY_PATH=$(CUDA_ROOT)/run$${LD_LIBRARY_PATH:+:$$LD_LIBRARY_PATH})

cuda-sysroot: deps
	@$(CUDA_SYSROOT_RECIPE) build

ucx-static-cuda: cuda-sysroot
	@VELO_UCX_CUDA=$(CUDA_ROOT) $(UCX_STATIC_RECIPE) build

ucx-static-cuda-tools: cuda-sysroot
	@VELO_UCX_CUDA=$(CUDA_ROOT) $(UCX_STATIC_RECIPE) tools

ifneq ($(strip $(UCX_DIR)),)
test-cuda: deps
	@echo "test-cuda: skipped: UCX_DIR=$(UCX_DIR) selects a preinstalled UCX, and the cuda tag links the static UCX built with CUDA (unset UCX_DIR)"
else
test-cuda: ucx-static-cuda
	@echo "test-cuda: UCX $$(readlink third_party/ucx/build-cuda | sed -e 's/^build-//' -e 's/-cuda$$//') with CUDA $$(sed -n 's/^#define CUDA_VERSION //p' $(CUDA_ROOT)/include/cuda.h) (static)"
	@out=$$(cd ucx && $(GO) vet -tags cuda ./internal/capi 2>&1) && { echo "test-cuda: -tags cuda without ucx_static compiled"; exit 1; }; \
	grep -q 'cuda_tag_needs_ucx_static__run_make_ucx_static_cuda' <<<"$$out" || { echo "$$out"; echo "test-cuda: -tags cuda without ucx_static failed for another reason"; exit 1; }; \
	echo "test-cuda: -tags cuda without ucx_static is refused by name, as it should be"
	cd ucx && $(CUDA_GO) $(GO) vet -tags $(CUDA_TAGS) ./...
	cd ucx && $(CUDA_GO) $(CUDA_RUN_ENV) GOEXPERIMENT=cgocheck2 $(GOTEST) -tags $(CUDA_TAGS) -run '$(CUDA_UCX_TESTS)' . ./internal/capi
	cd velo && $(CUDA_GO) $(GO) build -tags $(CUDA_TAGS) ./... && $(CUDA_GO) $(GO) vet -tags $(CUDA_TAGS) ./...
	cd test && $(CUDA_GO) $(GO) vet -tags $(CUDA_TAGS) ./gpu
	cd test && $(CUDA_GO) $(CUDA_RUN_ENV) UCX_TLS=$${UCX_TLS:-tcp} $(GOTEST) -tags $(CUDA_TAGS) -run 'Harness' ./gpu
	$(if $(strip $(CUDA_VELO_PKGS)),cd velo && $(CUDA_GO) $(CUDA_RUN_ENV) $(RDMA_TEST_ENV) UCX_TLS=$${UCX_TLS:-tcp} $(GOTEST) -tags $(CUDA_TAGS) -run '$(CUDA_VELO_TESTS)' $(CUDA_VELO_PKGS))
	cd tools/ibcheck && $(CUDA_GO) $(CUDA_RUN_ENV) $(GOTEST) -tags $(CUDA_TAGS) -run 'UCXProbe|GPUOnThisMachine' .
	@echo "test-cuda: passed"
endif
