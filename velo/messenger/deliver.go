package messenger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/metrics"
	"github.com/velo-go/velo/velo/transport"
)

// ClaimPrefix is the number of leading bytes Claim needs: the fixed frame header, and for a
// request a claimer takes (ClaimRequests) its name and the claimer's own prefix.
func (g *Messenger) ClaimPrefix() int {
	if n := g.claimPrefix.Load(); n > 0 {
		return int(n)
	}
	return wire.HeaderLen
}

// Claim takes the body of a response frame for a RequestInto call whose buffer has exactly the
// body's size; anything else is left to Deliver. It claims no request: ClaimOn does, for the
// transport whose index it is given.
func (g *Messenger) Claim(from transport.InstanceID, prefix []byte, size int) []byte {
	return g.ClaimOn(-1, from, prefix, size)
}

// ClaimOn is Claim for a frame that arrived on transport idx: besides answers, it gives a request
// with a claimer (ClaimRequests) to that claimer, and answers it on idx once it is read.
func (g *Messenger) ClaimOn(idx int, from transport.InstanceID, prefix []byte, size int) []byte {
	if len(prefix) < wire.HeaderLen {
		return nil
	}
	h, err := wire.DecodeHeader(prefix)
	if err == nil && h.Kind == wire.KindRequest && idx >= 0 {
		return g.claimRequest(idx, from, h, prefix, size)
	}
	if err != nil || h.Kind != wire.KindResponse || h.Flags != 0 {
		return nil
	}
	g.mu.Lock()
	c := g.calls[h.ID]
	g.mu.Unlock()
	if c == nil || c.peer != from {
		return nil
	}
	dst := c.claim(size - wire.HeaderLen)
	if dst == nil {
		return nil
	}
	// The transport read ClaimPrefix bytes before asking, which is more than the header once a
	// request claimer needs more (ClaimRequests): the answer's first bytes are in the prefix
	// already, and the transport reads the rest.
	head := copy(dst, prefix[wire.HeaderLen:])
	return dst[head:]
}

// Claimed completes a claimed call, or a claimed request.
func (g *Messenger) Claimed(from transport.InstanceID, prefix []byte, err error) {
	h, _ := wire.DecodeHeader(prefix)
	if h.Kind == wire.KindRequest {
		g.claimedRequest(from, h, err)
		return
	}
	g.mu.Lock()
	c := g.calls[h.ID]
	g.mu.Unlock()
	if c == nil {
		return
	}
	if err != nil {
		err = fmt.Errorf("messenger: reading the answer from %016x: %w: %v", uint64(from), transport.ErrPeerUnreachable, err)
	} else {
		g.m.Received("response")
	}
	g.finish(c, c.sink, 0, err)
}

// Deliver handles one frame that transport idx received from peer. Handlers run on other
// goroutines, so Deliver never blocks on one.
func (g *Messenger) Deliver(idx int, from transport.InstanceID, frame []byte) {
	g.deliver(idx, from, frame, nil)
}

// deliver routes one frame: answers complete their call here; user messages run here when handOff
// is set and the peer has no handler running (see DeliverInline), and on a drain goroutine
// otherwise; internal messages run on a goroutine of their own. It reports whether the calling
// goroutine is still the connection's reader.
func (g *Messenger) deliver(idx int, from transport.InstanceID, frame []byte, handOff func()) (stillReading bool) {
	msg, err := wire.DecodeMessage(frame)
	if err != nil {
		g.m.Error("malformed_frame")
		g.log.Warn("messenger: dropping malformed frame", "peer", fmt.Sprintf("%016x", uint64(from)), "bytes", len(frame), "err", err)
		return true
	}
	switch msg.Kind {
	case wire.KindResponse, wire.KindError:
		g.answer(from, msg)
	case wire.KindOneWay, wire.KindRequest:
		g.m.Received(kindLabel(msg.Kind))
		return g.dispatch(idx, from, msg, handOff)
	}
	return true
}

// Answers reports whether frame answers a call of this side's: a response or an error frame
// (transport.InlineHost).
func (g *Messenger) Answers(frame []byte) bool {
	h, err := wire.DecodeHeader(frame)
	return err == nil && (h.Kind == wire.KindResponse || h.Kind == wire.KindError)
}

