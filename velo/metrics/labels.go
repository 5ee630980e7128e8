package metrics

// Labels picks series by label value, for Value: every label named must have the value given.
// It is a plain map, so a map[string]string (a literal, or a variable of that type) is one too.
type Labels map[string]string

// PathLabels picks the velo_rendezvous_rdma_path_total series of one path and reason, so the
// typed constants go in as they are:
//
//	n, err := metrics.Value(g, metrics.RDMAPathTotal, metrics.PathLabels(metrics.PathRDMA, metrics.ReasonOK))
func PathLabels(p Path, r Reason) Labels {
	return Labels{"path": string(p), "reason": string(r)}
}

// String is the path as its label value ("rdma", "chunked"), for label sets of other families
// that carry a path (velo_rendezvous_bytes_total).
func (p Path) String() string { return string(p) }

// String is the reason as its label value ("ok", "no_offer", ...).
func (r Reason) String() string { return string(r) }
