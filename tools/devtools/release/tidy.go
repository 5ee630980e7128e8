package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
)

func runTidy(args []string) error {
	var c common
	fs := newFlags("tidy", &c, true)
	proxy := fs.String("proxy", "", "the file proxy of the release (release proxy -out)")
	cache := fs.String("modcache", "", "the module cache to use (default: a new, empty one, removed afterwards)")
	write := fs.String("write", "", "instead of failing on what go mod tidy would change, change it in this checkout (the\n"+
		"one the release was made from), keeping the checkout's own versions of the siblings")
	r, err := c.start(fs, args, "proxy")
	if err != nil {
		return err
	}
	return Tidy(r, c.version, *proxy, *cache, *write, os.Stdout)
}

// errUntidy marks the modules go mod tidy would change.
var errUntidy = errors.New("not tidy")

// Tidy runs go mod tidy -diff in every module of r, which must be checked out at the release
// commit of v, with GOWORK=off and the siblings from the file proxy at proxyDir (the rest from
// the public proxy or RELEASE_GOPROXY), and fails, showing the diffs, when a go.mod or go.sum
// would change. Inside the workspace go mod tidy cannot run at all: the siblings' version between
// releases exists in no proxy. So a go.mod edited there (or a go.sum that only go.work.sum
// completed) is found untidy only on a release commit, and with writeTo set Tidy runs go mod
// tidy there and carries its changes back into that checkout: each go.mod as tidy wrote it but
// with the siblings at the checkout's own versions, and the go.sum lines of modules that are not
// siblings; writeTo must be the checkout the release was made from, its go.mod and
// go.sum files as committed. cache is the module cache to use ("": an empty one of its own).
func Tidy(r *Repo, v, proxyDir, cache, writeTo string, w io.Writer) error {
	if p := CheckGoMods(r, v); len(p) > 0 {
		return fmt.Errorf("the tree is not a release commit of %s (release prepare makes one):\n  %s", v, strings.Join(p, "\n  "))
	}
	if cache == "" {
		dir, err := os.MkdirTemp("", "release-tidy-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		cache = filepath.Join(dir, "mod")
	}
	env := moduleEnv(proxyDir, cache, r.Prefix, thirdPartyProxy(), "-modcacherw")
	var untidy []string
	for _, m := range r.Modules {
		start := time.Now()
		args := []string{"mod", "tidy", "-diff"}
		if writeTo != "" {
			args = args[:2]
		}
		var stdout, stderr bytes.Buffer
		cmd := exec.Command("go", args...)
		cmd.Dir = m.Abs()
		cmd.Env = env
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		switch {
		case err == nil && writeTo != "":
			changed, err := writeBack(r, m, writeTo)
			if err != nil {
				return err
			}
			if len(changed) > 0 {
				fmt.Fprintf(w, "tidy %-24s wrote %s\n", m.Dir, strings.Join(changed, " and "))
				continue
			}
		case err == nil:
		case errors.As(err, &ee) && stdout.Len() > 0 && writeTo == "":
			// go mod tidy -diff: exit status 1 and the diff on standard output.
			untidy = append(untidy, fmt.Sprintf("%s:\n%s", m.Dir, strings.TrimRight(stdout.String(), "\n")))
			fmt.Fprintf(w, "tidy %-24s would change (%.1fs)\n", m.Dir, time.Since(start).Seconds())
			continue
		default:
			return fmt.Errorf("%s: go %s (GOWORK=off, siblings from the file proxy) failed: %w\n%s",
				m.Dir, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
		}
		fmt.Fprintf(w, "tidy %-24s ok (%.1fs)\n", m.Dir, time.Since(start).Seconds())
	}
	if len(untidy) > 0 {
		return fmt.Errorf("%w: on the release commit of %s, go mod tidy would change %d module(s); the diffs show the siblings at %s:\n%s\n"+
			"go mod tidy cannot run in the workspace, so make tidy runs it on a release of HEAD made in a clone and writes the changes into this checkout (siblings at their versions here): commit, run make tidy, and commit the go.mod and go.sum files it changed",
			errUntidy, v, len(untidy), v, strings.Join(untidy, "\n"))
	}
	return nil
}

// writeBack carries what go mod tidy changed in m (in r, the release commit) into the same module
// of the checkout at root, and returns the files it wrote: tidy's go.mod with the checkout's
// sibling versions, and tidy's go.sum lines with the checkout's lines for siblings.
func writeBack(r *Repo, m *Module, root string) ([]string, error) {
	dir := filepath.Join(root, filepath.FromSlash(m.Dir))
	name := filepath.Join(dir, "go.mod")
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("-write: %w (is %s the checkout the release was made from?)", err, root)
	}
	mine, err := modfile.Parse(name, data, nil)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", name, err)
	}
	if mine.Module == nil || mine.Module.Mod.Path != m.Path {
		return nil, fmt.Errorf("-write: %s is not module %s: give the checkout the release was made from", name, m.Path)
	}
	rp := filepath.ToSlash(filepath.Join(m.Dir, "go.mod"))
	rs := filepath.ToSlash(filepath.Join(m.Dir, "go.sum"))
	st, err := git(root, "status", "--porcelain", "--", rp, rs)
	if err != nil {
		return nil, fmt.Errorf("-write: %w", err)
	}
	if st = strings.TrimSpace(st); st != "" {
		return nil, fmt.Errorf("-write: %s has changes of its own (%s): go mod tidy ran on a release of HEAD, so commit them (or drop them) and run it again", root, st)
	}
	// tidy's go.mod as it wrote it (go mod tidy -diff compares bytes), with the checkout's
	// siblings at the versions they have there, a sibling tidy added at the version go.work's
	// replace lines carry (the placeholder before the first release), and the checkout's
	// replaces of siblings, which the release commit drops, put back.
	tidied, err := readModFile(m.GoMod())
	if err != nil {
		return nil, err
	}
	at := map[string]string{}
	for _, q := range mine.Require {
		at[q.Mod.Path] = q.Mod.Version
	}
	fallback := workspaceVersion(r, root)
	for _, q := range tidied.Require {
		if _, ok := r.Sibling(q.Mod.Path); !ok {
			continue
		}
		v, ok := at[q.Mod.Path]
		if !ok {
			v = fallback
		}
		if err := tidied.AddRequire(q.Mod.Path, v); err != nil {
			return nil, err
		}
	}
	for _, x := range mine.Replace {
		if _, ok := r.Sibling(x.Old.Path); ok {
			if err := tidied.AddReplace(x.Old.Path, x.Old.Version, x.New.Path, x.New.Version); err != nil {
				return nil, err
			}
		}
	}
	tidied.Cleanup()
	out, err := tidied.Format()
	if err != nil {
		return nil, err
	}
	var changed []string
	if !bytes.Equal(out, data) {
		if err := os.WriteFile(name, out, 0o644); err != nil {
			return nil, err
		}
		changed = append(changed, rel(&Repo{Root: root}, name))
	}

	// go.sum: tidy's lines but the siblings', and the checkout's lines for siblings.
	sumName := filepath.Join(dir, "go.sum")
	old, err := os.ReadFile(sumName)
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	oldLines, err := parseGoSum(old)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", sumName, err)
	}
	newData, err := os.ReadFile(filepath.Join(m.Abs(), "go.sum"))
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	newLines, err := parseGoSum(newData)
	if err != nil {
		return nil, err
	}
	var lines []sumLine
	for _, l := range newLines {
		if _, ok := r.Sibling(l.mod.Path); !ok {
			lines = append(lines, l)
		}
	}
	for _, l := range oldLines {
		if _, ok := r.Sibling(l.mod.Path); ok {
			lines = append(lines, l)
		}
	}
	sum := formatGoSum(lines)
	if !bytes.Equal(sum, old) && !(len(sum) == 0 && old == nil) {
		if err := os.WriteFile(sumName, sum, 0o644); err != nil {
			return nil, err
		}
		changed = append(changed, rel(&Repo{Root: root}, sumName))
	}
	return changed, nil
}

// workspaceVersion is the version at which the checkout at root requires its siblings: the one
// its go.work's replace lines carry, or the placeholder.
func workspaceVersion(r *Repo, root string) string {
	name := filepath.Join(root, "go.work")
	data, err := os.ReadFile(name)
	if err != nil {
		return placeholder
	}
	f, err := modfile.ParseWork(name, data, nil)
	if err != nil {
		return placeholder
	}
	for _, rp := range f.Replace {
		if _, ok := r.Sibling(rp.Old.Path); ok && rp.Old.Version != "" {
			return rp.Old.Version
		}
	}
	return placeholder
}
