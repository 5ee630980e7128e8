//go:build cgo && linux

package ucx

import (
	"os"

	"github.com/velo-go/velo/ucx/internal/capi"
)

func init() {
	if capi.FaultSignalsYielded() >= 0 {
		// The constructor set it only for a libucs initialised after it (a static link); every
		// libucs of this process is initialised by now. Child processes start from the user's
		// environment, so UCX's own tools keep their default.
		_ = os.Unsetenv("UCX_HANDLE_ERRORS")
	}
	applyLoadTimeDefault = func(name, value string) bool {
		switch name {
		case "UCX_MEM_EVENTS":
			capi.UcmSetEvents(!isNegative(value))
			return true
		}
		return false
	}
	setBeforeMain = func(name string) bool {
		return name == "UCX_HANDLE_ERRORS" && capi.FaultSignalsYielded() >= 0
	}
}

// memEventsEnabled reports whether UCM will install memory event hooks (UCX_MEM_EVENTS
// as UCM applies it).
func memEventsEnabled() bool { return capi.UcmEventsEnabled() }
