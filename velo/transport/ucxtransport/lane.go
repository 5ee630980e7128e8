package ucxtransport

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/velo/transport"
)

// A pair whose UCX has no lane between them.
//
// velo's endpoints ask UCX for peer failure handling (UCP_ERR_HANDLING_MODE_PEER): that is how an
// endpoint to a peer that vanished fails instead of hanging its operations. UCX's shared-memory
// transports do not offer it (sysv and posix have no peer failure handler, cma no active
// messages), so with UCX_TLS=sm,self, or any list without a transport that has one, ucp_ep_create
// fails with UCS_ERR_UNREACHABLE before anything is sent. Nothing at run time changes that for
// the pair, so the transport remembers it per peer incarnation: the peer is no longer reached for
// messages (the control plane carries them), CanGet is false so no RDMA offer is made, and
// PathRefusal says no_ucx_lane, so the pair's payloads move on the chunked path under that reason
// (or through the same-host path, when both sides turned it on). The warning, naming UCX's words
// and the fix, is logged once per peer incarnation.
//
// When UCX_TLS names shared-memory transports only, New finds this out for every peer at once,
// before any transfer: it creates an endpoint to its own worker (local, no traffic), and when UCX
// refuses it with UNREACHABLE no peer is reached over UCX at all (noLanes), so even a pair's first
// transfer is counted under no_ucx_lane on both sides; the warning is logged once, by Start.

// ReasonNoUCXLane is what PathRefusal says of a peer UCX has no lane to: the path reason of
// package metrics (metrics.ReasonNoUCXLane). velo's endpoints need peer failure handling, which
// UCX's shared-memory transports lack, so under UCX_TLS=sm,self (or any list without a transport
// that has it) ucp_ep_create fails with UCS_ERR_UNREACHABLE. Such a peer is not reached for
// messages nor offered RDMA, and the warning, naming the fix, is logged once.
const ReasonNoUCXLane = "no_ucx_lane"

// noteConnectFailed records a failed ucp_ep_create to p: when UCX found no lane (UNREACHABLE at
// creation, which no retry changes), the pair is marked and the warning logged the first time.
func (t *Transport) noteConnectFailed(p *peer, err error) {
	if !errors.Is(err, ucx.StatusUnreachable) {
		return
	}
	t.mu.Lock()
	first := p.noLane == ""
	if first {
		p.noLane = err.Error()
	}
	t.mu.Unlock()
	if first {
		t.log.Warn("ucx: UCX has no lane to this peer (velo's endpoints need peer failure handling, which UCX's shared-memory "+
			"transports lack); its messages go on the control plane and its payloads on the chunked path (reason "+ReasonNoUCXLane+"): "+
			"add tcp or an RDMA device to UCX_TLS, or turn on the same-host path (velo.WithSameHost) for peers of this host",
			"peer", fmt.Sprintf("%016x", uint64(p.id)), "ucx_tls", t.tls(), "err", err)
	}
}

// sharedMemoryOnly reports whether tls (a UCX_TLS value) names shared-memory transports only.
func sharedMemoryOnly(tls string) bool {
	if tls == "" {
		return false
	}
	for _, name := range strings.Split(tls, ",") {
		switch strings.TrimSpace(name) {
		case "sm", "shm", "mm", "posix", "sysv", "cma", "knem", "xpmem", "self":
		default:
			return false
		}
	}
	return true
}

// probeLanes sets noLanes when UCX_TLS names shared-memory transports only and UCX cannot create
// an endpoint with peer failure handling even to this process's own worker.
func (t *Transport) probeLanes() {
	if !sharedMemoryOnly(t.tls()) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := t.eng.Connect(ctx, t.worker, ucx.ConnectOptions{ErrorMode: ucx.ErrorModePeer})
	if err == nil {
		_ = c.Close(ctx, ucx.CloseForce) // this UCX has such a lane: peers are tried one by one
		return
	}
	if errors.Is(err, ucx.StatusUnreachable) {
		t.noLanes = err.Error()
	}
}

// logNoLanes is Start's warning when probeLanes found no lane.
func (t *Transport) logNoLanes() {
	if t.noLanes == "" {
		return
	}
	t.log.Warn("ucx: UCX has no lane to any peer (velo's endpoints need peer failure handling, which UCX's shared-memory "+
		"transports lack); messages go on the control plane and payloads on the chunked path (reason "+ReasonNoUCXLane+"): "+
		"add tcp or an RDMA device to UCX_TLS, or turn on the same-host path (velo.WithSameHost) for peers of this host",
		"ucx_tls", t.tls(), "err", t.noLanes)
}

// laneless is why UCX has no lane to p ("" when it may have one); t.mu is held.
func (t *Transport) laneless(p *peer) string {
	if t.noLanes != "" {
		return t.noLanes
	}
	return p.noLane
}

// tls is the UCX_TLS this transport's context applied: the environment's, else Config.TLS.
func (t *Transport) tls() string {
	if v, ok := os.LookupEnv("UCX_TLS"); ok {
		return v
	}
	if t.cfg.TLS == "" {
		return "(UCX's default)"
	}
	return t.cfg.TLS
}

// noLaneErr is the error of a send to a peer UCX has no lane to.
func noLaneErr(p *peer, why string) error {
	return fmt.Errorf("ucx: %016x: %w: UCX has no lane to the peer (%s)", uint64(p.id), transport.ErrPeerUnreachable, why)
}
