# ucx binding (module ucx/). See ucx/README.md and docs/ucx.md.
#
# UCX_DIR=/opt/ucx builds against the UCX installed under that prefix instead of the
# system one: cgo finds it through its pkg-config file, and an rpath makes the binaries
# load that libucp at run time (UCX then finds its transport plugins next to it, in
# $(UCX_DIR)/lib/ucx). Exported here so every target, in every module, sees the same UCX.
ifneq ($(strip $(UCX_DIR)),)
export PKG_CONFIG_PATH := $(UCX_DIR)/lib/pkgconfig:$(UCX_DIR)/lib64/pkgconfig$(if $(PKG_CONFIG_PATH),:$(PKG_CONFIG_PATH))
export CGO_LDFLAGS := $(strip $(CGO_LDFLAGS) -Wl,-rpath,$(UCX_DIR)/lib -Wl,-rpath,$(UCX_DIR)/lib64)
# The benchmarks' baselines (ucx_perftest) come from the same install (ucx.FindTool).
export VELO_UCX_TOOLS ?= $(UCX_DIR)/bin
endif

.PHONY: test-ucx bench-rma bench-ucx-delivery
TEST_TARGETS += test-ucx
BENCH_TARGETS += bench-rma bench-ucx-delivery

# The suite runs three times: with -race and the environment as it is (UCX_TLS unset on
# CI; the tests pin tcp in code); under GOEXPERIMENT=cgocheck2 with UCX_TLS=tcp set in the
# environment (kept when the caller set another value, e.g. on InfiniBand); and with
# protocol v2 (UCX_PROTO_ENABLE=y, experimental on Debian's UCX 1.13; the runnable examples
# use the guarded GET, which v2 on 1.13 refuses, so that run leaves them out). Then the same
# package is vetted and tested without cgo, where internal/capi's twin answers every call with
# "not compiled" (the non-Linux build: make lint-ucx). About 1.5 minutes on 2 cores, plus a one-time
# cgocheck2 rebuild of the standard library (about a minute).
test-ucx: deps
	cd ucx && $(GOTEST) -race ./...
	cd ucx && UCX_TLS=$${UCX_TLS:-tcp} GOEXPERIMENT=cgocheck2 $(GOTEST) ./...
	cd ucx && UCX_PROTO_ENABLE=y $(GOTEST) -run 'Test|Fuzz' ./...
	cd ucx && CGO_ENABLED=0 $(GO) vet ./... && CGO_ENABLED=0 $(GOTEST) ./...

# The non-Linux twins build (a darwin standard library is compiled once for this; lint, not test).
.PHONY: lint-ucx
LINT_TARGETS += lint-ucx
lint-ucx: deps
	cd ucx && GOOS=darwin CGO_ENABLED=0 $(GO) vet ./...

# Active-message round trips, registration cost, GET bandwidth and many small GETs (GetMany),
# each beside its baseline from the same run (ucx_perftest -t ucp_am_lat; mmap+mlock;
# ucx_perftest -t ucp_get, -O for many, with the same UCX_TLS). Prints, asserts nothing.
bench-rma: deps
	cd ucx && $(GO) run ./internal/benchrma

# How a received active message reaches Go: the C event ring the binding uses, against a
# cgo callback per message (compiled in only with the ucx_cbbench tag). The figures and the
# choice are in docs/ucx.md.
bench-ucx-delivery: deps
	cd ucx && $(GO) test -tags ucx_cbbench -run '^$$' -bench AMDelivery -benchtime 100000x -count 5 .
