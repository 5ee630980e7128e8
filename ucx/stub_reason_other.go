//go:build !linux

package ucx

// errNoUCX: only Linux has a UCX binding.
var errNoUCX = ErrUnsupported
