package ucxtransport

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/velo-go/velo/ucx"
	"github.com/velo-go/velo/velo/transport"
)

// RMABackend implements transport.RMA: "ucx".
func (t *Transport) RMABackend() string { return Name }

// RegistersRuns implements transport.RunRegisterer: every registration names its parts.
func (t *Transport) RegistersRuns() bool { return true }

// CanGet implements transport.RMA: the peer was registered with AddPeer (a peer we only know
// from its hello does not count: the runtime offers RDMA to owners it registered), its address
// says it serves one-sided reads, and UCX has a lane to it (see ReasonNoUCXLane).
func (t *Transport) CanGet(id transport.InstanceID) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.peers[id]
	return !t.closed && t.started && p != nil && p.added && p.addr.rma && t.laneless(p) == ""
}

// RegisterMemory implements transport.RMA: it maps mem with ucp_mem_map and packs its remote
// key, sealed by the engine in an envelope that names the region and this registration (see
// package ucx). Every call is its own registration with its own key.
func (t *Transport) RegisterMemory(mem []byte) (transport.Registration, error) {
	return t.register("RegisterMemory", mem, ucx.RegisterOptions{}, "")
}

// register is every RegisterMemory* of the transport: one engine registration of mem with opts,
// refused when mem is empty or the transport is closed. call names the method in errors, and
// kind the registration (" for writing", " of cuda memory", ...).
func (t *Transport) register(call string, mem []byte, opts ucx.RegisterOptions, kind string) (transport.Registration, error) {
	if len(mem) == 0 {
		return nil, fmt.Errorf("ucx: %s: empty region", call)
	}
	if t.isClosed() {
		return nil, fmt.Errorf("ucx: %s: %w", call, transport.ErrClosed)
	}
	// The engine registers in the calling goroutine (it waits for nothing but its lock), so no
	// deadline is needed: a timer per registration would cost more than the registration.
	eng, err := t.engine()
	if err != nil {
		return nil, fmt.Errorf("ucx: %s: %w", call, err)
	}
	r, err := eng.RegisterWith(context.Background(), mem, opts)
	if err != nil {
		return nil, fmt.Errorf("ucx: registering %d bytes%s: %w", len(mem), kind, err)
	}
	return &registration{r: r}, nil
}

// RegisterMemoryMany implements transport.ManyRegisterer: the engine registers every region
// under one hold of its lock.
func (t *Transport) RegisterMemoryMany(mems [][]byte) ([]transport.Registration, []error) {
	return t.registerMany(mems, ucx.RegisterOptions{})
}

// RegisterMemoryFor implements transport.PeerRegisterer: each region is registered with its own
// key, bound to peer. The owner's guard serves a guarded GET through such a key only when it
// arrives on one of this transport's endpoints to peer (ucx.RegisterOptions.Holder), so a key
// read off the wire is worth nothing to any other process. Over InfiniBand RC and DC the HCA
// serves the read, checking key and range but not who asks. When this side has no endpoint to
// peer, one is opened before the keys are returned (holderEndpoint).
func (t *Transport) RegisterMemoryFor(peer transport.InstanceID, mems [][]byte) ([]transport.Registration, []error) {
	regs, errs := t.registerMany(mems, ucx.RegisterOptions{Holder: uint64(peer)})
	t.holderEndpoint(peer)
	return regs, errs
}

// holderEndpoint opens this side's endpoint to peer, the holder of keys about to be handed out,
// when there is none: the endpoint is bound to peer as it is created, so the holder's first
// read finds it bound instead of racing this side's answer to the holder's hello (which under
// load can take seconds). It costs nothing new: the holder's first operation would open the
// same slot, and this side would follow. Best effort: if the endpoint cannot be opened the keys
// are still good, and the holder's hello makes this side try again.
func (t *Transport) holderEndpoint(peer transport.InstanceID) {
	t.mu.Lock()
	p := t.peers[peer]
	ok := p != nil && t.started && !t.closed
	t.mu.Unlock()
	if !ok {
		return
	}
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	if p.conn != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), t.cfg.SendTimeout)
	defer cancel()
	if _, err := t.connLocked(ctx, p); err != nil {
		t.log.Debug("ucx: no endpoint to the holder of new keys yet; its first read opens one", "peer", fmt.Sprintf("%016x", uint64(peer)), "err", err)
	}
}

