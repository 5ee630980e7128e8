# Static UCX from source (third_party/ucx) and the Go link that uses it (-tags ucx_static).
#
#   make ucx-static       build UCX into third_party/ucx/build (cached by a stamp; see third_party/ucx/README.md)
#   make test-static      recipe refusals; a static cgo binary (ucp_init over tcp, ldd, constructors,
#                         logging); the ucx module's tests linked against the static UCX
#   make test-ctor-order  the mlx5 memory domains are tried before the verbs one, in the static link
#
# The recipe reads its variables from the environment or the make command line: UCX_TARBALL,
# UCX_DIR, UCX_EXTRA_CONFIGURE, VELO_UCX_IGNORE_MISSING_HEADERS, CC, CC_<target>, GOARCH, CFLAGS,
# CPATH, C_INCLUDE_PATH, ...
UCX_STATIC_RECIPE := third_party/ucx/ucx-static.sh
# Which of the ucx module's tests test-static runs against the static UCX (a go test -run pattern).
UCX_STATIC_UCX_TESTS ?= .

.PHONY: ucx-static test-static test-ctor-order
TEST_TARGETS += test-static

ucx-static: deps
	@$(UCX_STATIC_RECIPE) build

# Both run under GOEXPERIMENT=cgocheck2 (the cgo pointer checks), like every cgo suite here.
# With UCX_DIR set there is no static build to link against: the recipe's refusal tests still run,
# the static-link tests are skipped with a message.
ifneq ($(strip $(UCX_DIR)),)
test-static: deps
	@echo "test-static: UCX_DIR=$(UCX_DIR) selects a preinstalled UCX, so there is no static build to link; running the recipe tests only"
	cd test && $(GOTEST) ./ucxstatic/...

test-ctor-order: deps
	@echo "test-ctor-order: skipped: UCX_DIR=$(UCX_DIR) selects a preinstalled UCX; the check is about the static link (unset UCX_DIR)"
else
test-static: ucx-static
	cd test && GOEXPERIMENT=cgocheck2 $(GOTEST) -tags ucx_static ./ucxstatic/...
	cd ucx && GOEXPERIMENT=cgocheck2 $(GOTEST) -tags ucx_static -run '$(UCX_STATIC_UCX_TESTS)' ./...

test-ctor-order: ucx-static
	cd test && GOEXPERIMENT=cgocheck2 $(GOTEST) -tags ucx_static -run 'TestCtorOrder' -v ./ucxstatic/
endif
