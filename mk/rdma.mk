# The rendezvous RDMA path (velo/rendezvous/rdma, test/rdmapath, the example): docs/rendezvous-rdma.md.
#
#   test-rdma-registry    the registry below the RMA seam: arenas, budget, reclaim, per-lease
#                         registrations, descriptors, memlock in a constrained child; and the
#                         runtime's path tests on an in-process RMA (-race; about 15 s)
#   test-rendezvous-rdma  end to end over the real UCX transport (UCX_TLS=tcp set in code; the
#                         environment wins, so the same tests run on InfiniBand): every path reason
#                         on both sides, revocation on every lease ending, memlock fallback, the
#                         example in two network namespaces with kernel byte counts (about 2 min)
#   bench-rendezvous-rdma RDMA-path Get of 1, 8, 64 MiB beside ucx_perftest -t ucp_get and the
#                         chunked path; Gets of 8 and 64 MiB between instances with a cluster secret
#                         (sealed UCX frames) beside instances without; peak RSS of a 1 GiB get and
#                         of 1 GiB staging, copied and zero-copy (prints ratios, asserts nothing)
#   bench-small           many small transfers, two processes: the engine's AM round trip beside
#                         ucx_perftest -t ucp_am_lat, velo's UCX transport, plain and sealed, beside
#                         its TCP transport and perftest's AM round trip, GetBatch of 4 KiB and
#                         64 KiB blocks beside one 64 MiB get and beside ucx_perftest -t ucp_get -O
#                         (about 1 minute)
#   bench-samehost        the same-host path (WithSameHost) between two processes of this host:
#                         Get of 8 and 64 MiB beside one core's memcpy of the same size and beside
#                         the UCX RDMA path (single-copy reads out of each payload's own file,
#                         SingleCopyMin 1 MiB), StageDataPinned into such a file beside an arena
#                         slot, GetBatch of 256 blocks of 4 KiB and 64 KiB beside the RDMA path,
#                         and Put of 8 and 64 MiB into a grant beside memcpy and the RDMA path
#                         (rdmabench -only samehost; prints ratios, asserts nothing;
#                         BENCH_ARGS=-quick, -rounds N, -single-copy-min 0 for the ring alone)
#   bench-small-static    bench-small linked with velo's static UCX, beside that build's own
#                         ucx_perftest (make ucx-static-tools); without perftest's GET, which its
#                         guard refuses over tcp
#   bench-rendezvous-rdma-static  bench-rendezvous-rdma the same way (what make bench-static runs
#                         first), so BENCH_ARGS reach it: BENCH_ARGS='-only seal'
#
# BENCH_ARGS go to the bench program: BENCH_ARGS='-only frames -rounds 5' (smallbench: -only
# am|frames|batch; rdmabench: -only get|seal|rss|samehost), '-quick' for a smoke run.
#   test-prefill-decode   velo/examples/prefill_decode, the program written from the docs alone:
#                         two processes, discovery with member names, a cluster secret, GetBatch,
#                         a 32 MiB region read by ranges, notified puts through a write grant,
#                         health and drain; fails unless each side's path metrics count every
#                         transfer on the path the pair has (over tcp, without the opt-in below:
#                         chunked, reason software_lanes; about 10 s)
#   demo                  the two-process example over UCX_TLS (tcp when unset), with
#                         VELO_UCX_SOFTWARE_RMA=1 (the RDMA path over tcp's software lanes); exits
#                         non-zero unless the transfer took the RDMA path, or, under a UCX_TLS of
#                         shared-memory transports only (sm,self), the same-host path it turns on
#
# The tests, demo and demo-cluster link velo's static UCX (VELO_UCX_GO, in the Makefile): velo's
# UCX transport refuses a UCX without its software RMA guard.
.PHONY: test-rdma-registry test-rendezvous-rdma bench-rendezvous-rdma bench-small bench-samehost bench-small-static bench-rendezvous-rdma-static demo
TEST_TARGETS += test-rdma-registry test-rendezvous-rdma test-prefill-decode
BENCH_TARGETS += bench-rendezvous-rdma bench-small bench-samehost

# A test run must not inherit a kill switch from the shell: the tests set it themselves.
RDMA_TEST_ENV := env -u VELO_RDMA_RENDEZVOUS_DISABLE

test-rdma-registry: deps $(VELO_UCX_DEP)
	cd velo && $(VELO_UCX_GO) $(RDMA_TEST_ENV) $(GOTEST) -race ./rendezvous/rdma/... ./examples/internal/...
	cd velo && $(VELO_UCX_GO) $(RDMA_TEST_ENV) $(GOTEST) -race -run 'RDMA|GetPinned|UCXTransport' .