// registerMany registers every region under one hold of the engine's lock, with opts.
func (t *Transport) registerMany(mems [][]byte, opts ucx.RegisterOptions) ([]transport.Registration, []error) {
	out := make([]transport.Registration, len(mems))
	errs := make([]error, len(mems))
	if t.isClosed() {
		for i := range errs {
			errs[i] = fmt.Errorf("ucx: RegisterMemory: %w", transport.ErrClosed)
		}
		return out, errs
	}
	eng, err := t.engine()
	if err != nil {
		for i := range errs {
			errs[i] = fmt.Errorf("ucx: RegisterMemory: %w", err)
		}
		return out, errs
	}
	regs, rerrs := eng.RegisterManyWith(context.Background(), mems, opts)
	for i, r := range regs {
		if rerrs[i] != nil {
			errs[i] = fmt.Errorf("ucx: registering %d bytes: %w", len(mems[i]), rerrs[i])
			continue
		}
		out[i] = &registration{r: r}
	}
	return out, errs
}

// registration is one engine registration behind transport.Registration.
type registration struct {
	r *ucx.Registration
}

func (g *registration) Len() int              { return g.r.Len() }
func (g *registration) Key() []byte           { return g.r.RemoteKey() }
func (g *registration) Dead() <-chan struct{} { return g.r.Done() }

// RangeKey implements transport.RangeKeyer: the sealed key of a part of the registration.
func (g *registration) RangeKey(off, n int) ([]byte, error) { return g.r.RangeKey(off, n) }

// Revoke implements transport.Registration: later guarded GETs with the key are refused. A
// guarded reply that is already reading the region keeps it until the reply completed (the
// consumer took the bytes), failed (the consumer died), or its endpoint was closed with force
// (ForceClosePeer); the engine unmaps the region then and Dead is closed. Over InfiniBand RC/DC
// the NIC checks the key itself, and the unmap kills it.
func (g *registration) Revoke(ctx context.Context) error {
	if err := g.r.Revoke(ctx); err != nil {
		return fmt.Errorf("ucx: revoking the key of %d bytes at %#x: %w", g.r.Len(), g.r.Addr(), err)
	}
	return nil
}

// ForceClosePeer implements transport.RMA: every endpoint to the peer, the current one and the
// retired ones, is closed with force. UCX cancels what is in flight on them, the guarded replies
// this side is sending to the peer included (the peer's GET requests arrive on the endpoint this
// side created for the same slot, so a reply goes out on one of ours). The peer is reported down:
// it did not answer for longer than its keys may live. The next frame to it opens a new slot.
func (t *Transport) ForceClosePeer(id transport.InstanceID) error {
	t.mu.Lock()
	p := t.peers[id]
	var orphans []*peer
	for o := range t.orphans {
		if o.id == id {
			orphans = append(orphans, o)
		}
	}
	t.mu.Unlock()
	if p == nil && len(orphans) == 0 {
		return fmt.Errorf("ucx: ForceClosePeer %016x: %w", uint64(id), transport.ErrUnknownPeer)
	}
	var conns []*outConn
	for _, q := range append(orphans, p) {
		if q == nil {
			continue
		}
		q.sendMu.Lock()
		if q.conn != nil {
			q.prevEpoch, q.prevSeq = q.conn.epoch, q.conn.seq
			conns = append(conns, q.conn)
			q.conn = nil
		}
		conns = append(conns, q.retired...)
		q.retired = nil
		q.sendMu.Unlock()
	}
	for _, oc := range conns {
		oc.mu.Lock()
		oc.state = connClosing
		oc.mu.Unlock()
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), t.timings.finWait)
			defer cancel()
			if err := oc.c.Close(ctx, ucx.CloseForce); err != nil && !errors.Is(err, ucx.ErrClosed) {
				t.log.Debug("ucx: force-closing an endpoint", "peer", fmt.Sprintf("%016x", uint64(id)), "slot", oc.epoch, "err", err)
			}
		}()
	}
	t.m.endpoints.WithLabelValues("forced").Add(float64(len(conns)))
	t.log.Warn("ucx: closed every endpoint to an unresponsive peer with force", "peer", fmt.Sprintf("%016x", uint64(id)), "endpoints", len(conns))
	if p != nil && len(conns) > 0 && !t.isClosed() {
		t.host.PeerDown(id, fmt.Errorf("ucx: endpoints to %016x closed with force: %w: it held a revoked key's read past the bound", uint64(id), transport.ErrPeerUnreachable))
	}
	return nil
}

