package ucxstatic

import "errors"

// ErrNotCompiled is returned by every probe when this package was built without the static UCX
// (no -tags ucx_static, no cgo, or not Linux). Build with `make test-static`.
var ErrNotCompiled = errors.New("ucxstatic: built without the static UCX; run `make ucx-static` and build with -tags ucx_static")

// ErrUCX wraps a UCX call that did not return UCS_OK; the message names the call and the status.
var ErrUCX = errors.New("ucxstatic: UCX call failed")

// InitReport is what InitTCP learned from a ucp_init over the configured transports.
type InitReport struct {
	Version            string // ucp_get_version_string of the linked UCX
	TLS                string // the transport list the context was created with
	WorkerAddressBytes int    // length of the packed worker address
}

// MDOps is one IB memory-domain implementation in the order uct_ib_md_open tries them.
type MDOps struct {
	Name  string  // the ops name UCX logs as "md open by '<name>'"
	Entry uintptr // address of UCX's entry for it, in this process
}
