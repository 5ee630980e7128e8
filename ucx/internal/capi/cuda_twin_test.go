package capi

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The CUDA wrappers have their own pair of files; like capi_cgo.go and capi_nocgo.go they must
// declare the same API.
func TestCudaTwinDeclaresTheSameAPI(t *testing.T) {
	withCgo := exportedAPI(t, "cuda_cgo.go")
	without := exportedAPI(t, "cuda_nocgo.go")
	require.Equal(t, sortedKeys(withCgo), sortedKeys(without), "exported names of cuda_cgo.go and cuda_nocgo.go differ")
	for name, sig := range withCgo {
		require.Equal(t, sig, without[name], "signature of %s differs between the two builds", name)
	}
	require.Len(t, withCgo, 11)
}
