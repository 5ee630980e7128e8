package messenger

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/velo-go/velo/velo/internal/wire"
)

// The messenger runs end to end in package velo's tests over real sockets; these cover the pieces
// whose timing those tests cannot force.

func TestRemoteErrorMatchesItsSentinel(t *testing.T) {
	for code, want := range map[wire.ErrorCode]error{
		wire.CodeUnknownHandler: ErrUnknownHandler,
		wire.CodeHandlerError:   ErrHandlerFailed,
		wire.CodeHandlerPanic:   ErrHandlerPanic,
		wire.CodeBadRequest:     ErrBadRequest,
		wire.CodeUnavailable:    ErrUnavailable,
	} {
		err := error(&RemoteError{Peer: 1, Handler: "h", Code: code, Text: "detail"})
		if !errors.Is(err, want) {
			t.Errorf("code %d does not match %v", code, want)
		}
	}
	k := WithKind(errors.New("x"), "pkg.kind")
	if errorKind(k) != "pkg.kind" || errorKind(errors.New("y")) != "" || WithKind(nil, "z") != nil {
		t.Fatal("WithKind does not round-trip")
	}
}

// A caller whose context ends while a transport writes the answer into its buffer must not return
// before that write ends: the caller reuses the buffer as soon as it returns.
func TestCancelledCallWaitsForAClaimedRead(t *testing.T) {
	c := &call{id: 1, peer: 2, sink: make([]byte, 8), done: make(chan struct{})}
	if c.claim(7) != nil {
		t.Fatal("claimed with the wrong size")
	}
	if c.claim(8) == nil {
		t.Fatal("claim refused")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	returned := make(chan error, 1)
	go func() { returned <- c.wait(ctx) }()
	select {
	case err := <-returned:
		t.Fatalf("wait returned (%v) while the read was in flight", err)
	case <-time.After(50 * time.Millisecond):
		// Still waiting, as it must. (Not synchronisation: an absence check with a short bound.)
	}
	c.complete(c.sink, 0, nil)
	if err := <-returned; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v", err)
	}
}

func TestCancelledUnclaimedCallCannotBeClaimedLater(t *testing.T) {
	c := &call{id: 1, peer: 2, sink: make([]byte, 8), done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	if c.claim(8) != nil {
		t.Fatal("a call that returned can still be written into")
	}
}

func TestHandleRejectsBadNames(t *testing.T) {
	g := New(Config{})
	h := func(context.Context, *Message) ([]byte, error) { return nil, nil }
	for _, n := range []string{"", "velo.x", string(make([]byte, 256))} {
		if err := g.Handle(n, h); !errors.Is(err, ErrInvalidName) {
			t.Errorf("%q: %v", n, err)
		}
	}
	if err := g.Handle("ok", nil); !errors.Is(err, ErrInvalidName) {
		t.Error("nil handler accepted")
	}
}
