package push

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/velo-go/velo/velo/internal/slowpath"
	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/rendezvous/rdma"
	"github.com/velo-go/velo/velo/transport"
)

// GrantOptions configure Service.Grant.
type GrantOptions struct {
	// Ranges are the ranges of the region the writer may write (default: the whole region). They
	// must lie inside the region, must not overlap each other, and must not overlap a live grant
	// of another writer on the same region.
	Ranges []Range
	// TTL bounds the grant's life (default DefaultTTL).
	TTL time.Duration
	// OnNotify, when set, receives each notification, in order, on a goroutine of the service:
	// keep it short (the writer's next notification waits for it). Without it notifications go to
	// the Notifications channel.
	OnNotify func(Notification)
	// NotifyBuffer is the capacity of the Notifications channel (default DefaultNotifyBuffer). A
	// receiver that does not read it holds up the writer's notifications, never its writes.
	NotifyBuffer int
}

// Notification is what a writer said after a put: which ranges are now written, and its payload.
type Notification struct {
	Writer  transport.InstanceID
	Grant   uint64
	Ranges  []Range
	Payload []byte
}

// Grant is a receiver's write grant: ranges of one region that one writer may write until the
// grant ends. Its methods are safe for concurrent use.
type Grant struct {
	s         *Service
	id        uint64
	nonce     [16]byte
	writer    transport.InstanceID
	writerInc uint64
	region    *rdma.Region
	ranges    []Range
	expires   time.Time
	onNotify  func(Notification)
	ch        chan Notification
	unstage   func()
	timer     *time.Timer

	mu       sync.RWMutex   // read-held by a chunk's copy; written to end the grant
	claims   sync.WaitGroup // chunks being read from the socket straight into the region (claimWrite)
	ended    bool
	why      error
	decided  bool
	rdmaPath bool
	onePath  metrics.Path // the lane of the grant's keys on the RDMA path: rdma, or shm (the same-host path)
	reason   metrics.Reason
	keys     [][]byte
	regEnds  []func()
	deads    []<-chan struct{}
	stop     chan struct{} // closed when the grant ends: a blocked delivery gives up
	done     chan struct{}

	dmu     sync.Mutex // one delivery at a time, in order
	cmu     sync.Mutex
	covered []Range       // sorted, merged: what notifications said is written
	chunks  uint64        // chunks copied in (under cmu: orders the copies before notifications)
	changed chan struct{} // closed and replaced when covered grows or the grant ends
}

