# CUDA: the CUDA 11.8 sysroot from Debian 12's non-free packages (third_party/cuda).
#
#   make cuda-sysroot     fetch nvidia-cuda-dev, libcudart11.0 and libnvidia-ml-dev by name and pinned
#                         version from bookworm non-free (apt, signature checked, private state; the
#                         machine's apt configuration is not touched), check their SHA-256, extract
#                         the headers, libcudart_static.a and the driver stubs into
#                         third_party/cuda/root (cached by a stamp; see third_party/cuda/README.md)
#
# Nothing of the default build needs it.
CUDA_SYSROOT_RECIPE := third_party/cuda/cuda-sysroot.sh
CUDA_ROOT := $(CURDIR)/third_party/cuda/root

.PHONY: cuda-sysroot

cuda-sysroot: deps
	@$(CUDA_SYSROOT_RECIPE) build
