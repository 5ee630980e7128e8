//go:build cgo && linux

package ucx

import "github.com/velo-go/velo/ucx/internal/capi"

func init() {
	applyLoadTimeDefault = func(name, value string) bool {
		if name != "UCX_MEM_EVENTS" {
			return false
		}
		capi.UcmSetEvents(!isNegative(value))
		return true
	}
}

// memEventsEnabled reports whether UCM will install memory event hooks (UCX_MEM_EVENTS
// as UCM applies it).
func memEventsEnabled() bool { return capi.UcmEventsEnabled() }
