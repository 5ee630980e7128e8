package rendezvous

import (
	"context"
	"errors"
	"fmt"

	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/messenger"
	"github.com/velo-go/velo/velo/transport"

	"github.com/velo-go/velo/velo/internal/fanout"
)

// endsInFlight is how many end-batch messages EndLeases keeps in flight at once, over all owners.
const endsInFlight = 4

// EndLeases ends many leases at once: released (each handle's reference is spent, as
// Lease.Release does) or detached (the payloads stay staged, as Lease.Detach does). The leases of
// one owner end in one message per wire.MaxEndBatch of them, a few messages in flight; an owner
// of an earlier release, which does not know that message, gets one message per lease,
// Config.BatchWindow at a time. The result holds one error per lease, in order, nil where the
// lease ended; a lease that had ended already, is nil, or belongs to another instance fails alone.
func (r *Rendezvous) EndLeases(ctx context.Context, leases []*Lease, release bool) []error {
	what := "detach"
	if release {
		what = "release"
	}
	errs := make([]error, len(leases))
	byOwner := map[transport.InstanceID][]int{}
	for i, l := range leases {
		switch {
		case l == nil:
			errs[i] = fmt.Errorf("rendezvous: %s: %w: entry %d is nil", what, ErrBadLease, i)
		case l.r != r:
			errs[i] = fmt.Errorf("rendezvous: %s: %w: lease %d was taken by another instance: end it there", what, ErrBadLease, l.id)
		case l.ended.Swap(true):
			errs[i] = fmt.Errorf("rendezvous: %s: %w: lease %d already ended", what, ErrBadLease, l.id)
		default:
			byOwner[l.h.Owner] = append(byOwner[l.h.Owner], i)
		}
	}
	type part struct {
		owner transport.InstanceID
		idx   []int
	}
	var parts []part
	for o, idx := range byOwner {
		for len(idx) > 0 {
			n := min(len(idx), wire.MaxEndBatch)
			parts = append(parts, part{o, idx[:n]})
			idx = idx[n:]
		}
	}
	fanout.Each(len(parts), endsInFlight, func(k int) {
		r.endPart(ctx, parts[k].owner, leases, parts[k].idx, release, what, errs)
	})
	return errs
}

// endPart ends the leases idx of owner and settles each with its own answer.
func (r *Rendezvous) endPart(ctx context.Context, owner transport.InstanceID, leases []*Lease, idx []int, release bool, what string, errs []error) {
	settle := func(i int, err error) { errs[i] = leases[i].settle(ctx, release, err) }
	each := func() {
		fanout.Each(len(idx), r.cfg.BatchWindow, func(k int) {
			i := idx[k]
			settle(i, r.endLease(ctx, owner, leases[i].id, release, what))
		})
	}
	if owner == r.cfg.Self {
		each()
		return
	}
	ids := make([]uint64, len(idx))
	for k, i := range idx {
		ids[k] = leases[i].id
	}
	req, err := wire.AppendEndBatchRequest(nil, wire.EndBatchRequest{Release: release, Leases: ids})
	var entries []wire.EndBatchEntry
	if err == nil {
		var resp []byte
		resp, err = r.msgr.Request(ctx, owner, opEndBatch, req)
		switch {
		case errors.Is(err, messenger.ErrUnknownHandler):
			each()
			return
		case err != nil:
			err = remoteErr(what, err)
		default:
			if entries, err = wire.DecodeEndBatchResponse(resp); err == nil && len(entries) != len(idx) {
				err = fmt.Errorf("%d answers to %d leases", len(entries), len(idx))
			}
			if err != nil {
				err = fmt.Errorf("rendezvous: %s from %016x: %w: %v", what, uint64(owner), ErrProtocol, err)
			}
		}
	}
	if err != nil {
		for _, i := range idx {
			settle(i, err)
		}
		return
	}
	for k, e := range entries {
		var eerr error
		if e.Failed() {
			eerr = batchEntryErr(what, e.ErrKind, e.ErrText)
		}
		settle(idx[k], eerr)
	}
}
