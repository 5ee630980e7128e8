# Cross-module integration tests (module test/).
.PHONY: test-integration
TEST_TARGETS += test-integration
test-integration: deps
	cd test && $(GOTEST) ./...