func kindLabel(k wire.Kind) string {
	switch k {
	case wire.KindOneWay:
		return "one_way"
	case wire.KindRequest:
		return "request"
	case wire.KindResponse:
		return "response"
	}
	return "error"
}

func (g *Messenger) answer(from transport.InstanceID, msg wire.Message) {
	g.m.Received(kindLabel(msg.Kind))
	g.mu.Lock()
	c := g.calls[msg.ID]
	g.mu.Unlock()
	if c == nil || c.peer != from {
		// An answer to a call that timed out, or a peer answering a call it was never sent.
		g.log.Debug("messenger: answer to no pending call", "peer", fmt.Sprintf("%016x", uint64(from)), "id", msg.ID)
		return
	}
	if msg.Kind == wire.KindError {
		g.finish(c, nil, 0, &RemoteError{Peer: from, Code: msg.Err.Code, Kind: msg.Err.Kind, Text: msg.Err.Text})
		return
	}
	if c.sink != nil && !c.upTo {
		if msg.Flags != 0 || len(msg.Payload) != len(c.sink) {
			g.finish(c, nil, 0, fmt.Errorf("messenger: %w: peer %016x answered %d bytes (flags %#x), %d expected",
				ErrProtocol, uint64(from), len(msg.Payload), uint8(msg.Flags), len(c.sink)))
			return
		}
		// Only when the transport could not claim the frame (it does not stream): one copy.
		c.mu.Lock()
		ok := c.state == callWaiting
		if ok {
			copy(c.sink, msg.Payload)
		}
		c.mu.Unlock()
		if ok {
			g.finish(c, c.sink, 0, nil)
		}
		return
	}
	g.finish(c, msg.Payload, msg.Flags, nil)
}

// inbox is one peer's queue of user messages. While running is set, one goroutine owns the peer's
// handlers (an inline run on a reader, or a drain goroutine) and later messages queue behind it;
// the queue is empty whenever running is not.
type inbox struct {
	mu      sync.Mutex
	queue   []job
	bytes   int // what the queue counts against Config.InboxLimit
	running bool
	refused int // messages refused since the queue last had room (for the log)
}

// cost is what a queued message counts against Config.InboxLimit.
func (j job) cost() int { return len(j.msg.Payload) + inboxOverhead }

type job struct {
	idx int
	msg wire.Message
}

func (g *Messenger) dispatch(idx int, from transport.InstanceID, msg wire.Message, handOff func()) (stillReading bool) {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		if msg.Kind == wire.KindRequest {
			g.reply(idx, from, msg.ID, nil, nil, &handlerFailure{code: wire.CodeUnavailable, text: "the instance is closing"})
		}
		return true
	}
	if ih, ok := g.internal[msg.Name]; ok {
		g.start()
		g.mu.Unlock()
		go func() {
			defer g.done()
			g.runInternal(idx, from, msg, ih)
		}()
		return true
	}
	if g.draining.Load() {
		g.mu.Unlock()
		g.refuseDraining(idx, from, msg)
		return true
	}
	in := g.inboxes[from]
	if in == nil {
		in = &inbox{}
		g.inboxes[from] = in
	}
	in.mu.Lock()
	if handOff != nil && !in.running {
		// Nothing of this peer runs: handle it right here, on the reader.
		in.running = true
		in.mu.Unlock()
		g.start()
		g.mu.Unlock()
		return g.runInline(idx, from, in, msg, handOff)
	}
	j := job{idx, msg}
	if len(in.queue) > 0 && in.bytes+j.cost() > g.cfg.InboxLimit {
		// The peer sends faster than its handlers run. Queueing more would let one peer grow
		// this process without bound; stopping the reader instead would also stop the answers
		// to this side's own calls to that peer on the same connection, and a handler waiting
		// for one would never finish. So the message is refused: a request gets ErrUnavailable
		// back at once, a one-way message is dropped, counted and logged.
		queued, bytes := len(in.queue), in.bytes
		in.refused++
		first := in.refused == 1
		in.mu.Unlock()
		g.mu.Unlock()
		g.refuseFull(idx, from, msg, queued, bytes, first)
		return true
	}
	in.queue = append(in.queue, j)
	in.bytes += j.cost()
	g.inboxAdd(1, j.cost())
	start := !in.running
	in.running = true
	in.mu.Unlock()
	if start {
		g.start()
	}
	g.mu.Unlock()
	if start {
		go g.drain(from, in)
	}
	return true
}

