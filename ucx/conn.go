// Conn: an endpoint of an engine, how it is opened, closed and failed, and which RMA path its
// lanes allow.

package ucx

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
)

// Conn is an endpoint owned by an engine. All methods are safe for concurrent use.
type Conn struct {
	e    *Engine
	opts ConnectOptions
	done chan struct{}

	errMu sync.Mutex
	err   error

	// Guarded by the engine's wmu.
	ep        *Endpoint
	id        uint64
	rmaMode   RMAMode // resolved on first use; RMAAuto until then
	gets      map[uint64]*engineOp
	closing   bool
	waiters   []*Op
	closedErr error
	isClosed  bool
}

// Connect creates an endpoint to the engine (or worker) whose address is addr. It returns
// once the endpoint exists; wireup finishes in the background and the first operation
// waits for it. A peer that cannot be reached surfaces as the first operation's error and
// through OnError.
func (e *Engine) Connect(ctx context.Context, addr []byte, opts ConnectOptions) (*Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c := &Conn{e: e, opts: opts, done: make(chan struct{}), gets: map[uint64]*engineOp{}}
	if err := e.lockRunning(); err != nil {
		return nil, err
	}
	defer e.wmu.Unlock()
	ep, err := e.w.Connect(addr, EndpointOptions{ErrorMode: opts.ErrorMode})
	if err != nil {
		return nil, err
	}
	c.ep, c.id = ep, ep.ID()
	e.conns[c.id] = c
	if opts.Holder != 0 {
		if err := e.w.guardBindEp(ep, opts.Holder); err != nil {
			c.startClose(e, CloseForce, nil)
			return nil, err
		}
	}
	// Wireup messages are queued on the new endpoint: have the progressor send them.
	e.kick()
	return c, nil
}

// Done is closed when the endpoint failed or was closed.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err is why the endpoint is no longer usable (nil while it is).
func (c *Conn) Err() error {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	return c.err
}

func (c *Conn) setErr(err error) bool {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	if c.err != nil {
		return false
	}
	c.err = err
	close(c.done)
	return true
}

// usable is checked under wmu before an operation starts.
func (c *Conn) usable() error {
	if c.isClosed || c.closing {
		if err := c.Err(); err != nil && !errors.Is(err, ErrClosed) {
			return fmt.Errorf("%w: %w", ErrEndpointFailed, err)
		}
		return fmt.Errorf("ucx: connection closed: %w", ErrClosed)
	}
	return nil
}

// fail handles the endpoint's error event.
func (c *Conn) fail(e *Engine, err error) {
	if c.setErr(err) && c.opts.OnError != nil {
		cb := c.opts.OnError
		e.deliver(func() { cb(err) })
	}
	for _, op := range c.gets {
		op.abandon(e, err)
	}
	c.startClose(e, CloseForce, nil)
}

func (c *Conn) startClose(e *Engine, mode CloseMode, waiter *Op) {
	if c.isClosed {
		if waiter != nil {
			waiter.finish(c.closedErr, 0)
		}
		return
	}
	if waiter != nil {
		c.waiters = append(c.waiters, waiter)
	}
	if c.closing {
		return
	}
	c.closing = true
	for _, op := range c.gets {
		op.abandon(e, fmt.Errorf("ucx: connection closing: %w", ErrClosed))
	}
	if c.ep.Err() != nil {
		mode = CloseForce
	}
	// The endpoint speaks for its holder no longer: once closed, its address may come back for
	// another peer's endpoint.
	if c.opts.Holder != 0 {
		e.w.guardUnbindEp(c.ep)
	}
	op := &engineOp{kind: opClose, op: newOp(), conn: c}
	req, err := c.ep.Close(mode)
	if err != nil {
		// The endpoint is released even when its close reports an error.
		c.closed(e, err)
	}
	e.started(op, req, err)
}

// closed runs when the endpoint's close completed (or the worker was destroyed).
func (c *Conn) closed(e *Engine, err error) {
	if c.isClosed {
		return
	}
	c.isClosed = true
	if err != nil && (errors.Is(err, ErrPeerFailure) || errors.Is(err, StatusCanceled)) {
		// Closing an endpoint to a dead peer reports the failure; the close still worked.
		err = nil
	}
	c.closedErr = err
	c.setErr(fmt.Errorf("ucx: connection closed: %w", ErrClosed))
	delete(e.conns, c.id)
	for _, w := range c.waiters {
		w.finish(err, 0)
	}
	c.waiters = nil
}

