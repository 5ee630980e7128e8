package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Package is one package of the workspace as the import check sees it.
type Package struct {
	ImportPath string
	Name       string
	Dir        string
	// Imports maps each package of the workspace this one imports (full import path) to the
	// first of its non-test files that imports it, whatever that file's build constraint.
	Imports map[string]string
	// Built says this build (this platform, cgo as the environment says, no tags) compiles it.
	Built bool
}

// listed is what go list -json says of a package.
type listed struct {
	ImportPath     string
	Name           string
	Dir            string
	GoFiles        []string
	CgoFiles       []string
	IgnoredGoFiles []string
	Error          *struct{ Err string }
}

// goEnv runs the go command in the repository's workspace, whatever the caller's GOWORK (make
// runs the tools of tools/devtools with GOWORK=off).
func goEnv(repo string) []string {
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GOWORK=") {
			env = append(env, kv)
		}
	}
	return append(env, "GOWORK="+filepath.Join(repo, "go.work"))
}

func goCmd(repo string, args ...string) ([]byte, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = repo
	cmd.Env = goEnv(repo)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go %s in %s: %v\n%s", strings.Join(args, " "), repo, err, stderr.String())
	}
	return out, nil
}

// LoadPackages lists every package of the workspace of repo (the modules of its go.work) but main
// packages, with the imports of all their non-test files: a file left out of the default build
// (another GOOS, cgo off, a build tag) counts too, so no build of the tree escapes the rules.
func LoadPackages(repo string) ([]*Package, error) {
	if _, err := os.Stat(filepath.Join(repo, "go.work")); err != nil {
		return nil, fmt.Errorf("%s has no go.work: run archcheck -repo with the repository's root", repo)
	}
	mods, err := goCmd(repo, "list", "-m", "-f", "{{.Path}}\t{{.Dir}}")
	if err != nil {
		return nil, err
	}
	var all []listed
	seen := map[string]bool{}
	dirs := map[string]bool{}
	list := func(patterns []string) error {
		out, err := goCmd(repo, append([]string{"list", "-e", "-json=ImportPath,Name,Dir,GoFiles,CgoFiles,IgnoredGoFiles,Error"}, patterns...)...)
		if err != nil {
			return err
		}
		dec := json.NewDecoder(bytes.NewReader(out))
		for {
			var l listed
			if err := dec.Decode(&l); errors.Is(err, io.EOF) {
				return nil
			} else if err != nil {
				return fmt.Errorf("reading go list's output: %w", err)
			}
			if l.Error != nil && len(l.GoFiles)+len(l.CgoFiles)+len(l.IgnoredGoFiles) == 0 {
				// A pattern that matches nothing (a module of test files only) is no package.
				if strings.Contains(l.Error.Err, "no Go files") || strings.Contains(l.Error.Err, "matched no packages") {
					continue
				}
				return fmt.Errorf("go list: %s: %s", l.ImportPath, l.Error.Err)
			}
			if !seen[l.ImportPath] {
				seen[l.ImportPath], dirs[l.Dir] = true, true
				all = append(all, l)
			}
		}
	}
	type module struct{ path, dir string }
	var modules []module
	var patterns []string
	for _, line := range strings.Split(strings.TrimSpace(string(mods)), "\n") {
		path, dir, _ := strings.Cut(line, "\t")
		modules = append(modules, module{path, dir})
		patterns = append(patterns, path+"/...")
	}
	if err := list(patterns); err != nil {
		return nil, err
	}
	// "x/..." leaves out a package no file of which this build includes (one for another
	// platform, or behind a build tag): name those one by one.
	var more []string
	for _, m := range modules {
		err := filepath.WalkDir(m.dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return err
			}
			name := d.Name()
			if path != m.dir {
				if name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
					return filepath.SkipDir
				}
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir // a module of its own
				}
			}
			if dirs[path] || !hasGoFiles(path) {
				return nil
			}
			rel, err := filepath.Rel(m.dir, path)
			if err != nil {
				return err
			}
			more = append(more, m.path+"/"+filepath.ToSlash(rel))
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("walking module %s: %w", m.path, err)
		}
	}
	if len(more) > 0 {
		if err := list(more); err != nil {
			return nil, err
		}
	}

	var pkgs []*Package
	for _, l := range all {
		if l.Name == "" {
			// No file of it is in this build (a package for another platform, say): its name is
			// the one its files declare.
			for _, f := range l.IgnoredGoFiles {
				if !strings.HasSuffix(f, "_test.go") {
					if name, _, err := fileImports(filepath.Join(l.Dir, f)); err == nil && name != "main" {
						l.Name = name
						break
					}
				}
			}
		}
		if l.Name == "main" || l.Name == "" {
			continue
		}
		p := &Package{ImportPath: l.ImportPath, Name: l.Name, Dir: l.Dir, Imports: map[string]string{},
			Built: len(l.GoFiles)+len(l.CgoFiles) > 0}
		files := append(append(append([]string(nil), l.GoFiles...), l.CgoFiles...), l.IgnoredGoFiles...)
		sort.Strings(files)
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			name, imports, err := fileImports(filepath.Join(l.Dir, f))
			if err != nil {
				return nil, err
			}
			if name != l.Name {
				continue // a generator (//go:build ignore, package main) beside the package
			}
			for _, imp := range imports {
				if seen[imp] {
					if _, ok := p.Imports[imp]; !ok {
						p.Imports[imp] = f
					}
				}
			}
		}
		pkgs = append(pkgs, p)
	}
	sort.Slice(pkgs, func(i, j int) bool { return pkgs[i].ImportPath < pkgs[j].ImportPath })
	return pkgs, nil
}

