package ucx

import (
	"fmt"
	"unsafe"

	"github.com/velo-go/velo/ucx/internal/capi"
)

// Worker is a UCP worker (ucp_worker_h): the progress engine, its address, its endpoints.
//
// Thread ownership: one OS thread at a time (single-thread mode). Signal is the one
// method that may be called from any goroutine.
//
// Completions, endpoint failures and received active messages are not delivered through
// cgo callbacks into Go. UCX calls small C callbacks during Progress that append records
// to a ring; Poll hands them to Go in one batch. Call Poll after Progress.
type Worker struct {
	ctx     *Context
	w       capi.Worker
	ring    capi.Ring
	eps     map[uintptr]*Endpoint
	reqs    map[uint64]*Request
	nextReq uint64
	events  []capi.Event
	dropped uint64
	// Reused for every AM event: an Event and its AMEvent are valid only during the Poll
	// callback anyway, and allocating them per message was a measurable share of the
	// delivery cost.
	evScratch Event
	amScratch AMEvent
	polling   bool
	closed    bool
}

// NewWorker creates a worker in single-thread mode (ucp_worker_create).
func (c *Context) NewWorker() (*Worker, error) {
	return c.newWorker(capi.ThreadModeSingle)
}

// newWorker creates a worker in the given UCS_THREAD_MODE_*. The engine's is serialized:
// any thread may call it, one at a time, which lets every goroutine post its own operations.
func (c *Context) newWorker(mode int) (*Worker, error) {
	if c.isClosed() {
		return nil, ErrClosed
	}
	w, s := capi.UcpWorkerCreate(c.c, mode)
	if s != capi.OK {
		return nil, statusErr("ucp_worker_create", Status(s))
	}
	ring := capi.RingNew(w)
	if ring.Nil() {
		capi.UcpWorkerDestroy(w)
		return nil, statusErr("event ring", StatusNoMemory)
	}
	// Every AM id gets a handler that drops and counts before a peer can send one: UCX 1.13
	// dereferences a NULL handler table when a message reaches a worker that registered no
	// handler, and leaves the entries it adds when the table grows uninitialised, so a
	// message for an id nobody registered jumps through stale memory (capi.c).
	if s := capi.UcpWorkerClaimAmIds(ring); s != capi.OK {
		capi.UcpWorkerDestroy(w)
		capi.RingFree(ring)
		return nil, statusErr("ucp_worker_set_am_recv_handler", Status(s))
	}
	return &Worker{
		ctx:  c,
		w:    w,
		ring: ring,
		eps:  map[uintptr]*Endpoint{},
		reqs: map[uint64]*Request{},
	}, nil
}

// Context is the context the worker belongs to.
func (w *Worker) Context() *Context { return w.ctx }

// Address returns the worker's address (ucp_worker_get_address), the bytes a peer passes
// to Connect.
func (w *Worker) Address() ([]byte, error) {
	if w.closed {
		return nil, ErrClosed
	}
	b, s := capi.UcpWorkerGetAddress(w.w)
	if s != capi.OK {
		return nil, statusErr("ucp_worker_get_address", Status(s))
	}
	return b, nil
}

// MaxAMHeader is the largest active-message header the worker sends (ucp_worker_query).
func (w *Worker) MaxAMHeader() (int, error) {
	n, s := capi.UcpWorkerQueryMaxAMHeader(w.w)
	if s != capi.OK {
		return 0, statusErr("ucp_worker_query", Status(s))
	}
	return n, nil
}

// Progress calls ucp_worker_progress once and returns how many events it processed.
// Callbacks fill the event ring; call Poll to receive them. Inside a Poll callback it
// does nothing and returns 0 (the ring is being read).
func (w *Worker) Progress() uint {
	if w.closed || w.polling {
		return 0
	}
	return capi.UcpWorkerProgress(w.w)
}

