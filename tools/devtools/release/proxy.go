package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/zip"
)

func runProxy(args []string) error {
	var c common
	fs := newFlags("proxy", &c, true)
	out := fs.String("out", "", "the proxy folder to write (GOPROXY=file://<out>)")
	r, err := c.start(fs, args, "out")
	if err != nil {
		return err
	}
	return BuildProxy(r, c.version, *out)
}

// BuildProxy writes, for every released module of r, what a module proxy serves for version v
// (<escaped path>/@v/list, v.info, v.mod, v.zip) into out, from the module's tag, so that
// GOPROXY=file://out hands the go command exactly what it would fetch from the published tags.
// Versions already in out are kept in list.
func BuildProxy(r *Repo, v, out string) error {
	ev, err := module.EscapeVersion(v)
	if err != nil {
		return err
	}
	for _, m := range r.Released() {
		tag := m.Tag(v)
		commit, ok := tagExists(r.Root, tag)
		if !ok {
			return fmt.Errorf("tag %s does not exist in %s: make the release commit first (release prepare)", tag, r.Root)
		}
		ep, err := module.EscapePath(m.Path)
		if err != nil {
			return err
		}
		dir := filepath.Join(out, filepath.FromSlash(ep), "@v")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		when, err := git(r.Root, "show", "-s", "--format=%cI", commit)
		if err != nil {
			return err
		}
		t, err := time.Parse(time.RFC3339, strings.TrimSpace(when))
		if err != nil {
			return fmt.Errorf("reading the time of %s: %w", commit, err)
		}
		info, err := json.Marshal(struct {
			Version string
			Time    time.Time
		}{v, t.UTC()})
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, ev+".info"), info, 0o644); err != nil {
			return err
		}
		gomod, err := git(r.Root, "show", commit+":"+path.Join(m.Subdir(), "go.mod"))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, ev+".mod"), []byte(gomod), 0o644); err != nil {
			return err
		}
		if err := writeZip(filepath.Join(dir, ev+".zip"), r, m, v, commit); err != nil {
			return err
		}
		if err := addToList(filepath.Join(dir, "list"), v); err != nil {
			return err
		}
	}
	return nil
}

func writeZip(name string, r *Repo, m *Module, v, rev string) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	mv := module.Version{Path: m.Path, Version: v}
	if err := zip.CreateFromVCS(f, mv, r.Root, rev, m.Subdir()); err != nil {
		f.Close()
		return zipProblem(m, err)
	}
	return f.Close()
}

func addToList(name, v string) error {
	data, err := os.ReadFile(name)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	vs := strings.Fields(string(data))
	if !slices.Contains(vs, v) {
		vs = append(vs, v)
	}
	slices.SortFunc(vs, semver.Compare)
	return os.WriteFile(name, []byte(strings.Join(vs, "\n")+"\n"), 0o644)
}

// moduleEnv is the environment of a go command that must get this repository's modules from the
// file proxy at proxyDir and nowhere else: no workspace, a module cache of its own, no checksum
// database for them (they are not published), and every other module from thirdParty (a GOPROXY
// list without "direct", so a lookup of one of ours that misses the file proxy fails instead of
// reaching for the repository).
func moduleEnv(proxyDir, cache, prefix, thirdParty, goflags string) []string {
	drop := map[string]bool{"GOFLAGS": true, "GOWORK": true, "GOPROXY": true, "GONOPROXY": true,
		"GOPRIVATE": true, "GONOSUMDB": true, "GONOSUMCHECK": true, "GOMODCACHE": true,
		"GOINSECURE": true, "GOTOOLCHAIN": true}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !drop[k] {
			env = append(env, kv)
		}
	}
	p := "file://" + filepath.ToSlash(proxyDir)
	if thirdParty != "" {
		p += "," + thirdParty
	}
	return append(env, "GOWORK=off", "GOPROXY="+p, "GONOSUMDB="+prefix, "GOPRIVATE=", "GONOPROXY=",
		"GOMODCACHE="+cache, "GOFLAGS="+goflags, "GOTOOLCHAIN=local")
}

// thirdPartyProxy is where modules other than ours come from in verify: RELEASE_GOPROXY, else the
// public proxy.
func thirdPartyProxy() string {
	if p := os.Getenv("RELEASE_GOPROXY"); p != "" {
		return p
	}
	return "https://proxy.golang.org"
}