// Grant gives writer ranges of region g for writing. The writer must be an instance this one knows
// (RegisterPeer, or discovery): the grant is bound to its incarnation as known now. The handle goes
// to the writer; the key behind it is given only to that writer, on its first put.
func (s *Service) Grant(writer transport.InstanceID, inc uint64, g *rdma.Region, opts GrantOptions) (*Grant, error) {
	if g == nil {
		return nil, errors.New("push: Grant: nil region")
	}
	if writer == 0 || writer == s.cfg.Self {
		return nil, fmt.Errorf("push: Grant: %w: the writer must be another instance", ErrNotGrantee)
	}
	size := uint64(len(g.Bytes()))
	ranges := append([]Range(nil), opts.Ranges...)
	if len(ranges) == 0 {
		ranges = []Range{{0, size}}
	}
	if len(ranges) > MaxRanges {
		return nil, fmt.Errorf("push: Grant: %w: %d ranges (at most %d)", ErrOutOfGrant, len(ranges), MaxRanges)
	}
	sortRanges(ranges)
	for i, r := range ranges {
		if r.Length == 0 || r.End() < r.Offset || r.End() > size {
			return nil, fmt.Errorf("push: Grant: %w: range [%d, +%d) is empty or outside the %d-byte region", ErrOutOfGrant, r.Offset, r.Length, size)
		}
		if i > 0 && ranges[i-1].overlaps(r) {
			return nil, fmt.Errorf("push: Grant: %w: ranges [%d, +%d) and [%d, +%d) overlap", ErrOverlap, ranges[i-1].Offset, ranges[i-1].Length, r.Offset, r.Length)
		}
	}
	ttl := opts.TTL
	if ttl == 0 {
		ttl = DefaultTTL
	}
	if ttl < 0 {
		return nil, fmt.Errorf("push: Grant: TTL %v is negative", ttl)
	}
	buf := opts.NotifyBuffer
	if buf <= 0 {
		buf = DefaultNotifyBuffer
	}
	gr := &Grant{s: s, writer: writer, writerInc: inc, region: g, ranges: ranges, expires: time.Now().Add(ttl),
		onNotify: opts.OnNotify, stop: make(chan struct{}), done: make(chan struct{}), changed: make(chan struct{})}
	if gr.onNotify == nil {
		gr.ch = make(chan Notification, buf)
	}
	if _, err := rand.Read(gr.nonce[:]); err != nil {
		return nil, fmt.Errorf("push: Grant: drawing its nonce: %w", err)
	}
	o, err := g.Stage()
	if err != nil {
		return nil, fmt.Errorf("push: Grant: %w", err)
	}
	gr.unstage = o.OnFree
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		o.OnFree()
		return nil, fmt.Errorf("push: Grant: %w", ErrClosed)
	case s.draining:
		s.mu.Unlock()
		o.OnFree()
		return nil, fmt.Errorf("push: Grant: this instance drains: %w", ErrDraining)
	}
	for _, other := range s.grants {
		if other.region != g || other.writer == writer {
			continue
		}
		for _, a := range other.ranges {
			for _, b := range ranges {
				if a.overlaps(b) {
					s.mu.Unlock()
					o.OnFree()
					return nil, fmt.Errorf("push: Grant: %w: [%d, +%d) overlaps grant %d of writer %016x", ErrOverlap, b.Offset, b.Length, other.id, uint64(other.writer))
				}
			}
		}
	}
	s.nextID++
	gr.id = s.nextID
	s.grants[gr.id] = gr
	s.m.grants.Set(float64(len(s.grants)))
	s.mu.Unlock()
	gr.timer = time.AfterFunc(ttl, func() { gr.end(ErrGrantEnded, "it expired") })
	return gr, nil
}

// ID is the grant's number on this receiver.
func (gr *Grant) ID() uint64 { return gr.id }

// Writer is the instance the grant names.
func (gr *Grant) Writer() transport.InstanceID { return gr.writer }

// Ranges are the granted ranges, in the region's offsets.
func (gr *Grant) Ranges() []Range { return append([]Range(nil), gr.ranges...) }

// Handle is what the writer needs: give it to the writer in a message.
func (gr *Grant) Handle() GrantHandle {
	return GrantHandle{Receiver: gr.s.cfg.Self, Writer: gr.writer, ID: gr.id, Nonce: gr.nonce,
		Expires: uint64(gr.expires.UnixMilli()), Ranges: gr.Ranges()}
}

// Notifications delivers the writer's notifications in order when GrantOptions.OnNotify is not
// set (nil otherwise). It is closed once the grant ended.
func (gr *Grant) Notifications() <-chan Notification { return gr.ch }

// Done is closed once the grant ended and no write through its keys can land any more: from then on
// the region's memory is the receiver's alone.
func (gr *Grant) Done() <-chan struct{} { return gr.done }

// Err is why the grant ended (nil while it lives).
func (gr *Grant) Err() error {
	gr.mu.RLock()
	defer gr.mu.RUnlock()
	return gr.why
}

// Revoke ends the grant now: later puts fail with ErrGrantEnded, its keys are revoked, and Done
// says when no write in flight can land any more (a writer stalled in the middle of a put does not
// keep the memory: its endpoints are closed with force past the registry's ForceCloseAfter, as a
// stalled reader's are). It is idempotent.
func (gr *Grant) Revoke(ctx context.Context) error {
	gr.end(ErrGrantEnded, "the receiver revoked it")
	return ctx.Err()
}

