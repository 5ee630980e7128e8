package velo

import (
	"fmt"
	"slices"
	"sort"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/velo-go/velo/velo/metrics"
)

// The introspection page's transfer tables, read from the instance's own transfer families
// (metrics/transfer.go) at each request, so the page and a scrape never disagree.

// TransferInfo is one row of the transfer table: the consumer's transfers of one path and size
// class, with their p50 and p99 estimated from the histogram's buckets (linear interpolation
// inside a bucket, as histogram_quantile does; the buckets step by about 2.15x).
type TransferInfo struct {
	Path      string  `json:"path"`
	Size      string  `json:"size_class"`
	Count     uint64  `json:"count"`
	P50Micros float64 `json:"p50_us"`
	P99Micros float64 `json:"p99_us"`
}

// LeaseEndInfo is one row of the lease table: the owner's leases that ended one way, with the
// p50 and p99 of their lifetimes.
type LeaseEndInfo struct {
	End       string  `json:"end"`
	Count     uint64  `json:"count"`
	P50Micros float64 `json:"p50_us"`
	P99Micros float64 `json:"p99_us"`
}

// PeerBytesInfo is one live peer's payload bytes: received from it as consumer and served to it
// as owner, by path.
type PeerBytesInfo struct {
	Peer            string `json:"peer"`
	ReceivedRDMA    uint64 `json:"received_rdma"`
	ReceivedChunked uint64 `json:"received_chunked"`
	ServedRDMA      uint64 `json:"served_rdma"`
	ServedChunked   uint64 `json:"served_chunked"`
	// ReceivedSameHost and ServedSameHost: bytes of the same-host path (shm).
	ReceivedSameHost uint64 `json:"received_shm"`
	ServedSameHost   uint64 `json:"served_shm"`
}

// transferTables reads the rows with at least one observation (and every peer's bytes) from mfs,
// in a fixed order: paths as the path metric lists them, size classes smallest first, lease ends
// in their declared order, peers by ID.
func transferTables(mfs []*dto.MetricFamily) (ts []TransferInfo, ls []LeaseEndInfo, ps []PeerBytesInfo) {
	peers := map[string]*PeerBytesInfo{}
	for _, mf := range mfs {
		switch mf.GetName() {
		case metrics.TransferDurationSeconds:
			for _, m := range mf.GetMetric() {
				h := m.GetHistogram()
				if h.GetSampleCount() == 0 {
					continue
				}
				ts = append(ts, TransferInfo{Path: label(m, "path"), Size: label(m, "size"), Count: h.GetSampleCount(),
					P50Micros: metrics.HistogramQuantile(0.5, h) * 1e6, P99Micros: metrics.HistogramQuantile(0.99, h) * 1e6})
			}
		case metrics.LeaseDurationSeconds:
			for _, m := range mf.GetMetric() {
				h := m.GetHistogram()
				if h.GetSampleCount() == 0 {
					continue
				}
				ls = append(ls, LeaseEndInfo{End: label(m, "end"), Count: h.GetSampleCount(),
					P50Micros: metrics.HistogramQuantile(0.5, h) * 1e6, P99Micros: metrics.HistogramQuantile(0.99, h) * 1e6})
			}
		case metrics.PeerBytesTotal:
			for _, m := range mf.GetMetric() {
				id := label(m, "peer")
				p := peers[id]
				if p == nil {
					p = &PeerBytesInfo{Peer: id}
					peers[id] = p
				}
				n := uint64(m.GetCounter().GetValue())
				switch label(m, "direction") + "/" + label(m, "path") {
				case "received/rdma":
					p.ReceivedRDMA = n
				case "received/chunked":
					p.ReceivedChunked = n
				case "served/rdma":
					p.ServedRDMA = n
				case "served/chunked":
					p.ServedChunked = n
				case "received/shm":
					p.ReceivedSameHost = n
				case "served/shm":
					p.ServedSameHost = n
				}
			}
		}
	}
	pathOrder := func(p string) int {
		switch p {
		case string(metrics.PathRDMA):
			return 0
		case string(metrics.PathSameHost):
			return 1
		}
		return 2
	}
	sizeOrder := func(s string) int { return slices.Index(metrics.SizeClasses[:], s) }
	sort.Slice(ts, func(i, j int) bool {
		if a, b := pathOrder(ts[i].Path), pathOrder(ts[j].Path); a != b {
			return a < b
		}
		return sizeOrder(ts[i].Size) < sizeOrder(ts[j].Size)
	})
	sort.Slice(ls, func(i, j int) bool {
		return slices.Index(metrics.LeaseEnds[:], ls[i].End) < slices.Index(metrics.LeaseEnds[:], ls[j].End)
	})
	for _, p := range peers {
		ps = append(ps, *p)
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].Peer < ps[j].Peer })
	return ts, ls, ps
}

// micros prints a time given in microseconds with three significant digits and a unit that fits:
// 12.3µs, 4.56ms, 1.2s, 315s.
func micros(us float64) string {
	d := time.Duration(us * float64(time.Microsecond))
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%.3gµs", us)
	case d < time.Second:
		return fmt.Sprintf("%.3gms", us/1e3)
	case d < 1000*time.Second:
		return fmt.Sprintf("%.3gs", us/1e6)
	}
	return fmt.Sprintf("%.0fs", us/1e6)
}
