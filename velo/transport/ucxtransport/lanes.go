package ucxtransport

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/velo-go/velo/velo/transport"
)

// Which pairs move payload bytes one-sided over UCX.
//
// Over software lanes — tcp, or ud without rc on InfiniBand — UCX emulates one-sided reads and
// writes with active messages: the bytes are copied through the same socket or datagrams a message
// takes, and velo's guard checks each request in software. There the chunked path moves bulk
// bytes at least as fast (measured over tcp: RDMA/chunked 0.63x at 1 MiB, 0.85x at 64 MiB), and it
// is authenticated end to end and TLS-capable. So a pair whose endpoint UCX built on software lanes
// only takes the chunked path by default: PathRefusal says software_lanes, both sides count it, and
// the first transfer of each pair logs the lanes once. The decision reads the lanes UCX selected
// for the endpoint (ucp_ep_print_info), never UCX_TLS: an endpoint with a hardware lane (rc, dc,
// shared memory, ...) keeps the RDMA path. Messages keep the UCX endpoint either way.
//
// Config.RMAOverSoftwareLanes or VELO_UCX_SOFTWARE_RMA=1 keeps the RDMA path over software lanes
// (tests, the demo and the benchmarks exercise it without RDMA hardware that way); Describe says
// which applies, and Health names the peers it applies to.

// SoftwareRMAEnv, set to 1 (or true, yes, on), keeps one-sided reads and writes on a pair whose
// UCX lanes are all software ones, like Config.RMAOverSoftwareLanes.
const SoftwareRMAEnv = "VELO_UCX_SOFTWARE_RMA"

// ReasonSoftwareLanes is what PathRefusal says of a peer whose endpoint runs on software lanes
// only, without the opt-in: the path reason of package metrics (metrics.ReasonSoftwareLanes).
const ReasonSoftwareLanes = "software_lanes"

// laneTimeout bounds opening an endpoint only to read its lanes (PathRefusal has no context).
const laneTimeout = 10 * time.Second

// softwareRMAOptIn names the opt-in that keeps the RDMA path over software lanes ("" for none).
func softwareRMAOptIn(cfg Config, env string) string {
	switch {
	case affirmative(env):
		return SoftwareRMAEnv + "=" + strings.TrimSpace(env)
	case cfg.RMAOverSoftwareLanes:
		return "Config.RMAOverSoftwareLanes"
	}
	return ""
}

// softwareOnly reports whether every lane is a software one: tcp, or ud (datagrams with RMA
// emulated over them). An endpoint with no lane read is not.
func softwareOnly(lanes []string) bool {
	if len(lanes) == 0 {
		return false
	}
	for _, l := range lanes {
		if l != "tcp" && !strings.HasPrefix(l, "ud_") {
			return false
		}
	}
	return true
}

// laneRefusal is software_lanes for a peer whose endpoint runs on software lanes only, unless the
// opt-in keeps the RDMA path; else "". Without the opt-in it opens the endpoint when there is
// none yet (the transfer that asks would open it anyway); with it, the answer is "" whatever the
// lanes, so it only notes the lanes of an endpoint already open, for Health, and opens nothing.
func (t *Transport) laneRefusal(id transport.InstanceID) string {
	t.mu.Lock()
	p := t.peers[id]
	usable := p != nil && !t.closed && t.started && (p.added || p.learned)
	t.mu.Unlock()
	if !usable {
		return ""
	}
	var lanes []string
	p.sendMu.Lock()
	if t.softRMABy != "" {
		if p.conn != nil {
			lanes = p.conn.lanes
		}
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), laneTimeout)
		if oc, err := t.connLocked(ctx, p); err == nil {
			lanes = oc.lanes
		}
		cancel()
	}
	p.sendMu.Unlock()
	if !softwareOnly(lanes) {
		return ""
	}
	said := strings.Join(lanes, ",")
	k := slotKey{p.id, p.inc}
	t.mu.Lock()
	first := !t.laneSaid[k]
	t.laneSaid[k] = true
	if t.softRMABy != "" {
		t.softRMAPeers[id] = said
	}
	t.mu.Unlock()
	peer := fmt.Sprintf("%016x", uint64(id))
	if t.softRMABy != "" {
		if first {
			t.log.Info("ucx: one-sided reads and writes with this peer run over software lanes by opt-in", "peer", peer, "lanes", said, "opt_in", t.softRMABy)
		}
		return ""
	}
	if first {
		t.log.Info("ucx: payloads with this peer move on the chunked path (reason "+ReasonSoftwareLanes+"): every lane UCX selected for the endpoint is a software one, "+
			"where the chunked path is as fast and authenticated end to end; messages keep UCX ("+SoftwareRMAEnv+"=1 or Config.RMAOverSoftwareLanes keeps the RDMA path)",
			"peer", peer, "lanes", said)
	}
	return ReasonSoftwareLanes
}

// softwareRMAReason is the health reason of the opt-in once it applies to a peer; "" otherwise.
func (t *Transport) softwareRMAReason() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.softRMAPeers) == 0 {
		return ""
	}
	lanes := map[string]bool{}
	for _, l := range t.softRMAPeers {
		lanes[l] = true
	}
	names := make([]string, 0, len(lanes))
	for l := range lanes {
		names = append(names, l)
	}
	sort.Strings(names)
	return fmt.Sprintf("UCX one-sided reads and writes run over software lanes (%s) with %d peers by opt-in (%s): the chunked path is as fast there "+
		"and authenticated end to end (unset it to use the chunked path)", strings.Join(names, "; "), len(t.softRMAPeers), t.softRMABy)
}

// describeSoftwareRMA is the opt-in's line on the introspection page.
func (t *Transport) describeSoftwareRMA() string {
	if t.softRMABy != "" {
		return "RDMA path kept by opt-in (" + t.softRMABy + ")"
	}
	return "chunked path (default)"
}