// runInline runs msg's handler on the reader's goroutine, which owns the peer's handlers (in.running)
// and one count of g.running. When reading was handed off meanwhile, this goroutine goes on draining
// the peer's queue and reports false; otherwise it gives ownership up (or passes it, with the count,
// to a drain goroutine when messages queued from another connection) and goes back to reading.
func (g *Messenger) runInline(idx int, from transport.InstanceID, in *inbox, msg wire.Message, handOff func()) (stillReading bool) {
	r := g.startInline(handOff)
	g.runUser(r, idx, from, msg)
	if !g.endInline(r) {
		g.drain(from, in)
		return false
	}
	in.mu.Lock()
	if len(in.queue) > 0 {
		in.mu.Unlock()
		go g.drain(from, in)
		return true
	}
	in.running = false
	in.mu.Unlock()
	g.dropIdleInbox(from, in)
	g.done()
	return true
}

func (g *Messenger) drain(from transport.InstanceID, in *inbox) {
	defer g.done()
	for {
		in.mu.Lock()
		if len(in.queue) == 0 {
			in.running = false
			in.queue = nil
			in.mu.Unlock()
			g.dropIdleInbox(from, in)
			return
		}
		j := in.queue[0]
		in.queue[0] = job{}
		in.queue = in.queue[1:]
		in.bytes -= j.cost()
		g.inboxAdd(-1, -j.cost())
		if in.refused > 0 && in.bytes <= g.cfg.InboxLimit/2 {
			g.log.Warn("messenger: peer's inbox has room again", "peer", logPeer(from), "refused", in.refused)
			in.refused = 0
		}
		in.mu.Unlock()
		g.runUser(nil, j.idx, from, j.msg)
	}
}

// refuseFull answers or drops a message its peer's full inbox had no room for. The first refusal
// of an episode is logged; the count of all of them is logged when the inbox has room again.
func (g *Messenger) refuseFull(idx int, from transport.InstanceID, msg wire.Message, queued, bytes int, first bool) {
	g.m.Error("inbox_full")
	g.m.HandlerRefused(g.handlerLabel(msg.Name))
	if first {
		g.log.Warn("messenger: peer's inbox is full; refusing its messages until its handlers catch up",
			"peer", logPeer(from), "handler", msg.Name, "queued", queued, "queued_bytes", bytes, "limit", g.cfg.InboxLimit,
			"fix", "make the handlers faster or hand slow work to goroutines of their own, slow the sender down, or raise velo.WithInboxLimit")
	}
	if msg.Kind == wire.KindRequest {
		g.reply(idx, from, msg.ID, nil, nil, &handlerFailure{code: wire.CodeUnavailable,
			text: fmt.Sprintf("inbox full: %d of your messages (%d bytes) wait for their handlers here, limit %d bytes; retry later", queued, bytes, g.cfg.InboxLimit)})
	}
}

// refuseDraining answers or refuses a user message that arrived while this instance drains: a
// request gets ErrDraining back (safe to send elsewhere), a one-way message is counted and, once
// per peer, logged: its sender learns of the drain from the notice velo sends its peers.
func (g *Messenger) refuseDraining(idx int, from transport.InstanceID, msg wire.Message) {
	g.m.Error("draining")
	g.m.HandlerRefused(g.handlerLabel(msg.Name))
	if msg.Kind == wire.KindRequest {
		g.reply(idx, from, msg.ID, nil, nil, &handlerFailure{code: wire.CodeDraining,
			text: "this instance is draining (shutting down) and runs no new handler: send the request to another instance"})
		return
	}
	g.mu.Lock()
	_, seen := g.refusedFrom[from]
	g.refusedFrom[from] = struct{}{}
	g.mu.Unlock()
	if !seen {
		g.log.Warn("messenger: refusing one-way messages while draining; they are counted, not handled",
			"peer", logPeer(from), "handler", msg.Name)
	}
}

