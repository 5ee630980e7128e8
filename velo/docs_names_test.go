package velo

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// docPackages are the package names a reader meets in README.md and docs/, with the import path
// each stands for. A qualified name whose package is not listed here (a variable, a C identifier,
// a metric) is not checked.
var docPackages = map[string]string{
	"velo":         "github.com/velo-go/velo/velo",
	"auth":         "github.com/velo-go/velo/velo/auth",
	"discovery":    "github.com/velo-go/velo/velo/discovery",
	"etcd":         "github.com/velo-go/velo/velo/discovery/etcd",
	"messenger":    "github.com/velo-go/velo/velo/messenger",
	"metrics":      "github.com/velo-go/velo/velo/metrics",
	"push":         "github.com/velo-go/velo/velo/push",
	"rendezvous":   "github.com/velo-go/velo/velo/rendezvous",
	"rdma":         "github.com/velo-go/velo/velo/rendezvous/rdma",
	"transport":    "github.com/velo-go/velo/velo/transport",
	"tcp":          "github.com/velo-go/velo/velo/transport/tcp",
	"rails":        "github.com/velo-go/velo/velo/transport/rails",
	"ucxtransport": "github.com/velo-go/velo/velo/transport/ucxtransport",
	"ucx":          "github.com/velo-go/velo/ucx",
	"verbs":        "github.com/velo-go/velo/verbs",
	"ibv":          "github.com/velo-go/velo/verbs/ibv",
	"topo":         "github.com/velo-go/velo/verbs/topo",
	"mlx5dv":       "github.com/velo-go/velo/mlx5dv",
	"rdmacm":       "github.com/velo-go/velo/rdmacm",
	"lanes":        "github.com/velo-go/velo/lanes",
}

// docCode is one piece of Go a reader may copy: a fenced go block or an inline code span.
type docCode struct {
	file  string // relative to the top of the checkout
	line  int    // of the code's first line
	text  string
	block bool // a fenced block (parsed for composite literals)
}

var (
	inlineCode = regexp.MustCompile("`([^`\n]+)`")
	// pkg.Name, pkg.Type.Member; the character before pkg must not continue a longer name or path.
	qualified = regexp.MustCompile(`(^|[^A-Za-z0-9_./"-])([a-z][a-z0-9]*)\.([A-Z][A-Za-z0-9_]*)(?:\.([A-Z][A-Za-z0-9_]*))?`)
)

// extractDocCode returns the Go of a Markdown file: its ```go blocks, and the inline code spans
// outside any fenced block. The first column of a "| was | is now | why |" table is history, names
// that no longer exist by design, and is left out.
func extractDocCode(file, text string) []docCode {
	var out []docCode
	lines := strings.Split(text, "\n")
	inFence, goFence, wasTable := false, false, false
	var block []string
	start := 0
	for i, l := range lines {
		trim := strings.TrimSpace(l)
		if strings.HasPrefix(trim, "```") {
			if !inFence {
				inFence, goFence = true, strings.TrimPrefix(trim, "```") == "go"
				block, start = nil, i+2
				continue
			}
			if goFence {
				out = append(out, docCode{file, start, strings.Join(block, "\n"), true})
			}
			inFence = false
			continue
		}
		if inFence {
			block = append(block, l)
			continue
		}
		if strings.HasPrefix(trim, "| was |") {
			wasTable = true
		} else if !strings.HasPrefix(trim, "|") {
			wasTable = false
		}
		if wasTable && strings.HasPrefix(trim, "|") {
			// Drop the first cell: "| was | is now | why |" keeps old names on purpose.
			if j := strings.Index(trim[1:], " | "); j >= 0 {
				l = trim[1+j:]
			}
		}
		for _, m := range inlineCode.FindAllStringSubmatch(l, -1) {
			out = append(out, docCode{file, i + 1, m[1], false})
		}
	}
	return out
}

