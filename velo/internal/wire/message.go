package wire

import (
	"encoding/binary"
	"fmt"
)

// MessageVersion is the version byte that opens every messenger frame.
const MessageVersion = 1

// Kind is what a messenger frame carries.
type Kind uint8

// Frame kinds.
const (
	// KindOneWay is a fire-and-forget message to a named handler.
	KindOneWay Kind = 1
	// KindRequest is a request to a named handler; a response or error with the same ID answers it.
	KindRequest Kind = 2
	// KindResponse is a successful answer; its payload is everything after the header.
	KindResponse Kind = 3
	// KindError is a failed answer; its payload is an ErrorBody.
	KindError Kind = 4
)

func (k Kind) String() string {
	switch k {
	case KindOneWay:
		return "one-way"
	case KindRequest:
		return "request"
	case KindResponse:
		return "response"
	case KindError:
		return "error"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Flags modify how a frame's payload is read.
type Flags uint8

// FlagStaged marks a payload that is an encoded Handle, not the bytes themselves: the payload was
// above the staging threshold and the receiver must fetch it by rendezvous first.
const FlagStaged Flags = 1 << 0

const knownFlags = FlagStaged

// HeaderLen is the fixed part of every messenger frame: version, kind, flags, a reserved byte and the
// 64-bit request ID. A transport that can steer a frame's body (transport.Claimer) is shown exactly
// these bytes first; for a response, the payload starts right after them.
const HeaderLen = 12

// MaxNameLen bounds a handler name.
const MaxNameLen = 255

// Header is the fixed part of a messenger frame.
type Header struct {
	Kind  Kind
	Flags Flags
	ID    uint64 // request ID; 0 for one-way messages
}

// Message is a decoded messenger frame. Name and Payload alias the frame.
type Message struct {
	Header
	Name    string // handler name, for one-way messages and requests
	Payload []byte // the body, for every kind except KindError
	Err     ErrorBody
}

// AppendHeader appends a frame header.
func AppendHeader(b []byte, h Header) []byte {
	b = append(b, MessageVersion, byte(h.Kind), byte(h.Flags), 0)
	return binary.BigEndian.AppendUint64(b, h.ID)
}

// AppendCallHeader appends the header of a one-way message or request and its handler name. The
// payload follows as its own part.
func AppendCallHeader(b []byte, h Header, name string) ([]byte, error) {
	if len(name) == 0 || len(name) > MaxNameLen {
		return nil, fmt.Errorf("wire: handler name must be 1..%d bytes, got %d", MaxNameLen, len(name))
	}
	b = AppendHeader(b, h)
	b = append(b, byte(len(name)))
	return append(b, name...), nil
}

// DecodeHeader decodes the fixed header at the start of a frame.
func DecodeHeader(b []byte) (Header, error) {
	r := newReader("messenger frame header", b)
	v := r.u8("version")
	k := Kind(r.u8("kind"))
	f := Flags(r.u8("flags"))
	r.u8("reserved")
	id := r.u64("request id")
	if r.err != nil {
		return Header{}, r.err
	}
	if v != MessageVersion {
		return Header{}, fmt.Errorf("%w: %w: messenger frame version %d, this build speaks %d", ErrMalformed, ErrVersion, v, MessageVersion)
	}
	if k < KindOneWay || k > KindError {
		return Header{}, fmt.Errorf("%w: messenger frame: unknown kind %d", ErrMalformed, k)
	}
	if f&^knownFlags != 0 {
		return Header{}, fmt.Errorf("%w: messenger frame: unknown flags %#x", ErrMalformed, uint8(f))
	}
	if (k == KindOneWay) != (id == 0) {
		return Header{}, fmt.Errorf("%w: messenger frame: %v with request id %d", ErrMalformed, k, id)
	}
	if f&FlagStaged != 0 && k == KindError {
		return Header{}, fmt.Errorf("%w: messenger frame: an error cannot be staged", ErrMalformed)
	}
	return Header{Kind: k, Flags: f, ID: id}, nil
}

// DecodeMessage decodes a whole messenger frame.
func DecodeMessage(b []byte) (Message, error) {
	h, err := DecodeHeader(b)
	if err != nil {
		return Message{}, err
	}
	m := Message{Header: h}
	r := newReader("messenger "+h.Kind.String(), b)
	r.take(HeaderLen, "header")
	switch h.Kind {
	case KindOneWay, KindRequest:
		name := r.bytes8("handler name")
		if r.err == nil && len(name) == 0 {
			r.fail("empty handler name")
		}
		m.Name = string(name)
		m.Payload = r.rest()
	case KindResponse:
		m.Payload = r.rest()
	case KindError:
		m.Err, err = DecodeErrorBody(r.rest())
		if err != nil {
			return Message{}, err
		}
	}
	if err := r.done(); err != nil {
		return Message{}, err
	}
	return m, nil
}

// ErrorCode classifies a remote failure.
type ErrorCode uint8

// Error codes carried by KindError frames.
const (
	// CodeUnknownHandler: no handler of that name is registered on the receiver.
	CodeUnknownHandler ErrorCode = 1
	// CodeHandlerError: the handler returned an error.
	CodeHandlerError ErrorCode = 2
	// CodeHandlerPanic: the handler panicked; the receiver recovered.
	CodeHandlerPanic ErrorCode = 3
	// CodeBadRequest: the receiver could not read the request (for instance a staged payload it
	// could not fetch, or a malformed handle).
	CodeBadRequest ErrorCode = 4
	// CodeUnavailable: the receiver is shutting down, or its inbox for the sender is full.
	CodeUnavailable ErrorCode = 5
	// CodeDraining: the receiver is draining (a graceful shutdown): it runs no new handler; the
	// caller may send the same request to another instance.
	CodeDraining ErrorCode = 6
)

// MaxErrorText bounds the message text of an error frame; longer text is cut by the sender.
const MaxErrorText = 4096

// ErrorBody is the payload of a KindError frame.
type ErrorBody struct {
	Code ErrorCode
	// Kind is a short machine-readable name chosen by the handler's package (for example
	// "rendezvous.lease_expired"), empty when the handler gave none. The caller's side maps it back
	// to a sentinel error.
	Kind string
	Text string
}

// AppendErrorBody appends e, cutting over-long text.
func AppendErrorBody(b []byte, e ErrorBody) []byte {
	text := e.Text
	if len(text) > MaxErrorText {
		text = text[:MaxErrorText]
	}
	kind := e.Kind
	if len(kind) > 255 {
		kind = kind[:255]
	}
	w := writer{b: b}
	w.u8(uint8(e.Code))
	w.bytes8("error kind", []byte(kind))
	w.bytes16("error text", []byte(text))
	return w.b
}

// DecodeErrorBody decodes the payload of a KindError frame.
func DecodeErrorBody(b []byte) (ErrorBody, error) {
	r := newReader("error body", b)
	e := ErrorBody{Code: ErrorCode(r.u8("code"))}
	e.Kind = string(r.bytes8("kind"))
	e.Text = string(r.bytes16("text"))
	if err := r.done(); err != nil {
		return ErrorBody{}, err
	}
	if e.Code < CodeUnknownHandler || e.Code > CodeDraining {
		return ErrorBody{}, fmt.Errorf("%w: error body: unknown code %d", ErrMalformed, e.Code)
	}
	return e, nil
}
