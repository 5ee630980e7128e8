//go:build !cgo

package check

// cgoEnabled: a CGO_ENABLED=0 binary; the checks that need libibverbs, libmlx5, librdmacm or UCX
// report "not compiled in".
const cgoEnabled = false
