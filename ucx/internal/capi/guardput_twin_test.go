package capi

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The guarded PUT's wrappers have their own pair of files; like capi_cgo.go and capi_nocgo.go they
// must declare the same API.
func TestGuardPutTwinDeclaresTheSameAPI(t *testing.T) {
	withCgo := exportedAPI(t, "guardput_cgo.go")
	without := exportedAPI(t, "guardput_nocgo.go")
	require.Equal(t, sortedKeys(withCgo), sortedKeys(without), "exported names of guardput_cgo.go and guardput_nocgo.go differ")
	for name, sig := range withCgo {
		require.Equal(t, sig, without[name], "signature of %s differs between the two builds", name)
	}
	require.Len(t, withCgo, 19)
}