// Get implements transport.RMA: one GET of len(dst) bytes at offset of the region that the
// sealed key (a registration of the peer's) names. The key's framing, checksum and UCX part are
// checked here, once, before any of it reaches UCX (ucp_ep_rkey_unpack trusts its input to
// describe its own length), and the engine checks the range once more than never: before it
// posts. Where UCX does not check remote keys itself (tcp and other software-emulated RMA), the
// engine uses its guarded GET: the owner checks the registration is live and covers the range
// before it sends a byte, so a stale or forged key reads nothing. Get returns when the bytes are
// in dst or with an error; if ctx ends first it still returns only once dst is out of UCX's hands.
func (t *Transport) Get(ctx context.Context, id transport.InstanceID, key []byte, offset uint64, dst []byte) error {
	return t.get(ctx, id, key, offset, dst, ucx.GetOptions{})
}

// get is Get with the destination's options (its memory type).
func (t *Transport) get(ctx context.Context, id transport.InstanceID, key []byte, offset uint64, dst []byte, opts ucx.GetOptions) error {
	k, err := ucx.ParseRegionKey(key)
	if err != nil {
		return fmt.Errorf("ucx: GET from %016x: %w", uint64(id), err)
	}
	p, err := t.oneSidedPeer(id, "GET from", "reads")
	if err != nil {
		return err
	}
	t.untilBound(ctx, p, []int{0}, func(c *ucx.Conn, _ []int, done func(j int, err error)) {
		done(0, c.GetKeyWith(ctx, dst, k, offset, opts))
	}, func(_ int, gerr error) { err = gerr })
	if err != nil {
		return fmt.Errorf("ucx: GET of %d bytes from %016x: %w", len(dst), uint64(id), err)
	}
	return nil
}

// ReadMany implements transport.ManyReader: every read goes through the engine's GetMany on the
// peer's endpoint, up to window at a time, each completion posting the next from the goroutine
// that saw it complete. Each distinct key is parsed and checked once for all the reads that name
// it; a read with a key the check refuses fails alone, before anything is posted. The endpoint
// counts the batch as one GET in flight (a fin waits for it, as for Get).
func (t *Transport) ReadMany(ctx context.Context, id transport.InstanceID, reads []transport.Read, window int, done func(i int, err error)) {
	if len(reads) == 0 {
		return
	}
	report := func(i int, err error) {
		if err != nil {
			err = fmt.Errorf("ucx: GET of %d bytes from %016x: %w", len(reads[i].Dst), uint64(id), err)
		}
		if done != nil {
			done(i, err)
		}
	}
	p, err := t.oneSidedPeer(id, "GET from", "reads")
	if err != nil {
		failAll(len(reads), err, done)
		return
	}
	keys := keyCache{}
	kr := make([]ucx.KeyRead, 0, len(reads))
	index := make([]int, 0, len(reads)) // kr[j] is reads[index[j]]
	for i, r := range reads {
		k, err := keys.parse(r.Key)
		if err != nil {
			report(i, err)
			continue
		}
		mt, err := ucxMemory(r.Memory)
		if err != nil {
			report(i, err)
			continue
		}
		kr = append(kr, ucx.KeyRead{Key: k, Offset: r.Offset, Dst: r.Dst, DstMemory: mt})
		index = append(index, i)
	}
	t.untilBound(ctx, p, index, func(c *ucx.Conn, sel []int, done func(j int, err error)) {
		c.GetMany(ctx, pick(kr, sel), window, done)
	}, report)
}

