package capi

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The guard marker lives in a file pair of its own; the pair must declare the same API, as
// capi_cgo.go and capi_nocgo.go must.
func TestNoCgoTwinOfTheGuardMarker(t *testing.T) {
	withCgo := exportedAPI(t, "rmaguard_cgo.go")
	without := exportedAPI(t, "rmaguard_nocgo.go")
	require.Equal(t, sortedKeys(withCgo), sortedKeys(without), "exported names of rmaguard_cgo.go and rmaguard_nocgo.go differ")
	for name, sig := range withCgo {
		require.Equal(t, sig, without[name], "signature of %s differs between the two builds", name)
	}
	require.Len(t, withCgo, 2)
}

// Whatever UCX is linked, asking for the marker never crashes, and the two answers agree: a
// version string exists exactly when the counters do.
func TestGuardMarkerAnswersAreConsistent(t *testing.T) {
	v, ok := VeloUcxGuardVersion()
	counters := make([]uint64, 10)
	got := VeloUcxGuardCounters(counters)
	require.Equal(t, ok, got, "the version and the counters must both be there or both be absent")
	require.Equal(t, ok, VeloUcxGuardCounters(nil))
	if ok {
		require.NotEmpty(t, v)
		require.Equal(t, []uint64{0, 0, 0}, counters[7:], "the patch set fills at most seven counters")
	} else {
		require.Empty(t, v)
		require.Equal(t, make([]uint64, 10), counters, "an absent marker leaves the slice alone")
	}
}