// loadDocPackages type-checks every package of docPackages from its export data, which one go list
// of the workspace writes.
func loadDocPackages(t *testing.T, root string) (map[string]*types.Package, map[string]string) {
	t.Helper()
	var paths []string
	for _, p := range docPackages {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	cmd := exec.Command("go", append([]string{"list", "-e", "-export", "-deps", "-json=ImportPath,Dir,Export,Error"}, paths...)...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "go list -export of the documented packages: %s", stderr.String())
	exports, dirs := map[string]string{}, map[string]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath string
			Dir        string
			Export     string
			Error      *struct{ Err string }
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else {
			require.NoError(t, err)
		}
		require.Nil(t, p.Error, "go list %s", p.ImportPath)
		exports[p.ImportPath], dirs[p.ImportPath] = p.Export, p.Dir
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok || f == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
	pkgs, pkgDirs := map[string]*types.Package{}, map[string]string{}
	for name, path := range docPackages {
		p, err := imp.Import(path)
		require.NoError(t, err, "importing %s", path)
		pkgs[name], pkgDirs[name] = p, dirs[path]
	}
	return pkgs, pkgDirs
}

// packageOverviews returns the package comments (what go doc shows first) of the documented
// packages, each line a piece of code to check: their snippets and their prose name things alike.
func packageOverviews(t *testing.T, root string, dirs map[string]string) []docCode {
	t.Helper()
	var out []docCode
	fset := token.NewFileSet()
	for _, dir := range dirs {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		require.NoError(t, err)
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, path, nil, parser.PackageClauseOnly|parser.ParseComments)
			require.NoError(t, err)
			if f.Doc == nil {
				continue
			}
			rel, _ := filepath.Rel(root, path)
			for _, c := range f.Doc.List {
				out = append(out, docCode{rel, fset.Position(c.Pos()).Line, c.Text, false})
			}
		}
	}
	return out
}

// resolveDocName says what is wrong with pkg.name[.member], or "" when it names something real.
func resolveDocName(p *types.Package, name, member string) string {
	obj := p.Scope().Lookup(name)
	if obj == nil || !obj.Exported() {
		return fmt.Sprintf("package %s has no %s", p.Path(), name)
	}
	if member == "" {
		return ""
	}
	var typ types.Type
	switch o := obj.(type) {
	case *types.TypeName:
		typ = o.Type()
	case *types.Var:
		typ = o.Type()
	default:
		return "" // a function or a constant: what follows is not a member of it
	}
	if m, _, _ := types.LookupFieldOrMethod(typ, true, p, member); m == nil {
		return fmt.Sprintf("%s.%s has no field or method %s", p.Name(), name, member)
	}
	return ""
}

// compositeFields checks the keys of pkg.Type{Key: ...} literals in a Go snippet, parsed as a file,
// a list of declarations, or statements. A snippet that parses as none of them is left to the
// name check.
func compositeFields(code docCode, pkgs map[string]*types.Package) []string {
	fset := token.NewFileSet()
	var f *ast.File
	added := 0 // lines put before the snippet to make it parse
	for i, prefix := range []string{"", "package p\n", "package p\nfunc _() {\n"} {
		if g, err := parser.ParseFile(fset, "", prefix+code.text+"\n"+strings.Repeat("}", i/2), parser.SkipObjectResolution); err == nil {
			f, added = g, strings.Count(prefix, "\n")
			break
		}
	}
	if f == nil {
		return nil
	}
	aliases := importNames(f)
	var bad []string
	ast.Inspect(f, func(n ast.Node) bool {
		lit, ok := n.(*ast.CompositeLit)
		if !ok {
			return true
		}
		sel, ok := lit.Type.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		id, ok := sel.X.(*ast.Ident)
		if !ok {
			return true
		}
		p := pkgs[aliases.resolve(id.Name)]
		if p == nil {
			return true
		}
		for _, e := range lit.Elts {
			kv, ok := e.(*ast.KeyValueExpr)
			if !ok {
				continue
			}
			key, ok := kv.Key.(*ast.Ident)
			if !ok {
				continue
			}
			if msg := resolveDocName(p, sel.Sel.Name, key.Name); msg != "" {
				line := code.line + fset.Position(key.Pos()).Line - 1 - added
				bad = append(bad, fmt.Sprintf("%s:%d: `%s.%s{%s: ...}`: %s", code.file, line, id.Name, sel.Sel.Name, key.Name, msg))
			}
		}
		return true
	})
	return bad
}

// importAliases maps a snippet's local package names to the names of docPackages.
type importAliases map[string]string

func (a importAliases) resolve(local string) string {
	if n, ok := a[local]; ok {
		return n
	}
	return local
}

func importNames(f *ast.File) importAliases {
	a := importAliases{}
	for _, spec := range f.Imports {
		path, err := strconv.Unquote(spec.Path.Value)
		if err != nil {
			continue
		}
		for name, p := range docPackages {
			if p != path {
				continue
			}
			local := filepath.Base(path)
			if spec.Name != nil {
				local = spec.Name.Name
			}
			a[local] = name
		}
	}
	return a
}

