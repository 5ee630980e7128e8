// The engine as the target of guarded PUTs: the worker checks and serves them in C (guardput.c);
// here its counts reach the metrics and its refusals the log.

package ucx

import (
	"fmt"
	"time"

	"github.com/velo-go/velo/ucx/internal/capi"
)

// putRefusalReasons name the target's refusal counters (capi.PutRefused*), as the metric's outcome.
var putRefusalReasons = [capi.PutRefusedKinds]string{
	capi.PutRefusedMalformed: "malformed",
	capi.PutRefusedRevoked:   "revoked",
	capi.PutRefusedReadOnly:  "read_only",
	capi.PutRefusedRange:     "out_of_range",
	capi.PutRefusedHolder:    "holder",
}

// putLogEvery is the most often the engine logs refused guarded PUTs: a peer that keeps writing
// without a key gets one line per interval with the count, not one per request.
const putLogEvery = 10 * time.Second

// putTarget is what the engine has folded and logged of the worker's guarded PUT counters. It is
// guarded by wmu.
type putTarget struct {
	last   capi.PutStats
	held   [capi.PutRefusedKinds]uint64 // refusals not yet logged
	logged time.Time                    // the last line
}

// foldPutCounts runs under wmu with the other counters of the worker, after every progress turn.
func (e *Engine) foldPutCounts() {
	st := e.w.guardPutStats()
	p := &e.puts
	if st.Served != p.last.Served {
		e.metrics.guardPuts.WithLabelValues("served").Add(float64(st.Served - p.last.Served))
		e.metrics.guardPutBytes.Add(float64(st.ServedBytes - p.last.ServedBytes))
	}
	var held uint64
	for i := range st.Refused {
		if d := st.Refused[i] - p.last.Refused[i]; d > 0 {
			e.metrics.guardPuts.WithLabelValues(putRefusalReasons[i]).Add(float64(d))
			p.held[i] += d
		}
		held += p.held[i]
	}
	p.last = st
	if held == 0 {
		return
	}
	now := time.Now()
	if !p.logged.IsZero() && now.Sub(p.logged) < putLogEvery {
		return
	}
	p.logged = now
	args := []any{"refused", held}
	for i, n := range p.held {
		if n > 0 {
			args = append(args, putRefusalReasons[i], n)
		}
	}
	if st.LastReason >= 0 && st.LastReason < len(putRefusalReasons) {
		last := fmt.Sprintf("%s: %d bytes at %#x through slot %d", putRefusalReasons[st.LastReason], st.LastLength, st.LastAddress, st.LastSlot)
		if st.LastSlot == ^uint32(0) {
			last = putRefusalReasons[st.LastReason] + ": a request too short to name a registration"
		}
		args = append(args, "last", last)
	}
	e.log.Warn(fmt.Sprintf("ucx: refused guarded PUT requests: a peer tried to write without a live write key of its own for the range (at most one line per %v; ucx_engine_guarded_put_requests_total counts them all)", putLogEvery), args...)
	p.held = [capi.PutRefusedKinds]uint64{}
}