// Wait returns once notifications have covered every byte of ranges (all the grant's ranges when
// none are given), or with the grant's end or ctx's error. An error before that is a *WaitError:
// it lists the bytes no notification covered, and errors.Is matches what stopped the wait
// (ErrGrantEnded, context.DeadlineExceeded, context.Canceled).
func (gr *Grant) Wait(ctx context.Context, ranges ...Range) error {
	if len(ranges) == 0 {
		ranges = gr.ranges // sorted at Grant
	} else {
		ranges = append([]Range(nil), ranges...)
		sortRanges(ranges)
	}
	for {
		gr.cmu.Lock()
		missing := gaps(gr.covered, ranges)
		ch := gr.changed
		gr.cmu.Unlock()
		if len(missing) == 0 {
			return nil
		}
		var why error
		select {
		case <-gr.stop:
			why = gr.Err()
		case <-ch:
			continue
		case <-ctx.Done():
			why = ctx.Err()
		}
		gr.cmu.Lock()
		missing = gaps(gr.covered, ranges)
		gr.cmu.Unlock()
		if len(missing) == 0 { // the last notification came as the wait stopped
			return nil
		}
		return &WaitError{Grant: gr.id, Writer: gr.writer, Missing: missing, Err: why}
	}
}

// WaitError is Wait's error when it stopped before notifications covered the ranges it waited
// for: Missing are the bytes no notification covered (sorted, disjoint), and Err is what stopped
// it: the grant's end (ErrGrantEnded) or the context's error. A writer whose puts failed, or that
// put without Notify, leaves its ranges here; the receiver can ask it for exactly those.
type WaitError struct {
	Grant   uint64
	Writer  transport.InstanceID
	Missing []Range
	Err     error
}

// waitErrorRanges is how many missing ranges the message lists before it counts the rest.
const waitErrorRanges = 8

func (e *WaitError) Error() string {
	var b strings.Builder
	var total uint64
	for _, r := range e.Missing {
		total += r.Length
	}
	b.WriteString("push: Wait: ")
	if !errors.Is(e.Err, ErrGrantEnded) { // the grant's end names the grant itself
		fmt.Fprintf(&b, "grant %d of writer %016x: ", e.Grant, uint64(e.Writer))
	}
	ranges := "ranges"
	if len(e.Missing) == 1 {
		ranges = "range"
	}
	fmt.Fprintf(&b, "%d bytes in %d %s never notified:", total, len(e.Missing), ranges)
	for i, r := range e.Missing {
		if i == waitErrorRanges {
			fmt.Fprintf(&b, " and %d more", len(e.Missing)-i)
			break
		}
		fmt.Fprintf(&b, " [%d, +%d)", r.Offset, r.Length)
	}
	fmt.Fprintf(&b, ": %v", e.Err)
	return b.String()
}

// Unwrap is what stopped the wait.
func (e *WaitError) Unwrap() error { return e.Err }

// sortRanges sorts rs by offset.
func sortRanges(rs []Range) {
	sort.Slice(rs, func(i, j int) bool { return rs[i].Offset < rs[j].Offset })
}

// gaps returns the bytes of want (sorted by offset) that the sorted disjoint set does not hold,
// sorted and merged: one pass over both, then one sort of the gaps (ranges of want that overlap
// can give gaps out of order).
func gaps(set []Range, want []Range) []Range {
	var out []Range
	j := 0
	for _, r := range want {
		lo, hi := r.Offset, r.End()
		for j < len(set) && set[j].End() <= lo {
			j++ // ends before r, and so before every later range (they start at or after r)
		}
		for k := j; k < len(set) && set[k].Offset < hi; k++ {
			if set[k].Offset > lo {
				out = append(out, Range{lo, set[k].Offset - lo})
			}
			lo = max(lo, set[k].End())
		}
		if lo < hi {
			out = append(out, Range{lo, hi - lo})
		}
	}
	if len(out) < 2 {
		return out
	}
	sortRanges(out)
	merged := out[:1]
	for _, g := range out[1:] {
		last := &merged[len(merged)-1]
		if g.Offset <= last.End() {
			last.Length = max(last.End(), g.End()) - last.Offset
			continue
		}
		merged = append(merged, g)
	}
	return merged
}

