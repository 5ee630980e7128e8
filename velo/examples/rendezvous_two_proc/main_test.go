package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/velo-go/velo/velo/examples/internal/twoproc"
)

// TestMain lets the test binary stand in for the example: runBoth starts its own executable once
// per role, and here that is this binary, called with --role.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "--role" {
		main()
		return
	}
	os.Exit(m.Run())
}

// TestTwoRunsInOneDirectory: a second run in the --dir of a first one finds no member of the first
// (both withdrew) and succeeds like the first; the runs leave the cluster's directory empty.
func TestTwoRunsInOneDirectory(t *testing.T) {
	dir := t.TempDir()
	for i := 1; i <= 2; i++ {
		if err := runBoth(dir, 1<<20, 2*time.Minute); err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, twoproc.Cluster)); len(ents) != 0 {
		t.Errorf("the runs left %d member files in --dir", len(ents))
	}
}
