package ucxtransport

import (
	"fmt"
	"sort"
)

// The endpoint budget (Config.MaxEndpoints).
//
// A member of a large cluster learns of every other member but talks to a few at a time, and an
// endpoint costs descriptors (a socket or two per side over tcp) and memory for as long as it is
// open. So the transport keeps at most MaxEndpoints endpoints of its own open: when opening one
// takes it past the budget, the maintenance goroutine retires the endpoints idle longest the
// way the idle reaper does (a fin asks the peer to follow, nothing in flight is cut, the next
// send to that peer opens a new slot), until the budget holds again. An endpoint with a send or
// GET in flight is never chosen: a burst to more peers than the budget leaves the count above it
// until the traffic pauses, and the next pass (every maintenance tick while it is above) catches
// up. The peer's retirement of its own endpoint to us follows the fin, so both sides' descriptors
// go.

// kickEviction asks the maintenance goroutine for an eviction pass, without waiting.
func (t *Transport) kickEviction() {
	select {
	case t.evict <- struct{}{}:
	default: // one is asked for already
	}
}

// evictIdle retires the current endpoints idle longest, none busy, until at most MaxEndpoints
// remain.
func (t *Transport) evictIdle() {
	t.mu.Lock()
	peers := make([]*peer, 0, len(t.peers))
	for _, p := range t.peers {
		peers = append(peers, p)
	}
	t.mu.Unlock()
	type candidate struct {
		p        *peer
		lastUsed int64
	}
	var live []candidate
	for _, p := range peers {
		p.sendMu.Lock()
		if p.conn != nil {
			live = append(live, candidate{p, p.lastUse.Load()})
		}
		p.sendMu.Unlock()
	}
	over := len(live) - t.cfg.MaxEndpoints
	if over <= 0 {
		return
	}
	sort.Slice(live, func(i, j int) bool { return live[i].lastUsed < live[j].lastUsed })
	for _, c := range live {
		if over == 0 {
			return
		}
		c.p.sendMu.Lock()
		if oc := c.p.conn; oc != nil && !oc.busy() {
			t.retireLocked(c.p, oc, "evicted", true)
			over--
		}
		c.p.sendMu.Unlock()
	}
	t.log.Debug(fmt.Sprintf("ucx: %d endpoints over the budget of %d are busy; evicted when idle", over, t.cfg.MaxEndpoints))
}
