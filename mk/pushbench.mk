# Push (velo/push: write grants, Put and PutBatch, notifications): the push table of make bench.
# Figures and their reading: docs/performance.md, "Push".
#
#   bench-push         two processes (writer and receiver), over UCX_TLS=tcp unless the environment
#                      says otherwise; each figure beside a baseline of the same run: RDMA-path Put
#                      of 1, 8, 64 MiB beside ucx_perftest -t ucp_put_bw (and -t ucp_am_bw, and a
#                      writer forced to ucp_put_nbx); a PutBatch of 1,024 puts of 64 KiB beside one
#                      64 MiB Put; a 64 B Put with a notification beside ucx_perftest -t ucp_am_lat;
#                      the chunked path (a receiver without the UCX transport) at 1, 8, 64 MiB beside
#                      a raw TCP stream into the same memory. Prints ratios, asserts nothing about
#                      speed; stops when a put takes another path or the receiver's bytes differ.
#                      About 3 minutes on 2 cores, most of it perftest's software PUT
#   bench-push-static  the same linked with velo's static UCX, beside that build's ucx_perftest;
#                      without ucp_put_bw and the forced ucp_put_nbx, which its guard refuses over tcp
#
# BENCH_ARGS go to the bench: BENCH_ARGS='-only put|batch|notify|chunked -rounds 5', '-quick' for a
# smoke run, '-profile PREFIX' for CPU profiles of both processes, '-staging N' for the chunked
# pair's staging threshold (which caps a chunk).
.PHONY: bench-push bench-push-static
BENCH_TARGETS += bench-push

# ucx_perftest -t ucp_put_bw over tcp is the software RMA that velo's static UCX refuses, so the
# bench links the system's UCX, on which velo's UCX transport runs only trusting the network (its
# processes talk over loopback), as bench-rendezvous-rdma does.
bench-push: deps
	cd test && $(RDMA_TEST_ENV) VELO_UCX_TRUST_NETWORK=1 UCX_TLS=$${UCX_TLS:-tcp} $(GO) run ./rdmapath/cmd/pushbench $(BENCH_ARGS)

ifneq ($(strip $(UCX_DIR)),)
bench-push-static: deps
	@echo "$@: skipped: UCX_DIR=$(UCX_DIR) selects a preinstalled UCX; make bench-push benchmarks it"
else
bench-push-static: ucx-static-tools
	cd test && $(UCX_STATIC_GO) $(RDMA_TEST_ENV) UCX_TLS=$${UCX_TLS:-tcp} $(GO) run -tags ucx_static ./rdmapath/cmd/pushbench $(BENCH_ARGS)
endif
