//go:build cgo && linux && !ucx_static

package capi

// The default link: the UCX that pkg-config names (Debian's libucx-dev, or any install that
// PKG_CONFIG_PATH points at — see docs/ucx.md for UCX_DIR). The static build replaces this
// file with link_static.go (build tag ucx_static); no other file in the module carries
// link flags.

// #cgo pkg-config: ucx
import "C"
