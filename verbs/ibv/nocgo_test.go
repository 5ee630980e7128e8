//go:build !linux || !cgo

package ibv

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
	_, err := Devices()
	if !errors.Is(err, want) {
		t.Errorf("Devices: %v, want %v", err, want)
	}
	c, err := Open("mlx5_0")
	if !errors.Is(err, want) {
		t.Errorf("Open: %v, want %v", err, want)
	}
	for name, err := range map[string]error{"Close": c.Close(), "AllocPD": second(c.AllocPD()), "QueryPort": second(c.QueryPort(1)), "Dereg": (*MR)(nil).Dereg()} {
		if !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", name, err, want)
		}
	}
	// Not compiled in is "could not tell", not "not available".
	if runtime.GOOS == "linux" && errors.Is(err, verbs.ErrNotSupported) {
		t.Error("ErrNotCompiled must not read as ErrNotSupported")
	}
}

func second[T any](_ T, err error) error { return err }