// EventFD is the worker's event file descriptor (ucp_worker_get_efd). It becomes
// readable after Arm succeeded and a new event arrived. Needs FeatureWakeup.
func (w *Worker) EventFD() (int, error) {
	fd, s := capi.UcpWorkerGetEfd(w.w)
	if s != capi.OK {
		return -1, statusErr("ucp_worker_get_efd", Status(s))
	}
	return fd, nil
}

// Arm arms the event fd for the next event (ucp_worker_arm). It fails with StatusBusy
// when events are pending: progress again before sleeping.
func (w *Worker) Arm() error {
	s := capi.UcpWorkerArm(w.w)
	if s == capi.OK {
		return nil
	}
	return Status(s)
}

// Signal wakes a thread waiting on the event fd (ucp_worker_signal). UCX allows it from
// any thread; the caller must still make sure the worker is not being destroyed.
func (w *Worker) Signal() error {
	return statusErr("ucp_worker_signal", Status(capi.UcpWorkerSignal(w.w)))
}

// SetAMHandler makes the worker receive active messages with id into its event ring
// (ucp_worker_set_am_recv_handler). Messages with ids that have no handler are dropped
// and counted (Unclaimed).
func (w *Worker) SetAMHandler(id uint16) error {
	return statusErr("ucp_worker_set_am_recv_handler", Status(capi.UcpWorkerSetAmRecvHandler(w.ring, id, true)))
}

// RemoveAMHandler stops receiving id: its messages are dropped and counted again.
func (w *Worker) RemoveAMHandler(id uint16) error {
	return statusErr("ucp_worker_set_am_recv_handler", Status(capi.UcpWorkerSetAmRecvHandler(w.ring, id, false)))
}

// Event is one record from the worker's event ring.
type Event struct {
	Kind     EventKind
	Err      error
	Endpoint *Endpoint // EventEndpointError; nil if UCX reported an endpoint it created itself
	Request  *Request  // EventCompleted
	AM       *AMEvent  // EventAM
}

// AMEvent is a received active message, valid only during the Poll callback (the struct
// itself is reused for the next message).
type AMEvent struct {
	ID uint16
	// Header and Data are views of C memory that UCX reuses after the callback; copy
	// what you keep. Data is nil for a rendezvous message: receive it with ReceiveAMData.
	Header     []byte
	Data       []byte
	Length     int
	Rendezvous bool
	// Sender identifies the sending endpoint when the sender set AMReply, else 0.
	Sender   uint64
	replyEP  unsafe.Pointer
	desc     unsafe.Pointer
	keep     bool // UCX keeps desc until ucp_am_data_release or ucp_am_recv_data_nbx
	consumed bool
}

// Poll drains the event ring, calling fn for each event in the order the callbacks ran,
// and returns how many it delivered. Completed requests are released before fn sees
// them. An AMEvent's memory is released when fn returns unless fn called ReceiveAMData.
func (w *Worker) Poll(fn func(*Event)) int {
	if w.closed || w.polling {
		return 0
	}
	if d := capi.RingDropped(w.ring); d != w.dropped {
		// A callback could not record an event (malloc failed). Requests can be
		// recovered by asking UCX; lost messages cannot.
		w.dropped = d
		w.ctx.log.Error("ucx: event ring lost records (out of memory); polling requests directly", "lost_total", d)
		w.recoverRequests(fn)
	}
	if capi.RingLen(w.ring) == 0 {
		return 0
	}
	w.polling = true
	defer func() { w.polling = false }()
	w.events = capi.RingEvents(w.ring, w.events[:0])
	arena := capi.RingBytes(w.ring)
	n := 0
	for i := range w.events {
		ev := &w.events[i]
		switch ev.Kind {
		case capi.EventReqDone:
			r := w.reqs[ev.User]
			if r == nil {
				continue
			}
			w.complete(r, capi.Status(ev.Status), int(ev.Length))
			n++
			fn(&Event{Kind: EventCompleted, Request: r, Err: r.err})
		case capi.EventEPError:
			ep := w.eps[capi.HandleID(ev.Handle)]
			err := fmt.Errorf("ucx: endpoint failed: %w", Status(ev.Status))
			if ep != nil && ep.failed == nil {
				ep.failed = err
			}
			n++
			fn(&Event{Kind: EventEndpointError, Endpoint: ep, Err: err})
		case capi.EventAM:
			am := &w.amScratch
			*am = AMEvent{
				ID:         uint16(ev.AMID),
				Length:     int(ev.DataLen),
				Rendezvous: ev.AMFlags&capi.AMRecvAttrRndv != 0,
				replyEP:    ev.Handle,
			}
			if ev.HeaderLen > 0 {
				am.Header = arena[ev.HeaderOff : ev.HeaderOff+ev.HeaderLen]
			}
			if ev.Handle != nil {
				am.Sender = uint64(capi.HandleID(ev.Handle))
			}
			switch {
			case ev.AMFlags&capi.AMDataInArena != 0:
				am.Data = arena[ev.Length : ev.Length+ev.DataLen]
			case am.Rendezvous:
				am.desc, am.keep = ev.Data, true
			default:
				am.desc, am.keep = ev.Data, ev.Data != nil
				am.Data = capi.CBytes(ev.Data, ev.DataLen)
			}
			n++
			w.evScratch = Event{Kind: EventAM, AM: am}
			fn(&w.evScratch)
			if am.keep && !am.consumed {
				capi.UcpAmDataRelease(w.w, am.desc)
			}
		}
	}
	capi.RingReset(w.ring)
	return n
}

