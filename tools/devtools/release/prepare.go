package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/sumdb/dirhash"
	"golang.org/x/mod/zip"
)

func runPrepare(args []string) error {
	var c common
	fs := newFlags("prepare", &c, true)
	r, err := c.start(fs, args)
	if err != nil {
		return err
	}
	commit, tags, err := Prepare(r, c.version, time.Now())
	if err != nil {
		return err
	}
	fmt.Printf("release commit %s\n", commit)
	for _, t := range tags {
		fmt.Printf("tag %s\n", t)
	}
	return nil
}

// Prepare writes the release commit of version v on the checked-out branch of r and tags every
// released module on it. In the commit:
//
//   - every go.mod requires its siblings at v, and no go.mod replaces a sibling;
//   - every go.sum holds the hashes of the siblings its go.mod requires at v, computed from the
//     module zips the tags will produce (in dependency order: a module's zip holds its go.sum).
//     These are the sibling lines go mod tidy keeps: with module graph pruning (go 1.17 on) the go
//     command reads the go.mod and zip of a module the main module lists, and a tidy go.mod lists
//     every module that provides one of the packages it builds;
//   - go.work points its per-version replaces at v, so the workspace keeps working;
//   - the changelog's heading for v is dated if it said Unreleased.
//
// When nothing needs to change (the tree is at v already), the tags go on HEAD.
func Prepare(r *Repo, v string, now time.Time) (commit string, tags []string, err error) {
	cl, err := preflight(r, v)
	if err != nil {
		return "", nil, err
	}
	reqs, err := r.Requirements()
	if err != nil {
		return "", nil, err
	}
	order, err := r.Ordered(reqs)
	if err != nil {
		return "", nil, err
	}
	var changed []string
	// preflight found the tree clean, so on failure every file this wrote goes back to HEAD.
	defer func() {
		if err == nil || commit != "" {
			return
		}
		for _, f := range changed {
			if _, e := git(r.Root, "cat-file", "-e", "HEAD:"+f); e != nil {
				git(r.Root, "rm", "-q", "--cached", "--ignore-unmatch", "--", f)
				os.Remove(filepath.Join(r.Root, filepath.FromSlash(f)))
				continue
			}
			git(r.Root, "reset", "-q", "HEAD", "--", f)
			git(r.Root, "checkout", "HEAD", "--", f)
		}
	}()
	for _, m := range order {
		did, err := rewriteGoMod(r, m, v)
		if did {
			changed = append(changed, rel(r, m.GoMod()))
		}
		if err != nil {
			return "", nil, err
		}
	}
	if did, err := rewriteGoWork(r, v); err != nil {
		return "", nil, err
	} else if did {
		changed = append(changed, "go.work")
	}
	if text := cl.Stamped(v, now); text != cl.Text {
		if err := os.WriteFile(cl.Name, []byte(text), 0o644); err != nil {
			return "", nil, err
		}
		changed = append(changed, rel(r, cl.Name))
	}
	// go.sum, in dependency order: the hash of a module's zip covers its go.sum, so a module's
	// go.sum is final before anything that requires it is hashed.
	hashes := map[*Module][2]string{}
	for _, m := range order {
		did, err := writeGoSum(r, m, v, reqs[m], hashes)
		if did {
			changed = append(changed, rel(r, filepath.Join(m.Abs(), "go.sum")))
		}
		if err != nil {
			return "", nil, err
		}
		if m.Released {
			h, err := moduleHashes(r, m, v)
			if err != nil {
				return "", nil, err
			}
			hashes[m] = h
		}
	}
	if len(changed) > 0 {
		if _, err := git(r.Root, append([]string{"add", "--"}, changed...)...); err != nil {
			return "", nil, err
		}
		msg := fmt.Sprintf("release %s: the modules require each other at %s\n\nTags: %s\n", v, v, strings.Join(tagNames(r, v), " "))
		if _, err := git(r.Root, "commit", "-q", "-m", msg); err != nil {
			return "", nil, fmt.Errorf("committing the release: %w (git needs user.name and user.email)", err)
		}
	}
	out, err := git(r.Root, "rev-parse", "HEAD")
	if err != nil {
		return "", nil, err
	}
	commit = strings.TrimSpace(out)
	for _, t := range tagNames(r, v) {
		mod := strings.TrimSuffix(strings.TrimSuffix(t, v), "/")
		if mod == "" {
			mod = "root module"
		}
		if _, err := git(r.Root, "tag", "-a", "-m", mod+" "+v, t, commit); err != nil {
			return "", nil, fmt.Errorf("tagging the release commit: %w", err)
		}
		tags = append(tags, t)
	}
	return commit, tags, nil
}

