//go:build cgo && linux && ucx_static && !cuda

package capi

// The static link (build tag ucx_static), used instead of link_pkgconfig.go. It needs
// `make ucx-static`, which installs UCX's headers and libvelo_ucx.a under third_party/ucx/build.
// With the cuda tag too, link_static_cuda.go links the CUDA variant instead.
//
// libvelo_ucx.a holds one relocatable object made of all UCX libraries (libucm, libucs, libuct,
// the ib, rdmacm and cma transports, libucp). Linking the separate archives would pull in only
// the objects the binding references, and UCX registers its components, transports and config
// tables from constructors in objects that nothing references: the IB transports would be
// missing and libucs's constructors would run out of order. -Wl,--whole-archive would fix that
// but cgo refuses it in #cgo LDFLAGS, so the recipe does the whole-archive step itself; see
// third_party/ucx/README.md, "Linking". After it, the only shared libraries UCX needs are the
// three rdma-core ones below (plus libc).

// #cgo CFLAGS: -I${SRCDIR}/../../../third_party/ucx/build/include
// #cgo LDFLAGS: ${SRCDIR}/../../../third_party/ucx/build/lib/libvelo_ucx.a -libverbs -lmlx5 -lrdmacm -lpthread -ldl -lrt -lm
import "C"
