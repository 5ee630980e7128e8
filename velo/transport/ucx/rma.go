package ucxt

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/velo/transport"
)

// RMABackend implements transport.RMA: "ucx".
func (t *Transport) RMABackend() string { return Name }

// CanGet implements transport.RMA: the peer was registered with AddPeer (a peer we only know
// from its hello does not count: the runtime offers RDMA to owners it registered) and its
// address says it serves one-sided reads.
func (t *Transport) CanGet(id transport.InstanceID) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.peers[id]
	return !t.closed && t.started && p != nil && p.added && p.addr.rma
}

// RegisterMemory implements transport.RMA: it maps mem with ucp_mem_map and packs its remote
// key, sealed by the engine in an envelope that names the region and this registration (see
// package ucx). Every call is its own registration with its own key.
func (t *Transport) RegisterMemory(mem []byte) (transport.Registration, error) {
	if len(mem) == 0 {
		return nil, errors.New("ucx: RegisterMemory: empty region")
	}
	if t.isClosed() {
		return nil, fmt.Errorf("ucx: RegisterMemory: %w", transport.ErrClosed)
	}
	ctx, cancel := context.WithTimeout(context.Background(), regTimeout)
	defer cancel()
	r, err := t.eng.Register(ctx, mem)
	if err != nil {
		return nil, fmt.Errorf("ucx: registering %d bytes: %w", len(mem), err)
	}
	return &registration{r: r}, nil
}

// registration is one engine registration behind transport.Registration.
type registration struct {
	r    *ucx.Registration
	once sync.Once
	err  error
}

func (g *registration) Addr() uint64 { return g.r.Addr() }
func (g *registration) Len() int     { return g.r.Len() }
func (g *registration) RKey() []byte { return g.r.RemoteKey() }

// Deregister revokes the key at once and returns when UCX no longer reads the memory: a guarded
// reply that was already reading the region has finished and the region is unmapped. Only then
// may the caller reuse or free the memory. If that does not happen within a minute it returns an
// error, and the memory must stay untouched (the RDMA registry quarantines the slot).
func (g *registration) Deregister() error {
	g.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), regTimeout)
		defer cancel()
		if err := g.r.Unregister(ctx); err != nil {
			g.err = fmt.Errorf("ucx: deregistering %d bytes at %#x: %w (the memory may still be read: do not reuse it)", g.r.Len(), g.r.Addr(), err)
			return
		}
		select {
		case <-g.r.Done():
		case <-ctx.Done():
			g.err = fmt.Errorf("ucx: deregistering %d bytes at %#x: %w (the memory may still be read: do not reuse it)", g.r.Len(), g.r.Addr(), ctx.Err())
		}
	})
	return g.err
}

// Get implements transport.RMA: one GET of len(dst) bytes at remoteAddr of peer, with the sealed
// key a registration of the peer's handed out. The key's framing, checksum and range are checked
// before any of it reaches UCX (ucp_ep_rkey_unpack trusts its input to describe its own length).
// Where UCX does not check remote keys itself (tcp and other software-emulated RMA), the engine
// uses its guarded GET: the owner checks the registration is live and covers the range before it
// sends a byte, so a stale or forged key reads nothing. Get returns when the bytes are in dst or
// with an error; if ctx ends first it still returns only once dst is out of UCX's hands.
func (t *Transport) Get(ctx context.Context, id transport.InstanceID, remoteAddr uint64, rkey []byte, dst []byte) error {
	k, err := ucx.ParseSealedKey(rkey)
	if err != nil {
		return fmt.Errorf("ucx: GET from %016x: %w", uint64(id), err)
	}
	if !k.Covers(remoteAddr, uint64(len(dst))) {
		return fmt.Errorf("ucx: GET from %016x: %w: [%#x, +%d) is outside the key's region [%#x, +%d)",
			uint64(id), ucx.ErrOutOfRange, remoteAddr, len(dst), k.Base, k.Length)
	}
	p, _, err := t.lookup(id)
	if err != nil {
		return err
	}
	if !t.CanGet(id) {
		return fmt.Errorf("ucx: GET from %016x: %w: the peer is not registered for one-sided reads (RegisterPeer with its UCX address)", uint64(id), transport.ErrUnknownPeer)
	}
	p.sendMu.Lock()
	oc, err := t.connLocked(ctx, p)
	if err != nil {
		p.sendMu.Unlock()
		return err
	}
	oc.beginGet()
	p.sendMu.Unlock()
	p.touch()
	err = oc.c.Get(ctx, dst, remoteAddr, rkey)
	p.touch()
	t.opDone(oc, true)
	if err != nil {
		return fmt.Errorf("ucx: GET of %d bytes from %016x: %w", len(dst), uint64(id), err)
	}
	return nil
}
