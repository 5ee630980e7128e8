package velo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/velo-go/velo/velo/auth"
	"github.com/velo-go/velo/velo/transport"
)

// What this file owns: what an instance learns of a peer besides its registration — a peer that
// reached it before it was registered (heard from), the member's name, and whether the peer's
// credentials hold (StateUnauthenticated).

// peerInfoName is the internal request that asks a peer for its PeerInfo and member name.
const peerInfoName = "velo.peerinfo"

// learnTimeout bounds asking a peer that reached this instance for its PeerInfo.
const learnTimeout = 10 * time.Second

// peerHello is the answer to peerInfoName.
type peerHello struct {
	Info PeerInfo `json:"info"`
	Name string   `json:"name"`
}

func (v *Velo) onPeerInfo(context.Context, transport.InstanceID, []byte) ([][]byte, func(), error) {
	b, err := json.Marshal(peerHello{Info: v.PeerInfo(), Name: v.publishedName()})
	if err != nil {
		return nil, nil, err
	}
	return [][]byte{b}, nil, nil
}

// publishedName is the member name this instance publishes through discovery (its instance ID in
// hex when WithDiscovery was given no name), or "" without discovery.
func (v *Velo) publishedName() string {
	if v.discovery == nil {
		return ""
	}
	if v.memberName == "" {
		return fmt.Sprintf("%016x", uint64(v.id))
	}
	return v.memberName
}

// heardFirst runs on a transport's reader when a peer sends its first frame (or its first since
// it was down). A peer this instance has no record of is listed at once, over the transport it
// came in on (Peers), and asked for its PeerInfo and name, so that its other transports — UCX,
// which the RDMA paths need — and its name are known within a round trip rather than at
// discovery's next poll. Its up event waits for that answer, so that it carries the name.
func (v *Velo) heardFirst(id InstanceID, idx int, tr string) {
	if v.closed.Load() {
		return
	}
	if !v.peers.listHeard(id, tr) {
		return // registered, found by discovery, or known from before
	}
	v.peerMetrics()
	go v.learnPeer(id, idx, tr)
}

// learnPeer asks a peer heard from for its PeerInfo and name and registers it with them; a peer
// that does not answer (a release without the request) stays listed over the transport it used.
func (v *Velo) learnPeer(id InstanceID, idx int, tr string) {
	ctx, cancel := context.WithTimeout(context.Background(), learnTimeout)
	defer cancel()
	go func() {
		select {
		case <-v.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	ans, err := v.msgr.RequestOver(ctx, idx, id, peerInfoName, nil)
	var hello peerHello
	if err == nil {
		err = json.Unmarshal(ans, &hello)
	}
	if err == nil && hello.Info.ID != id {
		err = fmt.Errorf("it answered with the PeerInfo of instance %016x", uint64(hello.Info.ID))
	}
	if err == nil && !v.closed.Load() {
		err = v.registerPeer(ctx, hello.Info, hello.Name, true)
		var partial *PartialPeerError
		if err == nil || errors.As(err, &partial) {
			return
		}
	}
	if v.closed.Load() {
		return
	}
	v.log.Info("velo: a peer that reached this instance did not say how to reach it; it is listed over the transport it used until it is registered",
		"peer", fmt.Sprintf("%016x", uint64(id)), "transport", tr, "err", err)
	v.peerChanged(id, func(*PeerStatus) {}) // its up event, without a name
}

// authenticatePeer has the control plane authenticate a peer being registered, when this instance
// requires credentials and has not authenticated it yet. A peer whose handshake fails on its
// credentials is recorded as StateUnauthenticated and the error returned; one that cannot be
// reached yet is left to authenticate on its first connection (nil).
func (v *Velo) authenticatePeer(ctx context.Context, p PeerInfo, name string, added []string) error {
	if v.authMode == auth.ModeNone {
		return nil
	}
	if _, ok := v.auth.lookup(p.ID, p.Incarnation); ok {
		return nil
	}
	err := (&host{v: v, idx: -1}).Authenticate(ctx, p.ID)
	if err == nil || !errors.Is(err, transport.ErrUnauthenticated) {
		return nil
	}
	v.peerChanged(p.ID, func(ps *PeerStatus) {
		ps.State, ps.Incarnation, ps.Transports, ps.Err = StateUnauthenticated, p.Incarnation, added, err.Error()
		if name != "" {
			ps.Name = name
		}
	})
	v.warnUnauthenticated(p.ID, err)
	return err
}

// PeerAuthFailed implements transport.AuthFailureObserver: a peer this instance dialled failed
// authentication. It is not up from now on (StateUnauthenticated, with the handshake's error).
func (h *host) PeerAuthFailed(peer transport.InstanceID, err error) {
	v := h.v
	if v.registering.get(peer) > 0 {
		return // registerPeer records it, with the name it has, in one change
	}
	v.peerChanged(peer, func(p *PeerStatus) {
		if p.State != StateDown {
			p.State, p.Err = StateUnauthenticated, err.Error()
		}
	})
	v.warnUnauthenticated(peer, err)
}

// warnUnauthenticated logs, once per peer, that it failed authentication.
func (v *Velo) warnUnauthenticated(peer InstanceID, err error) {
	v.authWarn.Once(v.log, "velo: a peer failed authentication; it is not up, and nothing is sent to it (check that every member has the same credentials)",
		uint64(peer), "unauthenticated", "err", err)
}

// peerAuthenticated moves a peer that had failed authentication back up once a handshake
// authenticated it (its credentials were fixed).
func (v *Velo) peerAuthenticated(peer InstanceID) {
	if st, ok := v.peerStatus(peer); !ok || st.State != StateUnauthenticated {
		return
	}
	v.peerChanged(peer, func(p *PeerStatus) {
		if p.State == StateUnauthenticated {
			p.State, p.Err = StateUp, ""
		}
	})
}

// counts is a count per peer, safe for concurrent use.
type counts struct {
	mu sync.Mutex
	m  map[InstanceID]int
}

func (c *counts) add(id InstanceID, d int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[InstanceID]int{}
	}
	if c.m[id] += d; c.m[id] <= 0 {
		delete(c.m, id)
	}
}

func (c *counts) get(id InstanceID) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[id]
}
