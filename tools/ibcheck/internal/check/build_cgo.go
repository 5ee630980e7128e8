//go:build cgo

package check

// cgoEnabled: this binary has the cgo parts of verbs, mlx5dv, rdmacm and ucx.
const cgoEnabled = true
