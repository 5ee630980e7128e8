# What each peer costs an instance, as the cluster grows (docs/performance.md, "A thousand members").
#
#   bench-scale   both halves below, the etcd membership first (about 2 + 20 minutes on 2 cores).
#                 Not part of make bench's default set: it takes a machine's worth of descriptors
#                 at N = 1000, and hundreds of processes.
#   bench-scale-etcd
#                 light members (an etcd backend each: client, lease, watch; no velo instance) on
#                 one real etcd, N = 100, 250, 500, 1000 (VELO_SCALE_MEMBERS=100,1000 to choose):
#                 the time for all to see all, for one join and one leave to reach every watcher,
#                 each member's CPU per membership change against the smallest N's (O(1) in N
#                 reads about 1x), etcd's CPU per change, the keep-alives' idle cost, and a
#                 record's memory.
#   bench-scale-instances
#                 N real velo instances, each a faultnode process (test/faults) with a 2 MiB
#                 arena, found through the filesystem backend, N = 16, 64, 128
#                 (VELO_SCALE_INSTANCES=16,256 to choose; each takes about 35 MiB), once per UCX
#                 endpoint budget (VELO_SCALE_BUDGETS, default 256,8). Each member fetches from
#                 three random others at a time for VELO_SCALE_PHASE (10s), then from every other
#                 once, three at a time; after the traffic, per instance (median and max): open
#                 descriptors, VmRSS, idle CPU over VELO_SCALE_QUIET (15s), UCX endpoints, TCP
#                 control-plane connections and evictions, and in all the owners' holder refusals
#                 (reads that met an owner not yet connected back, and went again); the time for
#                 one more member's join and leave to reach every member, and the slope per peer
#                 between consecutive N.
#                 Fails on any transfer that errs, leaves the RDMA path or delivers other bytes.
.PHONY: bench-scale bench-scale-etcd bench-scale-instances
bench-scale: bench-scale-etcd bench-scale-instances

bench-scale-etcd: deps
	ulimit -n 65536 2>/dev/null || true; cd test && $(GO) test -count=1 -timeout 30m -run '^$$' -bench EtcdScale -benchtime 1x ./membership/

bench-scale-instances: deps $(VELO_UCX_DEP)
	ulimit -n 65536 2>/dev/null || true; uptime; cd test && $(VELO_UCX_GO) $(RDMA_TEST_ENV) $(GO) test -count=1 -timeout 90m -run '^$$' -bench InstanceScale -benchtime 1x ./faults/
