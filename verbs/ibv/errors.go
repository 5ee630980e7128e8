package ibv

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/velo-go/velo/verbs"
)

// Error is a failed libibverbs call.
type Error struct {
	Op     string        // the C function, e.g. "ibv_reg_mr"
	Device string        // the device, when known
	Errno  syscall.Errno // what the library reported; 0 when the error was found before the call
	Kind   error         // the sentinel of package verbs it belongs to, or nil
	Detail string        // the cause and the fix, in words
}

func (e *Error) Error() string {
	s := e.Op
	if e.Device != "" {
		s += " on " + e.Device
	}
	if e.Errno != 0 {
		s += ": " + e.Errno.Error()
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Unwrap lets errors.Is find both the sentinel and the errno.
func (e *Error) Unwrap() []error {
	var errs []error
	if e.Kind != nil {
		errs = append(errs, e.Kind)
	}
	if e.Errno != 0 {
		errs = append(errs, e.Errno)
	}
	return errs
}

// memlockProbe reads the memlock state when ibv_reg_mr fails with ENOMEM; a variable so that the
// mapping can be tested with any state (the real probe is tested in package verbs).
var memlockProbe = verbs.ReadMemlock

// errnoError turns a failed call's errno into an *Error whose text says what to do. length is the
// size of the registration for ibv_reg_mr and unused otherwise.
func errnoError(op, device string, errno syscall.Errno, length uint64) *Error {
	e := &Error{Op: op, Device: device, Errno: errno}
	switch errno {
	case syscall.ENOMEM:
		if op == "ibv_reg_mr" {
			m, err := memlockProbe()
			if err != nil {
				e.Detail = fmt.Sprintf("registering %s failed and the memlock limit could not be read (%v); a low memlock limit is the usual cause: try `ulimit -l unlimited`", verbs.FormatBytes(length), err)
				return e
			}
			// The registration failed, so the memory it would have pinned is not counted yet:
			// the check asks exactly the question the kernel asked.
			switch cause := m.Check(length); {
			case cause != nil:
				e.Kind = verbs.ErrMemlock
				e.Detail = "the memlock limit is the cause: " + unwrapText(cause, verbs.ErrMemlock)
			default:
				e.Detail = fmt.Sprintf("not the memlock limit (%s still allowed): the adapter or the kernel is out of memory or memory-region resources", verbs.FormatBytes(m.Available()))
			}
			return e
		}
		e.Detail = "out of memory or adapter resources"
	case syscall.EACCES, syscall.EPERM:
		e.Kind = verbs.ErrPermission
		switch op {
		case "ibv_open_device":
			e.Detail = "this user may not open the device's /dev/infiniband/uverbs node: add the user to the group that owns it (often rdma), or start the container with --device=/dev/infiniband"
		case "ibv_reg_mr":
			e.Detail = "the access flags ask for more than the memory's mapping allows (write access to read-only memory?)"
		default:
			e.Detail = "not permitted for this process"
		}
	case syscall.ENODEV, syscall.ENXIO:
		e.Kind = verbs.ErrNoDevice
		e.Detail = "the device is gone (driver unloaded, adapter reset or removed)"
	case syscall.ENOSYS:
		e.Kind = verbs.ErrNoDevice
		e.Detail = "the kernel has no RDMA verbs support: load ib_uverbs and the adapter's RDMA driver (mlx5_ib)"
	case syscall.EOPNOTSUPP:
		e.Kind = verbs.ErrNotSupported
		e.Detail = "the device or its provider library does not support this"
	case syscall.EINVAL:
		e.Kind = verbs.ErrInvalid
		switch op {
		case "ibv_query_port":
			e.Detail = "no such port on this device (ports are numbered from 1; see ibv_devinfo)"
		case "ibv_query_pkey", "ibv_query_gid", "ibv_query_gid_ex":
			e.Detail = "port or table index out of range (see the port's table lengths)"
		case "ibv_reg_mr":
			e.Detail = "the device rejected the access flags or the address range"
		default:
			e.Detail = "the library rejected an argument"
		}
	case syscall.EFAULT:
		e.Kind = verbs.ErrInvalid
		e.Detail = "the memory is not mapped in this process"
	case syscall.EBUSY:
		e.Kind = verbs.ErrBusy
		e.Detail = "still in use: release its memory regions (or protection domains) first"
	}
	return e
}

// unwrapText returns err's text without the leading "<sentinel>: ".
func unwrapText(err, sentinel error) string {
	s := err.Error()
	prefix := sentinel.Error() + ": "
	if len(s) > len(prefix) && s[:len(prefix)] == prefix {
		return s[len(prefix):]
	}
	return s
}

// callErrno picks the errno of a call that returns an int: libibverbs returns either the errno
// itself or -1 with errno set, depending on the function and its version.
func callErrno(rc int, err error) syscall.Errno {
	if rc > 0 {
		return syscall.Errno(rc)
	}
	var en syscall.Errno
	if errors.As(err, &en) && en != 0 {
		return en
	}
	return syscall.EIO
}
