//go:build !linux || !cgo

package mlx5dv

import (
	"fmt"
	"runtime"

	"github.com/velo-go/velo/verbs"
)

// Without cgo (or off Linux) the libmlx5 questions cannot be asked: the answers are "could not
// tell" (verbs.ErrNotCompiled), or "not available" (verbs.ErrUnsupported) off Linux. IsMLX5 still
// works from sysfs.

func unavailable(op string) error {
	if runtime.GOOS != "linux" {
		return fmt.Errorf("mlx5dv: %s: %w", op, verbs.ErrUnsupported)
	}
	return fmt.Errorf("mlx5dv: %s: %w", op, verbs.ErrNotCompiled)
}

// Supported returns an error wrapping verbs.ErrNotCompiled or verbs.ErrUnsupported.
func Supported(name string) error { return unavailable("mlx5dv_is_supported") }

// ProbeDEVX returns an error wrapping verbs.ErrNotCompiled or verbs.ErrUnsupported.
func ProbeDEVX(name string) error { return unavailable("mlx5dv_open_device") }

// QueryDevice returns an error wrapping verbs.ErrNotCompiled or verbs.ErrUnsupported.
func QueryDevice(name string) (Caps, error) { return Caps{}, unavailable("mlx5dv_query_device") }
