package main

import (
	"fmt"
	"go/build/constraint"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"

	"golang.org/x/mod/modfile"
)

func runNames(args []string) error {
	var c common
	fs := newFlags("names", &c, false)
	r, err := c.start(fs, args)
	if err != nil {
		return err
	}
	files, err := r.Files()
	if err != nil {
		return err
	}
	return reportNames(os.Stdout, r.Root, CheckNames(os.DirFS(r.Root), files))
}

// reportNames prints what CheckNames found and turns it into the command's error.
func reportNames(w io.Writer, root string, problems []string) error {
	if len(problems) == 0 {
		fmt.Fprintf(w, "release names: no two packages of %s share a name, and no file is named after a sibling folder\n", root)
		return nil
	}
	return fmt.Errorf("%d naming problem(s) in %s:\n  %s", len(problems), root, strings.Join(problems, "\n  "))
}

// Files lists the files of the repository that git tracks or would track (untracked files that no
// .gitignore names), slash-separated and relative to the root, so that a new file is checked
// before it is committed while build outputs and unpacked third-party sources are not.
func (r *Repo) Files() ([]string, error) {
	out, err := git(r.Root, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	if err != nil {
		return nil, err
	}
	var files []string
	for _, f := range strings.Split(out, "\x00") {
		if f == "" {
			continue
		}
		// A tracked file deleted from the working tree is gone for the check too.
		if _, err := os.Lstat(path.Join(r.Root, f)); err == nil {
			files = append(files, f)
		}
	}
	return files, nil
}

// CheckNames applies the naming rules of the repository to files (slash paths in fsys, as
// Repo.Files lists them) and returns one line per problem, sorted:
//
//   - No two packages share a package name, across every module of the repository (every go.mod
//     outside testdata and vendor folders: the modules of go.work, tools/devtools and any other).
//     A program that needs both would import one of them under an alias, and a reader meeting
//     the name cannot tell which is meant. Packages main are exempt (they are never imported), and
//     so are external test packages (package x_test); a folder of tests only counts under the
//     name its in-package tests declare.
//   - No Go file is named after a folder beside it (x.go or x_test.go next to x/): a reader who
//     looks for package x opens the file, and the file's code is not package x.
//
// Folders the go command ignores (testdata, vendor, and names starting with "." or "_") hold no
// packages. A file whose build constraint no build can satisfy without the "ignore" tag is not
// part of its package.
func CheckNames(fsys fs.FS, files []string) []string {
	// The modules, by folder, to turn folders into import paths.
	mods := map[string]string{}
	dirs := map[string]bool{}
	for _, f := range files {
		for d := path.Dir(f); d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
		if path.Base(f) != "go.mod" || inIgnoredFolder(f) {
			continue
		}
		data, err := fs.ReadFile(fsys, f)
		if err != nil {
			continue
		}
		if p := modfile.ModulePath(data); p != "" {
			mods[path.Dir(f)] = p
		}
	}

	var problems []string
	type pkg struct {
		names map[string]bool // from non-test files
		tests map[string]bool // from in-package test files, for a folder of tests only
	}
	pkgs := map[string]*pkg{}
	for _, f := range files {
		if !strings.HasSuffix(f, ".go") || inIgnoredFolder(f) {
			continue
		}
		dir, base := path.Dir(f), path.Base(f)
		if strings.HasPrefix(base, ".") || strings.HasPrefix(base, "_") {
			continue // the go command ignores these files too
		}
		stem := strings.TrimSuffix(strings.TrimSuffix(base, ".go"), "_test")
		if dirs[path.Join(dir, stem)] {
			problems = append(problems, fmt.Sprintf("%s is named after the folder %s/ beside it: rename the file for what it holds (a reader looking for package %s opens it)",
				f, path.Join(dir, stem), stem))
		}
		name, ok, err := packageName(fsys, f)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		if !ok || name == "main" || strings.HasSuffix(name, "_test") {
			continue
		}
		p := pkgs[dir]
		if p == nil {
			p = &pkg{names: map[string]bool{}, tests: map[string]bool{}}
			pkgs[dir] = p
		}
		if strings.HasSuffix(base, "_test.go") {
			p.tests[name] = true
		} else {
			p.names[name] = true
		}
	}

	byName := map[string][]string{}
	for dir, p := range pkgs {
		names := p.names
		if len(names) == 0 {
			names = p.tests
		}
		imp, ok := importPath(mods, dir)
		if !ok {
			continue // outside every module: nothing builds it
		}
		for n := range names {
			byName[n] = append(byName[n], imp)
		}
	}
	for name, paths := range byName {
		if len(paths) < 2 {
			continue
		}
		sort.Strings(paths)
		problems = append(problems, fmt.Sprintf("package name %s is used by %d packages: %s; a file that imports two of them needs an alias, so rename all but one for what it owns (its folder and its package clause) and list the rename in CHANGELOG.md",
			name, len(paths), strings.Join(paths, ", ")))
	}
	sort.Strings(problems)
	return problems
}

// importPath is the import path of the package in folder dir: the path of the innermost module
// around it joined with the rest of the folder.
func importPath(mods map[string]string, dir string) (string, bool) {
	for d := dir; ; d = path.Dir(d) {
		if p, ok := mods[d]; ok {
			if d == dir {
				return p, true
			}
			rest := strings.TrimPrefix(dir, d+"/")
			if d == "." {
				rest = dir
			}
			return p + "/" + rest, true
		}
		if d == "." {
			return "", false
		}
	}
}

// packageName reads the package clause of the Go file f; ok is false for a file no build
// includes (its constraint needs the "ignore" tag, or cannot be met at all).
func packageName(fsys fs.FS, f string) (name string, ok bool, err error) {
	data, err := fs.ReadFile(fsys, f)
	if err != nil {
		return "", false, err
	}
	file, err := parser.ParseFile(token.NewFileSet(), f, data, parser.PackageClauseOnly|parser.ParseComments)
	if err != nil {
		return "", false, fmt.Errorf("%s: reading its package clause: %w (fix the file; the go command cannot build it either)", f, err)
	}
	for _, g := range file.Comments {
		if g.Pos() >= file.Package {
			break
		}
		for _, c := range g.List {
			if !constraint.IsGoBuild(c.Text) {
				continue
			}
			expr, err := constraint.Parse(c.Text)
			if err != nil {
				return "", false, fmt.Errorf("%s: %w", f, err)
			}
			if !satisfiable(expr) {
				return "", false, nil
			}
		}
	}
	return file.Name.Name, true, nil
}

// satisfiable reports whether some set of build tags without "ignore" satisfies expr.
func satisfiable(expr constraint.Expr) bool {
	var tags []string
	seen := map[string]bool{}
	var walk func(constraint.Expr)
	walk = func(e constraint.Expr) {
		switch e := e.(type) {
		case *constraint.TagExpr:
			if !seen[e.Tag] && e.Tag != "ignore" {
				seen[e.Tag] = true
				tags = append(tags, e.Tag)
			}
		case *constraint.NotExpr:
			walk(e.X)
		case *constraint.AndExpr:
			walk(e.X)
			walk(e.Y)
		case *constraint.OrExpr:
			walk(e.X)
			walk(e.Y)
		}
	}
	walk(expr)
	if len(tags) > 16 {
		return true // too many to try; count the file in
	}
	for set := 0; set < 1<<len(tags); set++ {
		on := map[string]bool{}
		for i, t := range tags {
			on[t] = set&(1<<i) != 0
		}
		if expr.Eval(func(tag string) bool { return on[tag] }) {
			return true
		}
	}
	return false
}
