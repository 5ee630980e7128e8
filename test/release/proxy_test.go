package release

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const prefix = "github.com/velo-go/velo"

// A release under test: a repository whose HEAD is a release commit of version, and the file proxy
// made from its tags.
type release struct {
	repo, proxy, version string
}

// theRelease is the release this test checks. make release hands it over in RELEASE_REPO,
// RELEASE_PROXY and RELEASE_VERSION; otherwise the test makes one in a clone of HEAD (without
// tags, so earlier releases do not stand in the way), at the first version CHANGELOG.md has a
// section for.
func theRelease(t *testing.T) release {
	t.Helper()
	if repo := os.Getenv("RELEASE_REPO"); repo != "" {
		r := release{repo, os.Getenv("RELEASE_PROXY"), os.Getenv("RELEASE_VERSION")}
		require.NotEmpty(t, r.proxy, "RELEASE_REPO is set, RELEASE_PROXY is not")
		require.NotEmpty(t, r.version, "RELEASE_REPO is set, RELEASE_VERSION is not")
		return r
	}
	v := regexp.MustCompile(`(?m)^##[ \t]+\[?(v\d+\.\d+\.\d+[^\] \t]*)\]?`).FindStringSubmatch(readFile(t, filepath.Join(root, "CHANGELOG.md")))
	require.NotNil(t, v, "CHANGELOG.md has no version section (## [vX.Y.Z] - ...)")
	tmp := t.TempDir()
	r := release{filepath.Join(tmp, "repo"), filepath.Join(tmp, "proxy"), v[1]}
	start := time.Now()
	must(t, tmp, nil, "git", "clone", "-q", "--no-tags", root, r.repo)
	out := must(t, r.repo, nil, tool, "prepare", "-version", r.version)
	t.Logf("release prepare in a clone of HEAD (%.1fs):\n%s", time.Since(start).Seconds(), out)
	start = time.Now()
	must(t, r.repo, nil, tool, "proxy", "-version", r.version, "-out", r.proxy)
	t.Logf("release proxy: %.1fs", time.Since(start).Seconds())
	return r
}

// TestReleaseFromAFileProxy builds, in fresh modules outside the workspace and with a module cache
// of their own, what users build from a release: the first example from the velo module, a
// verbs-only program that must stay free of cgo, and ibcheck by go install; and it checks that
// every module of the release commit is tidy. This repository's
// modules can only come from the file proxy (nothing else has these versions); the rest come from
// the public proxy, so it needs the network the way any fresh module does.
func TestReleaseFromAFileProxy(t *testing.T) {
	rel := theRelease(t)
	checkReleaseCommit(t, rel)

	work := t.TempDir()
	cache := filepath.Join(work, "modcache")
	env := []string{
		"GOWORK=off",
		"GOPROXY=file://" + rel.proxy + ",https://proxy.golang.org",
		"GONOSUMDB=" + prefix, // unpublished: the checksum database has never seen them
		"GOPRIVATE=", "GONOPROXY=", "GOINSECURE=",
		"GOMODCACHE=" + cache, // empty: nothing of ours can come from an earlier download
		// -trimpath keeps the build cache useful across runs, whose module caches differ.
		"GOFLAGS=-mod=mod -modcacherw -trimpath",
		"GOTOOLCHAIN=local",
		"GOBIN=" + filepath.Join(work, "bin"),
		"CGO_CPPFLAGS=", "CGO_LDFLAGS=", // the Makefile's static-UCX stamp is not for this build
	}

	t.Run("velo", func(t *testing.T) {
		start := time.Now()
		dir := filepath.Join(work, "first")
		require.NoError(t, os.MkdirAll(dir, 0o755))
		must(t, dir, env, "go", "mod", "init", "example.com/first")
		main, err := os.ReadFile(filepath.Join(rel.repo, "velo", "examples", "first", "main.go"))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), main, 0o644))
		must(t, dir, env, "go", "get", prefix+"/velo@"+rel.version)
		must(t, dir, env, "go", "mod", "tidy")
		// Debian's shared UCX through pkg-config (make deps): built, not run; running it needs
		// the enforcing UCX or VELO_UCX_TRUST_NETWORK=1.
		must(t, dir, append(env, "CGO_ENABLED=1"), "go", "build", "-o", "first", ".")
		assert.FileExists(t, filepath.Join(dir, "first"))
		checkUserModule(t, dir, env, rel)
		t.Logf("go get velo@%s, go mod tidy, go build of velo/examples/first: %.1fs", rel.version, time.Since(start).Seconds())
	})

	t.Run("verbs", func(t *testing.T) {
		start := time.Now()
		dir := filepath.Join(work, "probe")
		require.NoError(t, os.MkdirAll(dir, 0o755))
		must(t, dir, env, "go", "mod", "init", "example.com/probe")
		require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(verbsProbe), 0o644))
		must(t, dir, env, "go", "get", prefix+"/verbs@"+rel.version)
		must(t, dir, env, "go", "mod", "tidy")

		// verbs must bring no cgo: no package of a module outside the standard library has cgo
		// files, and no UCX module is anywhere in the build.
		deps := must(t, dir, append(env, "CGO_ENABLED=1"), "go", "list", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}} {{.ImportPath}} {{len .CgoFiles}}", ".")
		sc := bufio.NewScanner(strings.NewReader(deps))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) != 3 {
				continue // a standard library package: no module
			}
			assert.NotContains(t, f[0], prefix+"/ucx", "verbs pulls in the UCX binding through %s", f[1])
			assert.Equal(t, "0", f[2], "package %s (module %s) uses cgo", f[1], f[0])
		}
		assert.NotContains(t, must(t, dir, env, "go", "list", "-m", "all"), prefix+"/ucx")

		must(t, dir, append(env, "CGO_ENABLED=0"), "go", "build", "-o", "probe", ".")
		// The fixture trees are complete only in a checkout (module zips hold no symlinks), so
		// the probe reads the release commit's.
		fx := filepath.Join(rel.repo, "verbs", "testdata")
		out := must(t, dir, nil, filepath.Join(dir, "probe"), filepath.Join(fx, "sysfs", "cx7-ib-active"), filepath.Join(fx, "dev", "cx7-ib-active"))
		assert.Contains(t, out, "mlx5_0 1 port(s)")
		checkUserModule(t, dir, env, rel)
		t.Logf("go get verbs@%s alone, go list -deps, CGO_ENABLED=0 build and run: %.1fs", rel.version, time.Since(start).Seconds())
	})

	t.Run("ibcheck", func(t *testing.T) {
		start := time.Now()
		dir := filepath.Join(work, "install")
		require.NoError(t, os.MkdirAll(dir, 0o755))
		must(t, dir, append(env, "CGO_ENABLED=1"), "go", "install", prefix+"/tools/ibcheck@"+rel.version)
		bin := filepath.Join(work, "bin", "ibcheck")
		require.FileExists(t, bin)
		// A fixture tree, as JSON. Exit status 1 is a failed check (this binary links Debian's
		// UCX, without velo's guard), not a broken binary; 2 would be a refused command line.
		cmd := exec.Command(bin, "--json", "--sysfs", filepath.Join(rel.repo, "verbs", "testdata", "sysfs", "cx7-ib-active"))
		out, err := cmd.Output()
		if err != nil {
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee, "running ibcheck")
			require.Equal(t, 1, ee.ExitCode(), "ibcheck --json: %s", ee.Stderr)
		}
		var report struct {
			Schema string `json:"schema"`
			Port   string `json:"port"`
		}
		require.NoError(t, json.Unmarshal(out, &report), "ibcheck --json printed %q", out)
		assert.True(t, strings.HasPrefix(report.Schema, "ibcheck/"), "schema %q", report.Schema)
		assert.Equal(t, "mlx5_0:1", report.Port)
		t.Logf("go install tools/ibcheck@%s and a run: %.1fs", rel.version, time.Since(start).Seconds())
	})

	// Every go.mod and go.sum of the release commit is what go mod tidy makes of it, with the
	// siblings from the file proxy (the module cache above already holds most of what it reads).
	t.Run("tidy", func(t *testing.T) {
		start := time.Now()
		r := execIn(t, rel.repo, nil, tool, "tidy", "-version", rel.version, "-proxy", rel.proxy, "-modcache", cache)
		require.Equal(t, 0, r.code, "%s", r.out)
		t.Logf("go mod tidy -diff in every module of the release commit: %.1fs\n%s", time.Since(start).Seconds(), r.out)
	})
}

