# The fault suite (module test, package faults): real owner and consumer processes over the real
# UCX transport (UCX_TLS=tcp set in code unless the environment names transports), stopped mid-GET
# and resumed, stopped and killed, stopped past the force bound, killed mid-GET, closed under a
# stalled consumer; tampered handles; a spent budget. After each case the owner must be alive and
# its registered and pinned bytes back at their start. About a minute on 2 cores.
.PHONY: test-faults
TEST_TARGETS += test-faults

test-faults: deps
	cd test && $(RDMA_TEST_ENV) $(GOTEST) ./faults/...