// end ends the grant once: no chunk is copied or claimed after it returns from taking the lock,
// its keys are revoked (quarantined by the registry while a write may be in flight), and Done
// closes once they are dead and the chunks claimed before the end are read (a writer that stalls
// in the middle of one is cut off by the control plane's I/O timeout, tcp.Config.IOTimeout).
func (gr *Grant) end(sentinel error, why string) {
	gr.mu.Lock()
	if gr.ended {
		gr.mu.Unlock()
		return
	}
	gr.ended = true
	gr.why = fmt.Errorf("grant %d of writer %016x ended: %s: %w", gr.id, uint64(gr.writer), why, sentinel)
	close(gr.stop)
	ends, deads := gr.regEnds, gr.deads
	gr.regEnds = nil
	gr.mu.Unlock()
	if gr.timer != nil {
		gr.timer.Stop()
	}
	s := gr.s
	s.mu.Lock()
	if s.grants[gr.id] == gr {
		delete(s.grants, gr.id)
	}
	s.m.grants.Set(float64(len(s.grants)))
	s.mu.Unlock()
	for _, e := range ends {
		e()
	}
	if gr.ch != nil {
		gr.dmu.Lock() // a delivery in progress sees stop and returns
		close(gr.ch)
		gr.dmu.Unlock()
	}
	gr.cmu.Lock()
	close(gr.changed)
	gr.changed = make(chan struct{})
	gr.cmu.Unlock()
	s.log.Debug("push: a write grant ended", "grant", gr.id, "writer", fmt.Sprintf("%016x", uint64(gr.writer)), "why", why)
	go func() {
		for _, d := range deads {
			<-d
		}
		gr.claims.Wait()
		gr.unstage()
		close(gr.done)
	}()
}

// lookup finds the live grant ref names for from, checking the nonce, the writer and its
// incarnation (a grant whose writer restarted ends here).
func (s *Service) lookup(ref wire.GrantRef, from transport.InstanceID) (*Grant, error) {
	return s.find(ref, from, true)
}

// find is lookup; with endRestarted false it leaves a grant whose writer restarted to a later
// lookup (a transport's reader, which must not block on ending a grant, only declines).
func (s *Service) find(ref wire.GrantRef, from transport.InstanceID, endRestarted bool) (*Grant, error) {
	s.mu.Lock()
	gr := s.grants[ref.ID]
	closed, draining := s.closed, s.draining
	s.mu.Unlock()
	switch {
	case closed:
		return nil, receiverErr(opErrorf(ErrGrantEnded, "the receiver closed"))
	case draining:
		return nil, receiverErr(opErrorf(ErrGrantEnded, "the receiver drains"))
	case gr == nil:
		return nil, receiverErr(opErrorf(ErrGrantEnded, "no live grant %d on this receiver (revoked, expired, or never granted)", ref.ID))
	case gr.nonce != ref.Nonce:
		return nil, receiverErr(opErrorf(ErrBadGrant, "grant %d's nonce does not match", ref.ID))
	case gr.writer != from:
		return nil, receiverErr(opErrorf(ErrNotGrantee, "grant %d names writer %016x, not %016x", ref.ID, uint64(gr.writer), uint64(from)))
	}
	if s.cfg.Incarnation != nil && gr.writerInc != 0 {
		if inc, ok := s.cfg.Incarnation(from); ok && inc != gr.writerInc {
			if !endRestarted {
				return nil, receiverErr(opErrorf(ErrGrantEnded, "grant %d's writer restarted", ref.ID))
			}
			gr.end(ErrGrantEnded, "its writer restarted")
			return nil, receiverErr(opErrorf(ErrGrantEnded, "grant %d was given to incarnation %016x of its writer, which restarted", ref.ID, gr.writerInc))
		}
	}
	return gr, nil
}

func (s *Service) onAcquire(ctx context.Context, from transport.InstanceID, p []byte) ([][]byte, func(), error) {
	req, err := wire.DecodePushAcquire(p)
	if err != nil {
		return nil, nil, receiverErr(opErrorf(ErrBadGrant, "acquire: %v", err))
	}
	if err := s.authorize(from); err != nil {
		return nil, nil, err
	}
	gr, err := s.lookup(req.Ref, from)
	if err != nil {
		return nil, nil, err
	}
	resp, err := gr.acquire(req.Offer)
	if err != nil {
		return nil, nil, err
	}
	b, err := wire.AppendPushAcquireResponse(nil, resp)
	return [][]byte{b}, nil, err
}

