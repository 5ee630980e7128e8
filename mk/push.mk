# The push fault suite (module test, package push; velo/push and Velo.Put): a receiver and writers
# in separate processes (test/pushfaults/cmd/pushpeer) over the real UCX transport, UCX_TLS=tcp set in
# code unless the environment names transports, so puts take the RDMA path (the guarded PUT). Puts
# of 1 KiB to 256 MiB checked by SHA-256 at their notification; a writer SIGKILLed and one
# SIGSTOPped in the middle of a put, and a receiver draining under batches of puts: the grant ends,
# the bytes around it are untouched, nothing stays registered, and the range is granted and written
# again. The kill, the stop and the drain run again with the writers on another host than the
# receiver (network namespaces joined by a veth pair, as root; skipped, saying why, elsewhere), as
# do puts of 1 KiB to 64 MiB; and a writer stopped in the middle of a chunk on the chunked path
# keeps the grant's Done open only until the control plane's I/O timeout. About 30-45 s on 2 cores. The processes link velo's static UCX (VELO_UCX_GO, Makefile; the
# suite builds pushpeer with the go command, which takes the build tag from GOFLAGS).
.PHONY: test-push
TEST_TARGETS += test-push

test-push: deps $(VELO_UCX_DEP)
	cd test && $(VELO_UCX_GO) $(RDMA_TEST_ENV) $(GOTEST) ./pushfaults/...

# make soak-push (not part of make test): the writer puts PUSH_SOAK_PUTS notified puts of 4 to
# 64 KiB, in rounds of PutBatch over a 16 MiB span whose boundaries move each round, each put the
# fill of a seed of its own, into the receiver's region, while PUSH_SOAK_BURN busy threads (a
# pushpeer -burn process) share the writer's CPU, both bound to the last CPU; the receiver's
# handler hashes each notified range the moment its notification arrives and compares it with
# the SHA-256 the notification carries. Fails on any range that did not yet hold its put's bytes;
# prints puts/s and the counts. Then the same on the chunked path (the receiver with the kill
# switch), PUSH_SOAK_CHUNKED_PUTS puts (0 skips it). PUSH_SOAK_MIN and PUSH_SOAK_MAX set the
# sizes (64 and 4096: every put travels inside its notification). Results: docs/performance.md,
# "Push".
PUSH_SOAK_PUTS ?= 100000
PUSH_SOAK_CHUNKED_PUTS ?= $(PUSH_SOAK_PUTS)
PUSH_SOAK_BURN ?= 2
PUSH_SOAK_MIN ?= 4096
PUSH_SOAK_MAX ?= 65536
PUSH_SOAK_TIMEOUT ?= 2h
.PHONY: soak-push
soak-push: deps $(VELO_UCX_DEP)
	cd test && $(VELO_UCX_GO) $(RDMA_TEST_ENV) VELO_PUSH_SOAK=$(PUSH_SOAK_PUTS) \
		VELO_PUSH_SOAK_CHUNKED=$(PUSH_SOAK_CHUNKED_PUTS) VELO_PUSH_SOAK_BURN=$(PUSH_SOAK_BURN) \
		VELO_PUSH_SOAK_MIN=$(PUSH_SOAK_MIN) VELO_PUSH_SOAK_MAX=$(PUSH_SOAK_MAX) \
		$(GO) test -count=1 -timeout $(PUSH_SOAK_TIMEOUT) -v -run 'TestPushSoak' ./pushfaults/
