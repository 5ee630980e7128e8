# verbs, mlx5dv and rdmacm modules (docs/verbs.md).
#
#   make test-verbs   pure-Go packages under -race, cgo packages under GOEXPERIMENT=cgocheck2, then
#                     every module again with CGO_ENABLED=0 (the not-compiled-in twins)
#   make lint-verbs   the twins also vet for CGO_ENABLED=0 and for a non-Linux system
#
# Hardware tests skip with a message unless VELO_TEST_RDMA_DEVICE=<device>:<port> is set (rdmacm's
# also wants VELO_TEST_RDMA_IP, an address on that port).
VERBS_MODULES := verbs mlx5dv rdmacm

.PHONY: test-verbs lint-verbs
TEST_TARGETS += test-verbs
LINT_TARGETS += lint-verbs

test-verbs: deps
	cd verbs && $(GOTEST) -race . ./verbstest ./topo
	cd verbs && GOEXPERIMENT=cgocheck2 $(GOTEST) ./ibv
	cd mlx5dv && GOEXPERIMENT=cgocheck2 $(GOTEST) ./...
	cd rdmacm && GOEXPERIMENT=cgocheck2 $(GOTEST) ./...
	@for m in $(VERBS_MODULES); do \
		echo "$$m (CGO_ENABLED=0)"; \
		(cd $$m && CGO_ENABLED=0 $(GO) build ./... && CGO_ENABLED=0 $(GOTEST) ./...); \
	done

lint-verbs: deps
	@for m in $(VERBS_MODULES); do \
		echo "vet $$m (CGO_ENABLED=0, GOOS=darwin)"; \
		(cd $$m && CGO_ENABLED=0 $(GO) vet ./... && GOOS=darwin $(GO) vet ./...); \
	done