func (w *Worker) recoverRequests(fn func(*Event)) {
	for _, r := range w.reqs {
		if r.r.Nil() {
			continue
		}
		if s := capi.UcpRequestCheckStatus(r.r); s != capi.InProgress {
			w.complete(r, s, r.length)
			fn(&Event{Kind: EventCompleted, Request: r, Err: r.err})
		}
	}
}

// ReceiveAMData starts receiving a rendezvous message into dst (ucp_am_recv_data_nbx).
// Call it only inside the Poll callback that delivered ev. dst must stay valid and
// unmoved until the request completes (mmap memory, C memory or pinned Go memory).
func (w *Worker) ReceiveAMData(ev *AMEvent, dst []byte) (*Request, error) {
	return w.receiveAMData(ev, dst, capi.MemTypeUnset)
}

// receiveAMData is ReceiveAMData with dst's memory type (capi.MemTypeUnset: UCX detects it).
func (w *Worker) receiveAMData(ev *AMEvent, dst []byte, memType int) (*Request, error) {
	if !ev.Rendezvous || ev.consumed || ev.desc == nil {
		return nil, fmt.Errorf("ucx: ReceiveAMData: %w: not a pending rendezvous message", StatusInvalidParam)
	}
	if len(dst) < ev.Length {
		return nil, fmt.Errorf("ucx: ReceiveAMData: %w: buffer of %d bytes for a %d-byte message", StatusBufferTooSmall, len(dst), ev.Length)
	}
	ev.consumed = true
	r := w.newRequest()
	req, s := capi.UcpAmRecvDataNbx(w.ring, ev.desc, bufPtr(dst), uintptr(ev.Length), memType, r.id)
	return w.started(r, req, s, "ucp_am_recv_data_nbx", ev.Length)
}

// ReceiveAMDataIov is ReceiveAMData into several buffers: the message's bytes fill dsts in
// order, and their lengths must add up to the message's. The buffers must stay valid and
// unmoved until the request completes.
func (w *Worker) ReceiveAMDataIov(ev *AMEvent, dsts [][]byte) (*Request, error) {
	return w.receiveAMDataIov(ev, dsts, capi.MemTypeUnset)
}

