package messenger

import (
	"context"
	"sync"

	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/transport"
)

const (
	callWaiting = iota
	callClaimed // a transport is reading the answer into sink right now
	callDone
)

// call is one outstanding request.
type call struct {
	id   uint64
	peer transport.InstanceID
	sink []byte // when set, the answer must be exactly this many bytes and lands here
	// upTo relaxes sink: an answer of at most len(sink) bytes lands in its first bytes, a larger
	// one arrives as any other (RequestBuffer).
	upTo bool
	done chan struct{}
	// waiter tells a transport that reads for its callers (transport.Awaiter) that the call is
	// complete; it fires right after done closes, whichever way the call ended.
	waiter transport.Waiter

	mu        sync.Mutex
	state     int
	transport int
	resp      []byte
	flags     wire.Flags
	err       error
}

func (c *call) complete(resp []byte, flags wire.Flags, err error) {
	c.mu.Lock()
	if c.state == callDone {
		c.mu.Unlock()
		return
	}
	c.state = callDone
	c.resp, c.flags, c.err = resp, flags, err
	close(c.done)
	c.mu.Unlock()
	c.waiter.Fire()
}

// claim moves a waiting call with a sink for n bytes to the claimed state.
func (c *call) claim(n int) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state != callWaiting || c.sink == nil || len(c.sink) != n && !(c.upTo && n <= len(c.sink)) {
		return nil
	}
	c.sink = c.sink[:n]
	c.state = callClaimed
	return c.sink
}

// wait returns the call's error once it is done, or the context's error. When the context ends
// while a transport is writing into the sink, wait still waits for that write to finish (the
// transport bounds it), because the caller may reuse the sink as soon as wait returns.
func (c *call) wait(ctx context.Context) error {
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
	}
	c.mu.Lock()
	switch c.state {
	case callDone:
		c.mu.Unlock()
		return c.err
	case callClaimed:
		c.mu.Unlock()
		<-c.done
		if c.err != nil {
			return c.err
		}
		return ctx.Err()
	}
	c.state = callDone
	c.err = ctx.Err()
	close(c.done)
	c.mu.Unlock()
	c.waiter.Fire()
	return ctx.Err()
}
