//go:build ucx_static

package attack

// buildTags are the tags the suite builds its programs with: the test binary's own, so that
// `go test -tags ucx_static` attacks a victim linked against the static UCX.
const buildTags = "ucx_static"
