// Package gobuild builds the programs a test suite runs as processes of their own, once per test
// binary, into a temporary folder the suite's TestMain removes.
//
// The go command takes the build tags and the cgo flags from the environment (GOFLAGS,
// CGO_CPPFLAGS, as the make targets set them), so a program links the same UCX as the suite that
// builds it.
package gobuild

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Program is one package to build: its import path and what its build adds to the environment.
type Program struct {
	pkg string
	env []string

	once sync.Once
	bin  string
	err  error
}

// New names the program of package pkg, built with env added to this process's environment.
func New(pkg string, env ...string) *Program { return &Program{pkg: pkg, env: env} }

// Path builds the program on the first call and returns its path; a failed build fails t, with
// the go command's output.
func (p *Program) Path(t testing.TB) string {
	t.Helper()
	p.once.Do(func() {
		name := path.Base(p.pkg)
		dir, err := os.MkdirTemp("", "velo-"+name+"-")
		if err != nil {
			p.err = err
			return
		}
		p.bin = filepath.Join(dir, name)
		cmd := exec.Command("go", "build", "-o", p.bin, p.pkg)
		cmd.Env = append(os.Environ(), p.env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			p.err = fmt.Errorf("go build %s: %v\n%s", p.pkg, err, out)
		}
	})
	if p.err != nil {
		t.Fatal(p.err)
	}
	return p.bin
}

// Remove deletes what Path built (TestMain calls it once the tests ran).
func (p *Program) Remove() {
	if p.bin != "" {
		os.RemoveAll(filepath.Dir(p.bin))
	}
}

// StockUCX is what to add to the environment of a build that links the system's UCX (Debian's,
// through pkg-config) where the suite links velo's static one: GOFLAGS without -tags=ucx_static.
// Such a program runs only with VELO_UCX_TRUST_NETWORK=1 (that UCX has no guard). It fails when
// the suite links the system's UCX itself: there is no second build to meet.
func StockUCX() ([]string, error) {
	var flags []string
	tagged := false
	for _, f := range strings.Fields(os.Getenv("GOFLAGS")) {
		if f == "-tags=ucx_static" {
			tagged = true
			continue
		}
		flags = append(flags, f)
	}
	if !tagged {
		return nil, errors.New("GOFLAGS has no -tags=ucx_static: the suite already links the system's UCX")
	}
	return []string{"GOFLAGS=" + strings.Join(flags, " ")}, nil
}
