// Package capi is the only place in module ucx that speaks C.
//
// Every exported function wraps exactly one UCX call (or one small helper in capi.c that
// exists because a callback or a parameter struct has to be built on the C side), is named
// after it, and says in its doc comment which C function it is. Nothing here holds policy:
// ownership, threading and error wrapping live in package ucx, which shows only Go types.
//
// Why one internal package: cgo is hard to read and easy to get subtly wrong (pointer
// passing rules, struct layouts that change between UCX releases). Keeping it in one thin
// layer lets the rest of the module be ordinary Go that the race detector and cgocheck2 can
// reason about, and lets the static-UCX build swap the link directives (link_pkgconfig.go
// versus link_static.go) without touching any call site.
//
// Pointer rules this layer relies on (and package ucx enforces): a Go pointer handed to a
// function here is only read during the call unless the caller pinned it with
// runtime.Pinner first; buffers that UCX keeps after a call returns (send payloads, GET
// destinations, AM headers) are pinned Go memory or C/mmap memory. C never stores an
// unpinned Go pointer. Completion callbacks never call into Go: they append records to a
// C-side event ring that Go drains after ucp_worker_progress (see capi.h for why).
//
// Without cgo, or off Linux, capi_nocgo.go declares the same API and every call returns
// NotCompiled, so package ucx is one copy of Go on every platform and reports ErrNotCompiled
// or ErrUnsupported from its first call into UCX. This is the only place the build splits;
// TestNoCgoTwinDeclaresTheSameAPI fails when the two files drift apart.
package capi
