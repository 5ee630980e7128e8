# velo runtime (module velo/). Owned by the runtime; see velo/doc.go.
.PHONY: test-velo
TEST_TARGETS += test-velo
test-velo: deps
	cd velo && $(GOTEST) -race ./...
