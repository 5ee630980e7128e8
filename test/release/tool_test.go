package release

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const placeholder = "v0.0.0-00010101000000-000000000000"

// smallRepo is a repository laid out like this one: a root module with no packages, module a,
// module b that requires a at the placeholder (through go.work, and a replace of its own), and
// module test, which is never released.
func smallRepo() map[string]string {
	return map[string]string{
		"go.mod": "module example.com/rel\n\ngo 1.26.0\n",
		"go.work": `go 1.26.0

use (
	.
	./a
	./b
	./test
)

// the placeholder points at the folders
replace (
	example.com/rel/a ` + placeholder + ` => ./a
	example.com/rel/b ` + placeholder + ` => ./b
)
`,
		"a/go.mod": "module example.com/rel/a\n\ngo 1.26.0\n",
		"a/a.go":   "// Package a greets.\npackage a\n\n// Hello greets.\nfunc Hello() string { return \"hello\" }\n\n// Kept stays.\nfunc Kept() {}\n",
		"b/go.mod": "module example.com/rel/b\n\ngo 1.26.0\n\nrequire example.com/rel/a " + placeholder + "\n\nreplace example.com/rel/a => ../a\n",
		"b/b.go":   "// Package b greets through a.\npackage b\n\nimport \"example.com/rel/a\"\n\n// Hi greets.\nfunc Hi() string { return a.Hello() }\n",
		"test/go.mod": "module example.com/rel/test\n\ngo 1.26.0\n\nrequire (\n\texample.com/rel/a " + placeholder +
			"\n\texample.com/rel/b " + placeholder + "\n)\n",
		"CHANGELOG.md": "# Changelog\n\n## [v0.1.0] - Unreleased\n\nThe first release.\n",
	}
}

func TestCheckRefusesAMalformedVersion(t *testing.T) {
	dir := newRepo(t, smallRepo())
	for v, says := range map[string]string{
		"0.1.0":                              "not a semantic version",
		"latest":                             "not a semantic version",
		"v0.1":                               "write v0.1.0",
		"v0.1.0+meta":                        "write v0.1.0",
		"v2.0.0":                             "/v2",
		"v0.0.0-20240101000000-abcdefabcdef": "pseudo-version",
	} {
		r := execIn(t, dir, nil, tool, "check", "-version", v)
		assert.Equal(t, 1, r.code, "version %q: %s", v, r.out)
		assert.Contains(t, r.out, says, "version %q", v)
	}
	r := execIn(t, dir, nil, tool, "check")
	assert.Equal(t, 2, r.code, r.out)
	assert.Contains(t, r.out, "-version is required")
	must(t, dir, nil, tool, "check", "-version", "v0.1.0")
	must(t, dir, nil, tool, "check", "-version", "v0.1.0", "-repo", filepath.Join(dir, "b"))
}

func TestCheckRefusesADirtyTree(t *testing.T) {
	dir := newRepo(t, smallRepo())
	writeFiles(t, dir, map[string]string{"a/new.go": "package a\n"})
	r := execIn(t, dir, nil, tool, "check", "-version", "v0.1.0")
	assert.Equal(t, 1, r.code, r.out)
	assert.Contains(t, r.out, "not clean")
	assert.Contains(t, r.out, "a/new.go")

	require.NoError(t, os.Remove(filepath.Join(dir, "a", "new.go")))
	writeFiles(t, dir, map[string]string{"a/a.go": "package a\n"})
	r = execIn(t, dir, nil, tool, "prepare", "-version", "v0.1.0")
	assert.Equal(t, 1, r.code, r.out)
	assert.Contains(t, r.out, "a/a.go")
	assert.Empty(t, must(t, dir, nil, "git", "tag"), "a refused release made tags")
}

