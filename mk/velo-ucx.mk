# velo's UCX transport (velo/transport/ucx): frames over UCX active messages and the one-sided
# reads of the rendezvous RDMA path. See the package documentation (go doc ./velo/transport/ucx).
#
#   test-ucx-transport  the suite under -race, then again under GOEXPERIMENT=cgocheck2 with
#                       UCX_TLS=tcp unless the caller set another UCX_TLS; then the package must
#                       still build and vet without cgo. About 50 s on 2 cores. On InfiniBand,
#                       TestUnusableRkeyIsRefusedOverTCP skips itself before its stale GET (the
#                       endpoint's RMA lanes are hardware-keyed); transport_test.go shows the
#                       explicit -skip command too.
#   bench-ucx-transport frame round trips (64 B, 1 KiB, 64 KiB) over UCX, over UCX with every
#                       frame sealed (credentials configured), and over velo's TCP transport, in
#                       the same run; prints the three and their ratios (about 15 s)
.PHONY: test-ucx-transport bench-ucx-transport
TEST_TARGETS += test-ucx-transport
BENCH_TARGETS += bench-ucx-transport

test-ucx-transport: deps
	cd velo && $(GOTEST) -race ./transport/ucx/...
	cd velo && UCX_TLS=$${UCX_TLS:-tcp} GOEXPERIMENT=cgocheck2 $(GOTEST) ./transport/ucx/...
	cd velo && CGO_ENABLED=0 $(GO) vet ./transport/ucx/...

bench-ucx-transport: deps
	cd velo && UCX_TLS=$${UCX_TLS:-tcp} $(GO) test -run '^$$' -bench RoundTrip -benchtime 2000x ./transport/ucx
