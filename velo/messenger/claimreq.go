package messenger

import (
	"fmt"
	"time"

	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/transport"
)

// Claiming requests: the receiving half of a bulk write over the control plane.
//
// An internal request that carries bulk bytes bound for memory its handler already knows (a
// chunk of a chunked push, whose bytes belong in a granted region) would otherwise be read off
// the socket into a fresh, zeroed frame, handed to its handler, and copied again into place. A
// RequestClaimer for that request name takes the payload at the transport instead: it sees the
// payload's first bytes, returns where the rest goes, and is told once the rest is there; the
// request is answered as its handler would have answered it. A request the claimer does not take
// (returns nil) is delivered to the handler as usual, which is how every refusal stays in one
// place: the handler's.

// RequestClaimer takes one request's payload from a stream transport. head is the start of the
// payload (at least the prefix given to ClaimRequests, fewer bytes only when the payload is
// shorter, and it may run into the bulk bytes), size the whole payload's length. It returns
// the buffer for the other size-len(head) bytes and done, which is called exactly once when they
// were read (err nil) or could not be (the connection is then dropped); done's error is the
// request's answer (nil: an empty success). It returns nil rest to leave the request to its
// handler. It runs on the connection's reader: it must not block.
type RequestClaimer func(from transport.InstanceID, head []byte, size int) (rest []byte, done func(err error) error)

type claimer struct {
	c      RequestClaimer
	prefix int
}

// claimKey names a request being read into a claimer's buffer: one per connection at a time, and
// request IDs are the sender's, so the pair is unique while the read lasts.
type claimKey struct {
	from transport.InstanceID
	id   uint64
}

type pendingClaim struct {
	idx   int
	name  string
	size  int
	began time.Time
	done  func(error) error
}

// ClaimRequests installs c for the internal requests named name; prefix is how many payload bytes
// it needs to decide (its own header). Claiming works on stream transports (TCP) and is skipped
// on the others; a nil c removes the claimer.
func (g *Messenger) ClaimRequests(name string, prefix int, c RequestClaimer) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c == nil {
		delete(g.claimers, name)
	} else {
		g.claimers[name] = claimer{c: c, prefix: prefix}
	}
	need := wire.HeaderLen
	for n, cl := range g.claimers {
		need = max(need, wire.HeaderLen+1+len(n)+cl.prefix)
	}
	g.claimPrefix.Store(int64(need))
}

// claimRequest is Claim for a request frame that arrived on transport idx.
func (g *Messenger) claimRequest(idx int, from transport.InstanceID, h wire.Header, prefix []byte, size int) []byte {
	if h.Flags != 0 || len(prefix) <= wire.HeaderLen {
		return nil
	}
	nameEnd := wire.HeaderLen + 1 + int(prefix[wire.HeaderLen])
	if nameEnd > len(prefix) {
		return nil
	}
	name := string(prefix[wire.HeaderLen+1 : nameEnd])
	g.mu.Lock()
	cl, ok := g.claimers[name]
	closed := g.closed
	g.mu.Unlock()
	if !ok || closed || len(prefix)-nameEnd < min(cl.prefix, size-nameEnd) {
		return nil
	}
	rest, done := cl.c(from, prefix[nameEnd:], size-nameEnd)
	if rest == nil || done == nil {
		return nil
	}
	if len(rest) != size-len(prefix) {
		// A claimer's mistake: read nothing into it, and let the handler answer.
		_ = done(fmt.Errorf("messenger: claimer of %q returned %d bytes for a %d-byte rest", name, len(rest), size-len(prefix)))
		return nil
	}
	g.mu.Lock()
	g.claims[claimKey{from, h.ID}] = &pendingClaim{idx: idx, name: name, size: size - nameEnd, began: time.Now(), done: done}
	g.mu.Unlock()
	return rest
}

// claimedRequest completes a claimed request: the claimer hears how the read went, and the
// request is answered.
func (g *Messenger) claimedRequest(from transport.InstanceID, h wire.Header, err error) {
	k := claimKey{from, h.ID}
	g.mu.Lock()
	p := g.claims[k]
	delete(g.claims, k)
	g.mu.Unlock()
	if p == nil {
		return
	}
	herr := p.done(err)
	if err != nil {
		return // the connection is gone: no answer can be sent on it, and the caller hears of it
	}
	g.m.Received("request")
	var fail *handlerFailure
	if herr != nil {
		fail = &handlerFailure{code: wire.CodeHandlerError, kind: errorKind(herr), text: herr.Error()}
	}
	g.m.HandlerDone(p.name, fail.outcome(), time.Since(p.began).Seconds(), p.size, 0)
	g.reply(p.idx, from, h.ID, nil, nil, fail)
}
