# The lane counter (module lanes): cgroup_skb programs written with cilium/ebpf's asm package
# count every socket's bytes for the processes of one cgroup v2. See docs/rendezvous-rdma.md,
# "Verify the lane".
#
#   make test-lanes   counts of a 64 MiB loopback transfer, two counters at once, Close and a
#                     killed counter leave nothing attached (needs root and cgroup v2; the tests
#                     say why they skip elsewhere); under -race, and vet for non-Linux
.PHONY: test-lanes
TEST_TARGETS += test-lanes

test-lanes: deps
	cd lanes && $(GOTEST) -race ./...
	cd lanes && GOOS=darwin CGO_ENABLED=0 $(GO) vet ./...