// pick is the entries of all at the positions sel, in that order (all itself when sel is every
// position, as on the first try).
func pick[T any](all []T, sel []int) []T {
	if len(sel) == len(all) {
		return all
	}
	out := make([]T, len(sel))
	for j, s := range sel {
		out[j] = all[s]
	}
	return out
}

// untilBound runs op on an endpoint to p for the operations index names (op's sel are positions
// in index; its done(j) reports sel[j]), reports each outcome with report(index[...]), and runs
// op again on those the peer answered "not yet connected back", once holderWait says they may go.
func (t *Transport) untilBound(ctx context.Context, p *peer, index []int, op func(c *ucx.Conn, sel []int, done func(j int, err error)), report func(i int, err error)) {
	sel := make([]int, len(index))
	for j := range sel {
		sel[j] = j
	}
	var w holderWait
	for len(sel) > 0 {
		var again []int
		var refusal error
		heard := t.heard(p) // before anything is posted: what the owner had bound by then
		var on *outConn
		err := t.withConn(ctx, p, func(oc *outConn) {
			on = oc
			op(oc.c, sel, func(j int, err error) {
				if notYetBound(err) {
					again, refusal = append(again, sel[j]), err
					return
				}
				report(index[sel[j]], err)
			})
		})
		if err != nil {
			for _, s := range sel {
				report(index[s], err)
			}
			return
		}
		if len(again) == 0 {
			return
		}
		if err := w.wait(ctx, t, p, on, heard, refusal); err != nil {
			for _, s := range again {
				report(index[s], err)
			}
			return
		}
		slices.Sort(again) // pick's order: a retry of every operation is the whole list again
		sel = again
	}
}

// Keys bound to their holder: the owner serves a key given to this instance only to requests
// that arrive on its own endpoints to this instance (ucx.RegisterOptions.Holder), and UCX hands
// a request the owner's endpoint of the slot it came on. The owner opens its endpoint to the
// holder, if it has none, before it hands the key out (RegisterMemoryFor, holderEndpoint), so a
// read normally finds it. What it can still meet is an owner one slot behind: this side opened a
// newer slot (its endpoint was evicted or reaped) and the owner has not yet handled the hello
// that makes it follow, which takes as long as the owner's process takes to get to it. The
// owner then answers StatusNotConnected, and the read waits for the event it needs: the owner's
// hello on that slot, which the owner sends only after binding its endpoint of the slot (conn.go,
// openLocked). A refusal of a read sent after that hello had arrived is final: the owner's
// endpoint was bound, and did not speak for this instance.
//
// The wait is bounded by the transfer's own deadline, and without one by SendTimeout (what a
// send to the peer may wait, and what the owner's own join may take): an owner that never
// connects back fails the read within that bound with the owner's refusal, and the caller falls
// back (the runtime's chunked path). While it waits the read also goes again on a slow pace
// (holderPace), in case the owner bound its endpoint without a hello this side saw.
const (
	holderPaceMin = 20 * time.Millisecond
	holderPaceMax = time.Second
)

// notYetBound reports whether err is the owner's "not on an endpoint I connected" answer.
func notYetBound(err error) bool { return errors.Is(err, ucx.StatusNotConnected) }

// heard is the newest slot p said hello on.
func (t *Transport) heard(p *peer) uint32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return p.heard
}

// heardHello notes that p said hello on slot, waking the reads that wait for it.
func (t *Transport) heardHello(p *peer, slot uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if slot <= p.heard {
		return
	}
	p.heard = slot
	if p.heardCh != nil {
		close(p.heardCh)
		p.heardCh = nil
	}
}

// heardWait is heard with a channel closed when p says hello on a newer slot.
func (t *Transport) heardWait(p *peer) (uint32, <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p.heardCh == nil {
		p.heardCh = make(chan struct{})
	}
	return p.heard, p.heardCh
}

