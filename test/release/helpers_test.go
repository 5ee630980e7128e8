// Package release tests the release tooling (tools/devtools/release, make release) the way a
// release meets its users: on small repositories made for each test, the command's refusals, its
// release commit and the API check; on a clone of this repository, a release commit served by a
// file-system module proxy to fresh modules that know nothing of the workspace.
package release

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// tool is the release command, built once from tools/devtools (a module outside the workspace).
var tool string

// root is the checkout this test runs in.
var root string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	var err error
	if root, err = filepath.Abs("../.."); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	dir, err := os.MkdirTemp("", "release-tool-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	tool = filepath.Join(dir, "release")
	cmd := exec.Command("go", "build", "-o", tool, "./release")
	cmd.Dir = filepath.Join(root, "tools", "devtools")
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the release command in tools/devtools: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// gitEnv gives git an identity of its own, whatever the machine's configuration says.
var gitEnv = []string{
	"GIT_AUTHOR_NAME=release test", "GIT_AUTHOR_EMAIL=release-test@example.com",
	"GIT_COMMITTER_NAME=release test", "GIT_COMMITTER_EMAIL=release-test@example.com",
	"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
}

// result is what a command did.
type result struct {
	out  string
	code int
}

// execIn runs name in dir with the environment plus env and returns its combined output and exit
// status; it fails the test only when the command cannot be started.
func execIn(t *testing.T, dir string, env []string, name string, args ...string) result {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), gitEnv...), env...)
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	err := cmd.Run()
	if err != nil {
		if _, ok := err.(*exec.ExitError); !ok {
			require.NoError(t, err, "starting %s %s", name, strings.Join(args, " "))
		}
	}
	return result{out: b.String(), code: cmd.ProcessState.ExitCode()}
}

// must runs a command that has to succeed and returns its output.
func must(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	r := execIn(t, dir, env, name, args...)
	require.Equal(t, 0, r.code, "%s %s in %s failed:\n%s", name, strings.Join(args, " "), dir, r.out)
	return r.out
}

// newRepo makes a git repository holding files (slash paths) in one commit.
func newRepo(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	writeFiles(t, dir, files)
	must(t, dir, nil, "git", "init", "-q", "-b", "main")
	must(t, dir, nil, "git", "add", "-A")
	must(t, dir, nil, "git", "commit", "-q", "-m", "start")
	return dir
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, text := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
	}
}

func commitAll(t *testing.T, dir, msg string) {
	t.Helper()
	must(t, dir, nil, "git", "add", "-A")
	must(t, dir, nil, "git", "commit", "-q", "-m", msg)
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(name)
	require.NoError(t, err)
	return string(data)
}