func tagNames(r *Repo, v string) []string {
	var out []string
	for _, m := range r.Released() {
		out = append(out, m.Tag(v))
	}
	return out
}

func rel(r *Repo, name string) string {
	p, err := filepath.Rel(r.Root, name)
	if err != nil {
		return name
	}
	return filepath.ToSlash(p)
}

// rewriteGoMod points every sibling requirement of m at v and drops its replaces of siblings. A
// released module may not require an unreleased one, nor replace anything else: a replace is
// ignored outside the module itself, so users would build something else than its tests did.
func rewriteGoMod(r *Repo, m *Module, v string) (bool, error) {
	name := m.GoMod()
	data, err := os.ReadFile(name)
	if err != nil {
		return false, err
	}
	f, err := modfile.Parse(name, data, nil)
	if err != nil {
		return false, fmt.Errorf("parsing %s: %w", name, err)
	}
	for _, q := range f.Require {
		s, ok := r.Sibling(q.Mod.Path)
		if !ok {
			continue
		}
		if m.Released && !s.Released {
			return false, fmt.Errorf("%s requires %s, which is never released: a user could not build %s; move the code or release %s", rel(r, name), s.Path, m.Path, s.Dir)
		}
		if q.Mod.Version != v {
			if err := f.AddRequire(q.Mod.Path, v); err != nil {
				return false, err
			}
		}
	}
	for _, rp := range f.Replace {
		if _, ok := r.Sibling(rp.Old.Path); ok {
			if err := f.DropReplace(rp.Old.Path, rp.Old.Version); err != nil {
				return false, err
			}
			continue
		}
		if m.Released {
			return false, fmt.Errorf("%s replaces %s: a replace only applies inside the module, so its users would build another %s than its tests did; require a published version instead", rel(r, name), rp.Old.Path, rp.Old.Path)
		}
	}
	f.Cleanup()
	out, err := f.Format()
	if err != nil {
		return false, err
	}
	if bytes.Equal(out, data) {
		return false, nil
	}
	return true, os.WriteFile(name, out, 0o644)
}

