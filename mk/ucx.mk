# ucx binding (module ucx/).
.PHONY: test-ucx
TEST_TARGETS += test-ucx
test-ucx: deps
	cd ucx && $(GOTEST) ./...
