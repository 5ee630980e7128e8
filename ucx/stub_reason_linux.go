//go:build linux && !cgo

package ucx

// errNoUCX: a Linux build without cgo has no UCX compiled in.
var errNoUCX = ErrNotCompiled