// rewriteGoWork points go.work's per-version replaces of siblings at v. (The workspace needs
// them: once a required workspace module has requirements of its own, the go command looks the
// required version up; a replace for every version is refused for a workspace module.)
func rewriteGoWork(r *Repo, v string) (bool, error) {
	name := filepath.Join(r.Root, "go.work")
	data, err := os.ReadFile(name)
	if os.IsNotExist(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	f, err := modfile.ParseWork(name, data, nil)
	if err != nil {
		return false, fmt.Errorf("parsing %s: %w", name, err)
	}
	// Edit the version token of each line in place, so the block and its comments stay as written.
	for _, rp := range f.Replace {
		if _, ok := r.Sibling(rp.Old.Path); !ok || rp.Old.Version == "" || rp.Old.Version == v {
			continue
		}
		tok := rp.Syntax.Token
		for i := 0; i+1 < len(tok); i++ {
			if modfile.AutoQuote(rp.Old.Path) == tok[i] && tok[i+1] == rp.Old.Version {
				tok[i+1] = v
				break
			}
		}
		rp.Old.Version = v
	}
	f.Cleanup()
	out := modfile.Format(f.Syntax)
	if bytes.Equal(out, data) {
		return false, nil
	}
	return true, os.WriteFile(name, out, 0o644)
}

// writeGoSum replaces m's go.sum lines for siblings with the hashes at v of need, the siblings m's
// go.mod requires. Siblings that are never released get no line (they cannot be downloaded anyway).
func writeGoSum(r *Repo, m *Module, v string, need []*Module, hashes map[*Module][2]string) (bool, error) {
	name := filepath.Join(m.Abs(), "go.sum")
	data, err := os.ReadFile(name)
	if err != nil && !os.IsNotExist(err) {
		return false, err
	}
	all, err := parseGoSum(data)
	if err != nil {
		return false, fmt.Errorf("%s: %w", rel(r, name), err)
	}
	var lines []sumLine
	for _, l := range all {
		if _, ok := r.Sibling(l.mod.Path); !ok {
			lines = append(lines, l)
		}
	}
	for _, s := range need {
		if !s.Released {
			continue
		}
		h, ok := hashes[s]
		if !ok {
			return false, fmt.Errorf("internal error: %s is needed by %s before its hash is known", s.Path, m.Path)
		}
		lines = append(lines,
			sumLine{module.Version{Path: s.Path, Version: v}, h[0]},
			sumLine{module.Version{Path: s.Path, Version: v + "/go.mod"}, h[1]})
	}
	out := formatGoSum(lines)
	if bytes.Equal(out, data) || len(out) == 0 && data == nil {
		return false, nil
	}
	return true, os.WriteFile(name, out, 0o644)
}

// sumLine is one line of a go.sum file: a module version ("/go.mod" appended for the hash of its
// go.mod alone) and a hash.
type sumLine struct {
	mod  module.Version
	hash string
}

func parseGoSum(data []byte) ([]sumLine, error) {
	var lines []sumLine
	for _, l := range strings.Split(string(data), "\n") {
		fs := strings.Fields(l)
		if len(fs) != 3 {
			if strings.TrimSpace(l) != "" {
				return nil, fmt.Errorf("malformed line %q", l)
			}
			continue
		}
		lines = append(lines, sumLine{module.Version{Path: fs[0], Version: fs[1]}, fs[2]})
	}
	return lines, nil
}

// formatGoSum writes go.sum lines the way the go command does: sorted by module and version, each
// line once.
func formatGoSum(lines []sumLine) []byte {
	mods := make([]module.Version, len(lines))
	byMod := map[module.Version][]string{}
	for i, l := range lines {
		mods[i] = l.mod
		byMod[l.mod] = append(byMod[l.mod], l.hash)
	}
	module.Sort(mods)
	var b strings.Builder
	seen := map[module.Version]bool{}
	for _, mv := range mods {
		if seen[mv] {
			continue
		}
		seen[mv] = true
		hs := byMod[mv]
		sort.Strings(hs)
		for i, h := range hs {
			if i > 0 && hs[i-1] == h {
				continue
			}
			fmt.Fprintf(&b, "%s %s %s\n", mv.Path, mv.Version, h)
		}
	}
	return []byte(b.String())
}

// moduleHashes returns the go.sum hashes of m at v ("h1:" of the zip, and of its go.mod) as the
// go command will compute them from the tag: the zip is made by golang.org/x/mod/zip from git's
// archive of m's folder as it stands in the index, which is what the release commit will hold.
func moduleHashes(r *Repo, m *Module, v string) ([2]string, error) {
	var h [2]string
	if _, err := git(r.Root, "add", "--", rel(r, m.GoMod()), rel(r, filepath.Join(m.Abs(), "go.sum"))); err != nil {
		// go.sum may not exist for a module without requirements.
		if _, err := git(r.Root, "add", "--", rel(r, m.GoMod())); err != nil {
			return h, err
		}
	}
	tree, err := git(r.Root, "write-tree")
	if err != nil {
		return h, err
	}
	tmp, err := os.CreateTemp("", "release-*.zip")
	if err != nil {
		return h, err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	mv := module.Version{Path: m.Path, Version: v}
	if err := zip.CreateFromVCS(tmp, mv, r.Root, strings.TrimSpace(tree), m.Subdir()); err != nil {
		return h, zipProblem(m, err)
	}
	if err := tmp.Close(); err != nil {
		return h, err
	}
	if h[0], err = dirhash.HashZip(tmp.Name(), dirhash.Hash1); err != nil {
		return h, err
	}
	gomod, err := os.ReadFile(m.GoMod())
	if err != nil {
		return h, err
	}
	h[1], err = goModHash(gomod)
	return h, err
}

// goModHash is the go.sum hash of a go.mod file alone (the "/go.mod" line).
func goModHash(data []byte) (string, error) {
	return dirhash.Hash1([]string{"go.mod"}, func(string) (rc io.ReadCloser, err error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	})
}