// handlerLabel is the handler label of a message: its name when a handler of that name is
// registered, UnknownHandler otherwise (a sender cannot grow the label set).
func (g *Messenger) handlerLabel(name string) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.handlers[name]; ok {
		return name
	}
	if _, ok := g.internal[name]; ok {
		return name
	}
	return metrics.UnknownHandler
}

// inboxAdd moves the instance-wide inbox gauges.
func (g *Messenger) inboxAdd(msgs, bytes int) {
	g.m.InboxMessages.Set(float64(g.inboxMsgs.Add(int64(msgs))))
	g.m.InboxBytes.Set(float64(g.inboxBytes.Add(int64(bytes))))
}

// dropIdleInbox forgets a peer's inbox once it is drained, so a process that talks to many
// short-lived peers does not keep one per peer forever. Lock order is g.mu, then in.mu.
func (g *Messenger) dropIdleInbox(from transport.InstanceID, in *inbox) {
	g.mu.Lock()
	defer g.mu.Unlock()
	in.mu.Lock()
	defer in.mu.Unlock()
	if !in.running && len(in.queue) == 0 && g.inboxes[from] == in {
		delete(g.inboxes, from)
	}
}

// logPeer shows an instance ID in log lines as 16 hex digits, formatted only when a handler
// actually writes the line.
type logPeer transport.InstanceID

func (p logPeer) LogValue() slog.Value { return slog.StringValue(fmt.Sprintf("%016x", uint64(p))) }

// handlerFailure is an error answer this side produces.
type handlerFailure struct {
	code    wire.ErrorCode
	kind    string
	text    string
	timeout bool // the handler returned a context deadline error
}

// outcome is the handler metric's outcome label of a handler run that ended with f (nil: ok).
func (f *handlerFailure) outcome() string {
	switch {
	case f == nil:
		return "ok"
	case f.code == wire.CodeHandlerPanic:
		return "panic"
	case f.timeout:
		return "timeout"
	}
	return "error"
}

// runUser runs a user handler and answers a request. run is the inline run when this goroutine
// is a connection's reader (see DeliverInline), else nil.
func (g *Messenger) runUser(run *inlineRun, idx int, from transport.InstanceID, msg wire.Message) {
	g.mu.Lock()
	h := g.handlers[msg.Name]
	g.mu.Unlock()
	var ctx context.Context = g.ctx
	if run != nil {
		ctx = run
	}
	isReq := msg.Kind == wire.KindRequest
	peer := logPeer(from) // formatted only if a line is logged
	if h == nil {
		g.m.Error("unknown_handler")
		g.m.HandlerRefused(metrics.UnknownHandler)
		g.log.Warn("messenger: message for an unknown handler", "peer", peer, "handler", msg.Name)
		if isReq {
			g.reply(idx, from, msg.ID, nil, nil, &handlerFailure{code: wire.CodeUnknownHandler,
				text: fmt.Sprintf("no handler %q is registered on %s: register it with RegisterHandler before peers call it", msg.Name, "the receiver")})
		}
		return
	}
	m := &Message{From: from, Name: msg.Name, Payload: msg.Payload}
	if msg.Flags&wire.FlagStaged != 0 {
		s := g.getStager()
		var err error
		var release func()
		if s == nil {
			err = fmt.Errorf("%w: staged payload but rendezvous is not set up here", ErrProtocol)
		} else {
			if run != nil {
				run.release() // the fetch's answers arrive on the connection this goroutine reads
			}
			m.Payload, release, err = s.Resolve(ctx, from, msg.Payload)
		}
		if err != nil {
			g.m.Error("staging_failed")
			g.log.Warn("messenger: could not fetch a staged payload", "peer", peer, "handler", msg.Name, "err", err)
			if isReq {
				g.reply(idx, from, msg.ID, nil, nil, &handlerFailure{code: wire.CodeBadRequest, kind: errorKind(err),
					text: "fetching the staged payload: " + err.Error()})
			}
			return
		}
		g.m.Staged("received")
		m.Staged = true
		defer release()
	}
	began := time.Now()
	resp, fail := g.invoke(ctx, h, m)
	g.m.HandlerDone(msg.Name, fail.outcome(), time.Since(began).Seconds(), len(m.Payload), len(resp))
	if !isReq {
		if fail != nil {
			g.log.Warn("messenger: one-way handler failed", "peer", peer, "handler", msg.Name, "err", fail.text)
		}
		return
	}
	if fail != nil {
		g.reply(idx, from, msg.ID, nil, nil, fail)
		return
	}
	body, flags, err := g.prepare(g.ctx, from, wire.HeaderLen, resp)
	if err != nil {
		g.reply(idx, from, msg.ID, nil, nil, &handlerFailure{code: wire.CodeHandlerError, text: "staging the answer: " + err.Error()})
		return
	}
	if !g.reply(idx, from, msg.ID, [][]byte{body}, nil, nil, flags) {
		g.unstage(flags, body)
	}
}