// verbsProbe is a program that needs nothing but verbs: it lists the devices of a sysfs tree.
// (It names verbs' API, so a rename there must follow here.)
const verbsProbe = `package main

import (
	"fmt"
	"os"

	"github.com/velo-go/velo/verbs"
)

func main() {
	devs, err := verbs.Devices(verbs.Paths{Sysfs: os.Args[1], Dev: os.Args[2]})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, d := range devs {
		fmt.Printf("%s %d port(s)\n", d.Name, len(d.Ports))
	}
}
`

// checkReleaseCommit fails when a go.mod of the release commit still names the placeholder or
// requires a sibling at another version, or a released module has a replace.
func checkReleaseCommit(t *testing.T, rel release) {
	t.Helper()
	head := strings.TrimSpace(must(t, rel.repo, nil, "git", "rev-parse", "HEAD"))
	tags := strings.Fields(must(t, rel.repo, nil, "git", "tag", "--points-at", head))
	require.NotEmpty(t, tags, "HEAD of %s is not tagged", rel.repo)
	released := map[string]bool{}
	for _, tag := range tags {
		if d, ok := strings.CutSuffix(tag, "/"+rel.version); ok {
			released[d] = true
		}
	}
	for _, d := range []string{"velo", "ucx", "verbs", "tools/ibcheck"} {
		assert.True(t, released[d], "no tag %s/%s on the release commit", d, rel.version)
	}
	sibling := regexp.MustCompile(`(?m)^\s*(?:require\s+)?(` + regexp.QuoteMeta(prefix) + `/\S+)\s+(\S+)`)
	replace := regexp.MustCompile(`(?m)^\s*replace\b`)
	for _, f := range strings.Fields(must(t, rel.repo, nil, "git", "ls-files", "go.mod", "*/go.mod")) {
		if strings.Contains(f, "testdata/") {
			continue
		}
		text := readFile(t, filepath.Join(rel.repo, f))
		assert.NotContains(t, text, placeholder, "%s names the placeholder on the release commit", f)
		for _, m := range sibling.FindAllStringSubmatch(text, -1) {
			assert.Equal(t, rel.version, m[2], "%s requires %s", f, m[1])
		}
		if released[filepath.Dir(f)] {
			assert.False(t, replace.MatchString(text), "%s has a replace: users would not get it", f)
		}
	}
}

// checkUserModule fails when a user's module needed a replace, or got a module of ours at another
// version than the release.
func checkUserModule(t *testing.T, dir string, env []string, rel release) {
	t.Helper()
	assert.NotContains(t, readFile(t, filepath.Join(dir, "go.mod")), "replace")
	out := must(t, dir, env, "go", "list", "-m", "-f", "{{.Path}} {{.Version}} {{.Replace}}", "all")
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) == 3 && strings.HasPrefix(f[0], prefix+"/") {
			assert.Equal(t, rel.version, f[1], "module %s", f[0])
			assert.Equal(t, "<nil>", f[2], "module %s is replaced", f[0])
		}
	}
}
