//go:build cgo && linux

package capi

// The marker of velo's UCX guard patch set (third_party/ucx/patches). A UCX built with it
// refuses software-emulated RMA: ucp's PUT, GET and atomics served over an active-message
// lane, and the tcp transport's PUT requests. Whether the linked
// UCX is such a build is decided by two symbols the patch set adds, not by its version: a
// release number says nothing about which patches a build carries.
//
// Both symbols are declared weak. With a UCX that lacks them (Debian's shared libucp, any
// stock build) the linker resolves them to NULL instead of failing, so one binding links
// against both, and the helpers below answer "absent" without calling through a NULL
// pointer. libvelo_ucx.a is one relocatable object that the strong references of the rest of
// this package pull in, so a weak reference to it resolves to the real definition.
//
// A shared UCX built with the patch set keeps the marker in libucs, which pkg-config does not
// name on the link line (it names libucp, which loads libucs), so the link may leave the weak
// reference NULL there. The helpers then look the marker up among the loaded libraries
// (dlsym(RTLD_DEFAULT)): still the patch set's own symbol, found at run time.

/*
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdint.h>
#include <stddef.h>

extern const char *velo_ucx_guard_version(void) __attribute__((weak));
extern void velo_ucx_guard_counters(uint64_t *out, size_t n) __attribute__((weak));

typedef const char *(*velo_capi_guard_version_fn)(void);
typedef void (*velo_capi_guard_counters_fn)(uint64_t *out, size_t n);

static const char *velo_capi_guard_version(void) {
	velo_capi_guard_version_fn f = velo_ucx_guard_version;
	if (f == NULL)
		f = (velo_capi_guard_version_fn)dlsym(RTLD_DEFAULT, "velo_ucx_guard_version");
	return f ? f() : NULL;
}

static int velo_capi_guard_counters(uint64_t *out, size_t n) {
	velo_capi_guard_counters_fn f = velo_ucx_guard_counters;
	if (f == NULL)
		f = (velo_capi_guard_counters_fn)dlsym(RTLD_DEFAULT, "velo_ucx_guard_counters");
	if (f == NULL)
		return 0;
	f(out, n);
	return 1;
}
*/
import "C"

import "unsafe"

// VeloUcxGuardVersion wraps velo_ucx_guard_version: the patch set's version string
// ("velo-ucx-guard/2"), and false when the linked UCX does not define the symbol.
func VeloUcxGuardVersion() (string, bool) {
	p := C.velo_capi_guard_version()
	if p == nil {
		return "", false
	}
	return C.GoString(p), true
}

// VeloUcxGuardCounters wraps velo_ucx_guard_counters: it fills out with the patch set's
// refusal counters (as many as both sides know) and reports false, leaving out alone, when the
// linked UCX does not define the symbol.
func VeloUcxGuardCounters(out []uint64) bool {
	if len(out) == 0 {
		return C.velo_capi_guard_version() != nil
	}
	return C.velo_capi_guard_counters((*C.uint64_t)(unsafe.Pointer(&out[0])), C.size_t(len(out))) != 0
}
