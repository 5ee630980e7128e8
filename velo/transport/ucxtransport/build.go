package ucxtransport

import (
	"errors"
	"fmt"

	"github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/transport"
)

// Which peers' UCX this transport may open an endpoint to.
//
// UCX releases of different minor versions do not share one wire protocol, and UCX does not
// check before it acts on what a peer sent: a process linked with Debian's 1.13 that meets one
// linked with velo's static 1.22 aborts inside UCX (an assertion in ucp_ep.inl), whichever side
// opened the endpoint. velo's guard patch set also refuses messages a stock UCX sends as a matter
// of course. So the address blob names the build each side links (wire.UCXBuild: release and
// guard), and a pair whose builds do not meet never opens a UCX endpoint in either direction:
// AddPeer refuses the address (ErrUCXBuildMismatch), a hello from such a peer is dropped
// unanswered, and PathRefusal tells the runtime why, so the pair's payloads move on the chunked
// path with reason release_mismatch and the control plane carries its messages. The warning names
// both builds, once per peer and build.

// ErrUCXBuildMismatch is wrapped (with transport.ErrInvalidEndpoint) by AddPeer when the peer's
// UCX build cannot talk to this one.
var ErrUCXBuildMismatch = errors.New("the peer's UCX build cannot talk to this one")

// ReasonReleaseMismatch is what PathRefusal says of such a peer: the path reason of package
// metrics (metrics.ReasonReleaseMismatch).
const ReasonReleaseMismatch = "release_mismatch"

// localBuild is the build this process links, as its blob announces it.
func localBuild(g ucx.RMAGuard) wire.UCXBuild {
	v := ucx.Version()
	b := wire.UCXBuild{Major: uint8(v.Major), Minor: uint8(v.Minor), Patch: uint8(v.Release)}
	if g.Enforced {
		b.Guard = g.Version
	}
	return b
}

// buildMismatch is the error for a peer whose build does not meet ours.
func (t *Transport) buildMismatch(id transport.InstanceID, theirs wire.UCXBuild) error {
	return fmt.Errorf("ucx: %w: %w: peer %016x links UCX %s, this instance UCX %s; link one UCX build on every member "+
		"(payloads with the peer move on the chunked path meanwhile)", transport.ErrInvalidEndpoint, ErrUCXBuildMismatch,
		uint64(id), theirs, t.build)
}

// noteMismatch remembers that peer id runs a build we cannot talk to, forgets an earlier
// incarnation of it that ran one we could (a member restarted on the other build), and warns the
// first time for that peer and build.
func (t *Transport) noteMismatch(id transport.InstanceID, theirs wire.UCXBuild) {
	t.mu.Lock()
	old, seen := t.mismatched[id]
	t.mismatched[id] = theirs
	stale := t.peers[id]
	delete(t.peers, id)
	t.mu.Unlock()
	if stale != nil {
		t.retireAll(stale, "removed")
	}
	if !seen || old != theirs {
		t.log.Warn("ucx: the peer's UCX build cannot talk to this one; no UCX endpoint will be opened to it, "+
			"and payloads with it move on the chunked path (reason "+ReasonReleaseMismatch+")",
			"peer", fmt.Sprintf("%016x", uint64(id)), "peer_ucx", theirs.String(), "ucx", t.build.String())
	}
}

// meets clears a peer's mismatch once it registers with a build we can talk to.
func (t *Transport) meets(id transport.InstanceID) {
	t.mu.Lock()
	delete(t.mismatched, id)
	t.mu.Unlock()
}

// PathRefusal implements transport.PathRefuser: release_mismatch for a peer whose UCX build does
// not meet this one, no_ucx_lane for one UCX has no lane to (ReasonNoUCXLane), software_lanes for
// one whose endpoint runs on software lanes only without the opt-in (Config.RMAOverSoftwareLanes),
// else "". A pair with no UCX lane at all says no_ucx_lane: it has no lanes to judge.
func (t *Transport) PathRefusal(id transport.InstanceID) string {
	t.mu.Lock()
	_, mismatched := t.mismatched[id]
	t.mu.Unlock()
	if mismatched {
		return ReasonReleaseMismatch
	}
	if t.noUCXLane(id) {
		return ReasonNoUCXLane
	}
	if r := t.laneRefusal(id); r != "" {
		return r
	}
	if t.noUCXLane(id) {
		return ReasonNoUCXLane // laneRefusal's endpoint, opened to read its lanes, found none
	}
	return ""
}

// noUCXLane reports whether UCX has no lane to id, to any peer or to this one.
func (t *Transport) noUCXLane(id transport.InstanceID) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.peers[id]
	return t.noLanes != "" || (p != nil && p.noLane != "")
}
