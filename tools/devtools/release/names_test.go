package main

import (
	"go/build/constraint"
	"io/fs"
	"os"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fixtureFiles lists the files of a fixture tree the way Repo.Files lists a repository's.
func fixtureFiles(t *testing.T, fsys fs.FS) []string {
	t.Helper()
	var files []string
	require.NoError(t, fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, p)
		}
		return err
	}))
	return files
}

// The fixture testdata/names is two modules (example.com/n and example.com/n/a) holding each kind
// of mistake once, beside what the rules let pass: main packages of the same name (b/cmd/tool,
// c/cmd/tool), an external test package (b_test), a generator that no build includes declaring
// the name of another package (b/gen.go), and a package inside a testdata folder.
func TestCheckNamesFindsCollisions(t *testing.T) {
	fsys := os.DirFS("testdata/names")
	problems := CheckNames(fsys, fixtureFiles(t, fsys))
	require.Len(t, problems, 4, "%s", strings.Join(problems, "\n"))
	assert.True(t, strings.HasPrefix(problems[0], "b/auth.go is named after the folder b/auth/ beside it: rename the file"), problems[0])
	assert.True(t, strings.HasPrefix(problems[1], "c/messenger_test.go is named after the folder c/messenger/ beside it"), problems[1])
	// A folder of tests only counts under its tests' package name.
	assert.True(t, strings.HasPrefix(problems[2], "package name auth is used by 2 packages: example.com/n/b/auth, example.com/n/c/auth; "), problems[2])
	// Across modules, with the import path each module gives its folders.
	assert.True(t, strings.HasPrefix(problems[3], "package name ucx is used by 2 packages: example.com/n/a/ucx, example.com/n/b/transport/ucx; "), problems[3])
	assert.Contains(t, problems[3], "needs an alias, so rename all but one")
	assert.Contains(t, problems[3], "CHANGELOG.md")

	err := reportNames(&strings.Builder{}, "testdata/names", problems)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "4 naming problem(s) in testdata/names:\n  b/auth.go")
}

func TestCheckNamesPassesOnceRenamed(t *testing.T) {
	fsys := os.DirFS("testdata/names")
	var files []string
	for _, f := range fixtureFiles(t, fsys) {
		switch f {
		case "b/auth.go", "c/messenger_test.go", "c/auth/auth_test.go", "b/transport/ucx/doc.go":
		default:
			files = append(files, f)
		}
	}
	problems := CheckNames(fsys, files)
	assert.Empty(t, problems)
	var out strings.Builder
	require.NoError(t, reportNames(&out, "testdata/names", problems))
	assert.Contains(t, out.String(), "no two packages")
}

// A deliberate collision added to a clean tree: the check fails on it, and on nothing else.
func TestCheckNamesFailsOnANewCollision(t *testing.T) {
	fsys := fstest.MapFS{
		"go.mod":                     {Data: []byte("module example.com/m\n")},
		"velo/go.mod":                {Data: []byte("module example.com/m/velo\n")},
		"velo/rendezvous/rdma/r.go":  {Data: []byte("package rdma\n")},
		"test/rdmapath/path_test.go": {Data: []byte("package rdmapath\n")},
		"test/rdmapath/main_test.go": {Data: []byte("package rdmapath_test\n")},
	}
	assert.Empty(t, CheckNames(fsys, fixtureFiles(t, fsys)))

	fsys["test/rdma/rdma.go"] = &fstest.MapFile{Data: []byte("// Package rdma runs the RDMA path's tests.\npackage rdma\n")}
	problems := CheckNames(fsys, fixtureFiles(t, fsys))
	require.Len(t, problems, 1)
	assert.Contains(t, problems[0], "package name rdma is used by 2 packages: example.com/m/test/rdma, example.com/m/velo/rendezvous/rdma;")
}

func TestCheckNamesReportsAFileItCannotRead(t *testing.T) {
	fsys := fstest.MapFS{
		"go.mod":  {Data: []byte("module example.com/m\n")},
		"a/a.go":  {Data: []byte("// no package clause\n")},
		"a/b.go":  {Data: []byte("//go:build (\n\npackage a\n")},
		"ok/o.go": {Data: []byte("package ok\n")},
	}
	problems := CheckNames(fsys, fixtureFiles(t, fsys))
	require.Len(t, problems, 2, "%q", problems)
	assert.True(t, strings.HasPrefix(problems[0], "a/a.go: reading its package clause:"), problems[0])
	assert.True(t, strings.HasPrefix(problems[1], "a/b.go: "), problems[1])
}

func TestCheckNamesSkipsFilesOutsideModules(t *testing.T) {
	fsys := fstest.MapFS{
		"x/go.mod":       {Data: []byte("module example.com/x\n")},
		"x/p/p.go":       {Data: []byte("package p\n")},
		"scripts/p/p.go": {Data: []byte("package p\n")},
	}
	assert.Empty(t, CheckNames(fsys, fixtureFiles(t, fsys)))
}

func TestSatisfiable(t *testing.T) {
	for line, want := range map[string]bool{
		"//go:build ignore":                     false,
		"//go:build ignore && linux":            false,
		"//go:build linux && !linux":            false,
		"//go:build linux":                      true,
		"//go:build !cgo || ucx_static":         true,
		"//go:build ignore || (darwin && !cgo)": true,
	} {
		expr, err := constraint.Parse(line)
		require.NoError(t, err, line)
		assert.Equal(t, want, satisfiable(expr), line)
	}
}
