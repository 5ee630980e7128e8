package capi

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
)

// The build without cgo must declare exactly what the cgo build declares, with the same
// signatures; otherwise package ucx stops compiling on one side, and nobody notices until
// someone builds with CGO_ENABLED=0 or for another system. This test reads both files as
// source, so it runs (and fails) in the ordinary cgo build.
func TestNoCgoTwinDeclaresTheSameAPI(t *testing.T) {
	withCgo := exportedAPI(t, "capi_cgo.go")
	without := exportedAPI(t, "capi_nocgo.go")
	require.Equal(t, sortedKeys(withCgo), sortedKeys(without), "exported names of capi_cgo.go and capi_nocgo.go differ")
	for name, sig := range withCgo {
		require.Equal(t, sig, without[name], "signature of %s differs between the two builds", name)
	}
	require.Greater(t, len(withCgo), 60, "the parser found too few declarations to mean anything")
}

// exportedAPI maps each exported declaration of file to its signature: the function type for
// functions and methods (receiver included in the name), the kind for types and constants.
func exportedAPI(t *testing.T, file string) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, nil, 0)
	require.NoError(t, err)
	out := map[string]string{}
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			name := d.Name.Name
			if d.Recv != nil {
				name = render(t, fset, d.Recv.List[0].Type) + "." + name
			}
			out[name] = render(t, fset, d.Type)
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						out["type "+s.Name.Name] = "type"
					}
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if n.IsExported() {
							out[d.Tok.String()+" "+n.Name] = d.Tok.String()
						}
					}
				}
			}
		}
	}
	return out
}

func render(t *testing.T, fset *token.FileSet, node any) string {
	t.Helper()
	var b bytes.Buffer
	require.NoError(t, printer.Fprint(&b, fset, node))
	return b.String()
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
