# Cross-module integration tests (module test/).
.PHONY: test-integration
TEST_TARGETS += test-integration
# test/rdma, test/ucxstatic and test/faults run in their own targets (test-rendezvous-rdma in mk/rdma.mk,
# test-static in mk/ucx-static.mk, test-faults in mk/faults.mk); the first two under cgocheck2.
test-integration: deps
	cd test && $(GOTEST) $$($(GO) list ./... | grep -v -e '/test/rdma' -e '/test/ucxstatic' -e '/test/faults')