func TestCheckRefusesAnExistingTag(t *testing.T) {
	dir := newRepo(t, smallRepo())
	must(t, dir, nil, "git", "tag", "b/v0.1.0")
	r := execIn(t, dir, nil, tool, "prepare", "-version", "v0.1.0")
	assert.Equal(t, 1, r.code, r.out)
	assert.Contains(t, r.out, "released already (1 tag(s) exist: b/v0.1.0 (on ")
	// The unreleased module's folder is no tag of ours.
	must(t, dir, nil, "git", "tag", "test/v0.2.0")
	writeFiles(t, dir, map[string]string{"CHANGELOG.md": "## [v0.2.0] - Unreleased\n"})
	commitAll(t, dir, "v0.2.0 notes")
	must(t, dir, nil, tool, "check", "-version", "v0.2.0")
}

func TestCheckWantsAChangelogEntry(t *testing.T) {
	files := smallRepo()
	files["CHANGELOG.md"] = "# Changelog\n\n## [v0.0.9] - 2026-01-01\n\nv0.1.0 is next.\n"
	dir := newRepo(t, files)
	r := execIn(t, dir, nil, tool, "check", "-version", "v0.1.0")
	assert.Equal(t, 1, r.code, r.out)
	assert.Contains(t, r.out, "CHANGELOG.md has no entry for v0.1.0")

	delete(files, "CHANGELOG.md")
	dir = newRepo(t, files)
	r = execIn(t, dir, nil, tool, "check", "-version", "v0.1.0")
	assert.Equal(t, 1, r.code, r.out)
	assert.Contains(t, r.out, "CHANGELOG.md")
}

func TestCheckRefusesAFileNoModuleZipMayHold(t *testing.T) {
	files := smallRepo()
	files["a/testdata/sysfs/pci0000:00/class"] = "0x020000\n"
	dir := newRepo(t, files)
	r := execIn(t, dir, nil, tool, "check", "-version", "v0.1.0")
	assert.Equal(t, 1, r.code, r.out)
	assert.Contains(t, r.out, "example.com/rel/a cannot be published")
	assert.Contains(t, r.out, "1 file(s) with invalid char ':', e.g. a/testdata/sysfs/pci0000:00/class")

	// A go.mod of its own keeps the folder out of a's zip.
	writeFiles(t, dir, map[string]string{"a/testdata/go.mod": "module example.com/rel/a/testdata\n"})
	commitAll(t, dir, "keep the fixtures out of the module zip")
	must(t, dir, nil, tool, "check", "-version", "v0.1.0")
}

func TestNamesRefusesACollision(t *testing.T) {
	dir := newRepo(t, smallRepo())
	out := must(t, dir, nil, tool, "names")
	assert.Contains(t, out, "no two packages")

	// A second package a, in a module that is never released, and a file named after a folder.
	writeFiles(t, dir, map[string]string{
		"test/helpers/a/a.go": "// Package a helps the tests.\npackage a\n",
		"b/greet.go":          "package b\n",
		"b/greet/greet.go":    "// Package greet greets.\npackage greet\n",
	})
	r := execIn(t, dir, nil, tool, "names")
	assert.Equal(t, 1, r.code, r.out)
	assert.Contains(t, r.out, "2 naming problem(s)")
	assert.Contains(t, r.out, "b/greet.go is named after the folder b/greet/ beside it")
	assert.Contains(t, r.out, "package name a is used by 2 packages: example.com/rel/a, example.com/rel/test/helpers/a;")

	// A release refuses it too, before it writes anything.
	commitAll(t, dir, "a second package a")
	r = execIn(t, dir, nil, tool, "check", "-version", "v0.1.0")
	assert.Equal(t, 1, r.code, r.out)
	assert.Contains(t, r.out, "package name a is used by 2 packages")

	must(t, dir, nil, "git", "mv", "test/helpers/a", "test/helpers/greeter")
	writeFiles(t, dir, map[string]string{"test/helpers/greeter/a.go": "// Package greeter helps the tests.\npackage greeter\n"})
	must(t, dir, nil, "git", "mv", "b/greet.go", "b/hello.go")
	commitAll(t, dir, "rename")
	must(t, dir, nil, tool, "names")
	must(t, dir, nil, tool, "check", "-version", "v0.1.0")
}

