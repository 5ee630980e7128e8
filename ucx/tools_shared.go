//go:build !ucx_static

package ucx

// staticToolsDir is empty: this binary links a shared UCX, whose tools are on PATH or in
// VELO_UCX_TOOLS.
func staticToolsDir() string { return "" }
