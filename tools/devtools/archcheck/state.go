package main

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/tools/go/packages"
)

// processState lists the package-level variables of the library that hold state of the process
// rather than of an instance, each with why; the state check lets these, and only these, pass.
// Keys are "package.name", the package relative to the table's module.
var processState = map[string]string{
	"ucx.envOnce":               "UCX reads its environment once per process, so the defaults are applied once per process",
	"ucx.envApplied":            "what ApplyEnvDefaults applied to the process's environment, written once under envOnce",
	"ucx.exeSymsOnce":           "the running executable's symbol table, read once",
	"ucx.exeSyms":               "the running executable's symbol table, read once under exeSymsOnce",
	"ucx.versionWarnOnce":       "the header/library mismatch is a fact of the process's UCX, warned about once",
	"ucx.liveEngines":           "one engine per process is the supported shape on UCX 1.13, so the process counts its engines",
	"ucx.sharedProcessWarnOnce": "the warning about a second engine in the process, once",
	"ucx.spinSlots":             "the process's Ps are shared by every engine, so at most GOMAXPROCS-1 of them spin",
}

// immutableTypes are pointer types whose values nothing changes once made and which are safe
// for concurrent use: a package-level variable of one is a constant that needs code to build.
var immutableTypes = map[string]bool{
	"*regexp.Regexp":          true,
	"*hash/crc32.Table":       true,
	"*text/template.Template": true,
	"*html/template.Template": true,
}

// LoadTyped type-checks the library packages among pkgs (the rows of kind Library) that this
// build compiles, from the workspace of repo, test files aside.
func LoadTyped(repo string, t *Table, pkgs []*Package) ([]*packages.Package, error) {
	var patterns []string
	for _, p := range pkgs {
		if row, ok := t.lookup(p.ImportPath); ok && row.Kind == Library && p.Built {
			patterns = append(patterns, p.ImportPath)
		}
	}
	if len(patterns) == 0 {
		return nil, nil
	}
	cfg := &packages.Config{
		Dir:  repo,
		Env:  goEnv(repo),
		Mode: packages.NeedName | packages.NeedFiles | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo,
	}
	loaded, err := packages.Load(cfg, patterns...)
	if err != nil {
		return nil, fmt.Errorf("loading the library packages: %w", err)
	}
	var errs []string
	packages.Visit(loaded, nil, func(p *packages.Package) {
		for _, e := range p.Errors {
			errs = append(errs, e.Error())
		}
	})
	if len(errs) > 0 {
		return nil, fmt.Errorf("the library packages do not type-check (fix the build first):\n  %s", strings.Join(errs, "\n  "))
	}
	return loaded, nil
}

// CheckState finds package-level variables that hold mutable state: a map that code writes after
// its declaration, a channel, a pointer (but to an immutable type), a sync or sync/atomic value
// (but a sync.Pool, which holds nothing a caller can observe), or any variable that code writes
// after its declaration (itself, a field or an element, outside init) or changes through a method
// with a pointer receiver. Sentinel errors and other interface values, functions, and tables
// nothing writes pass. State belongs to the instance that uses it; what is truly the process's is
// listed in processState with its reason.
func CheckState(t *Table, pkgs []*packages.Package, allowed map[string]string) []string {
	var problems []string
	used := map[string]bool{}
	for _, p := range pkgs {
		rel, _ := t.rel(p.PkgPath)
		written := writtenVars(p)
		for _, f := range p.Syntax {
			for _, decl := range f.Decls {
				gen, ok := decl.(*ast.GenDecl)
				if !ok || gen.Tok != token.VAR {
					continue
				}
				for _, spec := range gen.Specs {
					for _, name := range spec.(*ast.ValueSpec).Names {
						obj, ok := p.TypesInfo.Defs[name].(*types.Var)
						if !ok || name.Name == "_" {
							continue
						}
						if _, ok := allowed[rel+"."+name.Name]; ok {
							used[rel+"."+name.Name] = true
							continue
						}
						why := mutable(obj.Type(), written[obj])
						if why == "" {
							continue
						}
						pos := p.Fset.Position(name.Pos())
						file := filepath.Join(rel, filepath.Base(pos.Filename))
						problems = append(problems, fmt.Sprintf("%s:%d: package-level var %s is %s: state at package level is shared by every instance of the process; keep it in the instance that uses it (or, if it is the process's, list it with why in processState, tools/devtools/archcheck/state.go)",
							file, pos.Line, name.Name, why))
					}
				}
			}
		}
	}
	for name := range allowed {
		if !used[name] {
			problems = append(problems, fmt.Sprintf("processState lists %s, which is no package-level variable of a library package: remove it from tools/devtools/archcheck/state.go", name))
		}
	}
	sort.Strings(problems)
	return problems
}

// write is how code changes a package-level variable after its declaration, outside init.
type write int

