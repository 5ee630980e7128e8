package ucx

import (
	"fmt"
	"strings"

	"github.com/velo-go/velo/ucx/internal/capi"
)

// Access says what a registration lets a peer that holds its key do. The owner's engine checks it
// on the guarded paths (a guarded GET needs AccessRead, a guarded PUT AccessWrite) before it
// touches a byte, and the sealed key carries it so that a writer refuses a read-only key before
// anything is sent.
//
// On InfiniBand RC/DC the HCA checks the key and the range, not the access: UCX registers every
// region with remote read and write enabled (UCT_IB_MEM_ACCESS_FLAGS in every release this binding
// supports), whatever ucp_mem_map is asked for. There a read key used with ucp_put_nbx by a
// program outside this binding would write. See docs/security.md.
type Access uint8

const (
	// AccessRead lets peers read the region (Conn.Get, GetMany).
	AccessRead Access = 1 << iota
	// AccessWrite lets peers write the region (Conn.PutKey and its forms).
	AccessWrite
)

// Has reports whether a grants everything want does.
func (a Access) Has(want Access) bool { return a&want == want }

func (a Access) String() string {
	var parts []string
	if a&AccessRead != 0 {
		parts = append(parts, "read")
	}
	if a&AccessWrite != 0 {
		parts = append(parts, "write")
	}
	if rest := a &^ (AccessRead | AccessWrite); rest != 0 {
		parts = append(parts, fmt.Sprintf("%#x", uint8(rest)))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "+")
}

// valid refuses an empty access and unknown bits.
func (a Access) valid() error {
	if a == 0 || a&^(AccessRead|AccessWrite) != 0 {
		return fmt.Errorf("ucx: %w: access %v (want AccessRead, AccessWrite or both)", StatusInvalidParam, a)
	}
	return nil
}

// capi is the access as the guard table stores it.
func (a Access) capi() uint32 {
	var v uint32
	if a&AccessRead != 0 {
		v |= capi.AccessRead
	}
	if a&AccessWrite != 0 {
		v |= capi.AccessWrite
	}
	return v
}
