package ucx

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/velo-go/velo/ucx/internal/capi"
)

// Status is a UCX status code (ucs_status_t) used as an error. Its text carries UCX's
// own name for the code (UCS_ERR_UNREACHABLE …), so a log line can be searched for in
// UCX's sources and issues. Compare with errors.Is against the Status constants below,
// or against ErrPeerFailure for "the other side is gone" in all its spellings.
type Status int32

// The UCX status codes. Their values are UCX's ABI and identical in every release.
const (
	StatusOK                   Status = 0
	StatusInProgress           Status = 1
	StatusNoMessage            Status = -1
	StatusNoResource           Status = -2
	StatusIOError              Status = -3
	StatusNoMemory             Status = -4
	StatusInvalidParam         Status = -5
	StatusUnreachable          Status = -6
	StatusInvalidAddr          Status = -7
	StatusNotImplemented       Status = -8
	StatusMessageTruncated     Status = -9
	StatusNoProgress           Status = -10
	StatusBufferTooSmall       Status = -11
	StatusNoElem               Status = -12
	StatusSomeConnectsFailed   Status = -13
	StatusNoDevice             Status = -14
	StatusBusy                 Status = -15
	StatusCanceled             Status = -16
	StatusShmemSegment         Status = -17
	StatusAlreadyExists        Status = -18
	StatusOutOfRange           Status = -19
	StatusTimedOut             Status = -20
	StatusExceedsLimit         Status = -21
	StatusUnsupported          Status = -22
	StatusRejected             Status = -23
	StatusNotConnected         Status = -24
	StatusConnectionReset      Status = -25
	StatusFirstLinkFailure     Status = -40
	StatusLastLinkFailure      Status = -59
	StatusFirstEndpointFailure Status = -60
	StatusEndpointTimeout      Status = -80
	StatusLastEndpointFailure  Status = -89
)

var statusNames = map[Status][2]string{
	StatusOK:                 {"UCS_OK", "success"},
	StatusInProgress:         {"UCS_INPROGRESS", "operation in progress"},
	StatusNoMessage:          {"UCS_ERR_NO_MESSAGE", "no message pending"},
	StatusNoResource:         {"UCS_ERR_NO_RESOURCE", "no resources to start the operation now"},
	StatusIOError:            {"UCS_ERR_IO_ERROR", "input/output error"},
	StatusNoMemory:           {"UCS_ERR_NO_MEMORY", "out of memory"},
	StatusInvalidParam:       {"UCS_ERR_INVALID_PARAM", "invalid parameter"},
	StatusUnreachable:        {"UCS_ERR_UNREACHABLE", "destination unreachable"},
	StatusInvalidAddr:        {"UCS_ERR_INVALID_ADDR", "address not valid"},
	StatusNotImplemented:     {"UCS_ERR_NOT_IMPLEMENTED", "not implemented"},
	StatusMessageTruncated:   {"UCS_ERR_MESSAGE_TRUNCATED", "message truncated"},
	StatusNoProgress:         {"UCS_ERR_NO_PROGRESS", "no progress"},
	StatusBufferTooSmall:     {"UCS_ERR_BUFFER_TOO_SMALL", "buffer too small"},
	StatusNoElem:             {"UCS_ERR_NO_ELEM", "no such element"},
	StatusSomeConnectsFailed: {"UCS_ERR_SOME_CONNECTS_FAILED", "some connections failed"},
	StatusNoDevice:           {"UCS_ERR_NO_DEVICE", "no such device"},
	StatusBusy:               {"UCS_ERR_BUSY", "busy"},
	StatusCanceled:           {"UCS_ERR_CANCELED", "request canceled"},
	StatusShmemSegment:       {"UCS_ERR_SHMEM_SEGMENT", "shared memory error"},
	StatusAlreadyExists:      {"UCS_ERR_ALREADY_EXISTS", "already exists"},
	StatusOutOfRange:         {"UCS_ERR_OUT_OF_RANGE", "out of range"},
	StatusTimedOut:           {"UCS_ERR_TIMED_OUT", "timed out"},
	StatusExceedsLimit:       {"UCS_ERR_EXCEEDS_LIMIT", "limit exceeded"},
	StatusUnsupported:        {"UCS_ERR_UNSUPPORTED", "unsupported operation"},
	StatusRejected:           {"UCS_ERR_REJECTED", "rejected by the remote peer"},
	StatusNotConnected:       {"UCS_ERR_NOT_CONNECTED", "endpoint not connected"},
	StatusConnectionReset:    {"UCS_ERR_CONNECTION_RESET", "connection reset by the remote peer"},
	StatusEndpointTimeout:    {"UCS_ERR_ENDPOINT_TIMEOUT", "endpoint timeout (peer failed)"},
	// Not a UCX code: what every call returns in a binary without UCX (see errNoUCX).
	Status(capi.NotCompiled): {"VELO_UCX_NOT_COMPILED", "this binary has no UCX (built without cgo, or not on Linux)"},
}