const (
	notWritten     write = iota
	methodWritten        // a method with a pointer receiver is called on it
	elementWritten       // m[k] = v, delete(m, k), clear(m) on a map
	reassigned           // it, a field or an element of it is assigned, or its address taken
)

// mutable says why a variable of type t written as w is state, or "" when it is not.
func mutable(t types.Type, w write) string {
	if w == reassigned {
		return "written after its declaration"
	}
	switch t.Underlying().(type) {
	case *types.Map:
		if w == elementWritten {
			return "a map that code writes to"
		}
	case *types.Chan:
		return "a channel"
	case *types.Pointer:
		if !immutableTypes[types.TypeString(t, nil)] {
			return "a pointer (" + types.TypeString(t, nil) + ")"
		}
	case *types.Struct, *types.Array:
		if s := syncType(t); s != "" {
			return "a " + s + " value"
		}
		if w == methodWritten && !isPool(t) {
			return "changed by its methods"
		}
	}
	return ""
}

func isPool(t types.Type) bool {
	n, ok := t.(*types.Named)
	return ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == "sync" && n.Obj().Name() == "Pool"
}

// syncType names the sync or sync/atomic type t is or holds (in a field or an element), but
// sync.Pool; "" when none.
func syncType(t types.Type) string {
	if n, ok := t.(*types.Named); ok && n.Obj().Pkg() != nil {
		switch path := n.Obj().Pkg().Path(); {
		case isPool(t):
			return ""
		case path == "sync" || path == "sync/atomic":
			return path + "." + n.Obj().Name()
		}
	}
	switch u := t.Underlying().(type) {
	case *types.Struct:
		for i := 0; i < u.NumFields(); i++ {
			if s := syncType(u.Field(i).Type()); s != "" {
				return s
			}
		}
	case *types.Array:
		return syncType(u.Elem())
	}
	return ""
}

// writtenVars finds the package-level variables of p that its code changes after their
// declaration, outside func init (which builds tables before anything runs): an element of a map
// (index assignment, delete, clear), the variable itself, a field or an element of it (assignment,
// ++, --, its address taken), or a call of a method with a pointer receiver on it.
func writtenVars(p *packages.Package) map[*types.Var]write {
	pkgVar := func(e ast.Expr) *types.Var {
		id, ok := ast.Unparen(e).(*ast.Ident)
		if !ok {
			return nil
		}
		v, ok := p.TypesInfo.Uses[id].(*types.Var)
		if !ok || v.Parent() != p.Types.Scope() {
			return nil
		}
		return v
	}
	// root is the package-level variable e is a part of: itself, a field, an element.
	var root func(e ast.Expr) *types.Var
	root = func(e ast.Expr) *types.Var {
		switch x := ast.Unparen(e).(type) {
		case *ast.Ident:
			return pkgVar(x)
		case *ast.SelectorExpr:
			if sel := p.TypesInfo.Selections[x]; sel != nil && sel.Kind() == types.FieldVal {
				return root(x.X)
			}
		case *ast.IndexExpr:
			return root(x.X)
		case *ast.StarExpr:
			return root(x.X)
		}
		return nil
	}
	out := map[*types.Var]write{}
	mark := func(v *types.Var, w write) {
		if v != nil && w > out[v] {
			out[v] = w
		}
	}
	lhs := func(e ast.Expr) {
		if ix, ok := ast.Unparen(e).(*ast.IndexExpr); ok {
			if v := pkgVar(ix.X); v != nil {
				if _, isMap := v.Type().Underlying().(*types.Map); isMap {
					mark(v, elementWritten)
					return
				}
			}
		}
		mark(root(e), reassigned)
	}
	for _, f := range p.Syntax {
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil || (fn.Recv == nil && fn.Name.Name == "init") {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.AssignStmt:
					if n.Tok != token.DEFINE {
						for _, e := range n.Lhs {
							lhs(e)
						}
					}
				case *ast.IncDecStmt:
					lhs(n.X)
				case *ast.UnaryExpr:
					if n.Op == token.AND {
						mark(root(n.X), reassigned) // its address lets anything write it
					}
				case *ast.CallExpr:
					switch fun := ast.Unparen(n.Fun).(type) {
					case *ast.Ident:
						if b, ok := p.TypesInfo.Uses[fun].(*types.Builtin); ok && len(n.Args) > 0 && (b.Name() == "delete" || b.Name() == "clear") {
							mark(pkgVar(n.Args[0]), elementWritten)
						}
					case *ast.SelectorExpr:
						sel := p.TypesInfo.Selections[fun]
						if sel == nil || sel.Kind() != types.MethodVal {
							break
						}
						if _, ptrRecv := sel.Obj().Type().(*types.Signature).Recv().Type().(*types.Pointer); !ptrRecv {
							break
						}
						if v := root(fun.X); v != nil {
							if _, isPtr := v.Type().Underlying().(*types.Pointer); !isPtr {
								mark(v, methodWritten)
							}
						}
					}
				}
				return true
			})
		}
	}
	return out
}
