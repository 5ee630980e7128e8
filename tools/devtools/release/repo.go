package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"golang.org/x/mod/modfile"
)

// Module is one folder of the repository with a go.mod.
type Module struct {
	Dir      string // slash-separated, relative to the repository root; "." for the root
	Path     string // the module path, prefix + "/" + Dir
	Released bool
	root     string
}

// GoMod is the file name of the module's go.mod.
func (m *Module) GoMod() string { return filepath.Join(m.root, filepath.FromSlash(m.Dir), "go.mod") }

// Abs is the module's folder.
func (m *Module) Abs() string { return filepath.Join(m.root, filepath.FromSlash(m.Dir)) }

// Tag is the tag of the module at version v: D/v for a module in folder D, v for the root.
func (m *Module) Tag(v string) string {
	if m.Dir == "." {
		return v
	}
	return m.Dir + "/" + v
}

// Subdir is the module's folder as git and golang.org/x/mod/zip name it ("" for the root).
func (m *Module) Subdir() string {
	if m.Dir == "." {
		return ""
	}
	return m.Dir
}

// Repo is a git repository whose module folders share one module path prefix.
type Repo struct {
	Root    string // absolute
	Prefix  string // the root go.mod's module path
	Modules []*Module
	byPath  map[string]*Module
}

// OpenRepo finds the repository around dir and its modules: every tracked go.mod outside testdata
// and vendor folders, all released but those in unreleased (each of which must be a module folder
// unless lenient). Each module's path must be the root module's path joined with its folder,
// or the D/vX.Y.Z tags would not name it.
func OpenRepo(dir string, unreleased []string, lenient bool) (*Repo, error) {
	top, err := git(dir, "rev-parse", "--show-toplevel")
	if err != nil {
		return nil, fmt.Errorf("%s is not inside a git repository: %w", dir, err)
	}
	r := &Repo{Root: strings.TrimSpace(top), byPath: map[string]*Module{}}
	rootMod, err := os.ReadFile(filepath.Join(r.Root, "go.mod"))
	if err != nil {
		return nil, fmt.Errorf("reading the root go.mod, whose module path is the prefix of every module's: %w", err)
	}
	r.Prefix = modfile.ModulePath(rootMod)
	if r.Prefix == "" {
		return nil, fmt.Errorf("%s has no module line: the root module's path is the prefix of every module's", filepath.Join(r.Root, "go.mod"))
	}
	files, err := git(r.Root, "ls-files", "-z")
	if err != nil {
		return nil, err
	}
	skip := map[string]bool{}
	for _, s := range unreleased {
		skip[path.Clean(s)] = true
	}
	for _, f := range strings.Split(files, "\x00") {
		if path.Base(f) != "go.mod" || inIgnoredFolder(f) {
			continue
		}
		d := path.Dir(f)
		data, err := os.ReadFile(filepath.Join(r.Root, filepath.FromSlash(f)))
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", f, err)
		}
		want := r.Prefix
		if d != "." {
			want += "/" + d
		}
		if got := modfile.ModulePath(data); got != want {
			return nil, fmt.Errorf("%s says module %q; in folder %s it must be %q, or the tags %s/vX.Y.Z would not name it", f, got, d, want, d)
		}
		m := &Module{Dir: d, Path: want, Released: !skip[d], root: r.Root}
		delete(skip, d)
		r.Modules = append(r.Modules, m)
		r.byPath[m.Path] = m
	}
	if len(skip) > 0 && !lenient {
		var names []string
		for s := range skip {
			names = append(names, s)
		}
		sort.Strings(names)
		return nil, fmt.Errorf("-unreleased names %s, which is not a module folder of %s (check the spelling)", strings.Join(names, ", "), r.Root)
	}
	sort.Slice(r.Modules, func(i, j int) bool { return r.Modules[i].Dir < r.Modules[j].Dir })
	return r, nil
}

func inIgnoredFolder(f string) bool {
	for _, e := range strings.Split(path.Dir(f), "/") {
		if e == "testdata" || e == "vendor" || strings.HasPrefix(e, ".") && e != "." || strings.HasPrefix(e, "_") {
			return true
		}
	}
	return false
}

// Sibling returns the module of the repository with that path.
func (r *Repo) Sibling(p string) (*Module, bool) {
	m, ok := r.byPath[p]
	return m, ok
}

// Released lists the released modules.
func (r *Repo) Released() []*Module {
	var out []*Module
	for _, m := range r.Modules {
		if m.Released {
			out = append(out, m)
		}
	}
	return out
}

// Requirements returns, for every module, the sibling modules its go.mod requires.
func (r *Repo) Requirements() (map[*Module][]*Module, error) {
	reqs := map[*Module][]*Module{}
	for _, m := range r.Modules {
		f, err := readModFile(m.GoMod())
		if err != nil {
			return nil, err
		}
		for _, q := range f.Require {
			if s, ok := r.Sibling(q.Mod.Path); ok {
				reqs[m] = append(reqs[m], s)
			}
		}
	}
	return reqs, nil
}

// Ordered returns the modules with every module after the siblings it requires, or an error
// naming a cycle (with a cycle no go.sum could hold the others' hashes).
func (r *Repo) Ordered(reqs map[*Module][]*Module) ([]*Module, error) {
	const (
		unseen = iota
		active
		done
	)
	state := map[*Module]int{}
	var out []*Module
	var stack []string
	var visit func(m *Module) error
	visit = func(m *Module) error {
		switch state[m] {
		case done:
			return nil
		case active:
			i := slices.Index(stack, m.Dir)
			return fmt.Errorf("the modules require each other in a cycle (%s -> %s): each go.sum would need the other's hash, so no release commit can exist; break the cycle",
				strings.Join(stack[i:], " -> "), m.Dir)
		}
		state[m] = active
		stack = append(stack, m.Dir)
		for _, s := range reqs[m] {
			if err := visit(s); err != nil {
				return err
			}
		}
		stack = stack[:len(stack)-1]
		state[m] = done
		out = append(out, m)
		return nil
	}
	for _, m := range r.Modules {
		if err := visit(m); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func readModFile(name string) (*modfile.File, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	f, err := modfile.Parse(name, data, nil)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", name, err)
	}
	return f, nil
}

// git runs git in dir and returns its standard output; a failure carries git's own message.
func git(dir string, args ...string) (string, error) {
	var out, errb bytes.Buffer
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Stdout = &out
	cmd.Stderr = &errb
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errb.String())
		if msg == "" {
			msg = err.Error()
		}
		return out.String(), fmt.Errorf("git %s: %s", strings.Join(args, " "), msg)
	}
	return out.String(), nil
}

// tagExists reports whether refs/tags/name exists, and the commit it names.
func tagExists(root, name string) (string, bool) {
	out, err := git(root, "rev-parse", "-q", "--verify", "refs/tags/"+name+"^{commit}")
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(out), true
}