// acquire decides the grant's path for its writer, once: with an offer and pinned memory it
// registers every range for writing (one key each), and otherwise, or when a registration fails,
// it answers chunked with the reason.
func (gr *Grant) acquire(offer bool) (wire.PushAcquireResponse, error) {
	s := gr.s
	gr.mu.Lock()
	defer gr.mu.Unlock()
	if gr.ended {
		return wire.PushAcquireResponse{}, receiverErr(gr.why)
	}
	if !gr.decided || (!gr.rdmaPath && offer && gr.reason == metrics.ReasonNoOffer) {
		gr.decide(offer)
	}
	reason := gr.reason
	if !gr.rdmaPath && gr.region.Memory().Typed() {
		reason = metrics.ReasonDeviceBounce // the chunks are copied in through a host buffer
	}
	// A piece travels in one frame (the writer's RequestParts): no larger than this side reads.
	chunk := s.cfg.ChunkSize
	if limit := s.cfg.Messenger.MaxParts(gr.writer, opWrite) - wire.PushWriteLen; limit > 0 && limit < chunk {
		chunk = limit
	}
	resp := wire.PushAcquireResponse{RDMA: gr.rdmaPath, Reason: string(reason), ChunkSize: uint32(chunk),
		TTLMillis: uint64(max(time.Until(gr.expires), 0) / time.Millisecond)}
	if gr.rdmaPath {
		resp.Keys = gr.keys
	}
	path := metrics.PathChunked
	if gr.rdmaPath {
		path = gr.onePath
	} else if offer && slowpath.Worth(string(reason)) {
		// The writer offered RDMA and this side decided chunks.
		s.slow.Once(s.log, "push: a writer offered RDMA and this receiver answers its grant on the chunked path",
			uint64(gr.writer), string(reason), "grant", gr.id)
	}
	s.m.countPath("receiver", path, reason, 1)
	return resp, nil
}

// decide runs under gr.mu.
func (gr *Grant) decide(offer bool) {
	s := gr.s
	gr.decided = true
	switch {
	case s.cfg.Registry == nil:
		gr.reason = metrics.ReasonNotConfigured
		return
	}
	// The RMA transport may know why the pair has no RDMA path (release_mismatch; software_lanes,
	// which this side refuses even when the writer offers): that reason, not no_offer, goes back
	// to the writer and into both sides' counts.
	if why := s.cfg.Registry.Owner().PathRefusal(gr.writer); why != "" {
		gr.reason = why
		return
	}
	if !offer {
		gr.reason = metrics.ReasonNoOffer
		return
	}
	keys := make([][]byte, 0, len(gr.ranges))
	var ends []func()
	var deads []<-chan struct{}
	for _, r := range gr.ranges {
		key, end, dead, reason, err := s.cfg.Registry.ServeWrite(gr.region, int(r.Offset), int(r.Length), gr.writer, gr.id)
		if err != nil {
			for _, e := range ends {
				e()
			}
			gr.deads = append(gr.deads, deads...)
			gr.reason = reason
			s.log.Debug("push: a grant takes the chunked path", "grant", gr.id, "reason", reason, "err", err)
			return
		}
		keys, ends, deads = append(keys, key), append(ends, end), append(deads, dead)
	}
	gr.rdmaPath, gr.reason, gr.keys, gr.regEnds = true, metrics.ReasonOK, keys, ends
	gr.onePath = s.keysPath(keys)
	gr.deads = append(gr.deads, deads...)
}

func (s *Service) onWrite(ctx context.Context, from transport.InstanceID, p []byte) ([][]byte, func(), error) {
	h, data, err := wire.DecodePushWrite(p)
	if err != nil {
		return nil, nil, receiverErr(opErrorf(ErrBadGrant, "write: %v", err))
	}
	if err := s.authorize(from); err != nil {
		return nil, nil, err
	}
	gr, err := s.lookup(h.Ref, from)
	if err != nil {
		return nil, nil, err
	}
	n := uint64(len(data))
	if n == 0 || gr.rangeOf(h.Offset, n) < 0 {
		return nil, nil, receiverErr(opErrorf(ErrOutOfGrant, "[%d, +%d) is not inside a range of grant %d", h.Offset, n, gr.id))
	}
	if _, err := s.writeAt(gr, h.Offset, data); err != nil {
		return nil, nil, err
	}
	s.m.addBytes("received", metrics.PathChunked, len(data))
	return nil, nil, nil
}

