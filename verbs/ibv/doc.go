// Package ibv calls libibverbs directly: open a device, query the device, its ports, P_Keys and
// GIDs, allocate a protection domain, and register and deregister memory regions. It is what a
// tool needs to prove that RDMA registration works on a node (ibcheck registers one arena), and
// nothing more: no queue pairs, no completion queues.
//
// # Shape
//
// One Go function or method per C call, named after it and documented with the C name, in the
// manner of golang.org/x/sys/unix: Open (ibv_open_device), (*Context).QueryPort (ibv_query_port),
// (*PD).RegMR (ibv_reg_mr) and so on. Answers use the types of package verbs (verbs.PortState,
// verbs.GID, verbs.PKey ...), so they compare directly with the sysfs probes, which on hardware
// they must agree with (a test checks every field).
//
// # Errors
//
// A failing call returns an *Error naming the C function, the device and the errno, and saying
// the cause and the fix in words. It wraps the errno (errors.Is(err, syscall.ENOMEM)) and a
// sentinel of package verbs: ErrNoDevice, ErrPermission, ErrInvalid, ErrBusy, ErrClosed, and
// ErrMemlock for the most common failure of all, ibv_reg_mr returning ENOMEM because the memlock
// limit is too low for the registration.
//
// # Lifetimes and memory
//
// Objects are released explicitly, children first (MR, then PD, then Context); releasing a parent
// that still has children returns verbs.ErrBusy instead of corrupting libibverbs. Methods on a nil
// or released object return verbs.ErrClosed. All objects are safe for concurrent use.
//
// The adapter reads and writes registered memory after RegMR returns, so the memory must not move
// or be freed while registered. RegMR pins the buffer with a runtime.Pinner until Dereg; memory
// from mmap (as velo's arenas are) is not the Go heap's and needs no pin. Register whole pages of
// mmap'd memory where you can: the kernel pins whole pages, whatever else lives on them.
//
// # Build
//
// The package needs cgo and libibverbs (Debian: libibverbs-dev). Built with CGO_ENABLED=0 every
// function returns an error wrapping verbs.ErrNotCompiled, and on other systems verbs.ErrUnsupported,
// so programs that import it still build everywhere.
package ibv
