//go:build !ucx_static

package ucx

// linkedStatic: this test binary links the UCX that pkg-config names (Debian's, or UCX_DIR's).
const linkedStatic = false
