//go:build !cgo || !linux

package ucx

import "context"

// This file is the binding without UCX: built with CGO_ENABLED=0, or for a platform other
// than Linux. Every entry point compiles and fails with errNoUCX (ErrNotCompiled or
// ErrUnsupported), so programs that use UCX optionally (ibcheck, velo without RDMA) build
// everywhere and report why the feature is missing.

// Context is a UCP context; unavailable in this build.
type Context struct{}

// NewContext fails: this build has no UCX.
func NewContext(cfg ContextConfig) (*Context, error) { return nil, errNoUCX }

// Settings returns nothing.
func (c *Context) Settings() []Setting { return nil }

// Setting returns nothing.
func (c *Context) Setting(name string) (Setting, bool) { return Setting{}, false }

// Close does nothing.
func (c *Context) Close() error { return nil }

// NewWorker fails.
func (c *Context) NewWorker() (*Worker, error) { return nil, errNoUCX }

// MapMemory fails.
func (c *Context) MapMemory(mem []byte) (*MemHandle, error) { return nil, errNoUCX }

// Worker is a UCP worker; unavailable in this build.
type Worker struct{}

// Event is a worker event.
type Event struct {
	Kind     EventKind
	Err      error
	Endpoint *Endpoint
	Request  *Request
	AM       *AMEvent
}

// AMEvent is a received active message.
type AMEvent struct {
	ID         uint16
	Header     []byte
	Data       []byte
	Length     int
	Rendezvous bool
	Sender     uint64
}

// Context returns nil.
func (w *Worker) Context() *Context { return nil }

// Address fails.
func (w *Worker) Address() ([]byte, error) { return nil, errNoUCX }

// MaxAMHeader fails.
func (w *Worker) MaxAMHeader() (int, error) { return 0, errNoUCX }

// Progress does nothing.
func (w *Worker) Progress() uint { return 0 }

// EventFD fails.
func (w *Worker) EventFD() (int, error) { return -1, errNoUCX }

// Arm fails.
func (w *Worker) Arm() error { return errNoUCX }

// Signal fails.
func (w *Worker) Signal() error { return errNoUCX }

// SetAMHandler fails.
func (w *Worker) SetAMHandler(id uint16) error { return errNoUCX }

// RemoveAMHandler fails.
func (w *Worker) RemoveAMHandler(id uint16) error { return errNoUCX }

// Poll does nothing.
func (w *Worker) Poll(fn func(*Event)) int { return 0 }

// ReceiveAMData fails.
func (w *Worker) ReceiveAMData(ev *AMEvent, dst []byte) (*Request, error) { return nil, errNoUCX }

// Flush fails.
func (w *Worker) Flush() (*Request, error) { return nil, errNoUCX }

// Pending returns 0.
func (w *Worker) Pending() int { return 0 }

// GuardStats returns zeros.
func (w *Worker) GuardStats() (served, refused uint64) { return 0, 0 }

// Connect fails.
func (w *Worker) Connect(addr []byte, opts EndpointOptions) (*Endpoint, error) {
	return nil, errNoUCX
}

// Close does nothing.
func (w *Worker) Close() error { return nil }

// Request is an outstanding operation.
type Request struct {
	UserData any
}

// Done returns true.
func (r *Request) Done() bool { return true }

// Err fails.
func (r *Request) Err() error { return errNoUCX }

// Length returns 0.
func (r *Request) Length() int { return 0 }

// Status fails.
func (r *Request) Status() error { return errNoUCX }

// Cancel does nothing.
func (r *Request) Cancel() {}

// Endpoint is a UCP endpoint; unavailable in this build.
type Endpoint struct{}

// ID returns 0.
func (e *Endpoint) ID() uint64 { return 0 }

// Worker returns nil.
func (e *Endpoint) Worker() *Worker { return nil }

// Err fails.
func (e *Endpoint) Err() error { return errNoUCX }

// Info returns "".
func (e *Endpoint) Info() string { return "" }

// SendAM fails.
func (e *Endpoint) SendAM(id uint16, header, payload []byte, flags AMFlags) (*Request, error) {
	return nil, errNoUCX
}

// SendAMParts fails.
func (e *Endpoint) SendAMParts(id uint16, header []byte, parts [][]byte, flags AMFlags) (*Request, error) {
	return nil, errNoUCX
}

// Get fails.
func (e *Endpoint) Get(dst []byte, remoteAddr uint64, rk *RemoteKey) (*Request, error) {
	return nil, errNoUCX
}

