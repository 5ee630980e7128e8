# velo runtime (module velo/): see docs/velo.md.
#   test-velo   every package under -race, fuzz seed corpora included, except what test-ucx-transport
#               and test-rdma-registry run (about 1 min on 2 cores)
#   bench-velo  chunked Get and messenger latency beside raw TCP, as ratios (about 20 s)
#   (make demo is the rendezvous RDMA example: mk/rdma.mk; the TCP-only example runs with
#    cd velo && go run ./examples/rendezvous_two_proc)
.PHONY: test-velo bench-velo
TEST_TARGETS += test-velo
BENCH_TARGETS += bench-velo
LINT_TARGETS += lint-velo

# The UCX transport, the RDMA registry and the runtime's RDMA tests have suites of their own
# (test-ucx-transport, test-rdma-registry), so this one leaves them out rather than run them twice.
VELO_OWN_PACKAGES = $$($(GO) list ./... | grep -v -e /transport/ucxtransport -e /rendezvous/rdma -e /examples/internal)
# Some of package velo's own tests start a real UCX transport (the metric list, authentication), so
# the suite links velo's static UCX like the other velo-level UCX suites (VELO_UCX_GO, Makefile).
test-velo: deps $(VELO_UCX_DEP)
	cd velo && $(VELO_UCX_GO) VELO_REQUIRE_BROWSER=1 $(GOTEST) -race -skip 'RDMA|GetPinned|UCXTransport' $(VELO_OWN_PACKAGES)
	@# The API guide a new user reads first must resolve from the top of the checkout (go.mod there).
	$(GO) doc github.com/velo-go/velo/velo > /dev/null

bench-velo: deps
	cd velo && $(GO) run ./internal/bench

# Package velo and everything it imports stay pure Go: no package outside the standard library in
# its import graph may have cgo files, and the whole module builds with CGO_ENABLED=0.
.PHONY: lint-velo
lint-velo: deps
	cd velo && cgo=$$($(GO) list -deps -f '{{if and (not .Standard) .CgoFiles}}{{.ImportPath}}{{end}}' . ./messenger ./rendezvous ./transport/tcp) && \
		if [ -n "$$cgo" ]; then echo "lint-velo: cgo in the import graph of package velo: $$cgo"; exit 1; fi
	cd velo && CGO_ENABLED=0 $(GO) build ./...
