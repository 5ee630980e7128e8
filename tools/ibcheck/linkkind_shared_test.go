//go:build !ucx_static

package main

// linkedStatic: this test binary links the UCX pkg-config names (Debian's shared 1.13.1 unless
// UCX_DIR says otherwise).
const linkedStatic = false