// invoke runs a user handler, turning an error or a panic into a failure answer.
func (g *Messenger) invoke(ctx context.Context, h Handler, m *Message) (resp []byte, fail *handlerFailure) {
	defer func() {
		if r := recover(); r != nil {
			g.m.Error("handler_panic")
			g.log.Error("messenger: handler panicked", "handler", m.Name, "panic", r, "stack", string(debug.Stack()))
			resp, fail = nil, &handlerFailure{code: wire.CodeHandlerPanic, text: fmt.Sprint(r)}
		}
	}()
	resp, err := h(ctx, m)
	if err != nil {
		g.m.Error("handler_error")
		return nil, &handlerFailure{code: wire.CodeHandlerError, kind: errorKind(err), text: err.Error(),
			timeout: errors.Is(err, context.DeadlineExceeded)}
	}
	return resp, nil
}

func (g *Messenger) runInternal(idx int, from transport.InstanceID, msg wire.Message, h InternalHandler) {
	var parts [][]byte
	var done func()
	var fail *handlerFailure
	func() {
		defer func() {
			if r := recover(); r != nil {
				g.m.Error("handler_panic")
				g.log.Error("messenger: internal handler panicked", "handler", msg.Name, "panic", r, "stack", string(debug.Stack()))
				fail = &handlerFailure{code: wire.CodeHandlerPanic, text: fmt.Sprint(r)}
			}
		}()
		var err error
		began := time.Now()
		defer func() {
			n := 0
			for _, p := range parts {
				n += len(p)
			}
			g.m.HandlerDone(msg.Name, fail.outcome(), time.Since(began).Seconds(), len(msg.Payload), n)
		}()
		parts, done, err = h(g.ctx, from, msg.Payload)
		if err != nil {
			fail = &handlerFailure{code: wire.CodeHandlerError, kind: errorKind(err), text: err.Error()}
		}
	}()
	if msg.Kind != wire.KindRequest {
		if done != nil {
			done()
		}
		return
	}
	g.reply(idx, from, msg.ID, parts, done, fail)
}

// reply answers request id on the transport it came in on (idx); it reports whether the
// transport took the answer.
func (g *Messenger) reply(idx int, to transport.InstanceID, id uint64, parts [][]byte, done func(), fail *handlerFailure, flags ...wire.Flags) bool {
	if done != nil {
		defer done()
	}
	g.mu.Lock()
	var t transport.Transport
	if idx < len(g.transports) {
		t = g.transports[idx]
	}
	g.mu.Unlock()
	if t == nil {
		return false
	}
	var out [][]byte
	kind := "response"
	if fail != nil {
		kind = "error"
		out = [][]byte{wire.AppendErrorBody(wire.AppendHeader(nil, wire.Header{Kind: wire.KindError, ID: id}),
			wire.ErrorBody{Code: fail.code, Kind: fail.kind, Text: fail.text})}
	} else {
		h := wire.Header{Kind: wire.KindResponse, ID: id}
		if len(flags) > 0 {
			h.Flags = flags[0]
		}
		out = append([][]byte{wire.AppendHeader(make([]byte, 0, wire.HeaderLen), h)}, parts...)
	}
	// Answers are bounded by the transport's own I/O timeout, not by a context.
	if err := t.Send(context.Background(), to, out...); err != nil {
		g.m.Error("send_failed")
		g.log.Info("messenger: could not send an answer", "peer", fmt.Sprintf("%016x", uint64(to)), "id", id, "err", err)
		return false
	}
	g.m.Sent(kind)
	return true
}
