//go:build ucx_static

package main

// linkedStatic: this test binary links velo's static UCX (make ucx-static), which carries the
// software RMA guard.
const linkedStatic = true
