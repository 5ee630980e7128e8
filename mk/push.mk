# The push fault suite (module test, package push; velo/push and Velo.Put): a receiver and writers
# in separate processes (test/pushfaults/cmd/pushpeer) over the real UCX transport, UCX_TLS=tcp set in
# code unless the environment names transports, so puts take the RDMA path (the guarded PUT). Puts
# of 1 KiB to 256 MiB checked by SHA-256 at their notification; a writer SIGKILLed and one
# SIGSTOPped in the middle of a put, and a receiver draining under batches of puts: the grant ends,
# the bytes around it are untouched, nothing stays registered, and the range is granted and written
# again. About 15-30 s on 2 cores. The processes link velo's static UCX (VELO_UCX_GO, Makefile; the
# suite builds pushpeer with the go command, which takes the build tag from GOFLAGS).
.PHONY: test-push
TEST_TARGETS += test-push

test-push: deps $(VELO_UCX_DEP)
	cd test && $(VELO_UCX_GO) $(RDMA_TEST_ENV) $(GOTEST) ./pushfaults/...
