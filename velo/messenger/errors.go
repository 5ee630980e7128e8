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

// Kinds is a package's table of the sentinels its errors match on both sides of a round trip:
// the kind each travels under in a RemoteError and what a caller can do about it. The answering
// side tags its errors with Tag; the asking side says an answer, or an error of its own, once, in
// the words of whoever failed, with Said, Remote or Entry. Rendezvous and push keep one each.
type Kinds struct {
	prefix string // the errors' first word: "rendezvous", "push"
	kinds  []Kind
}

// Kind is one sentinel of a Kinds table.
type Kind struct {
	Name     string // the kind on the wire; "" for a sentinel that never crosses it
	Sentinel error
	Fix      string // what the caller can do, appended to the error's text; "" for nothing
}

// NewKinds makes the table of a package whose errors read "prefix: op: what happened (fix)". A
// sentinel that two entries match is said as the first.
func NewKinds(prefix string, kinds ...Kind) Kinds {
	return Kinds{prefix: prefix, kinds: kinds}
}

// KindOf is the kind of the first sentinel of the table that err matches and that crosses the
// wire.
func (k Kinds) KindOf(err error) (string, bool) {
	for _, e := range k.kinds {
		if e.Name != "" && errors.Is(err, e.Sentinel) {
			return e.Name, true
		}
	}
	return "", false
}

// Tag marks err with the kind of its sentinel (WithKind), for the caller's side to map back.
func (k Kinds) Tag(err error) error {
	if name, ok := k.KindOf(err); ok {
		return WithKind(err, name)
	}
	return err
}

// Remote says err of op once when it is a peer's answer of a known kind: the peer's words, the
// fix, matching both the sentinel and the RemoteError (errors.As gives the peer and handler).
// Anything else keeps its text behind "prefix: op: ".
func (k Kinds) Remote(op string, err error) error {
	if said, ok := k.answer(op, err); ok {
		return said
	}
	return fmt.Errorf("%s: %s: %w", k.prefix, op, err)
}

// Said is Remote, and also says an error of this instance's own that matches a sentinel of the
// table in its own words with the fix. A nil err stays nil.
func (k Kinds) Said(op string, err error) error {
	if err == nil {
		return nil
	}
	if said, ok := k.answer(op, err); ok {
		return said
	}
	for _, e := range k.kinds {
		if errors.Is(err, e.Sentinel) {
			return &opError{prefix: k.prefix, op: op, detail: err.Error(), kind: e, causes: []error{err}}
		}
	}
	return fmt.Errorf("%s: %s: %w", k.prefix, op, err)
}

// answer says err when it is a peer's answer of a kind of the table.
func (k Kinds) answer(op string, err error) (error, bool) {
	var re *RemoteError
	if !errors.As(err, &re) {
		return nil, false
	}
	e, ok := k.byName(re.Kind)
	if !ok {
		return nil, false
	}
	return &opError{prefix: k.prefix, op: op, detail: re.Text, kind: e, causes: []error{e.Sentinel, re}}, true
}

// Entry says the error of op that an answer carried as a kind and a text of its own (one entry
// of a batch), as Remote says a whole answer: it matches the sentinel the kind names.
func (k Kinds) Entry(op, kind, text string) error {
	if e, ok := k.byName(kind); ok {
		return &opError{prefix: k.prefix, op: op, detail: text, kind: e, causes: []error{e.Sentinel}}
	}
	return fmt.Errorf("%s: %s: %s", k.prefix, op, text)
}

func (k Kinds) byName(name string) (Kind, bool) {
	for _, e := range k.kinds {
		if name != "" && e.Name == name {
			return e, true
		}
	}
	return Kind{}, false
}

// opError is one failed operation, said once: the package, the operation, the detail (the words
// of whoever failed) and the fix where there is one.
type opError struct {
	prefix string
	op     string
	detail string
	kind   Kind
	causes []error
}

func (e *opError) Error() string {
	s := e.prefix + ": " + e.op + ": " + e.detail
	if e.kind.Fix != "" {
		s += " (" + e.kind.Fix + ")"
	}
	return s
}

func (e *opError) Unwrap() []error { return e.causes }
