package capi

// PutStats mirrors velo_ucx_gput_stats_t: what a worker did as the target of guarded PUTs.
type PutStats struct {
	Served, ServedBytes uint64
	// Refused counts refusals by reason, indexed by the PutRefused constants.
	Refused [5]uint64
	// The last refusal: its reason (-1 before the first), slot, address and length as the
	// request named them (slot all ones when the header itself was unusable).
	LastReason  int
	LastSlot    uint32
	LastAddress uint64
	LastLength  uint64
}
