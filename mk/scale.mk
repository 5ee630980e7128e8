# What each peer costs an instance, as the cluster grows (docs/performance.md, "A thousand members").
#
#   bench-scale   light members (an etcd backend each: client, lease, watch; no velo instance) on
#                 one real etcd, N = 100, 250, 500, 1000 (VELO_SCALE_MEMBERS=100,1000 to choose):
#                 the time for all to see all, for one join and one leave to reach every watcher,
#                 each member's CPU per membership change against the smallest N's (O(1) in N
#                 reads about 1x), etcd's CPU per change, the keep-alives' idle cost, and a
#                 record's memory (about 2 minutes on 2 cores). Not part of make bench's default
#                 set: it takes a machine's worth of descriptors at N = 1000.
.PHONY: bench-scale
bench-scale: deps
	ulimit -n 65536 2>/dev/null || true; cd test && $(GO) test -count=1 -timeout 30m -run '^$$' -bench EtcdScale -benchtime 1x ./membership/
