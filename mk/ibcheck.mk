# ibcheck, the node preflight (module tools/ibcheck). See docs/ibcheck.md.
#
#   make test-ibcheck     the golden tests (every fixture tree, environment combinations), the real
#                         UCX probe, the real and the static binary, and the memlock failure in a
#                         child without CAP_IPC_LOCK; under -race on the system's shared UCX (whose
#                         missing software RMA guard ucx_rma_guard fails), then the real UCX tests
#                         linked with velo's static UCX (the guard passes), then again with
#                         CGO_ENABLED=0 (about 1.5 minutes on 2 cores with a warm build cache)
#   make ibcheck          bin/ibcheck, linked with cgo against the same UCX as velo: the static one
#                         of make ucx-static (VELO_UCX_GO, Makefile)
#   make ibcheck-static   bin/ibcheck-static, a CGO_ENABLED=0 static binary: the pure-Go checks run,
#                         the rest say "not compiled in"
#   make lint-ibcheck     vet for CGO_ENABLED=0 and a non-Linux system too
IBCHECK_BIN ?= bin/ibcheck
IBCHECK_STATIC ?= bin/ibcheck-static

.PHONY: test-ibcheck ibcheck ibcheck-static lint-ibcheck
TEST_TARGETS += test-ibcheck
LINT_TARGETS += lint-ibcheck

test-ibcheck: deps $(VELO_UCX_DEP)
	cd tools/ibcheck && $(GOTEST) -race ./...
	cd tools/ibcheck && $(VELO_UCX_GO) $(GOTEST) -run 'RMAGuardReal|UCXProbe' .
	cd tools/ibcheck && CGO_ENABLED=0 $(GOTEST) ./...

ibcheck: deps $(VELO_UCX_DEP)
	@mkdir -p $(dir $(IBCHECK_BIN))
	cd tools/ibcheck && $(VELO_UCX_GO) $(GO) build -o $(abspath $(IBCHECK_BIN)) .
	@echo "wrote $(IBCHECK_BIN)"

# The smoke run reads a fixture tree, so it passes on any machine; --need-memlock keeps the memlock
# verdict out of it.
ibcheck-static: deps
	@mkdir -p $(dir $(IBCHECK_STATIC))
	cd tools/ibcheck && CGO_ENABLED=0 $(GO) build -trimpath -o $(abspath $(IBCHECK_STATIC)) .
	@out=$$(ldd $(IBCHECK_STATIC) 2>&1 || true); case "$$out" in \
		*"not a dynamic executable"*|*"statically linked"*) echo "ldd $(IBCHECK_STATIC): $$out";; \
		*) echo "ibcheck-static: $(IBCHECK_STATIC) is not static: $$out"; exit 1;; esac
	$(IBCHECK_STATIC) --sysfs verbs/testdata/sysfs/cx7-ib-active --need-memlock 4K >/dev/null
	@echo "wrote $(IBCHECK_STATIC); it runs (try: $(IBCHECK_STATIC) --sysfs verbs/testdata/sysfs/cx7-roce-active)"

lint-ibcheck: deps
	cd tools/ibcheck && CGO_ENABLED=0 $(GO) vet ./... && GOOS=darwin CGO_ENABLED=0 $(GO) vet ./...