// writeAt copies data to off of gr's region (a chunk that came through the handler, or a small put
// that came inside its notification) and says which path the grant is on. It fails once the grant
// ended: no byte lands after Done.
func (s *Service) writeAt(gr *Grant, off uint64, data []byte) (metrics.Path, error) {
	n := uint64(len(data))
	gr.mu.RLock()
	if gr.ended {
		gr.mu.RUnlock()
		return "", receiverErr(gr.why)
	}
	path := metrics.PathChunked
	if gr.rdmaPath {
		path = gr.onePath
	}
	if m := gr.region.Memory(); m.Typed() {
		// Device memory: the bytes arrived in a host buffer and are copied in with the transport.
		if err := s.copyIn(gr.region.Bytes()[off:off+n], m, data); err != nil {
			gr.mu.RUnlock()
			return "", receiverErr(fmt.Errorf("push: write of %d bytes at %d into %v memory: %w", n, off, m.Type, err))
		}
	} else {
		copy(gr.region.Bytes()[off:], data)
	}
	gr.mu.RUnlock()
	// The copy happens before every later notification's delivery and Wait (both take cmu), so a
	// receiver that reads the range after either sees the bytes, as the memory model says it.
	gr.cmu.Lock()
	gr.chunks++
	gr.cmu.Unlock()
	return path, nil
}

// claimWrite takes a chunk's bytes from the control plane's socket straight into the granted
// range (messenger.ClaimRequests): no frame is allocated for it and nothing is copied after the
// read. It claims only a write onWrite would serve — an authorized writer's live grant, a range
// inside it, host memory — and leaves every other request to onWrite, which refuses it with its
// reason (or, for device memory, copies it in through the transport).
func (s *Service) claimWrite(from transport.InstanceID, head []byte, size int) ([]byte, func(error) error) {
	h, inHead, err := wire.DecodePushWrite(head)
	if err != nil || size < wire.PushWriteLen || (s.cfg.Authorize != nil && s.cfg.Authorize(from) != nil) {
		return nil, nil
	}
	gr, err := s.find(h.Ref, from, false)
	if err != nil {
		return nil, nil
	}
	n := uint64(size - wire.PushWriteLen)
	if n == 0 || gr.rangeOf(h.Offset, n) < 0 || gr.region.Memory().Typed() {
		return nil, nil
	}
	gr.mu.RLock()
	if gr.ended {
		gr.mu.RUnlock()
		return nil, nil
	}
	gr.claims.Add(1) // before the grant can end: Done waits for this read
	gr.mu.RUnlock()
	dst := gr.region.Bytes()[h.Offset : h.Offset+n]
	copy(dst, inHead) // the chunk's first bytes came with the header
	return dst[len(inHead):], func(err error) error {
		defer gr.claims.Done()
		if err != nil {
			return err
		}
		gr.mu.RLock()
		ended, why := gr.ended, gr.why
		gr.mu.RUnlock()
		if ended {
			// The bytes landed before Done closed, as a write in flight may; the writer hears that
			// the grant ended, as it would have at the handler.
			return receiverErr(why)
		}
		// As in onWrite: the chunk counts before any later notification is delivered.
		gr.cmu.Lock()
		gr.chunks++
		gr.cmu.Unlock()
		s.m.addBytes("received", metrics.PathChunked, int(n))
		return nil
	}
}

func (gr *Grant) rangeOf(off, n uint64) int {
	for i, r := range gr.ranges {
		if r.contains(off, n) {
			return i
		}
	}
	return -1
}

func (s *Service) onNotify(ctx context.Context, from transport.InstanceID, p []byte) ([][]byte, func(), error) {
	m, err := wire.DecodeNotify(p)
	if err != nil {
		return nil, nil, receiverErr(opErrorf(ErrBadGrant, "notify: %v", err))
	}
	return s.answerEach(from, m.Ref, len(m.Entries), func(gr *Grant, i int) byte {
		e := m.Entries[i]
		for _, r := range e.Ranges {
			if gr.rangeOf(r.Offset, r.Length) < 0 {
				return wire.NotifyRange
			}
		}
		return gr.deliver(from, fromWire(e.Ranges), e.Payload)
	})
}