// Put fails.
func (e *Endpoint) Put(src []byte, remoteAddr uint64, rk *RemoteKey) (*Request, error) {
	return nil, errNoUCX
}

// Flush fails.
func (e *Endpoint) Flush() (*Request, error) { return nil, errNoUCX }

// Close does nothing.
func (e *Endpoint) Close(mode CloseMode) (*Request, error) { return nil, nil }

// UnpackRemoteKey fails.
func (e *Endpoint) UnpackRemoteKey(packed []byte) (*RemoteKey, error) { return nil, errNoUCX }

// RemoteKey is an unpacked remote key.
type RemoteKey struct{}

// Destroy does nothing.
func (k *RemoteKey) Destroy() {}

// MemHandle is registered memory.
type MemHandle struct{}

// Addr returns 0.
func (m *MemHandle) Addr() uint64 { return 0 }

// Len returns 0.
func (m *MemHandle) Len() int { return 0 }

// PackRemoteKey fails.
func (m *MemHandle) PackRemoteKey() ([]byte, error) { return nil, errNoUCX }

// Unmap does nothing.
func (m *MemHandle) Unmap() error { return nil }

// Version returns the zero version: no UCX is linked.
func Version() VersionInfo { return VersionInfo{} }

// QueryResources fails.
func QueryResources() (*Resources, error) { return nil, errNoUCX }

// Engine is the goroutine-safe UCX engine; unavailable in this build.
type Engine struct{}

// NewEngine fails.
func NewEngine(ctx context.Context, cfg EngineConfig) (*Engine, error) { return nil, errNoUCX }

// Address returns nil.
func (e *Engine) Address() []byte { return nil }

// MaxEagerSize returns 0.
func (e *Engine) MaxEagerSize() int { return 0 }

// MaxAMHeader returns 0.
func (e *Engine) MaxAMHeader() int { return 0 }

// Settings returns nil.
func (e *Engine) Settings() []Setting { return nil }

// HandleAM fails.
func (e *Engine) HandleAM(id uint16, handler AMHandler) error { return errNoUCX }

// Connect fails.
func (e *Engine) Connect(ctx context.Context, addr []byte, opts ConnectOptions) (*Conn, error) {
	return nil, errNoUCX
}

// Register fails.
func (e *Engine) Register(ctx context.Context, mem []byte) (*Registration, error) {
	return nil, errNoUCX
}

// Close does nothing.
func (e *Engine) Close(ctx context.Context) error { return nil }

// Conn is an engine endpoint.
type Conn struct{}

// Done returns a closed channel.
func (c *Conn) Done() <-chan struct{} { return closedChan }

// Err fails.
func (c *Conn) Err() error { return errNoUCX }

// Close does nothing.
func (c *Conn) Close(ctx context.Context, mode CloseMode) error { return nil }

// Info fails.
func (c *Conn) Info(ctx context.Context) (string, error) { return "", errNoUCX }

// RMAMode fails.
func (c *Conn) RMAMode(ctx context.Context) (RMAMode, error) { return RMAAuto, errNoUCX }

// SendAM fails.
func (c *Conn) SendAM(ctx context.Context, id uint16, header []byte, parts ...[]byte) error {
	return errNoUCX
}

// SendAMAsync fails.
func (c *Conn) SendAMAsync(ctx context.Context, id uint16, header []byte, parts [][]byte, opts SendOptions) *Op {
	return completedOp(errNoUCX)
}

// Get fails.
func (c *Conn) Get(ctx context.Context, dst []byte, remoteAddr uint64, key []byte) error {
	return errNoUCX
}

// GetAsync fails.
func (c *Conn) GetAsync(ctx context.Context, dst []byte, remoteAddr uint64, key []byte) *Op {
	return completedOp(errNoUCX)
}

// Put fails.
func (c *Conn) Put(ctx context.Context, src []byte, remoteAddr uint64, key []byte) error {
	return errNoUCX
}

// Flush fails.
func (c *Conn) Flush(ctx context.Context) error { return errNoUCX }

// Registration is registered memory.
type Registration struct{}

// Addr returns 0.
func (r *Registration) Addr() uint64 { return 0 }

// Len returns 0.
func (r *Registration) Len() int { return 0 }

// RemoteKey returns nil.
func (r *Registration) RemoteKey() []byte { return nil }

// Done returns a closed channel.
func (r *Registration) Done() <-chan struct{} { return closedChan }

// Unregister does nothing.
func (r *Registration) Unregister(ctx context.Context) error { return nil }

// Revoke does nothing.
func (r *Registration) Revoke(ctx context.Context) error { return nil }

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()