// Every qualified name in README.md, docs/*.md and the documented packages' overviews — pkg.Name,
// pkg.Type.Field or .Method, the keys of pkg.Type{...} in Go blocks — names something the package
// has: a snippet copied from the docs compiles as far as its names go. A rename that leaves a doc
// behind fails here, naming the file, the line and the name.
func TestDocsNamesResolve(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks the documented packages from their export data")
	}
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	files = append([]string{filepath.Join(root, "README.md")}, files...)
	pkgs, dirs := loadDocPackages(t, root)

	checked := 0
	for _, path := range files {
		text, err := os.ReadFile(path)
		require.NoError(t, err)
		rel, _ := filepath.Rel(root, path)
		for _, code := range extractDocCode(rel, string(text)) {
			aliases := importAliases{}
			if code.block {
				if f, err := parser.ParseFile(token.NewFileSet(), "", code.text, parser.ImportsOnly); err == nil {
					aliases = importNames(f)
				}
				for _, msg := range compositeFields(code, pkgs) {
					assert.Fail(t, "a field the docs name does not exist", msg)
				}
			}
			for i, l := range strings.Split(code.text, "\n") {
				for _, m := range qualified.FindAllStringSubmatch(l, -1) {
					p := pkgs[aliases.resolve(m[2])]
					if p == nil {
						continue
					}
					checked++
					name := strings.TrimSuffix(m[2]+"."+m[3]+"."+m[4], ".")
					if msg := resolveDocName(p, m[3], m[4]); msg != "" {
						assert.Fail(t, "a name the docs use does not exist", "%s:%d: `%s`: %s", code.file, code.line+i, name, msg)
					}
				}
			}
		}
	}
	for _, code := range packageOverviews(t, root, dirs) {
		for _, m := range qualified.FindAllStringSubmatch(code.text, -1) {
			if p := pkgs[m[2]]; p != nil {
				checked++
				if msg := resolveDocName(p, m[3], m[4]); msg != "" {
					name := strings.TrimSuffix(m[2]+"."+m[3]+"."+m[4], ".")
					assert.Fail(t, "a name a package overview uses does not exist", "%s:%d: `%s`: %s", code.file, code.line, name, msg)
				}
			}
		}
	}
	require.Greater(t, checked, 200, "the extraction found fewer qualified names than README.md and docs/ hold")
}

// A type package velo takes from another package under its own name (an alias) shows go doc only
// its own comment, not the fields and methods of the type behind it. So that comment names every
// exported field and method; a field added behind an alias without a word here fails.
func TestAliasDocsNameFieldsAndMethods(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks the documented packages from their export data")
	}
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	pkgs, _ := loadDocPackages(t, root)
	velo := pkgs["velo"]

	docs := map[string]string{}
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
		require.NoError(t, err)
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.TYPE {
				continue
			}
			for _, s := range g.Specs {
				ts := s.(*ast.TypeSpec)
				doc := ts.Doc
				if doc == nil && len(g.Specs) == 1 {
					doc = g.Doc
				}
				docs[ts.Name.Name] = doc.Text()
			}
		}
	}

	aliases := 0
	for _, name := range velo.Scope().Names() {
		tn, ok := velo.Scope().Lookup(name).(*types.TypeName)
		if !ok || !tn.Exported() || !tn.IsAlias() {
			continue
		}
		named, ok := types.Unalias(tn.Type()).(*types.Named)
		if !ok || named.Obj().Pkg() == velo {
			continue
		}
		aliases++
		var members []string
		if st, ok := named.Underlying().(*types.Struct); ok {
			for i := range st.NumFields() {
				if f := st.Field(i); f.Exported() {
					members = append(members, f.Name())
				}
			}
		}
		if _, ok := named.Underlying().(*types.Struct); !ok {
			continue // InstanceID, MemoryType: a number whose only method is String
		}
		ms := types.NewMethodSet(types.NewPointer(named))
		for i := range ms.Len() {
			if m := ms.At(i).Obj(); m.Exported() {
				members = append(members, m.Name())
			}
		}
		doc := docs[name]
		for _, m := range members {
			if !regexp.MustCompile(`\b` + m + `\b`).MatchString(doc) {
				assert.Fail(t, "an alias's doc comment leaves a member out",
					"velo.%s is %s; its comment does not name %s, which go doc of package velo then never shows", name, named, m)
			}
		}
	}
	require.Greater(t, aliases, 5, "the check found fewer aliases than package velo has")
}
