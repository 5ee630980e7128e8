# velobench, the benchmark operators run between two nodes (module tools/velobench). See
# docs/velobench.md.
#
#   make velobench        bin/velobench, linked with cgo against the same UCX as velo: the static
#                         one of make ucx-static (VELO_UCX_GO, Makefile), so it runs without
#                         VELO_UCX_TRUST_NETWORK; its version is git describe's, which the initiator
#                         and the target compare. A smoke run prints it and the UCX it links
#   make test-velobench   velobench local sweeps of every operation, put included (JSON schema,
#                         CSV, SVG, each point's kernel byte counts by lane checked against its
#                         path when run as root, the progress line on a pseudo-terminal, a target
#                         killed mid-sweep, SIGINT), the refusals, and a target and an initiator
#                         in two network namespaces over the filesystem and etcd backends (the
#                         latter over two links as velo's rails); under -race, on the system's
#                         shared UCX (whose ucx_perftest GET and PUT over tcp give the baselines;
#                         the tests trust the network of their own loopback and veths); about
#                         35 s on 2 cores with a warm cache
#   make lint-velobench   vet for CGO_ENABLED=0 too (the binary builds without cgo and says UCX is
#                         not compiled in)
#   make bench-velobench-overhead
#                         velobench's get point beside the RDMA-path benchmark's own get, in the
#                         same rounds of one command (rdmabench -only get -velobench): its last
#                         column is velobench over rdmabench (the target: within 5 %). Static UCX,
#                         UCX_TLS=tcp unless set; about a minute. Figures in docs/performance.md
#
# VELOBENCH_ARGS go to make velobench-local: VELOBENCH_ARGS='--blocks 4K-64M --plot out.svg'.
VELOBENCH_BIN ?= bin/velobench
VELOBENCH_VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)

.PHONY: velobench test-velobench lint-velobench velobench-local bench-velobench-overhead
TEST_TARGETS += test-velobench
LINT_TARGETS += lint-velobench

# The sweeps run the test binary itself as velobench (its TestMain), so no build comes first.
test-velobench: deps
	cd tools/velobench && $(GOTEST) -race ./...

velobench: deps $(VELO_UCX_DEP)
	@mkdir -p $(dir $(VELOBENCH_BIN))
	cd tools/velobench && $(VELO_UCX_GO) $(GO) build -ldflags '-X main.version=$(VELOBENCH_VERSION)' -o $(abspath $(VELOBENCH_BIN)) .
	$(VELOBENCH_BIN) version
	@echo "wrote $(VELOBENCH_BIN) (try: $(VELOBENCH_BIN) local --plot velobench.svg)"

# A default sweep of this host with the binary make velobench wrote.
velobench-local: velobench
	UCX_TLS=$${UCX_TLS:-tcp} $(VELOBENCH_BIN) local $(VELOBENCH_ARGS)

lint-velobench: deps
	cd tools/velobench && CGO_ENABLED=0 $(GO) vet ./... && CGO_ENABLED=0 $(GO) build -o /dev/null .

bench-velobench-overhead: velobench
	cd test && $(VELO_UCX_GO) $(RDMA_TEST_ENV) UCX_TLS=$${UCX_TLS:-tcp} $(GO) run ./rdmapath/cmd/rdmabench -only get -velobench $(abspath $(VELOBENCH_BIN)) $(BENCH_ARGS)