// receiveAMDataIov is ReceiveAMDataIov with the buffers' memory type, the same for all.
func (w *Worker) receiveAMDataIov(ev *AMEvent, dsts [][]byte, memType int) (*Request, error) {
	if !ev.Rendezvous || ev.consumed || ev.desc == nil {
		return nil, fmt.Errorf("ucx: ReceiveAMDataIov: %w: not a pending rendezvous message", StatusInvalidParam)
	}
	bufs := make([]unsafe.Pointer, 0, len(dsts))
	lens := make([]uintptr, 0, len(dsts))
	total := 0
	for _, d := range dsts {
		if len(d) == 0 {
			continue
		}
		bufs, lens = append(bufs, unsafe.Pointer(&d[0])), append(lens, uintptr(len(d)))
		total += len(d)
	}
	if total != ev.Length {
		return nil, fmt.Errorf("ucx: ReceiveAMDataIov: %w: buffers of %d bytes for a %d-byte message", StatusBufferTooSmall, total, ev.Length)
	}
	ev.consumed = true
	r := w.newRequest()
	req, s := capi.UcpAmRecvDataIovNbx(w.ring, ev.desc, bufs, lens, memType, r.id)
	return w.started(r, req, s, "ucp_am_recv_data_nbx", ev.Length)
}

// Flush starts a flush of every endpoint of the worker (ucp_worker_flush_nbx).
func (w *Worker) Flush() (*Request, error) {
	if w.closed {
		return nil, ErrClosed
	}
	r := w.newRequest()
	req, s := capi.UcpWorkerFlushNbx(w.ring, r.id)
	return w.started(r, req, s, "ucp_worker_flush_nbx", 0)
}

// Pending is the number of requests the worker still tracks.
func (w *Worker) Pending() int { return len(w.reqs) }

// GuardStats reports how many guarded GET requests this worker served and refused.
func (w *Worker) GuardStats() (served, refused uint64) { return capi.RingGuardStats(w.ring) }

// Unclaimed is the number of active messages dropped because no handler had their id.
func (w *Worker) Unclaimed() uint64 { return capi.RingUnclaimed(w.ring) }

// Close destroys the worker (ucp_worker_destroy). Close or force-close its endpoints and
// let their requests complete first; endpoints still open are destroyed with it.
func (w *Worker) Close() error {
	if w.closed {
		return nil
	}
	w.closed = true
	capi.UcpWorkerDestroy(w.w)
	w.freeRing()
	return nil
}

// Request is an operation UCX has not finished yet. It is owned by its worker's thread.
type Request struct {
	w       *Worker
	r       capi.Request
	id      uint64
	done    bool
	err     error
	length  int
	release func()
	// UserData is free for the caller (the engine keeps its operation here).
	UserData any
}

// Done reports whether the request completed (seen through Poll).
func (r *Request) Done() bool { return r.done }

// Err is the request's result once Done; StatusInProgress before.
func (r *Request) Err() error {
	if !r.done {
		return StatusInProgress
	}
	return r.err
}

// Length is the received length of a completed ReceiveAMData request.
func (r *Request) Length() int { return r.length }

// Status asks UCX for the request's state (ucp_request_check_status) without waiting for
// Poll: StatusInProgress, nil, or the error.
func (r *Request) Status() error {
	if r.done {
		return r.err
	}
	s := Status(capi.UcpRequestCheckStatus(r.r))
	if s == StatusOK {
		return nil
	}
	return s
}

// Cancel asks UCX to cancel the request (ucp_request_cancel). It still completes through
// Poll, with UCS_ERR_CANCELED if the cancel took effect. Not every operation can be
// cancelled; those simply complete.
func (r *Request) Cancel() {
	if !r.done && !r.r.Nil() && !r.w.closed {
		capi.UcpRequestCancel(r.w.w, r.r)
	}
}

func (w *Worker) newRequest() *Request {
	w.nextReq++
	return &Request{w: w, id: w.nextReq}
}

// started files the result of posting an operation: nil request and nil error when it
// completed at once, a tracked request while in progress, or the error.
func (w *Worker) started(r *Request, req capi.Request, s capi.Status, call string, length int) (*Request, error) {
	switch s {
	case capi.InProgress:
		r.r = req
		w.reqs[r.id] = r
		return r, nil
	case capi.OK:
		r.done = true
		r.length = length
		if r.release != nil {
			r.release()
		}
		return nil, nil
	default:
		if r.release != nil {
			r.release()
		}
		return nil, statusErr(call, Status(s))
	}
}

