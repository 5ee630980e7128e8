package rendezvous

import (
	"context"
	"fmt"
	"time"

	"github.com/velo-go/velo/velo/messenger"
	"github.com/velo-go/velo/velo/transport"
)

// stagePayload (messenger.Stager.Stage): keep a copy of a large message payload for peer and return its
// encoded handle. The copy is what lets Send return while the receiver has not fetched yet and the
// caller reuses its buffer. With an RDMA registry the copy goes to pinned memory when an arena is
// already mapped (never mapping one: a send must not wait for a large pin), else to plain memory
// with reason pool_exhausted. The slot is transient: freed when the receiver releases it, when the
// receiver goes down, or after StageTTL with no lease open.
func (r *Rendezvous) stagePayload(ctx context.Context, peer transport.InstanceID, payload []byte) ([]byte, error) {
	h, err := r.stageCopy(payload, false, StageOptions{For: peer, TTL: r.cfg.StageTTL})
	if err != nil {
		return nil, err
	}
	return h.MarshalBinary()
}

// resolvePayload (messenger.Stager.Resolve): fetch the payload a staged message names. release ends the
// lease with a release once the handler has run, which frees the owner's slot. The error goes back
// to the sender tagged with its kind, so the sender can tell a payload above this receiver's
// MaxGetSize (ErrTooLarge) from a bad handle.
func (r *Rendezvous) resolvePayload(ctx context.Context, from transport.InstanceID, token []byte) ([]byte, func(), error) {
	var h Handle
	if err := h.UnmarshalBinary(token); err != nil {
		return nil, nil, err
	}
	if h.Owner != from {
		return nil, nil, fmt.Errorf("rendezvous: %w: a message from %016x carries a handle owned by %016x", ErrForeignHandle, uint64(from), uint64(h.Owner))
	}
	// Get refuses a handle above MaxGetSize before anything is allocated or asked: the size in a
	// staged message is the sender's word.
	l, err := r.Get(ctx, h)
	if err != nil {
		return nil, nil, ownerErr(fmt.Errorf("staged message payload from %016x: %w", uint64(from), err))
	}
	return l.Bytes(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := l.Release(ctx); err != nil {
			r.log.Debug("rendezvous: releasing a staged message payload failed; the owner frees it after StageTTL", "err", err)
		}
	}, nil
}

// Stager is the transparent stager the messenger uses for payloads above its threshold.
func (r *Rendezvous) Stager() messenger.Stager { return stagerAdapter{r} }

type stagerAdapter struct{ r *Rendezvous }

func (s stagerAdapter) Stage(ctx context.Context, peer transport.InstanceID, payload []byte) ([]byte, error) {
	return s.r.stagePayload(ctx, peer, payload)
}

// Unstage drops the reference a staged message's handle carried; its slot is freed at once, as no
// receiver holds a lease on it.
func (s stagerAdapter) Unstage(token []byte) {
	var h Handle
	if err := h.UnmarshalBinary(token); err != nil {
		return
	}
	if err := s.r.store.drop(h); err != nil {
		s.r.log.Debug("rendezvous: freeing the payload of a message that was not sent", "err", err)
	}
}

func (s stagerAdapter) Resolve(ctx context.Context, from transport.InstanceID, token []byte) ([]byte, func(), error) {
	return s.r.resolvePayload(ctx, from, token)
}