// onNoteWrite serves small puts that came inside their notifications: each entry's bytes are
// copied into its range and then its notification is delivered, one entry at a time in order, as
// a write followed by a notification would be. An entry outside the grant, or one the grant ended
// before, is answered with its code and writes nothing.
func (s *Service) onNoteWrite(ctx context.Context, from transport.InstanceID, p []byte) ([][]byte, func(), error) {
	m, err := wire.DecodeNoteWrites(p)
	if err != nil {
		return nil, nil, receiverErr(opErrorf(ErrBadGrant, "notified write: %v", err))
	}
	return s.answerEach(from, m.Ref, len(m.Entries), func(gr *Grant, i int) byte {
		e := m.Entries[i]
		n := uint64(len(e.Data))
		if gr.rangeOf(e.Offset, n) < 0 {
			return wire.NotifyRange
		}
		path, err := s.writeAt(gr, e.Offset, e.Data)
		switch {
		case err != nil && gr.hasEnded():
			return wire.NotifyEnded
		case err != nil:
			s.log.Warn("push: a notified write could not be copied in", "grant", gr.id, "offset", e.Offset, "bytes", n, "err", err)
			return wire.NotifyCopy
		}
		s.m.addBytes("received", path, int(n))
		s.m.inlineWrites.WithLabelValues("receiver").Inc()
		return gr.deliver(from, []Range{{e.Offset, n}}, e.Payload)
	})
}

// answerEach serves a message of n notes for the grant ref names, once its writer is authorized
// and the grant found: serve decides each, one at a time and in order (one delivery at a time per
// grant), and the answer is their codes.
func (s *Service) answerEach(from transport.InstanceID, ref wire.GrantRef, n int, serve func(gr *Grant, i int) byte) ([][]byte, func(), error) {
	if err := s.authorize(from); err != nil {
		return nil, nil, err
	}
	gr, err := s.lookup(ref, from)
	if err != nil {
		return nil, nil, err
	}
	codes := make([]byte, n)
	gr.dmu.Lock()
	defer gr.dmu.Unlock()
	for i := range codes {
		codes[i] = serve(gr, i)
	}
	return [][]byte{codes}, nil, nil
}

// hasEnded reports whether the grant ended (it stays ended).
func (gr *Grant) hasEnded() bool {
	gr.mu.RLock()
	defer gr.mu.RUnlock()
	return gr.ended
}

// deliver hands one notification to the grant's handler or channel (dmu held) and says how it went.
func (gr *Grant) deliver(from transport.InstanceID, rs []Range, payload []byte) byte {
	select {
	case <-gr.stop:
		return wire.NotifyEnded
	default:
	}
	n := Notification{Writer: from, Grant: gr.id, Ranges: rs, Payload: payload}
	gr.cover(rs)
	if gr.onNotify != nil {
		gr.onNotify(n)
		return wire.NotifyOK
	}
	select {
	case gr.ch <- n:
		return wire.NotifyOK
	case <-gr.stop:
		return wire.NotifyEnded
	}
}

// cover adds ranges to what notifications said is written and wakes Wait.
func (gr *Grant) cover(rs []Range) {
	gr.cmu.Lock()
	for _, r := range rs {
		gr.covered = addRange(gr.covered, r)
	}
	close(gr.changed)
	gr.changed = make(chan struct{})
	gr.cmu.Unlock()
}

// addRange adds r to a sorted list of disjoint ranges, merging what touches it.
func addRange(set []Range, r Range) []Range {
	out := make([]Range, 0, len(set)+1)
	lo, hi := r.Offset, r.End()
	placed := false
	for _, x := range set {
		switch {
		case x.End() < lo:
			out = append(out, x)
		case x.Offset > hi:
			if !placed {
				out = append(out, Range{lo, hi - lo})
				placed = true
			}
			out = append(out, x)
		default:
			lo, hi = min(lo, x.Offset), max(hi, x.End())
		}
	}
	if !placed {
		out = append(out, Range{lo, hi - lo})
	}
	return out
}

// opErrorf is an error wrapping sentinel with a message.
func opErrorf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), sentinel)
}
