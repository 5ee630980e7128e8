//go:build ucx_static

package ucx

// linkedStatic: this test binary links the static UCX of make ucx-static, which carries velo's
// guard patch set.
const linkedStatic = true
