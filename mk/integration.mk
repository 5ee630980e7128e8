# Cross-module integration tests (module test/).
.PHONY: test-integration
TEST_TARGETS += test-integration
# test/rdma runs in its own target (test-rendezvous-rdma, mk/rdma.mk), under cgocheck2.
test-integration: deps
	cd test && $(GOTEST) $$($(GO) list ./... | grep -v '/test/rdma')
