package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/zip"
)

// CheckVersion refuses what cannot be a release version of these modules: anything but a
// canonical vMAJOR.MINOR.PATCH[-PRERELEASE], a pseudo-version, and a major version above 1 (the
// module paths carry no /vN suffix).
func CheckVersion(v string) error {
	if !semver.IsValid(v) {
		return fmt.Errorf("version %q is not a semantic version: write vMAJOR.MINOR.PATCH, for example v0.1.0", v)
	}
	if c := semver.Canonical(v); c != v {
		return fmt.Errorf("version %q is not in canonical form: write %s (three numbers, no +build suffix)", v, c)
	}
	if module.IsPseudoVersion(v) {
		return fmt.Errorf("version %q has the form of a Go pseudo-version: pick a plain vMAJOR.MINOR.PATCH", v)
	}
	if m := semver.Major(v); m != "v0" && m != "v1" {
		return fmt.Errorf("version %q has major version %s, which needs every module path to end in /%s (Go's semantic import versioning); this tooling releases v0 and v1 only", v, m, m)
	}
	return nil
}

// Changelog is the repository's CHANGELOG.md.
type Changelog struct {
	Name string
	Text string
}

func readChangelog(root string) (*Changelog, error) {
	name := filepath.Join(root, "CHANGELOG.md")
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("reading the changelog: %w (a release needs CHANGELOG.md at the repository root)", err)
	}
	return &Changelog{Name: name, Text: string(data)}, nil
}

// headingRE matches a version's heading: "## [v0.1.0] - 2026-01-02", "## v0.1.0", ...
func headingRE(v string) *regexp.Regexp {
	return regexp.MustCompile(`(?m)^##[ \t]+\[?` + regexp.QuoteMeta(v) + `\]?([ \t].*)?$`)
}

// HasEntry reports whether the changelog has a section for v.
func (c *Changelog) HasEntry(v string) bool { return headingRE(v).MatchString(c.Text) }

// Stamped returns the changelog with the heading of v dated: "## [v0.1.0] - Unreleased" becomes
// "## [v0.1.0] - 2026-01-02". A heading that already has a date is left as it is.
func (c *Changelog) Stamped(v string, day time.Time) string {
	re := headingRE(v)
	loc := re.FindStringSubmatchIndex(c.Text)
	if loc == nil {
		return c.Text
	}
	line := c.Text[loc[0]:loc[1]]
	rest := ""
	if loc[2] >= 0 {
		rest = c.Text[loc[2]:loc[3]]
	}
	if !strings.Contains(strings.ToLower(rest), "unreleased") {
		return c.Text
	}
	i := strings.Index(strings.ToLower(line), "unreleased")
	dated := line[:i] + day.UTC().Format("2006-01-02") + line[i+len("unreleased"):]
	return c.Text[:loc[0]] + dated + c.Text[loc[1]:]
}

// Since returns the part of the changelog above the heading of version v (all of it when v has no
// heading): what was written after release v.
func (c *Changelog) Since(v string) string {
	if loc := headingRE(v).FindStringIndex(c.Text); loc != nil {
		return c.Text[:loc[0]]
	}
	return c.Text
}

// preflight refuses a malformed version, a dirty working tree, an existing tag of any released
// module, a changelog without an entry for v, a file no module zip may hold and the naming
// problems of CheckNames. It returns the changelog.
func preflight(r *Repo, v string) (*Changelog, error) {
	if err := CheckVersion(v); err != nil {
		return nil, err
	}
	if _, err := git(r.Root, "rev-parse", "--verify", "HEAD"); err != nil {
		return nil, fmt.Errorf("the repository has no commit to release: %w", err)
	}
	st, err := git(r.Root, "status", "--porcelain", "--untracked-files=normal")
	if err != nil {
		return nil, err
	}
	if st = strings.TrimRight(st, "\n"); st != "" {
		lines := strings.Split(st, "\n")
		more := ""
		if len(lines) > 5 {
			more = fmt.Sprintf("\n  ... and %d more", len(lines)-5)
			lines = lines[:5]
		}
		return nil, fmt.Errorf("the working tree of %s is not clean: a release is made from a commit, so commit, stash or remove these first:\n  %s%s",
			r.Root, strings.Join(lines, "\n  "), more)
	}
	var exist []string
	for _, m := range r.Released() {
		if c, ok := tagExists(r.Root, m.Tag(v)); ok {
			exist = append(exist, fmt.Sprintf("%s (on %.12s)", m.Tag(v), c))
		}
	}
	if len(exist) > 0 {
		return nil, fmt.Errorf("version %s is released already (%d tag(s) exist: %s); a version is released once, so pick the next one", v, len(exist), strings.Join(exist, ", "))
	}
	cl, err := readChangelog(r.Root)
	if err != nil {
		return nil, err
	}
	if !cl.HasEntry(v) {
		return nil, fmt.Errorf("CHANGELOG.md has no entry for %s: add a section headed \"## [%s] - Unreleased\" that says what changed (the release dates it)", v, v)
	}
	if err := checkZippable(r, v); err != nil {
		return nil, err
	}
	// The first release freezes the package names, and every later one keeps them.
	files, err := r.Files()
	if err != nil {
		return nil, err
	}
	if err := reportNames(io.Discard, r.Root, CheckNames(os.DirFS(r.Root), files)); err != nil {
		return nil, err
	}
	return cl, nil
}

func runCheck(args []string) error {
	var c common
	fs := newFlags("check", &c, true)
	r, err := c.start(fs, args)
	if err != nil {
		return err
	}
	if _, err := preflight(r, c.version); err != nil {
		return err
	}
	fmt.Printf("release check: %s can be released from %s\n", c.version, r.Root)
	return nil
}

// checkZippable makes every released module's zip from HEAD and throws it away, so that a file the
// go command cannot put in a module (a ':' in its name, a name that differs only in case, ...)
// stops the release before anything is written.
func checkZippable(r *Repo, v string) error {
	var errs []string
	for _, m := range r.Released() {
		mv := module.Version{Path: m.Path, Version: v}
		if err := zip.CreateFromVCS(io.Discard, mv, r.Root, "HEAD", m.Subdir()); err != nil {
			errs = append(errs, zipProblem(m, err).Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return nil
}

// zipProblem turns golang.org/x/mod/zip's list of bad files (one line per file, thousands for a
// fixture tree) into a count per reason with a few examples and the ways out.
func zipProblem(m *Module, err error) error {
	var list zip.FileErrorList
	if !errors.As(err, &list) {
		return fmt.Errorf("making the module zip of %s: %w", m.Path, err)
	}
	type reason struct {
		n        int
		examples []string
	}
	reasons := map[string]*reason{}
	var order []string
	for _, fe := range list {
		k := fe.Err.Error()
		if i := strings.LastIndex(k, ": "); i >= 0 {
			k = k[i+2:] // "malformed file path "...": invalid char ':'" -> "invalid char ':'"
		}
		rs, ok := reasons[k]
		if !ok {
			rs = &reason{}
			reasons[k] = rs
			order = append(order, k)
		}
		rs.n++
		if len(rs.examples) < 3 {
			rs.examples = append(rs.examples, path.Join(m.Dir, fe.Path))
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "module %s cannot be published: the go command refuses a module zip that holds", m.Path)
	for _, k := range order {
		fmt.Fprintf(&b, "\n  %d file(s) with %s, e.g. %s", reasons[k].n, k, strings.Join(reasons[k].examples, ", "))
	}
	fmt.Fprintf(&b, "\n  rename them, or keep them out of the module: a folder with a go.mod of its own is not part of %s's zip", m.Dir)
	return errors.New(b.String())
}
