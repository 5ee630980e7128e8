# Static UCX from source (third_party/ucx) and the Go link that uses it (-tags ucx_static).
#
#   make ucx-static       build UCX, with velo's patch set (third_party/ucx/patches), into
#                         third_party/ucx/build-<version>, linked as build (cached by a stamp; see
#                         third_party/ucx/README.md): 1.22.0 when its source is beside the checkout
#                         (../shared/third_party) or given as UCX_TARBALL, else Debian's 1.13.1.
#                         The library only: what make demo and the suites link
#   make ucx-static-tools the same build's ucx_info and ucx_perftest (build/bin), on demand: the
#                         static tests and the benchmarks that compare with ucx_perftest need them
#   make test-static      recipe refusals; a static cgo binary (ucp_init over tcp, ldd, constructors,
#                         logging); the ucx module's, the UCX transport's and the rendezvous RDMA
#                         tests linked against that static UCX (make test runs it)
#   make test-static-other  the same against the other release: Debian's 1.13.1 when make test
#                         took 1.22 (and the reverse when a 1.22 source is there), not in make test
#   make test-ctor-order  the mlx5 memory domains are tried before the verbs one, in the static link
#   make bench-static     the RDMA-path and engine benchmarks linked against the static UCX, beside
#                         that build's own ucx_perftest (prints ratios, asserts nothing)
#   make ucx-gtest        UCX's own gtest (its am, tag, keepalive, wireup, peer-failure, sockaddr,
#                         stream and tcp groups) against UCX 1.22.0 with the patch set, built in
#                         third_party/ucx/work/gtest-1.22.0; fails on any failure the README does not
#                         list as an expected refusal (third_party/ucx/README.md, "UCX's own
#                         tests"). Not in make test: the build and the run take tens of minutes
#
# The recipe reads its variables from the environment or the make command line: UCX_TARBALL,
# UCX_DIR, UCX_EXTRA_CONFIGURE, VELO_UCX_IGNORE_MISSING_HEADERS, CC, CC_<target>, GOARCH, CFLAGS,
# CPATH, C_INCLUDE_PATH, ...
UCX_STATIC_RECIPE := third_party/ucx/ucx-static.sh
# Which of the ucx module's tests test-static runs against the static UCX (a go test -run pattern).
UCX_STATIC_UCX_TESTS ?= .

.PHONY: ucx-static ucx-static-tools test-static test-static-other test-ctor-order bench-static ucx-gtest
TEST_TARGETS += test-static

# The go command does not look inside an archive named in #cgo LDFLAGS, so a rebuilt or switched
# UCX would leave cached test binaries linked against the old one. The stamp of the build in use
# goes into CGO_CPPFLAGS, which is part of every cgo package's cache key.
UCX_STATIC_GO = CGO_CPPFLAGS="$${CGO_CPPFLAGS:-} -DVELO_UCX_BUILD=$$(sha256sum $(CURDIR)/third_party/ucx/build/.velo-ucx-stamp | cut -c1-16)"
# The suites that run against the static UCX: the binding's, the UCX transport's, the RDMA path's.
define ucx_static_suites
	cd test && $(UCX_STATIC_GO) GOEXPERIMENT=cgocheck2 $(GOTEST) -tags ucx_static ./ucxstatic/...
	cd ucx && $(UCX_STATIC_GO) GOEXPERIMENT=cgocheck2 $(GOTEST) -tags ucx_static -run '$(UCX_STATIC_UCX_TESTS)' ./...
	cd velo && $(UCX_STATIC_GO) UCX_TLS=$${UCX_TLS:-tcp} $(GOTEST) -tags ucx_static ./transport/ucxtransport/... ./rendezvous/rdma/...
	cd velo && $(UCX_STATIC_GO) $(RDMA_TEST_ENV) $(GOTEST) -tags ucx_static -run 'RDMA|GetPinned|UCXTransport' .
endef

ucx-static: deps
	@$(UCX_STATIC_RECIPE) build

ucx-static-tools: deps
	@$(UCX_STATIC_RECIPE) tools

# UCX_GTEST_GROUPS picks groups (ucx-gtest.sh groups lists them); empty runs them all.
UCX_GTEST_GROUPS ?=
ucx-gtest: deps
	@third_party/ucx/ucx-gtest.sh run $(UCX_GTEST_GROUPS)

# Both run under GOEXPERIMENT=cgocheck2 (the cgo pointer checks), like every cgo suite here.
# With UCX_DIR set there is no static build to link against: the recipe's refusal tests still run,
# the static-link tests are skipped with a message.
ifneq ($(strip $(UCX_DIR)),)
test-static: deps
	@echo "test-static: UCX_DIR=$(UCX_DIR) selects a preinstalled UCX, so there is no static build to link; running the recipe tests only"
	cd test && $(GOTEST) ./ucxstatic/...

test-ctor-order: deps
	@echo "test-ctor-order: skipped: UCX_DIR=$(UCX_DIR) selects a preinstalled UCX; the check is about the static link (unset UCX_DIR)"
test-static-other: deps
	@echo "test-static-other: skipped: UCX_DIR=$(UCX_DIR) selects a preinstalled UCX"
bench-static: deps
	@echo "bench-static: skipped: UCX_DIR=$(UCX_DIR) selects a preinstalled UCX; make bench-rendezvous-rdma benchmarks it"
else
test-static: ucx-static-tools
	@echo "test-static: UCX $$(readlink third_party/ucx/build | sed 's/^build-//') (static)"
	$(ucx_static_suites)

# The other release: Debian's 1.13.1 when the default is 1.22, 1.22 when the default fell back to
# 1.13.1 and UCX_TARBALL names a 1.22 source. build/ is pointed back at the default at the end.
test-static-other: deps
	@if [ "$$($(UCX_STATIC_RECIPE) version 2>/dev/null)" = 1.13.1 ] && [ -z "$${UCX_TARBALL:-}" ]; then \
		echo "test-static-other: the default is Debian's 1.13.1 and no other source is given (UCX_TARBALL=path of a 1.22 source)"; exit 1; fi
	@if [ "$$($(UCX_STATIC_RECIPE) version 2>/dev/null)" = 1.13.1 ]; then $(UCX_STATIC_RECIPE) tools; else UCX_SOURCE=debian $(UCX_STATIC_RECIPE) tools; fi
	@echo "test-static-other: UCX $$(readlink third_party/ucx/build | sed 's/^build-//') (static)"
	$(ucx_static_suites)
	@env -u UCX_TARBALL $(UCX_STATIC_RECIPE) build

test-ctor-order: ucx-static
	cd test && $(UCX_STATIC_GO) GOEXPERIMENT=cgocheck2 $(GOTEST) -tags ucx_static -run 'TestCtorOrder' -v ./ucxstatic/

bench-static: ucx-static-tools
	cd test && $(UCX_STATIC_GO) $(RDMA_TEST_ENV) UCX_TLS=$${UCX_TLS:-tcp} $(GO) run -tags ucx_static ./rdmapath/cmd/rdmabench
	cd ucx && $(UCX_STATIC_GO) UCX_TLS=$${UCX_TLS:-tcp} $(GO) run -tags ucx_static ./internal/benchrma
endif
