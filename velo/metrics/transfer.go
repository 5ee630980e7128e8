package metrics

// Transfer telemetry: how long rendezvous transfers take on the consumer, by path and size class;
// how long the owner's leases live and how each ended; and the bytes moved with each peer.
//
// Why it is built this way: the observations sit on the transfer path, so each one must cost a
// few atomic adds and nothing else. Every histogram child is resolved once, when the instance
// starts (a fixed array indexed by path and size class, or by how a lease ended), so an
// observation never builds a label string, hashes a label set or allocates. The per-peer byte
// counters are the one family whose label set is not closed: a peer's four children are resolved
// on its first transfer (the only allocation, once per peer) and dropped with its series when the
// runtime declares the peer down (ForgetPeer), so the series are bounded by the peers alive, not
// by every peer the instance ever met.

import (
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Names of the transfer families.
const (
	// TransferDurationSeconds: consumer, one observation per transfer that put its bytes in place,
	// labels path and size.
	TransferDurationSeconds = "velo_rendezvous_transfer_duration_seconds"
	// LeaseDurationSeconds: owner, one observation per lease it granted, from the grant to its
	// end, label end.
	LeaseDurationSeconds = "velo_rendezvous_lease_duration_seconds"
	// PeerBytesTotal: payload bytes per peer, labels peer, direction (received, served) and path.
	PeerBytesTotal = "velo_rendezvous_peer_bytes_total"
)

// SizeClass is a payload size range of the transfer histogram. The classes step by 16 from one
// page: le_4k (a page, the smallest cache block), le_64k (typical KV-cache blocks), le_1m (where
// time stops being mostly round trips and becomes mostly bandwidth), le_16m (a few default 2 MiB
// chunks: the chunked path's pipelining in full swing), le_256m (the large single Gets, up to the
// multi-rail 256 MiB point), gt_256m. Six classes keep the histogram at 12 children (two paths),
// a size alone moves a transfer's time by at most 16x within a class, and each size the benchmark
// tables use (4 KiB, 64 KiB, 1, 8, 64 and 256 MiB) falls in one class. Bounds are inclusive, so a
// power-of-two payload (a 1 MiB Get) sits at the top of its class, with the others of its size.
type SizeClass uint8

// Size classes, in order.
const (
	SizeLE4K SizeClass = iota
	SizeLE64K
	SizeLE1M
	SizeLE16M
	SizeLE256M
	SizeGT256M
	numSizeClasses
)

// SizeClasses are the size label's values, indexed by SizeClass.
var SizeClasses = [numSizeClasses]string{"le_4k", "le_64k", "le_1m", "le_16m", "le_256m", "gt_256m"}

// String is the class's label value.
func (c SizeClass) String() string {
	if c < numSizeClasses {
		return SizeClasses[c]
	}
	return fmt.Sprintf("SizeClass(%d)", uint8(c))
}

// ClassOf returns the size class of an n-byte transfer.
func ClassOf(n uint64) SizeClass {
	switch {
	case n <= 4<<10:
		return SizeLE4K
	case n <= 64<<10:
		return SizeLE64K
	case n <= 1<<20:
		return SizeLE1M
	case n <= 16<<20:
		return SizeLE16M
	case n <= 256<<20:
		return SizeLE256M
	}
	return SizeGT256M
}

// LeaseEnd is how a lease ended on its owner.
type LeaseEnd uint8

// Lease ends: the consumer released it (the handle's reference spent) or detached it; the owner's
// reaper expired it (its TTL passed without a pull); the consumer went down; the owner shut down.
const (
	LeaseReleased LeaseEnd = iota
	LeaseDetached
	LeaseExpired
	LeasePeerDown
	LeaseShutdown
	numLeaseEnds
)

// LeaseEnds are the end label's values, indexed by LeaseEnd.
var LeaseEnds = [numLeaseEnds]string{"released", "detached", "expired", "peer_down", "shutdown"}

// String is the end's label value.
func (e LeaseEnd) String() string {
	if e < numLeaseEnds {
		return LeaseEnds[e]
	}
	return fmt.Sprintf("LeaseEnd(%d)", uint8(e))
}

// PeerDirections are the direction label's values of velo_rendezvous_peer_bytes_total: bytes this
// instance received from the peer as consumer, and bytes it served to the peer as owner.
var PeerDirections = [2]string{"received", "served"}

// TransferBuckets are the bounds of the transfer histogram: 1 µs to 10 s, three per decade
// (factor 10^(1/3), about 2.15), 22 bounds. A loopback round trip sits near the bottom and a
// multi-GiB chunked transfer near the top. Three per decade keeps a quantile read from the
// buckets (the debug page's p50 and p99, histogram_quantile) within one step of 2.15x of the true
// value, where a step of 4 (13 bounds) would often put p50 and p99 in the same bucket; the cost
// is a fixed 25 series per child, 600 in all (four paths, six size classes).
var TransferBuckets = prometheus.ExponentialBucketsRange(1e-6, 10, 22)

// LeaseBuckets are the bounds of the lease histogram: the transfer bounds continued, at the same
// step, to 1000 s (28 bounds). A lease lives as long as its consumer holds it, and one that
// expired lived at least the lease TTL (30 s by default), so the 10 s top of the transfer
// histogram would put every expiry in +Inf.
var LeaseBuckets = prometheus.ExponentialBucketsRange(1e-6, 1000, 28)

// pathIndex maps the paths to their place in transferPaths (the children's arrays); ok is false
// for any other.
func pathIndex(p Path) (int, bool) {
	switch p {
	case PathRDMA:
		return 0, true
	case PathChunked:
		return 1, true
	case PathInline:
		return 2, true
	case PathSameHost:
		return 3, true
	}
	return 0, false
}

var transferPaths = [4]Path{PathRDMA, PathChunked, PathInline, PathSameHost}

// transfers holds the three families and their pre-resolved children. It is one collector to
// Register (it describes and collects its three families).
type transfers struct {
	duration  *prometheus.HistogramVec
	lease     *prometheus.HistogramVec
	peerBytes *prometheus.CounterVec

	byClass [len(transferPaths)][numSizeClasses]prometheus.Observer
	byEnd   [numLeaseEnds]prometheus.Observer

	mu    sync.RWMutex
	peers map[uint64]*peerSeries
}

// peerSeries are one peer's counters, [direction][path].
type peerSeries [2][len(transferPaths)]prometheus.Counter

func newTransfers() *transfers {
	t := &transfers{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: TransferDurationSeconds,
			Help:    "Consumer: time of each rendezvous transfer from its acquire sent to its bytes in place (ReadRanges: from the call), by the path the bytes took and the payload's size class.",
			Buckets: TransferBuckets}, []string{"path", "size"}),
		lease: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: LeaseDurationSeconds,
			Help:    "Owner: lifetime of each lease it granted, from the grant to its end, by how it ended.",
			Buckets: LeaseBuckets}, []string{"end"}),
		peerBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: PeerBytesTotal,
			Help: "Rendezvous payload bytes per live peer: received from it as consumer, served to it as owner (rdma: the bytes each lease made readable), by path. A peer's series go when it goes down."}, []string{"peer", "direction", "path"}),
		peers: map[uint64]*peerSeries{},
	}
	for p, path := range transferPaths {
		for c := range numSizeClasses {
			t.byClass[p][c] = t.duration.WithLabelValues(string(path), SizeClasses[c])
		}
	}
	for e := range numLeaseEnds {
		t.byEnd[e] = t.lease.WithLabelValues(LeaseEnds[e])
	}
	return t
}

