//go:build cgo && linux && ucx_static && cuda

package capi

// The static link with CUDA (build tags cuda and ucx_static), used instead of link_static.go. It
// needs `make ucx-static-cuda`: the same UCX source and patch set as make ucx-static, configured
// --with-cuda against the CUDA 11.8 sysroot of make cuda-sysroot (third_party/cuda/root), and
// installed under third_party/ucx/build-cuda. libvelo_ucx.a there also holds UCX's cuda module
// (the cuda_copy and cuda_ipc transports); cuda.c (velo's few driver calls) compiles against the
// sysroot's cuda.h.
//
// libcuda and libnvidia-ml are linked against the toolkit's stubs, so the binary needs the
// NVIDIA driver's libcuda.so.1 and libnvidia-ml.so.1 at run time (driver 520 or later, what CUDA
// 11.8 needs); see third_party/cuda/README.md. Nothing of the CUDA runtime (libcudart) is linked.

// #cgo CFLAGS: -I${SRCDIR}/../../../third_party/ucx/build-cuda/include -I${SRCDIR}/../../../third_party/cuda/root/include
// #cgo LDFLAGS: ${SRCDIR}/../../../third_party/ucx/build-cuda/lib/libvelo_ucx.a -L${SRCDIR}/../../../third_party/cuda/root/lib/stubs -lcuda -lnvidia-ml -libverbs -lmlx5 -lrdmacm -lpthread -ldl -lrt -lm
import "C"
