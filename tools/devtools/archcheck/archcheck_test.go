package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fixture is the layer table of testdata/tree: two modules (example.com/fix and, in b,
// example.com/fix/b), a program that imports everything, and a generator that no build includes.
var fixture = Table{
	Module: "example.com/fix",
	Rows: []Row{
		{2, Library, "top", []string{"b/...", "high"}, "what uses low"},
		{1, Library, "bottom", []string{"low"}, "the base"},
	},
}

// copyTree copies testdata/tree into a temporary folder, so that a test can break it.
func copyTree(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	require.NoError(t, os.CopyFS(dst, os.DirFS("testdata/tree")))
	return dst
}

func writeFile(t *testing.T, root, name, text string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, name), []byte(text), 0o644))
}

// run checks the tree at root with the fixture's table and its doc, once written.
func run(t *testing.T, root string) (string, error) {
	t.Helper()
	doc := filepath.Join(root, "docs/arch.md")
	require.NoError(t, WriteDoc(&fixture, doc))
	var out strings.Builder
	err := Run(&out, root, doc, &fixture, map[string]string{})
	return out.String(), err
}

// The fixture keeps its layers, and what it keeps at package level is a sentinel error, a table
// nothing writes, a crc32 table, a regexp and a sync.Pool: the check passes and prints the table.
func TestPassesOnALayeredTree(t *testing.T) {
	out, err := run(t, copyTree(t))
	require.NoError(t, err, out)
	assert.Contains(t, out, "  2 top                b/... high\n  1 bottom             low\n")
	assert.Contains(t, out, "archcheck: 3 packages keep to their layers")
}

// An import of a higher layer fails the check, also from a file only one build includes, and so
// does an import within one layer.
func TestFailsOnAForbiddenImport(t *testing.T) {
	root := copyTree(t)
	writeFile(t, root, "low/tagged.go", "//go:build sometag\n\npackage low\n\nimport _ \"example.com/fix/high\"\n")
	writeFile(t, root, "high/mid.go", "package high\n\nimport _ \"example.com/fix/b/mid\"\n")
	// A package no file of which this build includes is checked all the same.
	writeFile(t, root, "b/other/other.go", "//go:build plan9\n\npackage other\n\nimport _ \"example.com/fix/b/mid\"\n")
	out, err := run(t, root)
	require.Error(t, err)
	msg := err.Error()
	assert.Contains(t, msg, "archcheck: 3 problem(s):")
	assert.Contains(t, msg, "b/other (layer 2 top) imports b/mid (layer 2 top) in b/other/other.go")
	assert.Contains(t, msg, "high (layer 2 top) imports b/mid (layer 2 top) in high/mid.go: a package imports only lower layers")
	assert.Contains(t, msg, "low (layer 1 bottom) imports high (layer 2 top) in low/tagged.go")
	assert.Contains(t, out, "  1 bottom             low\n", "the table is printed with the failure")
}

// A package no row names fails the check, which says where its imports put it.
func TestFailsOnAPackageTheTableDoesNotName(t *testing.T) {
	root := copyTree(t)
	writeFile(t, root, "extra/extra.go", "package extra\n\nimport _ \"example.com/fix/high\"\n")
	_, err := run(t, root)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "extra is in no row of the layer table: add it to the row of layer 3 or above")
}

