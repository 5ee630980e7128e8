# velo's UCX transport (velo/transport/ucx): frames over UCX active messages and the one-sided
# reads of the rendezvous RDMA path. See the package documentation (go doc ./velo/transport/ucx).
#
#   test-ucx-transport  the suite under -race, then again under GOEXPERIMENT=cgocheck2 with
#                       UCX_TLS=tcp unless the caller set another UCX_TLS (InfiniBand: add
#                       -skip TestUnusableRkeyIsRefusedOverTCP, see transport_test.go); then the
#                       package must still build and vet without cgo.
.PHONY: test-ucx-transport
TEST_TARGETS += test-ucx-transport

test-ucx-transport: deps
	cd velo && $(GOTEST) -race ./transport/ucx/...
	cd velo && UCX_TLS=$${UCX_TLS:-tcp} GOEXPERIMENT=cgocheck2 $(GOTEST) ./transport/ucx/...
	cd velo && CGO_ENABLED=0 $(GO) vet ./transport/ucx/...
