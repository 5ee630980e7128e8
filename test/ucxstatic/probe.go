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

// GuardVersionWant is what velo_ucx_guard_version returns in a UCX built with velo's patch set.
const GuardVersionWant = "velo-ucx-guard/2"

// GuardCounts are the patch set's refusal counters, in velo_ucx_guard_counters' order.
type GuardCounts [5]uint64

// The counters' indexes.
const (
	CountSoftwarePut = iota // ucp software PUTs refused
	CountSoftwareGet        // ucp software GETs refused
	CountSoftwareAMO        // ucp software atomics refused
	CountTCPPut             // tcp PUT requests refused
	CountWireID             // wire ids refused
)

// Sub returns how far each counter moved from before.
func (c GuardCounts) Sub(before GuardCounts) GuardCounts {
	var d GuardCounts
	for i := range c {
		d[i] = c[i] - before[i]
	}
	return d
}

// RMAProbeReport is what SoftwareRMAProbe saw. The statuses are UCX's status strings.
type RMAProbeReport struct {
	Put, PutFlush, Get, AtomicPost, AtomicFlush, AtomicFetch, AM string
	GetDelivered, FetchDelivered                                 uint64 // what the refused reads wrote into their buffers (zeroed before)
	Target                                                       uint64 // the global the operations named, afterwards
	Counted                                                      GuardCounts
}

// RMAProbeTarget is the value of SoftwareRMAProbe's target global before the probe.
const RMAProbeTarget = 0x1122334455667788

// TCPProbeReport is what TCPPutProbe saw.
type TCPProbeReport struct {
	Put          string // what uct_ep_put_zcopy returned
	SenderErrors int    // error callbacks of the sending interface (its connection closed)
	Target       uint64 // the global the PUT named, afterwards
	Counted      GuardCounts
}

// TCPProbeTarget is the value of TCPPutProbe's target global before the probe.
const TCPProbeTarget = 0x8877665544332211
