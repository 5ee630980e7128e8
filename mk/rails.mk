# Rail sets (velo/transport/rails, velo.WithRails with Slice; docs/rails.md): one UCX transport per
# NIC, each large GET sliced over all of them, a failing rail paused and its slices read again over
# the others.
#
#   make test-rails   the rails package under -race over an in-process RMA (one fabric per rail:
#                     slicing, batches and ranges, failover, probes after the cool-down, mixed
#                     releases); velo's rail choice; and, as root, two hosts in network namespaces
#                     joined by two, then four, veth rails shaped with tc to 200 Mbit/s (test/multirail):
#                     one 48 MiB GET over all of them in equal shares by the kernel's counters
#                     (each interface's, and the lane witness: the owner under ibcheck lanes, bytes
#                     by local address), a rail at half the rate carrying a third, a rail set down mid-GET (right bytes
#                     on the RDMA path, the rail paused, back after its cool-down), both set down
#                     (chunked fallback, right bytes). About a minute on 2 cores. It adds network interfaces, so make test runs it alone
#                     (TEST_ALONE). The hosts link velo's static UCX (VELO_UCX_GO, Makefile; the
#                     suite builds cmd/railnode with the go command, which takes the tag from GOFLAGS).
#   make bench-rails  one 256 MiB GET and a batch of 64 KiB GETs over 1, 2 and 4 rails shaped to
#                     the same rate, each as a ratio of one rail's in the same run, and the time a
#                     rail lost mid-GET costs (prints; asserts only the bytes; as root; about a
#                     minute). Figures in docs/performance.md
.PHONY: test-rails bench-rails
TEST_TARGETS += test-rails

test-rails: deps $(VELO_UCX_DEP)
	cd velo && $(GOTEST) -race ./transport/rails/...
	cd velo && $(GOTEST) -race -run 'Rail' .
	cd test && $(VELO_UCX_GO) $(RDMA_TEST_ENV) $(GOTEST) ./multirail/...

bench-rails: deps $(VELO_UCX_DEP)
	cd test && $(VELO_UCX_GO) $(RDMA_TEST_ENV) RAILS_BENCH=1 $(GOTEST) -v -run 'TestBenchRails' ./multirail/
