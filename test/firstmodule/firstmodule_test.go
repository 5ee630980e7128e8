// Package firstmodule checks the README's "Using velo from your own module" steps as a new user
// follows them: the shell block between the README's first-module markers runs word for word in a
// fresh folder outside the workspace (GOWORK=off), with only the checkout's path filled in, and
// the program it builds must move its payloads on the RDMA path.
package firstmodule

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	beginMarker = "<!-- first-module:begin -->"
	endMarker   = "<!-- first-module:end -->"
	placeholder = "/path/to/velo-go"
)

// steps returns the shell lines of the README's first-module block.
func steps(t *testing.T, readme string) string {
	t.Helper()
	_, rest, ok := strings.Cut(readme, beginMarker)
	require.True(t, ok, "README.md has no %s marker", beginMarker)
	block, _, ok := strings.Cut(rest, endMarker)
	require.True(t, ok, "README.md has no %s marker", endMarker)
	block = strings.TrimSpace(block)
	block = strings.TrimPrefix(block, "```sh")
	block = strings.TrimSuffix(block, "```")
	require.Contains(t, block, placeholder, "the steps no longer name the checkout as %s", placeholder)
	return block
}

func TestREADMEStepsFromAFreshModule(t *testing.T) {
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	script := strings.ReplaceAll(steps(t, string(readme)), placeholder, root)

	dir := t.TempDir() // outside the checkout: no go.work above it
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	require.NoError(t, err, "the README's steps failed")
	assert.Contains(t, string(out), "on the RDMA path")
	assert.Contains(t, string(out), `consumer: velo_rendezvous_rdma_path_total{path="rdma",reason="ok"} 2`)
	assert.Contains(t, string(out), `owner: velo_rendezvous_rdma_path_total{path="rdma",reason="ok"} 2`)
	gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	require.NoError(t, err)
	assert.NotContains(t, string(gomod), "testify", "a test-only module became a requirement of the user's module")
}