func TestPrepareRefusesAReleasedModuleThatNeedsAnUnreleasedOne(t *testing.T) {
	files := smallRepo()
	files["a/go.mod"] = "module example.com/rel/a\n\ngo 1.26.0\n\nrequire example.com/rel/test " + placeholder + "\n"
	dir := newRepo(t, files)
	r := execIn(t, dir, nil, tool, "prepare", "-version", "v0.1.0")
	assert.Equal(t, 1, r.code, r.out)
	assert.Contains(t, r.out, "in a cycle (a -> test -> a)", "test requires a too")

	// b needs test, and test (rewritten before b) needs a: the refusal comes after a write, which
	// must be undone.
	files["a/go.mod"] = "module example.com/rel/a\n\ngo 1.26.0\n"
	files["b/go.mod"] = "module example.com/rel/b\n\ngo 1.26.0\n\nrequire example.com/rel/test " + placeholder + "\n"
	files["test/go.mod"] = "module example.com/rel/test\n\ngo 1.26.0\n\nrequire example.com/rel/a " + placeholder + "\n"
	dir = newRepo(t, files)
	r = execIn(t, dir, nil, tool, "prepare", "-version", "v0.1.0")
	assert.Equal(t, 1, r.code, r.out)
	assert.Contains(t, r.out, "b/go.mod requires example.com/rel/test, which is never released")
	assert.Empty(t, must(t, dir, nil, "git", "status", "--porcelain"), "a refused release left changes behind")
}

func TestPrepareMakesTheReleaseCommit(t *testing.T) {
	dir := newRepo(t, smallRepo())
	base := strings.TrimSpace(must(t, dir, nil, "git", "rev-parse", "HEAD"))
	out := must(t, dir, nil, tool, "prepare", "-version", "v0.1.0")
	t.Log(out)

	head := strings.TrimSpace(must(t, dir, nil, "git", "rev-parse", "HEAD"))
	assert.Equal(t, base, strings.TrimSpace(must(t, dir, nil, "git", "rev-parse", "HEAD^")), "the release commit is one commit on top of HEAD")
	assert.Contains(t, out, "release commit "+head)
	assert.Empty(t, must(t, dir, nil, "git", "status", "--porcelain"))
	tags := strings.Fields(must(t, dir, nil, "git", "tag", "--points-at", "HEAD"))
	assert.ElementsMatch(t, []string{"a/v0.1.0", "b/v0.1.0"}, tags, "the root module and test are never tagged")

	bmod := readFile(t, filepath.Join(dir, "b", "go.mod"))
	assert.Contains(t, bmod, "require example.com/rel/a v0.1.0")
	assert.NotContains(t, bmod, "replace")
	assert.Regexp(t, regexp.MustCompile(`(?m)^example.com/rel/a v0.1.0 h1:\S+=$`), readFile(t, filepath.Join(dir, "b", "go.sum")))
	assert.Regexp(t, regexp.MustCompile(`(?m)^example.com/rel/a v0.1.0/go.mod h1:\S+=$`), readFile(t, filepath.Join(dir, "b", "go.sum")))
	tmod := readFile(t, filepath.Join(dir, "test", "go.mod"))
	assert.NotContains(t, tmod, placeholder, "the unreleased test module follows too")
	work := readFile(t, filepath.Join(dir, "go.work"))
	assert.Contains(t, work, "example.com/rel/a v0.1.0 => ./a")
	assert.Contains(t, work, "// the placeholder points at the folders", "go.work keeps its comments")
	assert.NotContains(t, work, placeholder)
	assert.Regexp(t, regexp.MustCompile(`(?m)^## \[v0\.1\.0\] - \d{4}-\d{2}-\d{2}$`), readFile(t, filepath.Join(dir, "CHANGELOG.md")))

	// The same version again: its tags exist.
	r := execIn(t, dir, nil, tool, "prepare", "-version", "v0.1.0")
	assert.Equal(t, 1, r.code, r.out)
	assert.Contains(t, r.out, "released already")

	// The file proxy serves the tags, and b builds from it alone, without the workspace: the go
	// command checks a's zip against the hash the release commit wrote into b's go.sum.
	proxy := filepath.Join(t.TempDir(), "proxy")
	must(t, dir, nil, tool, "proxy", "-version", "v0.1.0", "-out", proxy)
	for _, f := range []string{"list", "v0.1.0.info", "v0.1.0.mod", "v0.1.0.zip"} {
		assert.FileExists(t, filepath.Join(proxy, "example.com", "rel", "a", "@v", f))
	}
	assert.Equal(t, "v0.1.0\n", readFile(t, filepath.Join(proxy, "example.com", "rel", "b", "@v", "list")))
	cache := t.TempDir()
	env := []string{"GOWORK=off", "GOPROXY=file://" + proxy, "GONOSUMDB=example.com/rel", "GOPRIVATE=", "GONOPROXY=",
		"GOMODCACHE=" + cache, "GOFLAGS=-mod=readonly -modcacherw", "GOTOOLCHAIN=local"}
	must(t, filepath.Join(dir, "b"), env, "go", "build", "./...")
	must(t, dir, nil, tool, "verify", "-version", "v0.1.0", "-proxy", proxy)
}

