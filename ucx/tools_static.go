//go:build ucx_static

package ucx

import (
	"path/filepath"
	"runtime"
)

// staticToolsDir is where make ucx-static installs the tools of the UCX a ucx_static binary
// links (third_party/ucx/build/bin), found from this file's place in the checkout; "" when
// the binary was built with -trimpath and the checkout is unknown.
func staticToolsDir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok || !filepath.IsAbs(file) {
		return ""
	}
	return filepath.Join(filepath.Dir(file), "..", "third_party", "ucx", "build", "bin")
}
