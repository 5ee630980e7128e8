// Package ucx binds UCP, the protocol layer of UCX, for Go programs: contexts, workers,
// endpoints, active messages, memory registration, remote keys, one-sided GET and PUT,
// and the UCT resource query that `ucx_info -d` prints. On top sits Engine, the
// goroutine-safe layer that velo's UCX transport and other callers use.
//
// # Two layers
//
// The low layer (Context, Worker, Endpoint, MemHandle, RemoteKey, Request) is one Go call
// per UCX call, named after it, with UCX's semantics unchanged. Each object belongs to
// one OS thread at a time: UCX is initialised in single-thread mode, so a caller of the
// low layer locks its goroutine to a thread (runtime.LockOSThread) and makes every call
// for a context from there. Worker.Signal is the one exception; UCX allows it from any
// thread.
//
// Engine owns one context and one worker and offers asynchronous, goroutine-safe operations
// whose results arrive as futures (Op) or blocking calls. It exists because UCX's threading
// model and Go's do not mix on their own: UCX wants its worker called by one thread at a
// time and progressed all the time, Go wants many goroutines that block cheaply. The worker
// runs in UCX's serialized mode and every call into it holds the engine's mutex, so the
// goroutine that starts an operation posts it itself, with no hand-off; an ordinary
// goroutine, the progressor, progresses the worker, finishes completed operations and runs
// active-message handlers, spins briefly after activity (EngineConfig.SpinFor) and then
// sleeps on the worker's event fd using UCX's arm protocol, so an idle engine costs nearly
// nothing (a few wake-ups a second for UCX's timers). docs/ucx.md, "Progress", has the
// design and the measurements that chose it.
//
// # Memory and pointer rules
//
// UCX keeps using a buffer after the call that received it returns: a send payload until
// the send completes, a GET destination until the data has landed, a registered region
// until it is unmapped. Go's cgo rules allow that only for memory the garbage collector
// can neither move nor free, so:
//
//   - Memory for registration (Context.MapMemory, Engine.Register) should be mmap'd
//     memory outside the Go heap: AllocMemory gives page-aligned, pre-faulted, optionally
//     mlock'ed memory. Engine.Register also accepts Go memory and pins it
//     (runtime.Pinner) for the registration's life.
//   - Every buffer an engine operation hands to UCX is pinned until the operation
//     completes. An operation owns its buffers until its Op is Done, whatever happens to
//     the caller's context: a cancelled context never frees memory UCX still reads or
//     writes. Blocking calls return only after that point.
//   - The low layer pins nothing: the caller keeps buffers valid and pinned until the
//     Request completes.
//
// C never stores an unpinned Go pointer, and completion callbacks never call into Go:
// they append records to a C-side ring that Poll drains after progress. The test suite
// runs under GOEXPERIMENT=cgocheck2 and -race.
//
// # Remote keys and the guarded GET
//
// Over transports without hardware RMA — tcp, and cma or shared memory within a host —
// UCX emulates GET in software: the owner's worker reads whatever address the request
// names. It does not look at the remote key at all. Measured on UCX 1.13 over tcp, a GET
// with the key of a region that was unmapped, or with a key of zeros, returns the owner's
// bytes; a GET of memory the owner freed kills the owner with SIGSEGV; and
// ucp_ep_rkey_unpack, which takes no length, reads past a truncated key or crashes the
// consumer (protocol v2) on a garbage one. A stale or malformed key must never yield owner
// bytes nor crash the owner, so:
//
//   - Every key is validated against its real length before ucp_ep_rkey_unpack sees it.
//   - Engine registrations hand out sealed keys (SealedKey): region bounds, an owner-side
//     slot and a random token, the UCX key, and a checksum. The consumer refuses a key
//     that fails framing or checksum, or a range outside the region.
//   - Engine.Get uses a guarded GET where the endpoint's RMA lanes are not InfiniBand
//     RC/DC (whose NIC checks keys): the request travels as an active message, the owner's
//     engine checks slot, token and range against its live registrations in the progress
//     thread's AM callback and only then sends the bytes. A revoked registration is
//     refused (ErrRemoteKeyRevoked) and its memory is unmapped only after replies that
//     were already reading it completed. EngineConfig.RMA overrides the choice.
//
// The guarded GET protects what velo reads; it cannot stop UCX itself from serving a
// peer's software PUT, GET or atomic at any address, which a stock UCX does for whoever
// connects. velo's static UCX (make ucx-static, -tags ucx_static) carries a patch set that
// refuses those requests; SoftwareRMAGuard says whether the linked UCX is such a build, and
// every engine exports ucx_engine_rma_guard_enforced and ucx_engine_rma_refused_total{kind}
// (with the tcp listener's ucx_engine_tcp_accept_paused_total and
// ucx_engine_tcp_connections_refused_total).
// This package only reports it: velo's UCX transport decides what to do about it.
//
// # Environment
//
// The environment wins: a value the program sets (ContextConfig.TLS, NetDevices,
// Settings) applies only when the matching UCX_* variable is unset, so an operator can
// move a deployed binary onto InfiniBand with UCX_TLS and UCX_NET_DEVICES. Before the
// first context the binding turns UCX's registration cache and UCM memory hooks off
// (UCX_RCACHE_ENABLE=n, UCX_MEM_EVENTS=n) unless the user set them, and it warns loudly
// about UCX_PROTO_ENABLE=n, which disables all RMA on recent UCX. Context.Settings shows
// every effective value and where it came from.
//
// # Build
//
// cgo links the UCX that `pkg-config ucx` names (Debian's libucx-dev, UCX 1.13 or newer);
// `make` with UCX_DIR=/prefix selects another install, and the build tag ucx_static links
// the static UCX of third_party/ucx. Without cgo, or off Linux, the same code compiles
// over internal/capi's twin, and every entry point fails with ErrNotCompiled or
// ErrUnsupported. docs/ucx.md has the details,
// the measurements behind the choices above, and the UCX 1.13 faults the binding avoids.
package ucx