// Name is UCX's identifier for the code, for example "UCS_ERR_UNREACHABLE".
func (s Status) Name() string {
	if n, ok := statusNames[s]; ok {
		return n[0]
	}
	switch {
	case s <= StatusFirstLinkFailure && s >= StatusLastLinkFailure:
		return fmt.Sprintf("UCS_ERR_LINK_FAILURE(%d)", int32(s))
	case s <= StatusFirstEndpointFailure && s >= StatusLastEndpointFailure:
		return fmt.Sprintf("UCS_ERR_ENDPOINT_FAILURE(%d)", int32(s))
	}
	return fmt.Sprintf("UCS_STATUS(%d)", int32(s))
}

func (s Status) Error() string {
	if n, ok := statusNames[s]; ok {
		return n[0] + ": " + n[1]
	}
	return s.Name()
}

// Is makes errors.Is(status, ErrPeerFailure) true for every code that means the remote
// side is gone or the path to it broke.
func (s Status) Is(target error) bool {
	if s == Status(capi.NotCompiled) {
		return target == errNoUCX
	}
	if target == ErrPeerFailure {
		return s.peerFailure()
	}
	return false
}

func (s Status) peerFailure() bool {
	switch s {
	case StatusUnreachable, StatusConnectionReset, StatusNotConnected, StatusEndpointTimeout,
		StatusIOError, StatusTimedOut, StatusRejected:
		return true
	}
	return (s <= StatusFirstLinkFailure && s >= StatusLastLinkFailure) ||
		(s <= StatusFirstEndpointFailure && s >= StatusLastEndpointFailure)
}

// Sentinel errors. Errors returned by this package wrap one of these or a Status.
var (
	// ErrNotCompiled: the binary was built without cgo, so there is no UCX in it.
	// Rebuild with CGO_ENABLED=1 and libucx-dev installed. It also matches errors.ErrUnsupported.
	ErrNotCompiled error = &unsupported{"ucx: not compiled in (built with CGO_ENABLED=0); rebuild with cgo and libucx-dev"}
	// ErrUnsupported: this platform has no UCX binding (only Linux is supported). It also
	// matches errors.ErrUnsupported.
	ErrUnsupported error = &unsupported{"ucx: unsupported on this platform (Linux only)"}
	// ErrClosed: the object, or the engine that owns it, was closed.
	ErrClosed = errors.New("ucx: closed")
	// ErrPeerFailure matches every Status that means the peer is gone (UCS_ERR_UNREACHABLE,
	// UCS_ERR_CONNECTION_RESET, UCS_ERR_ENDPOINT_TIMEOUT, link and endpoint failures …).
	ErrPeerFailure = errors.New("ucx: peer failure")
	// ErrInvalidRemoteKey: a remote key that fails validation (wrong magic or version,
	// truncated, checksum mismatch, UCX section inconsistent with its length). It was
	// never handed to ucp_ep_rkey_unpack.
	ErrInvalidRemoteKey = errors.New("ucx: invalid remote key")
	// ErrRemoteKeyRevoked: the owner does not serve that registration to this endpoint (it was
	// unmapped, the key belongs to another engine, or it was given to another peer:
	// RegisterOptions.Holder). No owner bytes were read.
	ErrRemoteKeyRevoked = errors.New("ucx: remote key revoked, unknown to the owner or given to another peer")
	// ErrAccessDenied: the key's registration does not grant the access the operation needs (a
	// write through a key registered for reading, or a read through one registered for writing
	// only). Nothing was written or read.
	ErrAccessDenied = errors.New("ucx: the remote key does not grant this access")
	// ErrOutOfRange: the requested range lies outside the registration the key covers.
	ErrOutOfRange = errors.New("ucx: range outside the registered region")
	// ErrMessageTooLarge: an eager active message above the engine's eager limit, or a
	// header above the worker's maximum AM header size.
	ErrMessageTooLarge = errors.New("ucx: message too large")
	// ErrInvalidAddress: a peer worker address that UCX cannot use.
	ErrInvalidAddress = errors.New("ucx: invalid worker address")
	// ErrEndpointFailed: an operation on an endpoint whose error handler already ran.
	ErrEndpointFailed = errors.New("ucx: endpoint failed")
)

// unsupported is a sentinel of this package that also answers errors.Is(err,
// errors.ErrUnsupported), the standard library's word for the same meaning.
type unsupported struct{ msg string }

func (e *unsupported) Error() string { return e.msg }
func (e *unsupported) Unwrap() error { return errors.ErrUnsupported }

// errNoUCX is what a binary without UCX reports from its first call into it: on Linux the
// binding was built without cgo (rebuild with it); elsewhere there is no binding at all.
var errNoUCX = func() error {
	if runtime.GOOS == "linux" {
		return ErrNotCompiled
	}
	return ErrUnsupported
}()

// statusErr wraps a non-OK status from call with context; OK gives nil.
func statusErr(call string, s Status) error {
	if s == StatusOK {
		return nil
	}
	return fmt.Errorf("ucx: %s: %w", call, s)
}
