package main

import (
	"errors"
	"fmt"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"golang.org/x/exp/apidiff"
	"golang.org/x/mod/semver"
	"golang.org/x/tools/go/packages"
)

func runAPICheck(args []string) error {
	var c common
	fs := newFlags("apicheck", &c, false)
	r, err := c.start(fs, args)
	if err != nil {
		return err
	}
	return APICheck(r, os.Stdout)
}

// lastRelease returns the highest version of m tagged on a commit HEAD contains, and that commit.
func lastRelease(r *Repo, m *Module) (version, commit string, ok bool, err error) {
	prefix := m.Tag("")
	out, err := git(r.Root, "tag", "--list", "--merged", "HEAD", prefix+"v*")
	if err != nil {
		return "", "", false, err
	}
	for _, t := range strings.Fields(out) {
		v := strings.TrimPrefix(t, prefix)
		if strings.Contains(v, "/") || !semver.IsValid(v) || semver.Canonical(v) != v {
			continue
		}
		if version == "" || semver.Compare(v, version) > 0 {
			version = v
		}
	}
	if version == "" {
		return "", "", false, nil
	}
	c, ok := tagExists(r.Root, m.Tag(version))
	if !ok {
		return "", "", false, fmt.Errorf("tag %s vanished", m.Tag(version))
	}
	return version, c, true, nil
}

// APICheck compares the exported API of every released module of r (its non-internal library
// packages, as the default build sees them) with the module's last release tag, using
// golang.org/x/exp/apidiff. An incompatible change passes only when CHANGELOG.md names it above
// the heading of that release, in one of these forms:
//
//	pkg.Name          a package-level name (pkg: the last element of the import path, or the
//	                  package's name in either version)
//	pkg.Type.Member   a field or method; Type.Member and (*Type).Member also do
//	path/of/pkg       a removed package (its import path, or its folder in the repository)
//
// A module without a release tag yet is said so and passes.
func APICheck(r *Repo, w io.Writer) error {
	var unnamed []string
	var cl *Changelog
	trees := map[string]string{}
	defer func() {
		for _, d := range trees {
			os.RemoveAll(d)
		}
	}()
	for _, m := range r.Released() {
		last, commit, ok, err := lastRelease(r, m)
		if err != nil {
			return err
		}
		if !ok {
			fmt.Fprintf(w, "apicheck %s: no release tag yet (%s), nothing to compare\n", m.Dir, m.Tag("v*"))
			continue
		}
		if cl == nil {
			if cl, err = readChangelog(r.Root); err != nil {
				return err
			}
		}
		old, ok := trees[commit]
		if !ok {
			if old, err = extract(r, commit); err != nil {
				return err
			}
			trees[commit] = old
		}
		fset := token.NewFileSet()
		oldMod, oldNames, err := loadModule(fset, filepath.Join(old, filepath.FromSlash(m.Dir)), m.Path)
		if err != nil {
			return fmt.Errorf("loading %s at %s: %w", m.Path, m.Tag(last), err)
		}
		newMod, newNames, err := loadModule(fset, m.Abs(), m.Path)
		if err != nil {
			return fmt.Errorf("loading %s: %w", m.Path, err)
		}
		names := map[string][]string{}
		for p, n := range oldNames {
			names[p] = append(names[p], n)
		}
		for p, n := range newNames {
			names[p] = append(names[p], n)
		}
		since := cl.Since(last)
		var incompatible, compatible int
		for _, c := range apidiff.ModuleChanges(oldMod, newMod).Changes {
			if c.Compatible {
				compatible++
				continue
			}
			incompatible++
			named := Named(since, ChangeNames(r, m, c.Message, names))
			mark := "named in CHANGELOG.md"
			if !named {
				mark = "NOT NAMED in CHANGELOG.md"
				unnamed = append(unnamed, fmt.Sprintf("%s: %s", m.Dir, c.Message))
			}
			fmt.Fprintf(w, "apicheck %s: incompatible since %s: %s (%s)\n", m.Dir, m.Tag(last), c.Message, mark)
		}
		fmt.Fprintf(w, "apicheck %s: against %s: %d incompatible, %d compatible change(s)\n", m.Dir, m.Tag(last), incompatible, compatible)
	}
	if len(unnamed) > 0 {
		return fmt.Errorf("%d incompatible API change(s) that CHANGELOG.md does not name above the heading of the last release:\n  %s\nput back what was removed or changed, or say in CHANGELOG.md what changed and why, naming each one (for example `pkg.Name` or `(*Type).Method`)",
			len(unnamed), strings.Join(unnamed, "\n  "))
	}
	return nil
}