// Package-level state fails the check: a mutex, an atomic, a map that code writes, a pointer, a
// channel, a struct holding a mutex, a variable, a field and an element that code assigns, and a
// value its methods change; a table init fills and a test file's state pass.
func TestFailsOnPackageLevelState(t *testing.T) {
	root := copyTree(t)
	writeFile(t, root, "low/state.go", `package low

import (
	"strings"
	"sync"
	"sync/atomic"
)

type cache struct {
	mu sync.Mutex
	m  map[string]int
}

var (
	mu      sync.Mutex
	hits    atomic.Int64
	seen    = map[string]bool{}
	current *cache
	events  = make(chan int)
	shared  cache
	calls   int
	limits  struct{ n int }
	last    [4]string
	log     strings.Builder
	squares = map[int]int{}
)

func init() {
	for i := range 10 {
		squares[i] = i * i
	}
}

// Note writes all of them.
func Note(s string) {
	mu.Lock()
	defer mu.Unlock()
	hits.Add(1)
	seen[s] = true
	calls++
	limits.n = len(s)
	last[calls%4] = s
	log.WriteString(s)
}
`)
	writeFile(t, root, "low/state_test.go", "package low\n\nimport \"sync\"\n\nvar testMu sync.Mutex\n")
	_, err := run(t, root)
	require.Error(t, err)
	msg := err.Error()
	assert.Contains(t, msg, "archcheck: 10 problem(s):")
	for _, want := range []string{
		"low/state.go:15: package-level var mu is a sync.Mutex value",
		"low/state.go:16: package-level var hits is a sync/atomic.Int64 value",
		"low/state.go:17: package-level var seen is a map that code writes to",
		"low/state.go:18: package-level var current is a pointer (*example.com/fix/low.cache)",
		"low/state.go:19: package-level var events is a channel",
		"low/state.go:20: package-level var shared is a sync.Mutex value",
		"low/state.go:21: package-level var calls is written after its declaration",
		"low/state.go:22: package-level var limits is written after its declaration",
		"low/state.go:23: package-level var last is written after its declaration",
		"low/state.go:24: package-level var log is changed by its methods",
	} {
		assert.Contains(t, msg, want)
	}
	assert.NotContains(t, msg, "squares", "a table init fills is no state")
	assert.Contains(t, msg, "keep it in the instance that uses it")

	// Listed as the process's, with a reason, they pass; a stale entry does not.
	allowed := map[string]string{"low.gone": "was here"}
	for _, v := range []string{"mu", "hits", "seen", "current", "events", "shared", "calls", "limits", "last", "log"} {
		allowed["low."+v] = "the process's"
	}
	err = Run(&strings.Builder{}, root, "", &fixture, allowed)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "archcheck: 1 problem(s):\n  processState lists low.gone, which is no package-level variable")
}

// The document must print the table as it is; WriteDoc puts it there.
func TestDocPrintsTheTable(t *testing.T) {
	root := copyTree(t)
	doc := filepath.Join(root, "docs/arch.md")
	err := CheckDoc(&fixture, doc)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "prints another layer table than tools/devtools/archcheck/layers.go: run make layers-doc")

	require.NoError(t, WriteDoc(&fixture, doc))
	require.NoError(t, CheckDoc(&fixture, doc))
	data, err := os.ReadFile(doc)
	require.NoError(t, err)
	assert.Equal(t, "# Fixture\n\n"+docBegin+"\n| layer | packages | kind | owns |\n|---|---|---|---|\n"+
		"| 2 top | `b/...`, `high` | library | what uses low |\n| 1 bottom | `low` | library | the base |\n"+docEnd+"\n\nAfter.\n", string(data))

	require.NoError(t, os.WriteFile(doc, []byte("# No table\n"), 0o644))
	err = CheckDoc(&fixture, doc)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "it needs the layer table between one line")
}

// A table that names a package twice, or lists a lower layer before a higher one, is refused.
func TestRefusesAMalformedTable(t *testing.T) {
	twice := Table{Module: "m", Rows: []Row{{2, Library, "a", []string{"x"}, ""}, {1, Library, "b", []string{"x"}, ""}}}
	assert.ErrorContains(t, twice.validate(), "x is named twice")
	upward := Table{Module: "m", Rows: []Row{{1, Library, "a", []string{"x"}, ""}, {2, Library, "b", []string{"y"}, ""}}}
	assert.ErrorContains(t, upward.validate(), "list the rows from the top layer down")
}

// The repository keeps to its table, and docs/architecture.md prints it.
func TestRepositoryKeepsItsLayers(t *testing.T) {
	root, err := filepath.Abs("../../..")
	require.NoError(t, err)
	if _, err := fs.Stat(os.DirFS(root), "go.work"); err != nil {
		t.Skip("not inside the repository")
	}
	var out strings.Builder
	require.NoError(t, Run(&out, root, filepath.Join(root, "docs/architecture.md"), &velo, processState), out.String())
}

// A library package above its floor fails the check: the layers would overstate how far a change
// to it reaches.
func TestFailsOnALibraryPackageAboveItsFloor(t *testing.T) {
	root := copyTree(t)
	raised := Table{Module: fixture.Module, Rows: []Row{
		{3, Library, "raised", []string{"high"}, "what uses low"},
		{2, Library, "top", []string{"b/..."}, "what uses low"},
		{1, Library, "bottom", []string{"low"}, "the base"},
	}}
	err := Run(&strings.Builder{}, root, "", &raised, map[string]string{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "archcheck: 1 problem(s):\n  high sits in layer 3 raised, but its imports put it in layer 2: move it down")
}
