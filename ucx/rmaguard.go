package ucx

import (
	"strings"

	"github.com/velo-go/velo/ucx/internal/capi"
)

// Software RMA and its guard.
//
// Where a lane has no hardware RMA, UCX emulates PUT, GET and atomics in software: the
// initiator sends an active message naming an address, and the target's worker copies to or
// from that address. A stock UCX checks neither the remote key nor a range, so whoever reaches
// a worker over such a lane (tcp; ucp's AM-based emulation over ud on InfiniBand) can read and
// write all of that process's memory; the tcp transport also serves PUT requests of its own the
// same way. velo never needs that path (its engine reads through the guarded GET wherever the
// NIC does not check keys), so velo's static build (make ucx-static) patches UCX to refuse all
// of it, and to refuse messages that name UCX-internal ids the worker never handed out; the
// patch set marks the build with two symbols. SoftwareRMAGuard reads that marker: it is how a
// program learns which kind of UCX it runs on.

// GuardVersionPrefix starts the version string of velo's UCX guard patch set
// ("velo-ucx-guard/2").
const GuardVersionPrefix = "velo-ucx-guard/"

// RMAGuard is what the linked UCX says about software RMA.
type RMAGuard struct {
	// Enforced: the linked UCX carries velo's guard patch set and refuses software-emulated
	// RMA and tcp PUT requests.
	Enforced bool
	// Version is the patch set's version ("velo-ucx-guard/2"); empty when not enforced.
	Version string
	// Refused counts the requests the patch set refused in this process since it started
	// (zero when not enforced).
	Refused GuardRefusals
	// UCX is the linked release ("1.22.0"), for messages.
	UCX string
}

// GuardRefusals are the patch set's refusal counters, process-wide.
type GuardRefusals struct {
	Put    uint64 // ucp software PUTs refused
	Get    uint64 // ucp software GETs refused
	Atomic uint64 // ucp software atomics refused
	TCPPut uint64 // the tcp transport's PUT requests refused
	WireID uint64 // messages naming a UCX-internal id (a request's, an endpoint's) the worker never handed out

	// The tcp listener's own refusals, not RMA, so not among GuardRefusalKinds: they are
	// exported as ucx_engine_tcp_accept_paused_total and
	// ucx_engine_tcp_connections_refused_total. A patch set older than these counters leaves
	// them 0.
	TCPAcceptPaused uint64 // accept() failures (a full descriptor table) that paused the tcp listener for 100 ms (patch 0008)
	TCPConnRefused  uint64 // connections to the tcp port closed at once: over 256 from one source or 4096 in all (patch 0010)
}

// guardCounters is how many counters SoftwareRMAGuard reads: the patch set's kinds in its
// order, the RMA ones (GuardRefusalKinds) first.
const guardCounters = len(GuardRefusalKinds) + 2

// GuardRefusalKinds are the label values of ucx_engine_rma_refused_total, in the order of the
// patch set's counters.
var GuardRefusalKinds = [...]string{"put", "get", "atomic", "tcp_put", "wire_id"}

// values returns the counters in the order of GuardRefusalKinds.
func (r GuardRefusals) values() [len(GuardRefusalKinds)]uint64 {
	return [...]uint64{r.Put, r.Get, r.Atomic, r.TCPPut, r.WireID}
}

// String is one line for a log or a page: "enforced (velo-ucx-guard/2)" or why not.
func (g RMAGuard) String() string {
	if g.Enforced {
		return "enforced (" + g.Version + ")"
	}
	return "not enforced: the linked UCX " + g.UCX + " lacks velo's guard patch set " +
		"(software RMA over tcp and ud serves any address without checking a key)"
}

// SoftwareRMAGuard reports whether the UCX linked into this binary enforces keys on software
// RMA (velo's guard patch set), with its refusal counters. The answer is fixed when the binary
// is linked: the static build (make ucx-static, go build -tags ucx_static) enforces, Debian's
// shared UCX does not. Without UCX in the binary it fails with ErrNotCompiled (or
// ErrUnsupported off Linux).
func SoftwareRMAGuard() (RMAGuard, error) {
	if !capi.Compiled {
		return RMAGuard{}, errNoUCX
	}
	g := RMAGuard{UCX: Version().releaseString()}
	v, ok := capi.VeloUcxGuardVersion()
	if !ok || !strings.HasPrefix(v, GuardVersionPrefix) {
		return g, nil
	}
	// Zeroed: a patch set with fewer kinds fills only those it has.
	var c [guardCounters]uint64
	if !capi.VeloUcxGuardCounters(c[:]) {
		return g, nil // a marker without its counters is not the patch set
	}
	g.Enforced, g.Version = true, v
	g.Refused = GuardRefusals{Put: c[0], Get: c[1], Atomic: c[2], TCPPut: c[3], WireID: c[4],
		TCPAcceptPaused: c[5], TCPConnRefused: c[6]}
	return g, nil
}
