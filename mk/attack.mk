# The attacker suite (module test, package attack): processes with no cluster secret and no velo
# instance attack a velo owner and its authenticated consumer from below velo, over a plain UCX
# endpoint of their own and over raw TCP sockets to the owner's UCX port: reads, writes and atomics
# at a global, the heap and lease registrations (without a key, with a revoked or another lease's
# key, across a registration's end), velo's guarded GET written by hand, and UCX transport frames
# forged in the consumer's name. After each attack: nothing read, written or delivered, the
# consumer up with every message delivered, the owner alive and serving. Linked against the static
# UCX (its patch set refuses software RMA), UCX_TLS=tcp unless the environment names transports;
# the raw-socket parts and the packet observer skip themselves, saying so, where tcp is not among
# them. About a minute on 2 cores, most of it linking the two programs.
#
# make test-attack-samehost runs the whole suite again with the same-host path on in the victim and
# its consumers (VELO_TEST_SAME_HOST=1, test/attack/doc.go): the legitimate pair reads through
# shared memory while every attack on the owner's UCX goes on, against leases held by a consumer
# configured as another host, and the same-host socket is attacked without the secret and as
# another user. About a minute on 2 cores.
.PHONY: test-attack test-attack-samehost
TEST_TARGETS += test-attack test-attack-samehost

ifneq ($(strip $(UCX_DIR)),)
test-attack test-attack-samehost: deps
	@echo "$@: skipped: UCX_DIR=$(UCX_DIR) selects a preinstalled UCX; the suite attacks velo's static UCX and its guard (unset UCX_DIR)"
else
test-attack: deps ucx-static
	cd test && $(UCX_STATIC_GO) VELO_TEST_SAME_HOST=0 $(GOTEST) -tags ucx_static ./attack/...

test-attack-samehost: deps ucx-static
	cd test && $(UCX_STATIC_GO) VELO_TEST_SAME_HOST=1 $(GOTEST) -tags ucx_static ./attack/...
endif
