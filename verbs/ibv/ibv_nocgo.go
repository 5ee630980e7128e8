//go:build !linux || !cgo

package ibv

import (
	"runtime"
	"unsafe"

	"github.com/velo-go/velo/verbs"
)

// This twin keeps the API whole in binaries built without cgo (or for other systems): every call
// returns an *Error wrapping verbs.ErrNotCompiled (or verbs.ErrUnsupported off Linux), which the
// three-valued probes of the callers read as "could not tell" (or "not available").

func unavailable(op string) error {
	if runtime.GOOS != "linux" {
		return &Error{Op: op, Kind: verbs.ErrUnsupported, Detail: "libibverbs exists only on Linux"}
	}
	return &Error{Op: op, Kind: verbs.ErrNotCompiled, Detail: "libibverbs support is not compiled into this binary (built with CGO_ENABLED=0); the sysfs probes of package verbs still work"}
}

// Devices returns an error wrapping verbs.ErrNotCompiled or verbs.ErrUnsupported.
func Devices() ([]DeviceInfo, error) { return []DeviceInfo{}, unavailable("ibv_get_device_list") }

// Context is an open device; this build cannot open one.
type Context struct{}

// Open returns an error wrapping verbs.ErrNotCompiled or verbs.ErrUnsupported.
func Open(name string) (*Context, error) { return nil, unavailable("ibv_open_device") }

// WithDevice fails: this build has no libibverbs.
func WithDevice(op, name string, fn func(dev unsafe.Pointer) error) error { return unavailable(op) }

// ErrnoError is the not-compiled error: no verbs call is made in this build.
func ErrnoError(op, device string, err error) error { return unavailable(op) }

// Name returns "".
func (c *Context) Name() string { return "" }

// Close returns an error wrapping verbs.ErrNotCompiled or verbs.ErrUnsupported.
func (c *Context) Close() error { return unavailable("ibv_close_device") }

// QueryDevice returns an error wrapping verbs.ErrNotCompiled or verbs.ErrUnsupported.
func (c *Context) QueryDevice() (DeviceAttr, error) {
	return DeviceAttr{}, unavailable("ibv_query_device")
}

// QueryPort returns an error wrapping verbs.ErrNotCompiled or verbs.ErrUnsupported.
func (c *Context) QueryPort(port int) (PortAttr, error) {
	return PortAttr{}, unavailable("ibv_query_port")
}

// QueryPKey returns an error wrapping verbs.ErrNotCompiled or verbs.ErrUnsupported.
func (c *Context) QueryPKey(port, index int) (verbs.PKey, error) {
	return 0, unavailable("ibv_query_pkey")
}

// QueryGID returns an error wrapping verbs.ErrNotCompiled or verbs.ErrUnsupported.
func (c *Context) QueryGID(port, index int) (verbs.GID, error) {
	return verbs.GID{}, unavailable("ibv_query_gid")
}

// QueryGIDEx returns an error wrapping verbs.ErrNotCompiled or verbs.ErrUnsupported.
func (c *Context) QueryGIDEx(port, index int) (GIDEntry, error) {
	return GIDEntry{Index: index}, unavailable("ibv_query_gid_ex")
}

// PD is a protection domain; this build cannot allocate one.
type PD struct{}

// AllocPD returns an error wrapping verbs.ErrNotCompiled or verbs.ErrUnsupported.
func (c *Context) AllocPD() (*PD, error) { return nil, unavailable("ibv_alloc_pd") }

// Dealloc returns an error wrapping verbs.ErrNotCompiled or verbs.ErrUnsupported.
func (pd *PD) Dealloc() error { return unavailable("ibv_dealloc_pd") }

// MR is a memory region; this build cannot register one.
type MR struct{}

// RegMR returns an error wrapping verbs.ErrNotCompiled or verbs.ErrUnsupported.
func (pd *PD) RegMR(buf []byte, access Access) (*MR, error) { return nil, unavailable("ibv_reg_mr") }

// LKey returns 0.
func (mr *MR) LKey() uint32 { return 0 }

// RKey returns 0.
func (mr *MR) RKey() uint32 { return 0 }

// Addr returns 0.
func (mr *MR) Addr() uintptr { return 0 }

// Len returns 0.
func (mr *MR) Len() int { return 0 }

// Access returns 0.
func (mr *MR) Access() Access { return 0 }

// Dereg returns an error wrapping verbs.ErrNotCompiled or verbs.ErrUnsupported.
func (mr *MR) Dereg() error { return unavailable("ibv_dereg_mr") }