// A module whose go.mod misses a sibling it imports: the workspace builds it (go.work has every
// module), go mod tidy cannot run there, and only on the release commit does tidy see it. tidy
// fails with the diff; tidy -write puts the requirement, at the placeholder, into the checkout.
func TestTidy(t *testing.T) {
	files := smallRepo()
	files["go.work"] = strings.Replace(files["go.work"], "\t./b\n", "\t./b\n\t./c\n", 1)
	files["test/go.mod"] = "module example.com/rel/test\n\ngo 1.26.0\n" // no packages, so no requirements
	files["c/go.mod"] = "module example.com/rel/c\n\ngo 1.26.0\n\nrequire example.com/rel/b " + placeholder + "\n"
	files["c/c.go"] = "// Package c greets twice.\npackage c\n\nimport (\n\t\"example.com/rel/a\"\n\t\"example.com/rel/b\"\n)\n\n" +
		"// Twice greets twice.\nfunc Twice() string { return a.Hello() + b.Hi() }\n"
	dir := newRepo(t, files)
	must(t, dir, nil, "go", "build", "./c")

	release := func() (string, string) {
		tmp := t.TempDir()
		repo, proxy := filepath.Join(tmp, "repo"), filepath.Join(tmp, "proxy")
		must(t, tmp, nil, "git", "clone", "-q", "--no-tags", dir, repo)
		must(t, repo, nil, tool, "prepare", "-version", "v0.1.0")
		must(t, repo, nil, tool, "proxy", "-version", "v0.1.0", "-out", proxy)
		return repo, proxy
	}
	repo, proxy := release()
	r := execIn(t, repo, nil, tool, "tidy", "-version", "v0.1.0", "-proxy", proxy)
	assert.Equal(t, 1, r.code, r.out)
	assert.Contains(t, r.out, "tidy c                        would change")
	assert.Contains(t, r.out, "tidy b                        ok")
	assert.Contains(t, r.out, "go mod tidy would change 1 module(s)")
	assert.Contains(t, r.out, "+\texample.com/rel/a v0.1.0")
	assert.Contains(t, r.out, "make tidy")

	// Not on a checkout with changes of its own to the files it would write.
	writeFiles(t, dir, map[string]string{"c/go.sum": "\n"})
	r = execIn(t, repo, nil, tool, "tidy", "-version", "v0.1.0", "-proxy", proxy, "-write", dir)
	assert.Equal(t, 1, r.code, r.out)
	assert.Contains(t, r.out, "has changes of its own (?? c/go.sum)")
	require.NoError(t, os.Remove(filepath.Join(dir, "c", "go.sum")))

	out := must(t, repo, nil, tool, "tidy", "-version", "v0.1.0", "-proxy", proxy, "-write", dir)
	assert.Contains(t, out, "tidy c                        wrote c/go.mod")
	cmod := readFile(t, filepath.Join(dir, "c", "go.mod"))
	assert.Contains(t, cmod, "example.com/rel/a "+placeholder)
	assert.NotContains(t, cmod, "v0.1.0")
	assert.NoFileExists(t, filepath.Join(dir, "c", "go.sum"), "no line for a sibling at the placeholder")
	assert.Equal(t, files["b/go.mod"], readFile(t, filepath.Join(dir, "b", "go.mod")), "b was tidy; its replace stays")
	must(t, dir, nil, "go", "build", "./c")
	commitAll(t, dir, "tidy")

	repo, proxy = release()
	out = must(t, repo, nil, tool, "tidy", "-version", "v0.1.0", "-proxy", proxy)
	assert.Contains(t, out, "tidy c                        ok")
	// The release commit holds the hashes tidy keeps: c's go.sum names a and b, b's names a.
	assert.Contains(t, readFile(t, filepath.Join(repo, "c", "go.sum")), "example.com/rel/a v0.1.0/go.mod")

	r = execIn(t, dir, nil, tool, "tidy", "-version", "v0.1.0", "-proxy", proxy)
	assert.Equal(t, 1, r.code, r.out)
	assert.Contains(t, r.out, "not a release commit of v0.1.0 (release prepare makes one)")
}