# On velo's UCX a direct ucp_get_nbx over tcp is software RMA, which its guard refuses
# (TestDirectGetIsRefusedByTheGuard); the direct read itself, the RDMA path as it runs on
# InfiniBand short of the NIC, then runs once more on the system's UCX, trusting the network.
test-rendezvous-rdma: deps $(VELO_UCX_DEP)
	cd test && $(VELO_UCX_GO) $(RDMA_TEST_ENV) GOEXPERIMENT=cgocheck2 $(GOTEST) ./rdmapath/...
	$(if $(VELO_UCX_DEP),cd test && $(RDMA_TEST_ENV) VELO_UCX_TRUST_NETWORK=1 $(GOTEST) -run 'TestDirectGetOverUCX' ./rdmapath/)

# The two benchmarks put velo beside ucx_perftest -t ucp_get, which over tcp is the software RMA
# that velo's static UCX refuses: they link the system's UCX, on which velo's UCX transport runs
# only trusting the network (their processes talk over loopback).
bench-rendezvous-rdma: deps
	cd test && $(RDMA_TEST_ENV) VELO_UCX_TRUST_NETWORK=1 UCX_TLS=$${UCX_TLS:-tcp} $(GO) run ./rdmapath/cmd/rdmabench $(BENCH_ARGS)

bench-small: deps
	cd test && $(RDMA_TEST_ENV) VELO_UCX_TRUST_NETWORK=1 UCX_TLS=$${UCX_TLS:-tcp} $(GO) run ./rdmapath/cmd/smallbench $(BENCH_ARGS)

bench-samehost: deps
	cd test && $(RDMA_TEST_ENV) VELO_UCX_TRUST_NETWORK=1 UCX_TLS=$${UCX_TLS:-tcp} $(GO) run ./rdmapath/cmd/rdmabench -only samehost $(BENCH_ARGS)

# The patched UCX's own figures: its engine and transport beside its own ucx_perftest.
ifneq ($(strip $(UCX_DIR)),)
bench-small-static bench-rendezvous-rdma-static: deps
	@echo "$@: skipped: UCX_DIR=$(UCX_DIR) selects a preinstalled UCX; the target without -static benchmarks it"
else
bench-small-static: ucx-static-tools
	cd test && $(UCX_STATIC_GO) $(RDMA_TEST_ENV) UCX_TLS=$${UCX_TLS:-tcp} $(GO) run -tags ucx_static ./rdmapath/cmd/smallbench $(BENCH_ARGS)

bench-rendezvous-rdma-static: ucx-static-tools
	cd test && $(UCX_STATIC_GO) $(RDMA_TEST_ENV) UCX_TLS=$${UCX_TLS:-tcp} $(GO) run -tags ucx_static ./rdmapath/cmd/rdmabench $(BENCH_ARGS)
endif

# Gets of 8 and 64 MiB over tcp's software lanes: the default (chunked, software_lanes) beside the
# chunked path, and VELO_UCX_SOFTWARE_RMA=1 (the RDMA path) beside it, in one run (rdmabench -only
# lanes; about a minute). Prints, asserts nothing but the paths.
.PHONY: bench-software-lanes
BENCH_TARGETS += bench-software-lanes
bench-software-lanes: deps $(VELO_UCX_DEP)
	cd test && $(VELO_UCX_GO) $(RDMA_TEST_ENV) UCX_TLS=$${UCX_TLS:-tcp} $(GO) run ./rdmapath/cmd/rdmabench -only lanes $(BENCH_ARGS)

.PHONY: test-prefill-decode
test-prefill-decode: deps $(VELO_UCX_DEP)
	$(VELO_UCX_GO) $(RDMA_TEST_ENV) UCX_TLS=$${UCX_TLS:-tcp} $(GO) run ./velo/examples/prefill_decode

demo: deps $(VELO_UCX_DEP)
	$(VELO_UCX_GO) VELO_UCX_SOFTWARE_RMA=1 UCX_TLS=$${UCX_TLS:-tcp} $(GO) run ./velo/examples/rendezvous_rdma_two_proc

# N members (default 4) that find each other through the filesystem discovery backend and move
# payloads all-to-all on the RDMA path; exits non-zero unless every pair took rdma/ok.
N ?= 4
.PHONY: demo-cluster
demo-cluster: deps $(VELO_UCX_DEP)
	$(VELO_UCX_GO) VELO_UCX_SOFTWARE_RMA=1 UCX_TLS=$${UCX_TLS:-tcp} $(GO) run ./velo/examples/cluster -n $(N) $(if $(ETCD),-etcd $(ETCD))
