# Cluster membership backends (velo/discovery; the etcd one is its own module,
# velo/discovery/etcd, so applications that never use etcd do not carry its client).
#
#   test-discovery   the etcd backend against real etcd servers started by the tests (Debian's
#                    etcd-server: one member, stopped and restarted, and a 3-member cluster losing
#                    one), under -race (about 30 s)
#   bench-discovery  time for N instances to all see all, etcd beside the filesystem backend
.PHONY: test-discovery bench-discovery
TEST_TARGETS += test-discovery
BENCH_TARGETS += bench-discovery

test-discovery: deps
	cd velo/discovery/etcd && $(GOTEST) -race ./...

bench-discovery: deps
	cd test && $(GO) test -count=1 -run '^$$' -bench . -benchtime 1x ./membership/
