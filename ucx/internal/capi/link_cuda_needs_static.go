//go:build cuda && !ucx_static

package capi

// The cuda build tag needs the static UCX built with CUDA: neither Debian's shared UCX nor a
// UCX_DIR prefix is known to have UCX's CUDA transports, and velo's CUDA calls (cuda.c) link
// against the CUDA sysroot of that build. So `-tags cuda` alone does not compile; the undefined
// name below says what to do instead.
var _ = cuda_tag_needs_ucx_static__run_make_ucx_static_cuda_and_build_with_tags_cuda_ucx_static
