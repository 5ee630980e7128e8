//go:build !linux || !cgo

package mlx5dv

import (
	"errors"
	"runtime"
	"testing"

	"github.com/velo-go/velo/verbs"
)

func TestNotCompiled(t *testing.T) {
	want := verbs.ErrNotCompiled
	if runtime.GOOS != "linux" {
		want = verbs.ErrUnsupported
	}
	_, qerr := QueryDevice("mlx5_0")
	for name, err := range map[string]error{"Supported": Supported("mlx5_0"), "ProbeDEVX": ProbeDEVX("mlx5_0"), "QueryDevice": qerr} {
		if !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", name, err, want)
		}
	}
	if runtime.GOOS == "linux" && errors.Is(ProbeDEVX("mlx5_0"), verbs.ErrNotSupported) {
		t.Error("not compiled in must read as inconclusive, not as 'DEVX not supported'")
	}
}
