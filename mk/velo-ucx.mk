# velo's UCX transport (velo/transport/ucxtransport): frames over UCX active messages and the one-sided
# reads of the rendezvous RDMA path. See the package documentation (go doc ./velo/transport/ucxtransport).
#
#   test-ucx-transport  the suite under -race, then again under GOEXPERIMENT=cgocheck2 with
#                       UCX_TLS=tcp unless the caller set another UCX_TLS, both linked with velo's
#                       static UCX (VELO_UCX_GO, Makefile); then the policy tests once more on the
#                       system's shared UCX, which has no software RMA guard: New refuses it
#                       without VELO_UCX_TRUST_NETWORK and warns with it (a few seconds); then the
#                       package must still build and vet without cgo. About 50 s on 2 cores. On InfiniBand,
#                       TestUnusableRkeyIsRefusedOverTCP skips itself before its stale GET (the
#                       endpoint's RMA lanes are hardware-keyed); transport_test.go shows the
#                       explicit -skip command too.
#   bench-ucx-transport frame round trips (64 B, 1 KiB, 64 KiB) over UCX, over UCX with every
#                       frame sealed (credentials configured), and over velo's TCP transport, in
#                       the same run; prints the three and their ratios (about 15 s)
.PHONY: test-ucx-transport bench-ucx-transport
TEST_TARGETS += test-ucx-transport
BENCH_TARGETS += bench-ucx-transport

# The tests of the guard policy; each takes the branch of the UCX it is linked with.
UCX_POLICY_TESTS := Guard|Unguarded|TrustedNetwork

test-ucx-transport: deps $(VELO_UCX_DEP)
	cd velo && $(VELO_UCX_GO) $(GOTEST) -race ./transport/ucxtransport/...
	cd velo && $(VELO_UCX_GO) UCX_TLS=$${UCX_TLS:-tcp} GOEXPERIMENT=cgocheck2 $(GOTEST) ./transport/ucxtransport/...
	cd velo && env -u VELO_UCX_TRUST_NETWORK $(GOTEST) -run '$(UCX_POLICY_TESTS)' ./transport/ucxtransport/
	cd velo && CGO_ENABLED=0 $(GO) vet ./transport/ucxtransport/...

bench-ucx-transport: deps $(VELO_UCX_DEP)
	cd velo && $(VELO_UCX_GO) UCX_TLS=$${UCX_TLS:-tcp} $(GO) test -run '^$$' -bench RoundTrip -benchtime 2000x ./transport/ucxtransport
