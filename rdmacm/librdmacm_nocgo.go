//go:build !linux || !cgo

package rdmacm

import (
	"fmt"
	"net/netip"
	"runtime"

	"github.com/velo-go/velo/verbs"
)

// ResolveLibrdmacm returns an error wrapping verbs.ErrNotCompiled (verbs.ErrUnsupported off
// Linux); Resolve then answers from sysfs.
func ResolveLibrdmacm(ip netip.Addr) (Location, error) {
	if runtime.GOOS != "linux" {
		return Location{}, fmt.Errorf("rdmacm: librdmacm: %w", verbs.ErrUnsupported)
	}
	return Location{}, fmt.Errorf("rdmacm: librdmacm: %w", verbs.ErrNotCompiled)
}
