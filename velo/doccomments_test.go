package velo

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sourceFileName is a Go source file named in prose: "guard.go", "(recv.go)".
var sourceFileName = regexp.MustCompile(`\b[a-z0-9_]+\.go\b`)

// exportedDocs returns the doc comments go doc shows for the file: the package comment, and those
// of exported declarations, methods of exported types, and exported fields and interface methods.
func exportedDocs(f *ast.File) []*ast.CommentGroup {
	docs := []*ast.CommentGroup{f.Doc}
	fields := func(t ast.Expr) {
		var list *ast.FieldList
		switch t := t.(type) {
		case *ast.StructType:
			list = t.Fields
		case *ast.InterfaceType:
			list = t.Methods
		}
		if list == nil {
			return
		}
		for _, fl := range list.List {
			for _, n := range fl.Names {
				if n.IsExported() {
					docs = append(docs, fl.Doc, fl.Comment)
					break
				}
			}
		}
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			if d.Recv != nil && len(d.Recv.List) == 1 {
				t := d.Recv.List[0].Type
				if s, ok := t.(*ast.StarExpr); ok {
					t = s.X
				}
				if g, ok := t.(*ast.IndexExpr); ok {
					t = g.X
				}
				if id, ok := t.(*ast.Ident); ok && !id.IsExported() {
					continue
				}
			}
			docs = append(docs, d.Doc)
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						docs = append(docs, d.Doc, s.Doc, s.Comment)
						fields(s.Type)
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if n.IsExported() {
							docs = append(docs, d.Doc, s.Doc, s.Comment)
							break
						}
					}
				}
			}
		}
	}
	return docs
}

// No comment go doc shows in this module points a reader at a source file: a user reads the
// documentation, not the tree, and a file name goes stale with the first split of the file. A
// package comment that starts "Package x" names its own package.
func TestExportedDocsNameNoSourceFile(t *testing.T) {
	fset := token.NewFileSet()
	files := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			// internal packages and the examples' mains are not what go doc shows a user; testdata is not Go.
			if n := d.Name(); n == "internal" || n == "testdata" || (path != "." && strings.HasPrefix(n, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
		require.NoError(t, err)
		files++
		if f.Name.Name == "main" {
			return nil
		}
		if f.Doc != nil {
			if words := strings.Fields(f.Doc.Text()); len(words) > 1 && words[0] == "Package" {
				assert.Equal(t, f.Name.Name, words[1], "%s: the package comment names another package", path)
			}
		}
		for _, c := range exportedDocs(f) {
			if c == nil {
				continue
			}
			if m := sourceFileName.FindString(c.Text()); m != "" {
				assert.Fail(t, "a doc comment names a source file", "%s: %q: say what the reader needs instead", fset.Position(c.Pos()), m)
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, files, 80, "the walk found fewer Go files than the module has")
}
