package ucx

import "github.com/velo-go/velo/ucx/internal/capi"

// Active-message ids of the guarded PUT and of its vectored form (within the reserved range,
// after the GET's).
const (
	guardPutReqID  = 0xFFF4
	guardPutRepID  = 0xFFF5
	guardPutVReqID = 0xFFF6
	guardPutVRepID = 0xFFF7
)

// enableGuardPut makes the worker answer guarded PUT requests, single and vectored (see
// guardput.c), against the registration table of the guarded GET (enableGuard first).
func (w *Worker) enableGuardPut(reqID, repID, vreqID, vrepID uint16) error {
	return statusErr("guarded PUT handler", Status(capi.GuardPutEnable(w.ring, reqID, repID, vreqID, vrepID)))
}

// guardAddAccess enters a live registration in the guard table with the access it grants.
func (w *Worker) guardAddAccess(token, base, length uint64, access Access) (uint32, error) {
	slot, s := capi.GuardAddAccess(w.ring, token, base, length, access.capi())
	return slot, statusErr("guard table", Status(s))
}

// guardPutStats is what the worker did as the target of guarded PUTs.
func (w *Worker) guardPutStats() capi.PutStats { return capi.GuardPutStats(w.ring) }
