//go:build !ucx_static

package attack

// buildTags are the tags the suite builds its programs with: none, so the victim links the UCX
// that pkg-config names (Debian's shared 1.13.1), which has no software RMA guard.
const buildTags = ""