// Close closes the endpoint. CloseFlush lets outstanding operations finish and tells the
// peer; CloseForce cancels them. Close returns when UCX released the endpoint or when
// ctx ends (the close then still completes in the background).
func (c *Conn) Close(ctx context.Context, mode CloseMode) error {
	e := c.e
	if err := e.lockRunning(); err != nil {
		// The engine is closing and closes this endpoint itself.
		select {
		case <-c.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	}
	res := newOp()
	c.startClose(e, mode, res)
	e.wmu.Unlock()
	if err := e.await(ctx, res.done); err != nil {
		return err
	}
	return res.err
}

// Info returns ucp_ep_print_info for the endpoint (lanes, transports, thresholds).
func (c *Conn) Info(ctx context.Context) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if err := c.e.lockRunning(); err != nil {
		return "", err
	}
	defer c.e.wmu.Unlock()
	if c.usable() != nil {
		return "", nil
	}
	return c.ep.Info(), nil
}

// RMAMode reports which GET path this connection uses (RMAGuarded or RMADirect), resolving
// RMAAuto from the endpoint's lanes.
func (c *Conn) RMAMode(ctx context.Context) (RMAMode, error) {
	if err := ctx.Err(); err != nil {
		return RMAAuto, err
	}
	if err := c.e.lockRunning(); err != nil {
		return RMAAuto, err
	}
	defer c.e.wmu.Unlock()
	return c.resolveRMA(c.e), nil
}

func (c *Conn) resolveRMA(e *Engine) RMAMode {
	if e.cfg.RMA != RMAAuto {
		return e.cfg.RMA
	}
	if c.rmaMode == RMAAuto {
		c.rmaMode = RMAGuarded
		if c.usable() == nil && rmaLanesKeyed(c.ep.Info()) {
			c.rmaMode = RMADirect
		}
	}
	return c.rmaMode
}

// Lanes returns the transport of each lane UCX selected for the endpoint, in lane order ("tcp",
// "rc_mlx5", "ud_verbs", ...): what the endpoint really runs on, whatever UCX_TLS allowed. Empty
// when the endpoint failed or closed.
func (c *Conn) Lanes(ctx context.Context) ([]string, error) {
	info, err := c.Info(ctx)
	if err != nil {
		return nil, err
	}
	return LaneTransports(info), nil
}

// LaneTransports reads ucp_ep_print_info (Conn.Info) and returns the transport of each lane line,
// in order ("tcp" for "lane[0]:  1:tcp/lo.0 md[0] -> ..."). Lines it cannot read are left out.
func LaneTransports(info string) []string {
	var out []string
	for _, l := range laneLines(info) {
		if tl, ok := laneTransport(l[0]); ok {
			out = append(out, tl)
		}
	}
	return out
}

// laneLines splits each lane line of ucp_ep_print_info at its arrow: the local side (index,
// resource, md) and the remote side with the lane's tags.
func laneLines(info string) [][2]string {
	var out [][2]string
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimLeft(line, "# \t")
		if !strings.HasPrefix(line, "lane[") {
			continue
		}
		if local, remote, ok := strings.Cut(line, "->"); ok {
			out = append(out, [2]string{local, remote})
		}
	}
	return out
}

// laneTransport is the transport of a lane line's local side ("tcp" of "lane[0]:  1:tcp/lo.0 md[0]").
func laneTransport(local string) (string, bool) {
	fields := strings.Fields(local)
	if len(fields) < 2 {
		return "", false
	}
	// "1:tcp/lo.0": resource index, transport, device.
	_, tl, ok := strings.Cut(fields[1], ":")
	tl, _, ok2 := strings.Cut(tl, "/")
	return tl, ok && ok2 && tl != ""
}

// rmaLanesKeyed reads ucp_ep_print_info and reports whether the endpoint has RMA lanes
// and every one of them is an InfiniBand RC/DC transport, whose NIC rejects a bad remote
// key. A lane line looks like
//
//	lane[1]:  2:rc_mlx5/mlx5_0:1.0 md[1] -> md[1]/ib/sysdev[255] rma_bw#0 wireup
//
// and over tcp no lane carries an rma tag at all (UCX emulates RMA through the AM lane).
// Anything unrecognised means "not keyed", which selects the guarded GET: safe, slower.
func rmaLanesKeyed(info string) bool {
	found := false
	for _, l := range laneLines(info) {
		rma := false
		for _, tag := range strings.Fields(l[1]) {
			if strings.HasPrefix(tag, "rma") {
				rma = true
			}
		}
		if !rma {
			continue
		}
		tl, ok := laneTransport(l[0])
		if !ok || (!strings.HasPrefix(tl, "rc_") && !strings.HasPrefix(tl, "dc_")) {
			return false
		}
		found = true
	}
	return found
}
