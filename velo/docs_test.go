package velo

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// exportedOptions lists the exported functions of package velo (this folder, tests left out)
// that return an Option.
func exportedOptions(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	var names []string
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !fn.Name.IsExported() || fn.Type.Results == nil || len(fn.Type.Results.List) != 1 {
				continue
			}
			if id, ok := fn.Type.Results.List[0].Type.(*ast.Ident); ok && id.Name == "Option" {
				names = append(names, fn.Name.Name)
			}
		}
	}
	sort.Strings(names)
	return names
}

// Every option New takes has a row in docs/velo.md's options table, and every row there names an
// option that exists: an option added without its row, or renamed, fails here.
func TestDocsTableListsEveryOption(t *testing.T) {
	doc, err := os.ReadFile("../docs/velo.md")
	require.NoError(t, err)
	row := regexp.MustCompile("(?m)^\\| `(With[A-Za-z]+)\\(")
	documented := map[string]bool{}
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		documented[m[1]] = true
	}
	options := exportedOptions(t)
	require.GreaterOrEqual(t, len(options), 16, "the parse found fewer options than package velo has")
	for _, name := range options {
		assert.True(t, documented[name], "docs/velo.md, Starting an instance: the options table has no row for %s", name)
		delete(documented, name)
	}
	for name := range documented {
		assert.Fail(t, "a row for an option package velo does not have", "docs/velo.md lists %s", name)
	}
}