// extract writes the tree of commit into a new temporary folder.
func extract(r *Repo, commit string) (string, error) {
	dir, err := os.MkdirTemp("", "apicheck-")
	if err != nil {
		return "", err
	}
	archive := exec.Command("git", "archive", "--format=tar", commit)
	archive.Dir = r.Root
	untar := exec.Command("tar", "-xf", "-", "-C", dir)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return "", err
	}
	untar.Stdin = pipe
	var errb strings.Builder
	archive.Stderr, untar.Stderr = &errb, &errb
	if err := untar.Start(); err != nil {
		return "", err
	}
	if err := archive.Run(); err != nil {
		untar.Wait()
		return "", fmt.Errorf("git archive %s: %w: %s", commit, err, errb.String())
	}
	if err := untar.Wait(); err != nil {
		return "", fmt.Errorf("unpacking %s: %w: %s", commit, err, errb.String())
	}
	return dir, nil
}

// loadModule loads the library packages of module modPath in dir (internal and main packages are
// not API) and returns them with each package's name by import path.
func loadModule(fset *token.FileSet, dir, modPath string) (*apidiff.Module, map[string]string, error) {
	env := append(os.Environ(), "GOWORK=") // the tree's own go.work, whatever the caller's
	cfg := &packages.Config{
		Fset: fset,
		Dir:  dir,
		Env:  env,
		Mode: packages.NeedName | packages.NeedTypes | packages.NeedModule,
	}
	pkgs, err := packages.Load(cfg, "./...")
	if err != nil {
		return nil, nil, err
	}
	mod := &apidiff.Module{Path: modPath}
	names := map[string]string{}
	var errs []error
	for _, p := range pkgs {
		if p.Module == nil || p.Module.Path != modPath || p.Name == "main" || isInternal(p.PkgPath, modPath) {
			continue
		}
		for _, e := range p.Errors {
			errs = append(errs, e)
		}
		if len(p.Errors) > 0 || p.Types == nil {
			continue
		}
		mod.Packages = append(mod.Packages, p.Types)
		names[p.PkgPath] = p.Name
	}
	if len(errs) > 0 {
		return nil, nil, fmt.Errorf("the packages do not build: fix that first (cgo packages need the C headers make deps installs): %w", errors.Join(errs...))
	}
	sort.Slice(mod.Packages, func(i, j int) bool { return mod.Packages[i].Path() < mod.Packages[j].Path() })
	return mod, names, nil
}

func isInternal(pkgPath, modPath string) bool {
	rest := strings.TrimPrefix(pkgPath, modPath)
	for _, e := range strings.Split(rest, "/") {
		if e == "internal" {
			return true
		}
	}
	return false
}

// ChangeNames returns the ways a changelog may name the object of an apidiff message of module m:
// "Name: removed", "./sub/pkg.Type.Field: changed from ...", "package path: removed". names holds
// the package names by import path.
func ChangeNames(r *Repo, m *Module, msg string, names map[string][]string) []string {
	obj, _, _ := strings.Cut(msg, ": ")
	if p, ok := strings.CutPrefix(obj, "package "); ok {
		out := []string{p}
		if d, ok := strings.CutPrefix(p, r.Prefix+"/"); ok {
			out = append(out, d)
		}
		return out
	}
	pkgPath, name := m.Path, obj
	if rest, ok := strings.CutPrefix(obj, "./"); ok {
		i := strings.LastIndex(rest, "/") + 1
		j := strings.Index(rest[i:], ".")
		if j < 0 {
			return []string{obj}
		}
		pkgPath, name = m.Path+"/"+rest[:i+j], rest[i+j+1:]
	} else if i := strings.LastIndex(obj, "/"); i >= 0 {
		j := strings.Index(obj[i:], ".")
		if j < 0 {
			return []string{obj}
		}
		pkgPath, name = obj[:i+j], obj[i+j+1:]
	}
	forms := []string{name}
	if plain := strings.NewReplacer("(*", "", ")", "").Replace(name); plain != name {
		forms = append(forms, plain)
	}
	quals := []string{path.Base(pkgPath)}
	quals = append(quals, names[pkgPath]...)
	var out []string
	for _, f := range forms {
		for _, q := range quals {
			out = append(out, q+"."+f)
		}
		if strings.Contains(f, ".") {
			out = append(out, f) // Type.Member or (*Type).Method alone
		}
	}
	return out
}

// Named reports whether text names any of the forms as a whole word (not as the prefix of a
// longer identifier).
func Named(text string, forms []string) bool {
	for _, f := range forms {
		re := regexp.MustCompile(`(?:^|[^A-Za-z0-9_])` + regexp.QuoteMeta(f) + `(?:$|[^A-Za-z0-9_])`)
		if re.MatchString(text) {
			return true
		}
	}
	return false
}