func TestAPICheck(t *testing.T) {
	files := smallRepo()
	files["CHANGELOG.md"] = "# Changelog\n\n## [v0.1.0] - 2026-01-01\n\nThe first release, with `a.Hello`.\n"
	files["b/go.mod"] = "module example.com/rel/b\n\ngo 1.26.0\n\nrequire example.com/rel/a v0.1.0\n"
	files["test/go.mod"] = "module example.com/rel/test\n\ngo 1.26.0\n"
	files["go.work"] = "go 1.26.0\n\nuse (\n\t.\n\t./a\n\t./b\n\t./test\n)\n\nreplace example.com/rel/a v0.1.0 => ./a\n"
	dir := newRepo(t, files)

	out := must(t, dir, nil, tool, "apicheck")
	assert.Contains(t, out, "apicheck a: no release tag yet (a/v*), nothing to compare")
	assert.Contains(t, out, "apicheck b: no release tag yet (b/v*), nothing to compare")

	must(t, dir, nil, "git", "tag", "a/v0.1.0")
	must(t, dir, nil, "git", "tag", "b/v0.1.0")
	must(t, dir, nil, tool, "apicheck")

	// Remove an exported function (incompatible) and add one (compatible).
	writeFiles(t, dir, map[string]string{
		"a/a.go": "// Package a greets.\npackage a\n\n// Greet greets.\nfunc Greet() string { return \"hello\" }\n\n// Kept stays.\nfunc Kept() {}\n",
		"b/b.go": "// Package b greets through a.\npackage b\n\nimport \"example.com/rel/a\"\n\n// Hi greets.\nfunc Hi() string { return a.Greet() }\n",
	})
	commitAll(t, dir, "rename Hello to Greet")
	r := execIn(t, dir, nil, tool, "apicheck")
	assert.Equal(t, 1, r.code, r.out)
	assert.Contains(t, r.out, "apicheck a: incompatible since a/v0.1.0: Hello: removed (NOT NAMED in CHANGELOG.md)")
	assert.Contains(t, r.out, "a: Hello: removed")
	assert.Contains(t, r.out, "apicheck b: against b/v0.1.0: 0 incompatible")

	// Named only in the section of the release it was in: still not named.
	writeFiles(t, dir, map[string]string{"CHANGELOG.md": files["CHANGELOG.md"] + "`a.HelloWorld` is not it either.\n"})
	commitAll(t, dir, "a mention in the wrong place")
	r = execIn(t, dir, nil, tool, "apicheck")
	assert.Equal(t, 1, r.code, r.out)

	writeFiles(t, dir, map[string]string{"CHANGELOG.md": "# Changelog\n\n## [Unreleased]\n\n### Renames\n\n- `a.Hello` is `a.Greet`\n\n" +
		strings.TrimPrefix(files["CHANGELOG.md"], "# Changelog\n\n")})
	commitAll(t, dir, "name the rename")
	out = must(t, dir, nil, tool, "apicheck")
	assert.Contains(t, out, "Hello: removed (named in CHANGELOG.md)")
}
