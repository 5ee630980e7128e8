// Package ucxstatic proves the static UCX of third_party/ucx: that the recipe refuses the builds
// that would quietly lose RDMA, and that a Go binary linked with -tags ucx_static carries a
// complete, working UCX.
//
// Two kinds of tests live here. The recipe tests (no build tag) run third_party/ucx/ucx-static.sh
// in its "check", "key" and "deb-src-list" modes against fixture include trees, fake compilers
// and fake UCX prefixes; none of them needs a UCX build, so they run everywhere in seconds. The
// static tests (tag ucx_static, run by `make test-static` after `make ucx-static`) link this
// package's small cgo layer against third_party/ucx/build/lib/libvelo_ucx.a, so the test binary
// itself is a statically linked UCX program: it runs ucp_init over tcp, lists the UCT components
// whose constructors ran, checks with ldd that no UCX shared object is loaded, and walks UCX's own
// table of IB memory-domain implementations to show that the mlx5 ones are tried before verbs.
//
// Why a package of its own rather than the ucx module: the recipe and its link must be provable
// before (and independently of) the binding, and a failure here points at the build, not at the
// Go API. The cgo layer is deliberately small: one C helper per question asked of UCX.
package ucxstatic