// holderWait decides when reads refused "not yet connected back" go again.
type holderWait struct {
	until time.Time // the bound, set at the first refusal
	bound string    // what set it, for the error
	pace  time.Duration
}

// wait returns nil once the reads the owner refused on oc may go again, or the error to report
// for them: the refusal, final (heard, the owner's newest hello when they were sent, was on oc's
// slot, and oc is still the endpoint they would go on), or past the bound, or ctx's end. When the
// owner had said hello on a newer slot than oc's, this side is about to follow it there
// (onHello), and the reads go again once it did.
func (w *holderWait) wait(ctx context.Context, t *Transport, p *peer, oc *outConn, heard uint32, refusal error) error {
	if w.until.IsZero() {
		w.until, w.bound = time.Now().Add(t.cfg.SendTimeout), fmt.Sprintf("SendTimeout (%v)", t.cfg.SendTimeout)
		if d, ok := ctx.Deadline(); ok && d.Before(w.until) {
			w.until, w.bound = d, "the transfer's deadline"
		}
	}
	moved := func() bool { // this side's endpoint changed: the next try goes on another slot
		p.sendMu.Lock()
		defer p.sendMu.Unlock()
		return p.conn != oc
	}
	if heard == oc.epoch && !moved() {
		return fmt.Errorf("%w (the owner had connected back on slot %d before the read was sent)", refusal, heard)
	}
	left := time.Until(w.until)
	if left <= 0 {
		return fmt.Errorf("%w: the owner did not connect back to this instance on slot %d within %s", refusal, oc.epoch, w.bound)
	}
	now, heardCh := t.heardWait(p)
	if moved() || (heard < oc.epoch && now >= oc.epoch) {
		return nil // bound since the reads went out, or they go on another slot now
	}
	w.pace = min(max(2*w.pace, holderPaceMin), holderPaceMax)
	tm := time.NewTimer(min(w.pace, left))
	defer tm.Stop()
	select {
	case <-heardCh:
	case <-oc.c.Done():
	case <-tm.C:
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", refusal, ctx.Err())
	}
	return nil
}

// oneSidedPeer is peer id, which must be registered for one-sided operations; what ("GET from",
// "PUT to") and which ("reads", "operations") name them in the error.
func (t *Transport) oneSidedPeer(id transport.InstanceID, what, which string) (*peer, error) {
	p, _, err := t.lookup(id)
	if err != nil {
		return nil, err
	}
	if !t.CanGet(id) {
		return nil, fmt.Errorf("ucx: %s %016x: %w: the peer is not registered for one-sided %s (RegisterPeer with its UCX address)", what, uint64(id), transport.ErrUnknownPeer, which)
	}
	return p, nil
}

// withConn runs op on an endpoint to p, which counts it as a GET in flight while it runs (a fin
// waits for it); the error is the endpoint's, when none could be had.
func (t *Transport) withConn(ctx context.Context, p *peer, op func(oc *outConn)) error {
	p.sendMu.Lock()
	oc, err := t.connLocked(ctx, p)
	if err != nil {
		p.sendMu.Unlock()
		return err
	}
	oc.beginGet()
	p.sendMu.Unlock()
	p.touch()
	op(oc)
	p.touch()
	t.opDone(oc, true)
	return nil
}

// failAll reports err for each of n operations, none of which was tried.
func failAll(n int, err error, done func(i int, err error)) {
	if done == nil {
		return
	}
	for i := range n {
		done(i, err)
	}
}

// keyCache parses each distinct sealed key of a batch once, for all the operations that name it.
type keyCache map[string]*ucx.RegionKey

// parse is key parsed and checked: the check's error the first time it fails, and ever after an
// error saying the key failed it.
func (c keyCache) parse(key []byte) (*ucx.RegionKey, error) {
	k, seen := c[string(key)]
	if !seen {
		var err error
		if k, err = ucx.ParseRegionKey(key); err != nil {
			c[string(key)] = nil
			return nil, err
		}
		c[string(key)] = k
	}
	if k == nil {
		return nil, fmt.Errorf("%w: the key failed its check", ucx.ErrInvalidRemoteKey)
	}
	return k, nil
}