// hasGoFiles reports whether dir holds a Go file other than a test.
func hasGoFiles(dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		n := e.Name()
		if !e.IsDir() && strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") && !strings.HasPrefix(n, ".") && !strings.HasPrefix(n, "_") {
			return true
		}
	}
	return false
}

// fileImports reads the package clause and the imports of one Go file.
func fileImports(path string) (string, []string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
	if err != nil {
		return "", nil, fmt.Errorf("reading the imports of %s: %w", path, err)
	}
	var imports []string
	for _, s := range f.Imports {
		p, err := strconv.Unquote(s.Path.Value)
		if err != nil {
			return "", nil, fmt.Errorf("%s: import %s: %w", path, s.Path.Value, err)
		}
		imports = append(imports, p)
	}
	return f.Name.Name, imports, nil
}

// CheckImports applies the table to the packages: every package must be named by a row, and may
// import packages of lower layers only; a library package sits on its floor, one layer above the
// highest it imports. It returns one line per problem, sorted.
func CheckImports(t *Table, pkgs []*Package) []string {
	var problems, high []string
	floors := measureFloors(pkgs)
	for _, p := range pkgs {
		rel, _ := t.rel(p.ImportPath)
		row, ok := t.lookup(p.ImportPath)
		if !ok {
			problems = append(problems, fmt.Sprintf("%s is in no row of the layer table: add it to the row of layer %d or above (its imports put it there) in tools/devtools/archcheck/layers.go, then run archcheck -write-doc",
				rel, floors[p.ImportPath]))
			continue
		}
		if row.Kind == Library && floors[p.ImportPath] < row.Layer {
			high = append(high, fmt.Sprintf("%s sits in layer %d %s, but its imports put it in layer %d: move it down to a row of that layer in tools/devtools/archcheck/layers.go, so the layers say how far a change reaches",
				rel, row.Layer, row.Name, floors[p.ImportPath]))
		}
		deps := make([]string, 0, len(p.Imports))
		for imp := range p.Imports {
			deps = append(deps, imp)
		}
		sort.Strings(deps)
		for _, imp := range deps {
			irel, _ := t.rel(imp)
			irow, ok := t.lookup(imp)
			if !ok {
				continue // reported as a package of its own
			}
			if irow.Layer >= row.Layer {
				problems = append(problems, fmt.Sprintf("%s (layer %d %s) imports %s (layer %d %s) in %s: a package imports only lower layers; move the code the import needs down, or the package up (its layer in tools/devtools/archcheck/layers.go)",
					rel, row.Layer, row.Name, irel, irow.Layer, irow.Name, filepath.Join(rel, p.Imports[imp])))
			}
		}
	}
	if len(problems) == 0 {
		// Floors mean something only in a graph that keeps to the layers (an upward import can
		// close a cycle): a package above its floor is told once the imports are right.
		problems = high
	}
	sort.Strings(problems)
	return problems
}

// measureFloors is the lowest layer each package could sit in: 1 for one that imports no package
// of the workspace, else one above the highest of its imports.
func measureFloors(pkgs []*Package) map[string]int {
	byPath := map[string]*Package{}
	for _, p := range pkgs {
		byPath[p.ImportPath] = p
	}
	floors := map[string]int{}
	var floor func(string, map[string]bool) int
	floor = func(path string, visiting map[string]bool) int {
		if f, ok := floors[path]; ok {
			return f
		}
		p := byPath[path]
		if p == nil || visiting[path] {
			return 0 // a main package, or a cycle the go command reports itself
		}
		visiting[path] = true
		f := 1
		for imp := range p.Imports {
			f = max(f, floor(imp, visiting)+1)
		}
		delete(visiting, path)
		floors[path] = f
		return f
	}
	for _, p := range pkgs {
		floor(p.ImportPath, map[string]bool{})
	}
	return floors
}