func (w *Worker) complete(r *Request, s capi.Status, length int) {
	delete(w.reqs, r.id)
	r.done = true
	r.length = length
	if s != capi.OK {
		r.err = Status(s)
	}
	if !r.r.Nil() {
		capi.UcpRequestFree(r.r)
		r.r = capi.Request{}
	}
	if r.release != nil {
		r.release()
		r.release = nil
	}
}

func bufPtr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}

// enableGuard makes the worker answer guarded GET requests (see capi.c).
func (w *Worker) enableGuard(reqID, repID uint16) error {
	return statusErr("guarded GET handler", Status(capi.GuardEnable(w.ring, reqID, repID)))
}

// enableGuardV makes the worker answer vectored guarded GET requests too.
func (w *Worker) enableGuardV(reqID, repID uint16) error {
	return statusErr("vectored guarded GET handler", Status(capi.GuardVEnable(w.ring, reqID, repID)))
}

func (w *Worker) guardRevoke(slot uint32) { capi.GuardRevoke(w.ring, slot) }
func (w *Worker) guardSetMemType(slot uint32, memType int) {
	capi.GuardSetMemType(w.ring, slot, memType)
}
func (w *Worker) guardInflight(slot uint32) uint32 { return capi.GuardInflight(w.ring, slot) }
func (w *Worker) guardRelease(slot uint32)         { capi.GuardRelease(w.ring, slot) }
func (w *Worker) guardSetHolder(slot uint32, holder uint64) {
	capi.GuardSetHolder(w.ring, slot, holder)
}

// guardBindEp says requests arriving on ep come from holder; guardUnbindEp takes that back.
func (w *Worker) guardBindEp(ep *Endpoint, holder uint64) error {
	if !capi.GuardBindEp(w.ring, ep.ep, holder) {
		return fmt.Errorf("ucx: binding an endpoint to its holder: %w", StatusNoMemory)
	}
	return nil
}
func (w *Worker) guardUnbindEp(ep *Endpoint) { capi.GuardUnbindEp(w.ring, ep.ep) }

// guardRefusedHolder counts the guarded requests refused for arriving on no endpoint of the
// key's holder.
func (w *Worker) guardRefusedHolder() uint64 { return capi.RingGuardRefusedHolder(w.ring) }

// destroyAndDrain releases every tracked request (ucp_request_free), destroys the worker,
// collects the completions its destruction reported and returns every request that was
// still tracked, marked done (with UCS_ERR_CANCELED unless a completion said otherwise).
// The ring stays allocated until freeRing.
func (w *Worker) destroyAndDrain() []*Request {
	if w.closed {
		return nil
	}
	w.closed = true
	// UCX asserts that every request handed to the user was released before the worker
	// goes: release them now (UCX frees each when it completes or is purged below).
	for _, r := range w.reqs {
		if !r.r.Nil() {
			capi.UcpRequestFree(r.r)
			r.r = capi.Request{}
		}
	}
	capi.UcpWorkerDestroy(w.w)
	status := map[uint64]capi.Status{}
	for _, ev := range capi.RingEvents(w.ring, nil) {
		if ev.Kind == capi.EventReqDone {
			status[ev.User] = capi.Status(ev.Status)
		}
	}
	capi.RingReset(w.ring)
	out := make([]*Request, 0, len(w.reqs))
	for id, r := range w.reqs {
		delete(w.reqs, id)
		r.done = true
		r.r = capi.Request{}
		if s, ok := status[id]; ok && s == capi.OK {
			r.err = nil
		} else if ok {
			r.err = Status(s)
		} else {
			r.err = StatusCanceled
		}
		if r.release != nil {
			r.release()
			r.release = nil
		}
		out = append(out, r)
	}
	return out
}

func (w *Worker) freeRing() {
	if !w.ring.Nil() {
		capi.RingFree(w.ring)
		w.ring = capi.Ring{}
	}
}
