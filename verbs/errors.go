package verbs

import (
	"errors"
	"runtime"
)

// sentinel is an error value that may belong to a family: errors.Is(child, parent) holds because
// Unwrap returns the parent. It lets "no device" also answer errors.Is(err, ErrNotSupported).
type sentinel struct {
	msg    string
	parent error
}

func (s *sentinel) Error() string { return s.msg }
func (s *sentinel) Unwrap() error { return s.parent }

var (
	// ErrNotSupported means a probe's answer is "definitely not available". Errors that wrap it
	// are findings about the node, not failures of the probe.
	// It also matches the standard library's errors.ErrUnsupported.
	ErrNotSupported error = &sentinel{msg: "not supported", parent: errors.ErrUnsupported}

	// ErrNoDevice: no RDMA device, or not the one named. Belongs to ErrNotSupported.
	ErrNoDevice error = &sentinel{msg: "no RDMA device", parent: ErrNotSupported}

	// ErrPortNotActive: the port exists but is not in state PORT_ACTIVE. Belongs to ErrNotSupported.
	ErrPortNotActive error = &sentinel{msg: "RDMA port not active", parent: ErrNotSupported}

	// ErrMemlock: the memlock limit is too low for the registration asked for, and the process
	// cannot bypass it. Belongs to ErrNotSupported.
	ErrMemlock error = &sentinel{msg: "memlock limit too low", parent: ErrNotSupported}

	// ErrUnsupported: the platform has no RDMA verbs (anything but Linux). Belongs to
	// ErrNotSupported: there is definitely nothing to use.
	ErrUnsupported error = &sentinel{msg: "RDMA verbs are unsupported on " + runtime.GOOS, parent: ErrNotSupported}

	// ErrNotCompiled: the answer needs cgo and this binary was built with CGO_ENABLED=0. It is
	// inconclusive: the node may well have the feature.
	ErrNotCompiled = errors.New("not compiled in (this binary was built with CGO_ENABLED=0; rebuild with cgo and the rdma-core headers)")

	// ErrPermission: this process may not use a device or resource it found. Inconclusive about
	// the feature itself, and always comes with the fix.
	ErrPermission = errors.New("permission denied")

	// ErrInvalid: the caller passed something malformed (a port spec, access flags, a buffer).
	ErrInvalid = errors.New("invalid argument")

	// ErrMalformed: a sysfs or procfs file did not have the format the kernel documents.
	ErrMalformed = errors.New("malformed kernel attribute")

	// ErrClosed: a method was called on a nil, closed or released object.
	ErrClosed = errors.New("use of a closed or nil object")

	// ErrBusy: an object still has dependants (a context with protection domains, a protection
	// domain with memory regions) and cannot be released yet.
	ErrBusy = errors.New("object still in use")
)
