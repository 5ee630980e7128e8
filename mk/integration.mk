# Cross-module integration tests (module test/).
.PHONY: test-integration
TEST_TARGETS += test-integration
# test/rdmapath, test/ucxstatic and test/faults run in their own targets (test-rendezvous-rdma in mk/rdma.mk,
# test-static in mk/ucx-static.mk, test-faults in mk/faults.mk); the first two under cgocheck2.
# test/release runs in test-release (mk/release.mk). test/attack runs in test-attack (mk/attack.mk), linked with the static UCX its victim needs.
# test/pushfaults runs in test-push (mk/push.mk) and test/multirail in test-rails (mk/rails.mk), both
# linked with the static UCX (their processes run velo's UCX transport); test-rails runs alone.
test-integration: deps
	cd test && $(GOTEST) $$($(GO) list ./... | grep -v -e '/test/rdmapath' -e '/test/ucxstatic' -e '/test/faults' -e '/test/firstmodule' -e '/test/release' -e '/test/attack' -e '/test/pushfaults' -e '/test/multirail')

# The README's "Using velo from your own module" steps, word for word, in a fresh module outside
# the workspace (GOWORK=off), building velo/examples/first, which must move its payloads on
# rdma/ok. Needs the Go module proxy for go mod tidy, like any fresh module. The steps build with
# -tags ucx_static themselves (the test clears GOFLAGS); the build's stamp reaches them through
# CGO_CPPFLAGS (VELO_UCX_GO, Makefile).
.PHONY: test-first-module
TEST_TARGETS += test-first-module
test-first-module: deps $(VELO_UCX_DEP)
	cd test && $(VELO_UCX_GO) $(RDMA_TEST_ENV) $(GOTEST) ./firstmodule/...