func (t *transfers) Describe(ch chan<- *prometheus.Desc) {
	t.duration.Describe(ch)
	t.lease.Describe(ch)
	t.peerBytes.Describe(ch)
}

func (t *transfers) Collect(ch chan<- prometheus.Metric) {
	t.duration.Collect(ch)
	t.lease.Collect(ch)
	t.peerBytes.Collect(ch)
}

// PeerLabel is the peer label's value for an instance ID: 16 hex digits, as logs and the debug
// page print it.
func PeerLabel(peer uint64) string { return fmt.Sprintf("%016x", peer) }

// peer returns peer's counters, resolving them on its first transfer.
func (t *transfers) peer(id uint64) *peerSeries {
	t.mu.RLock()
	s := t.peers[id]
	t.mu.RUnlock()
	if s != nil {
		return s
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if s = t.peers[id]; s != nil {
		return s
	}
	s = new(peerSeries)
	label := PeerLabel(id)
	for d, dir := range PeerDirections {
		for p, path := range transferPaths {
			s[d][p] = t.peerBytes.WithLabelValues(label, dir, string(path))
		}
	}
	t.peers[id] = s
	return s
}

// ObserveTransfer observes one consumer transfer of size bytes that took d on path p. A path
// outside transferPaths is a programming error and is not observed.
func (m *Metrics) ObserveTransfer(p Path, size uint64, d time.Duration) {
	i, ok := pathIndex(p)
	if !ok {
		return
	}
	m.transfer.byClass[i][ClassOf(size)].Observe(max(d, 0).Seconds())
}

// ObserveLease observes the lifetime d of one lease that ended as e.
func (m *Metrics) ObserveLease(e LeaseEnd, d time.Duration) {
	if e >= numLeaseEnds {
		return
	}
	m.transfer.byEnd[e].Observe(max(d, 0).Seconds())
}

// PeerReceived counts n payload bytes received from peer (this instance the consumer) on path p.
func (m *Metrics) PeerReceived(peer uint64, p Path, n int) { m.peerBytes(peer, 0, p, n) }

// PeerServed counts n payload bytes served to peer (this instance the owner) on path p.
func (m *Metrics) PeerServed(peer uint64, p Path, n int) { m.peerBytes(peer, 1, p, n) }

func (m *Metrics) peerBytes(peer uint64, dir int, p Path, n int) {
	i, ok := pathIndex(p)
	if !ok || n <= 0 {
		return
	}
	m.transfer.peer(peer)[dir][i].Add(float64(n))
}

// ForgetPeer removes peer's byte series: the runtime calls it when the peer goes down, so a
// cluster whose members come and go does not grow the family without bound. A transfer with the
// peer that completes afterwards (it is back) creates them again, from zero.
func (m *Metrics) ForgetPeer(peer uint64) {
	t := m.transfer
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.peers[peer]; !ok {
		return
	}
	delete(t.peers, peer)
	t.peerBytes.DeletePartialMatch(prometheus.Labels{"peer": PeerLabel(peer)})
}
