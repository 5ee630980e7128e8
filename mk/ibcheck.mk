# ibcheck node preflight (module tools/ibcheck).
.PHONY: test-ibcheck
TEST_TARGETS += test-ibcheck
test-ibcheck: deps
	cd tools/ibcheck && $(GOTEST) ./...
