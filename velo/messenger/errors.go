package messenger

import (
	"errors"
	"fmt"

	"github.com/velo-go/velo/velo/internal/wire"
	"github.com/velo-go/velo/velo/transport"
)

// RemoteError is a failure reported by the peer that handled a request. errors.Is matches it
// against ErrUnknownHandler, ErrHandlerFailed, ErrHandlerPanic, ErrBadRequest or ErrUnavailable
// according to its Code.
type RemoteError struct {
	Peer    transport.InstanceID
	Handler string
	Code    wire.ErrorCode
	// Kind is the machine-readable name the remote handler attached with WithKind, or "".
	Kind string
	Text string
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("peer %016x, handler %q: %v: %s", uint64(e.Peer), e.Handler, e.sentinel(), e.Text)
}

func (e *RemoteError) sentinel() error {
	switch e.Code {
	case wire.CodeUnknownHandler:
		return ErrUnknownHandler
	case wire.CodeHandlerPanic:
		return ErrHandlerPanic
	case wire.CodeBadRequest:
		return ErrBadRequest
	case wire.CodeUnavailable:
		return ErrUnavailable
	case wire.CodeDraining:
		return ErrDraining
	}
	return ErrHandlerFailed
}

// Unwrap exposes the sentinel for the code.
func (e *RemoteError) Unwrap() error { return e.sentinel() }

// kindError attaches a machine-readable kind to a handler error.
type kindError struct {
	kind string
	err  error
}

func (k *kindError) Error() string { return k.err.Error() }
func (k *kindError) Unwrap() error { return k.err }

// WithKind marks a handler error with a short machine-readable kind that travels to the caller in
// RemoteError.Kind (for example "rendezvous.lease_expired"), so the caller's side can map it back
// to a sentinel of its own.
func WithKind(err error, kind string) error {
	if err == nil {
		return nil
	}
	return &kindError{kind: kind, err: err}
}

func errorKind(err error) string {
	var k *kindError
	if errors.As(err, &k) {
		return k.kind
	}
	return ""
}
