package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

func runVerify(args []string) error {
	var c common
	fs := newFlags("verify", &c, true)
	proxy := fs.String("proxy", "", "the file proxy of the release (release proxy -out)")
	r, err := c.start(fs, args, "proxy")
	if err != nil {
		return err
	}
	return Verify(r, c.version, *proxy)
}

// CheckGoMods returns what keeps the checked-out tree of r from being the release commit of v:
// a go.mod that still names the placeholder or requires a sibling at another version, and a
// released module with a replace (which its users would not get).
func CheckGoMods(r *Repo, v string) []string {
	var problems []string
	for _, m := range r.Modules {
		data, err := os.ReadFile(m.GoMod())
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		if strings.Contains(string(data), placeholder) {
			problems = append(problems, fmt.Sprintf("%s still names the placeholder version %s", rel(r, m.GoMod()), placeholder))
		}
		f, err := readModFile(m.GoMod())
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		for _, q := range f.Require {
			if _, ok := r.Sibling(q.Mod.Path); ok && q.Mod.Version != v {
				problems = append(problems, fmt.Sprintf("%s requires %s at %s, not %s", rel(r, m.GoMod()), q.Mod.Path, q.Mod.Version, v))
			}
		}
		if m.Released {
			for _, rp := range f.Replace {
				problems = append(problems, fmt.Sprintf("%s replaces %s: a released module must build without a replace", rel(r, m.GoMod()), rp.Old.Path))
			}
		}
	}
	return problems
}

// Verify checks the release commit of v checked out in r: its go.mod files (CheckGoMods), and that
// every released module builds and vets on its own (GOWORK=off) with its siblings taken from the
// file proxy at proxyDir, in an empty module cache. The go command may add what it is missing to
// go.mod and go.sum (-mod=mod, as in a user's module), on copies (-modfile), so the tree stays as
// it is; what it had to add is reported, since a build from a checkout without the workspace
// needs it. (-trimpath lets the build cache serve later runs, whose module caches differ.)
func Verify(r *Repo, v, proxyDir string) error {
	if p := CheckGoMods(r, v); len(p) > 0 {
		return fmt.Errorf("the tree is not a release commit of %s:\n  %s", v, strings.Join(p, "\n  "))
	}
	cache, err := os.MkdirTemp("", "release-modcache-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(cache)
	for _, m := range r.Released() {
		mf, err := copyModFiles(m, cache)
		if err != nil {
			return err
		}
		env := moduleEnv(proxyDir, filepath.Join(cache, "mod"), r.Prefix, thirdPartyProxy(), "-modcacherw -trimpath -mod=mod -modfile="+mf)
		for _, args := range [][]string{{"build", "./..."}, {"vet", "./..."}} {
			start := time.Now()
			cmd := exec.Command("go", args...)
			cmd.Dir = m.Abs()
			cmd.Env = env
			out, err := cmd.CombinedOutput()
			if err != nil {
				return fmt.Errorf("%s: go %s without the workspace (GOWORK=off, siblings from the file proxy) failed: %w\n%s",
					m.Dir, strings.Join(args, " "), err, out)
			}
			fmt.Printf("verify %-24s go %-12s ok (GOWORK=off, %.1fs)\n", m.Dir, strings.Join(args, " "), time.Since(start).Seconds())
		}
		if note := modFilesChanged(m, mf); note != "" {
			fmt.Printf("verify %-24s note: without the workspace the go command had to add %s\n", m.Dir, note)
		}
	}
	return nil
}

// copyModFiles copies m's go.mod and go.sum into a folder of their own under dir and returns the
// copy of go.mod (for -modfile, which takes go.sum from beside it).
func copyModFiles(m *Module, dir string) (string, error) {
	d, err := os.MkdirTemp(dir, "modfile-")
	if err != nil {
		return "", err
	}
	for _, n := range []string{"go.mod", "go.sum"} {
		data, err := os.ReadFile(filepath.Join(m.Abs(), n))
		if os.IsNotExist(err) && n == "go.sum" {
			continue
		}
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(d, n), data, 0o644); err != nil {
			return "", err
		}
	}
	return filepath.Join(d, "go.mod"), nil
}

// modFilesChanged says what the go command added to the copies of m's go.mod and go.sum.
func modFilesChanged(m *Module, mf string) string {
	var notes []string
	for _, n := range []string{"go.mod", "go.sum"} {
		before, _ := os.ReadFile(filepath.Join(m.Abs(), n))
		after, _ := os.ReadFile(filepath.Join(filepath.Dir(mf), n))
		if string(before) == string(after) {
			continue
		}
		had := map[string]bool{}
		for _, l := range strings.Split(string(before), "\n") {
			had[strings.TrimSpace(l)] = true
		}
		var added []string
		for _, l := range strings.Split(string(after), "\n") {
			if l = strings.TrimSpace(l); l != "" && !had[l] {
				added = append(added, l)
			}
		}
		if n == "go.sum" {
			notes = append(notes, fmt.Sprintf("%d go.sum line(s)", len(added)))
		} else {
			notes = append(notes, fmt.Sprintf("go.mod lines %q", added))
		}
	}
	return strings.Join(notes, " and ")
}
