package rails

import (
	"context"
	"errors"
	"fmt"

	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/transport"
)

// RegisterMemory registers mem on the first rail alone, with that rail's plain key: what a peer
// that is not known to share other rails (or is of an earlier release) can read.
func (t *Transport) RegisterMemory(mem []byte) (transport.Registration, error) {
	return t.rails[0].rma.RegisterMemory(mem)
}

// RegisterMemoryFor registers each region on every rail shared with peer, each with its own key
// per rail, and hands out one rail-set key per region. A peer that shares only the first rail gets
// that rail's plain key, as RegisterMemory gives. A region a rail fails to register is left off
// that rail (its key names the others); it fails only when no rail registered it.
func (t *Transport) RegisterMemoryFor(peer transport.InstanceID, mems [][]byte) ([]transport.Registration, []error) {
	mask := t.sharedMask(peer)
	if mask&^1 == 0 {
		return registerOn(t.rails[0], peer, mems)
	}
	byRail := make([][]transport.Registration, len(t.rails))
	errsBy := make([][]error, len(t.rails))
	for i, r := range t.rails {
		if mask&(1<<i) != 0 {
			byRail[i], errsBy[i] = registerOn(r, peer, mems)
		}
	}
	out := make([]transport.Registration, len(mems))
	errs := make([]error, len(mems))
	for k, mem := range mems {
		g := &registration{n: len(mem), subs: make([]transport.Registration, len(t.rails))}
		keys := make([][]byte, len(t.rails))
		var failed []error
		for i := range t.rails {
			if byRail[i] == nil {
				continue
			}
			if err := errsBy[i][k]; err != nil {
				failed = append(failed, fmt.Errorf("rail %d (%s): %w", i, t.rails[i].name, err))
				continue
			}
			g.subs[i], keys[i] = byRail[i][k], byRail[i][k].Key()
		}
		key, err := wire.AppendRailKey(nil, keys)
		if err != nil {
			g.revokeAll()
			errs[k] = errors.Join(append(failed, err)...)
			continue
		}
		g.key = key
		g.watch()
		out[k] = g
	}
	return out, errs
}

// registerOn registers mems on one rail, in one call where the member can.
func registerOn(r *rail, peer transport.InstanceID, mems [][]byte) ([]transport.Registration, []error) {
	if pr, ok := r.t.(transport.PeerRegisterer); ok {
		// Keys bound to the peer the lease is for, where the rail's transport can bind them.
		return pr.RegisterMemoryFor(peer, mems)
	}
	if mr, ok := r.t.(transport.ManyRegisterer); ok && len(mems) > 1 {
		return mr.RegisterMemoryMany(mems)
	}
	regs := make([]transport.Registration, len(mems))
	errs := make([]error, len(mems))
	for i, m := range mems {
		regs[i], errs[i] = r.rma.RegisterMemory(m)
	}
	return regs, errs
}

// registration is one region registered on several rails: one key names them all, a revocation
// revokes each, and it is dead once every rail's registration is.
type registration struct {
	n    int
	key  []byte
	subs []transport.Registration // by rail; nil where the rail has none
	dead chan struct{}
}

func (g *registration) Len() int              { return g.n }
func (g *registration) Key() []byte           { return g.key }
func (g *registration) Dead() <-chan struct{} { return g.dead }

// RangeKey implements transport.RangeKeyer: the part named on every rail, in one rail key.
func (g *registration) RangeKey(off, n int) ([]byte, error) {
	keys := make([][]byte, len(g.subs))
	for i, s := range g.subs {
		if s == nil {
			continue
		}
		rk, ok := s.(transport.RangeKeyer)
		if !ok {
			return nil, fmt.Errorf("rails: rail %d's registration cannot name a part of itself", i)
		}
		k, err := rk.RangeKey(off, n)
		if err != nil {
			return nil, fmt.Errorf("rails: rail %d: %w", i, err)
		}
		keys[i] = k
	}
	return wire.AppendRailKey(nil, keys)
}

// Revoke revokes every rail's registration; one that could not be handed over is retried by the
// caller's next Revoke (the others are idempotent).
func (g *registration) Revoke(ctx context.Context) error {
	var errs []error
	for _, s := range g.subs {
		if s != nil {
			if err := s.Revoke(ctx); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func (g *registration) revokeAll() { _ = g.Revoke(context.Background()) }

// watch closes dead once every rail's registration is dead.
func (g *registration) watch() {
	g.dead = make(chan struct{})
	go func() {
		for _, s := range g.subs {
			if s != nil {
				<-s.Dead()
			}
		}
		close(g.dead)
	}()
}
