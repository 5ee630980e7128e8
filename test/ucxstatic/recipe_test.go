package ucxstatic_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// recipe is third_party/ucx/ucx-static.sh, relative to this package's directory (go test runs
// in it).
var recipe = filepath.Join("..", "..", "third_party", "ucx", "ucx-static.sh")

// recipeVars are the variables the recipe reads; each test starts from an environment without
// them so that the machine's settings cannot change the outcome.
var recipeVars = []string{
	"CC", "CFLAGS", "CPPFLAGS", "LDFLAGS", "CPATH", "C_INCLUDE_PATH", "LIBRARY_PATH", "GOOS", "GOARCH",
	"UCX_DIR", "UCX_TARBALL", "UCX_EXTRA_CONFIGURE", "UCX_DEBIAN_VERSION", "UCX_SOURCE", "VELO_UCX_SHARED_SOURCE",
	"VELO_UCX_IGNORE_MISSING_HEADERS", "VELO_UCX_APT_ETC", "VELO_UCX_PATCHES",
}

type recipeResult struct {
	out string // stdout and stderr together
	ok  bool   // exit status 0
}

// runRecipe runs the recipe with the given command line and extra environment (KEY=VALUE) and a
// generous deadline; it fails the test only when the recipe could not be run at all.
func runRecipe(t *testing.T, env []string, args ...string) recipeResult {
	t.Helper()
	return runScript(t, recipe, cleanEnv(env), 2*time.Minute, args...)
}

// runScript runs a bash script with exactly the environment env and the deadline.
func runScript(t *testing.T, script string, env []string, deadline time.Duration, args ...string) recipeResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{script}, args...)...)
	cmd.Env = env
	var buf bytes.Buffer
	cmd.Stdout = &buf
	cmd.Stderr = &buf
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("running %s %v: %v\n%s", script, args, err, buf.String())
	}
	if ctx.Err() != nil {
		t.Fatalf("%s %v did not finish within the deadline:\n%s", script, args, buf.String())
	}
	return recipeResult{out: buf.String(), ok: err == nil}
}

func cleanEnv(extra []string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if isRecipeVar(name) {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

func isRecipeVar(name string) bool {
	if strings.HasPrefix(name, "CC_") {
		return true
	}
	for _, v := range recipeVars {
		if name == v {
			return true
		}
	}
	return false
}

// wantRefusal asserts that the recipe stopped and said every one of the fragments.
func wantRefusal(t *testing.T, r recipeResult, fragments ...string) {
	t.Helper()
	if r.ok {
		t.Fatalf("the recipe accepted what it must refuse; output:\n%s", r.out)
	}
	for _, f := range fragments {
		if !strings.Contains(r.out, f) {
			t.Errorf("refusal does not say %q; output:\n%s", f, r.out)
		}
	}
}

func wantAccepted(t *testing.T, r recipeResult) {
	t.Helper()
	if !r.ok {
		t.Fatalf("the recipe refused; output:\n%s", r.out)
	}
}

// headerTree makes a fixture include directory holding the named headers (empty files: the check
// looks for the files, as configure's first probe does).
func headerTree(t *testing.T, headers ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, h := range headers {
		p := filepath.Join(dir, h)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

var rdmaHeaders = []string{"infiniband/verbs.h", "infiniband/mlx5dv.h", "rdma/rdma_cma.h"}

// isolatedCC is the system compiler told to ignore its standard include directories, so that only
// CPATH and C_INCLUDE_PATH (which gcc still honours) decide which headers exist.
const isolatedCC = "CC=gcc -nostdinc"

func TestMissingRDMAHeaderStopsTheBuildNamingIt(t *testing.T) {
	t.Parallel()
	pkgOf := map[string]string{
		"infiniband/verbs.h":  "libibverbs-dev",
		"infiniband/mlx5dv.h": "libibverbs-dev",
		"rdma/rdma_cma.h":     "librdmacm-dev",
	}
	for _, missing := range rdmaHeaders {
		t.Run(missing, func(t *testing.T) {
			t.Parallel()
			var present []string
			for _, h := range rdmaHeaders {
				if h != missing {
					present = append(present, h)
				}
			}
			tree := headerTree(t, present...)
			r := runRecipe(t, []string{isolatedCC, "CPATH=" + tree}, "check")
			wantRefusal(t, r,
				"missing <"+missing+"> (Debian package "+pkgOf[missing]+")",
				"TCP/shared-memory-only",
				"apt-get install "+pkgOf[missing],
				"VELO_UCX_IGNORE_MISSING_HEADERS",
				tree)
			for _, h := range present {
				if strings.Contains(r.out, "missing <"+h+">") {
					t.Errorf("reports present header %s as missing:\n%s", h, r.out)
				}
			}
		})
	}
}

func TestHeaderCheckSearchesCPATHAndCIncludePath(t *testing.T) {
	t.Parallel()
	all := headerTree(t, rdmaHeaders...)
	verbsOnly := headerTree(t, "infiniband/verbs.h", "infiniband/mlx5dv.h")
	cmOnly := headerTree(t, "rdma/rdma_cma.h")
	cases := map[string][]string{
		"CPATH":                 {"CPATH=" + all},
		"C_INCLUDE_PATH":        {"C_INCLUDE_PATH=" + all},
		"CPATH list":            {"CPATH=" + verbsOnly + ":" + cmOnly},
		"CPATH and C_INCLUDE":   {"CPATH=" + verbsOnly, "C_INCLUDE_PATH=" + cmOnly},
		"system include (real)": nil,
	}
	for name, env := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if env == nil {
				if _, err := os.Stat("/usr/include/infiniband/mlx5dv.h"); err != nil {
					t.Skip("libibverbs-dev is not installed here; `make deps` installs it")
				}
				wantAccepted(t, runRecipe(t, nil, "check"))
				return
			}
			wantAccepted(t, runRecipe(t, append([]string{isolatedCC}, env...), "check"))
		})
	}
}

func TestIgnoreMissingHeadersSkipsTheCheck(t *testing.T) {
	t.Parallel()
	empty := headerTree(t)
	r := runRecipe(t, []string{isolatedCC, "CPATH=" + empty, "VELO_UCX_IGNORE_MISSING_HEADERS=1"}, "check")
	wantAccepted(t, r)
	if !strings.Contains(r.out, "skipping the rdma-core header check") {
		t.Errorf("the skip is not announced:\n%s", r.out)
	}
	// A negative value is not a request to skip.
	r = runRecipe(t, []string{isolatedCC, "CPATH=" + empty, "VELO_UCX_IGNORE_MISSING_HEADERS=0"}, "check")
	wantRefusal(t, r, "missing <infiniband/verbs.h>")
}

func TestExtraConfigureMayNotSwitchOffDEVX(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"--without-devx", "--with-devx=no", "--with-devx=check"} {
		t.Run(arg, func(t *testing.T) {
			t.Parallel()
			r := runRecipe(t, []string{"UCX_EXTRA_CONFIGURE=--enable-stats " + arg}, "check")
			wantRefusal(t, r, "UCX_EXTRA_CONFIGURE carries "+arg, "appended last", "Remove "+arg)
		})
	}
}

func TestExtraConfigureMayNotDropAnRDMATransport(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"--without-verbs", "--with-mlx5-dv=no", "--without-rdmacm"} {
		t.Run(arg, func(t *testing.T) {
			t.Parallel()
			r := runRecipe(t, []string{"UCX_EXTRA_CONFIGURE=" + arg}, "check")
			wantRefusal(t, r, "UCX_EXTRA_CONFIGURE carries "+arg, "over TCP")
		})
	}
}

func TestExtraConfigureIsAppendedLast(t *testing.T) {
	t.Parallel()
	r := runRecipe(t, []string{"UCX_EXTRA_CONFIGURE=--enable-stats  --with-devx=yes"}, "check")
	wantAccepted(t, r)
	var args []string
	for _, l := range strings.Split(r.out, "\n") {
		if strings.HasPrefix(l, "--") || strings.HasPrefix(l, "CC=") {
			args = append(args, l)
		}
	}
	n := len(args)
	if n < 3 || args[n-2] != "--enable-stats" || args[n-1] != "--with-devx=yes" {
		t.Fatalf("extra arguments are not last, in order: %q", args)
	}
	for _, want := range []string{"--enable-static", "--disable-shared", "--with-pic", "--enable-mt",
		"--with-verbs", "--with-rdmacm", "--with-mlx5", "--with-devx"} {
		found := false
		for _, a := range args[:n-2] {
			// 1.13 names the mlx5 option --with-mlx5-dv, 1.22 --with-mlx5.
			found = found || a == want || (want == "--with-mlx5" && a == "--with-mlx5-dv")
		}
		if !found {
			t.Errorf("configure arguments lack %s: %q", want, args)
		}
	}
}

// otherArch returns a GOARCH and its GNU triple that differ from this machine's.
func otherArch() (goarch, triple string) {
	if runtime.GOARCH == "arm64" {
		return "amd64", "x86_64-linux-gnu"
	}
	return "arm64", "aarch64-linux-gnu"
}

func hostTriple(t *testing.T) string {
	switch runtime.GOARCH {
	case "amd64":
		return "x86_64-linux-gnu"
	case "arm64":
		return "aarch64-linux-gnu"
	case "ppc64le":
		return "powerpc64le-linux-gnu"
	}
	t.Skipf("UCX does not build on %s", runtime.GOARCH)
	return ""
}

// fakeCompiler writes an executable shell script named name into a fresh directory.
func fakeCompiler(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCrossBuildWithoutCrossCompilerStops(t *testing.T) {
	t.Parallel()
	goarch, triple := otherArch()
	ccVar := "CC_" + strings.ReplaceAll(triple, "-", "_")
	arch, _, _ := strings.Cut(triple, "-")

	t.Run("no compiler set", func(t *testing.T) {
		t.Parallel()
		r := runRecipe(t, []string{"GOARCH=" + goarch}, "check")
		wantRefusal(t, r, "cross build for "+triple, "no cross compiler is set", ccVar, "quietly build for the host")
	})
	t.Run("CC_<target> not installed", func(t *testing.T) {
		t.Parallel()
		r := runRecipe(t, []string{"GOARCH=" + goarch, ccVar + "=/nonexistent/" + triple + "-gcc"}, "check")
		wantRefusal(t, r, ccVar+"=/nonexistent/"+triple+"-gcc", "was not found")
	})
	t.Run("CC_<target> emits host code", func(t *testing.T) {
		t.Parallel()
		// Named and answering like a cross compiler, but really the host gcc: exactly the
		// compiler that would make configure build for the host.
		fake := fakeCompiler(t, triple+"-gcc",
			`[ "$1" = -dumpmachine ] && { echo `+triple+`; exit 0; }; exec gcc "$@"`)
		r := runRecipe(t, []string{"GOARCH=" + goarch, ccVar + "=" + fake}, "check")
		wantRefusal(t, r, "not "+arch, "not a working cross compiler for "+triple)
	})
	t.Run("CC that cannot compile", func(t *testing.T) {
		t.Parallel()
		broken := fakeCompiler(t, triple+"-gcc", `echo "fatal: no such sysroot" >&2; exit 1`)
		r := runRecipe(t, []string{"GOARCH=" + goarch, "CC=" + broken}, "check")
		wantRefusal(t, r, "CC="+broken, "does not compile a trivial C file", "no such sysroot")
	})
	t.Run("CC names an absent cross compiler", func(t *testing.T) {
		t.Parallel()
		if _, err := exec.LookPath(triple + "-gcc"); err == nil {
			t.Skipf("%s-gcc is installed here", triple)
		}
		r := runRecipe(t, []string{"CC=" + triple + "-gcc"}, "check")
		wantRefusal(t, r, "CC="+triple+"-gcc", "not found")
	})
	t.Run("native CC_<host triple> is accepted", func(t *testing.T) {
		t.Parallel()
		host := hostTriple(t)
		r := runRecipe(t, []string{"CC_" + strings.ReplaceAll(host, "-", "_") + "=gcc"}, "check")
		wantAccepted(t, r)
		if strings.Contains(r.out, "--host=") {
			t.Errorf("a native build passes --host to configure:\n%s", r.out)
		}
	})
	t.Run("a real cross compiler is accepted", func(t *testing.T) {
		t.Parallel()
		cc, err := exec.LookPath(triple + "-gcc")
		if err != nil {
			t.Skipf("no %s-gcc installed (Debian: gcc-%s); the refusal paths above are covered", triple, triple)
		}
		r := runRecipe(t, []string{"GOARCH=" + goarch, ccVar + "=" + cc, "VELO_UCX_IGNORE_MISSING_HEADERS=1"}, "check")
		wantAccepted(t, r)
		if !strings.Contains(r.out, "--host="+triple) {
			t.Errorf("the cross build does not pass --host=%s:\n%s", triple, r.out)
		}
	})
}

// ucxPrefix makes a fixture UCX install prefix: the libraries named, and a ucp_version.h with the
// given API version.
func ucxPrefix(t *testing.T, major, minor int, files ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range files {
		p := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("fixture"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	hdr := filepath.Join(dir, "include", "ucp", "api", "ucp_version.h")
	if err := os.MkdirAll(filepath.Dir(hdr), 0o755); err != nil {
		t.Fatal(err)
	}
	text := "#define UCP_API_MAJOR    " + strconv.Itoa(major) + "\n#define UCP_API_MINOR    " + strconv.Itoa(minor) + "\n"
	if err := os.WriteFile(hdr, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestUCXDirChecksTheInstall(t *testing.T) {
	t.Parallel()
	t.Run("does not exist", func(t *testing.T) {
		t.Parallel()
		r := runRecipe(t, []string{"UCX_DIR=/nonexistent/ucx"}, "check")
		wantRefusal(t, r, "UCX_DIR=/nonexistent/ucx does not exist")
	})
	refusals := []struct {
		name         string
		major, minor int
		files        []string
		want         []string
	}{
		{"static only", 1, 13, []string{"lib/libucp.a"}, []string{"no shared libucp.so", "make ucx-static"}},
		{"no libucp at all", 1, 13, nil, []string{"no shared libucp.so in lib/, lib64/"}},
		{"too old", 1, 12, []string{"lib/libucp.so", "lib/ucx/libuct_ib.so.0"}, []string{"holds UCX 1.12", "needs UCX 1.13 or later"}},
		{"no IB plugin", 1, 14, []string{"lib64/libucp.so"}, []string{"no InfiniBand plugin", "TCP only"}},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := ucxPrefix(t, tc.major, tc.minor, tc.files...)
			wantRefusal(t, runRecipe(t, []string{"UCX_DIR=" + dir}, "check"), tc.want...)
		})
	}
	t.Run("fixture accepted, version said", func(t *testing.T) {
		t.Parallel()
		dir := ucxPrefix(t, 1, 17, "lib/libucp.so", "lib/ucx/libuct_ib.so.0", "lib/pkgconfig/ucx.pc")
		if err := os.WriteFile(filepath.Join(dir, "lib/pkgconfig/ucx.pc"), []byte("Name: ucx\nVersion: 1.17.0\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		r := runRecipe(t, []string{"UCX_DIR=" + dir}, "check")
		wantAccepted(t, r)
		if !strings.Contains(r.out, "found UCX 1.17.0") || !strings.Contains(r.out, "static build is skipped") {
			t.Errorf("does not say what it found:\n%s", r.out)
		}
	})
	t.Run("the Debian UCX", func(t *testing.T) {
		t.Parallel()
		if _, err := os.Stat("/usr/include/ucp/api/ucp_version.h"); err != nil {
			t.Skip("libucx-dev is not installed here; `make deps` installs it")
		}
		r := runRecipe(t, []string{"UCX_DIR=/usr"}, "check")
		wantAccepted(t, r)
		if !strings.Contains(r.out, "found UCX 1.") {
			t.Errorf("does not say which UCX it found:\n%s", r.out)
		}
	})
}

func TestTarballMustBePinned(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "ucx-1.13.1.tar.gz")
	content := []byte("not the release")
	if err := os.WriteFile(p, content, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(content)
	r := runRecipe(t, []string{"UCX_TARBALL=" + p}, "check")
	wantRefusal(t, r, hex.EncodeToString(sum[:]), "not pinned in third_party/ucx/sources.sha256")

	r = runRecipe(t, []string{"UCX_TARBALL=/nonexistent/ucx.tar.gz"}, "check")
	wantRefusal(t, r, "UCX_TARBALL=/nonexistent/ucx.tar.gz does not exist")
}

// TestMissingAutotoolStopsBeforeAnythingIsRemoved: a source without a configure (Debian's,
// the git archive) needs the autotools; without autoreconf the recipe stops at its checks,
// naming the tool and the fix, before it unpacks or removes anything.
func TestMissingAutotoolStopsBeforeAnythingIsRemoved(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	for _, dir := range []string{"/usr/local/bin", "/usr/bin", "/bin"} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if e.Name() == "autoreconf" {
				continue
			}
			_ = os.Symlink(filepath.Join(dir, e.Name()), filepath.Join(bin, e.Name())) // first directory wins, as on PATH
		}
	}
	r := runRecipe(t, []string{"PATH=" + bin, "UCX_SOURCE=debian"}, "check")
	wantRefusal(t, r, "autoreconf is missing", "ships no configure", "make deps")
	if _, err := os.Stat(sharedSource); err == nil {
		r = runRecipe(t, []string{"PATH=" + bin, "UCX_TARBALL=" + sharedSource}, "check")
		wantRefusal(t, r, "autoreconf is missing")
	}
}

func TestStampKeyFollowsFlagsAndToolchain(t *testing.T) {
	t.Parallel()
	key := func(env ...string) string {
		r := runRecipe(t, env, "key")
		wantAccepted(t, r)
		return r.out
	}
	base := key()
	if again := key(); again != base {
		t.Fatalf("the key is not stable:\n%s\nvs\n%s", base, again)
	}
	tree := headerTree(t, rdmaHeaders...)
	for name, env := range map[string][]string{
		"CFLAGS":              {"CFLAGS=-O1"},
		"CPPFLAGS":            {"CPPFLAGS=-DVELO_TEST=1"},
		"CPATH":               {"CPATH=" + tree},
		"C_INCLUDE_PATH":      {"C_INCLUDE_PATH=" + tree},
		"UCX_EXTRA_CONFIGURE": {"UCX_EXTRA_CONFIGURE=--enable-stats"},
		"CC":                  {"CC=gcc -std=gnu11"},
	} {
		if k := key(env...); k == base {
			t.Errorf("changing %s leaves the stamp key unchanged, so it would not rebuild:\n%s", name, k)
		}
	}
	for _, want := range []string{"recipe ", "source ", "configure ", "--with-devx", "cc gcc ("} {
		if !strings.Contains(base, want) {
			t.Errorf("the key lacks %q:\n%s", want, base)
		}
	}
	// The source is part of the key: the two releases never share a stamp.
	debian := key("UCX_SOURCE=debian")
	assert.Contains(t, debian, "source debian ucx=1.13.1-1")
	assert.Contains(t, debian, "--with-mlx5-dv")
	if _, err := os.Stat(sharedSource); err == nil {
		assert.Contains(t, base, "source tarball ucx-1.22.0-git.tar.gz sha256=e3b078c5")
		assert.Contains(t, base, "--with-mlx5 ")
		assert.NotContains(t, base, "--disable-numa", "1.22's configure refuses --disable-numa")
	}
}

// sharedSource is the UCX 1.22.0 source the workspace keeps beside the checkout.
var sharedSource = filepath.Join("..", "..", "..", "shared", "third_party", "ucx-1.22.0-git.tar.gz")

// TestSourceSelection: UCX_TARBALL first, then the 1.22 source beside the checkout, then Debian's
// 1.13.1, each said in one line; UCX_SOURCE=debian picks Debian's whatever is there.
func TestSourceSelection(t *testing.T) {
	t.Parallel()
	version := func(env ...string) recipeResult {
		r := runRecipe(t, env, "version")
		wantAccepted(t, r)
		return r
	}
	r := version("VELO_UCX_SHARED_SOURCE=/nonexistent/ucx-1.22.0-git.tar.gz")
	assert.Contains(t, r.out, "1.13.1\n")
	assert.Contains(t, r.out, "UCX source: Debian's ucx 1.13.1-1 (no UCX_TARBALL, and no UCX 1.22 source at /nonexistent/ucx-1.22.0-git.tar.gz)")
	r = version("UCX_SOURCE=debian")
	assert.Contains(t, r.out, "1.13.1\n")
	assert.NotContains(t, r.out, "UCX source:", "UCX_SOURCE=debian is the caller's choice; nothing to say")
	if _, err := os.Stat(sharedSource); err == nil {
		r = version()
		assert.Contains(t, r.out, "1.22.0\n")
		assert.Contains(t, r.out, "UCX source: ")
		r = version("UCX_TARBALL=" + sharedSource)
		assert.Contains(t, r.out, "1.22.0\n")
	} else {
		t.Logf("no UCX 1.22 source at %s: the default case is covered above", sharedSource)
	}
	r = runRecipe(t, []string{"UCX_SOURCE=upstream"}, "version")
	wantRefusal(t, r, "UCX_SOURCE=upstream", "UCX_TARBALL=path")
}

func TestDebSrcListIsDerivedFromTheSystemSources(t *testing.T) {
	t.Parallel()
	etc := t.TempDir()
	if err := os.MkdirAll(filepath.Join(etc, "sources.list.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	deb822 := "Types: deb\nURIs: http://deb.example.invalid/debian\nSuites: bookworm bookworm-updates\n" +
		"Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n" +
		"Types: deb deb-src\nURIs: http://security.example.invalid/debian-security\nSuites: bookworm-security\nComponents: main\n"
	oneLine := "# a comment\ndeb http://mirror.example.invalid/debian bookworm main\n" +
		"deb [signed-by=/k.gpg] http://other.example.invalid/debian bookworm main contrib\ndeb-src http://x.invalid/debian bookworm main\n"
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(etc, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("sources.list.d/debian.sources", deb822)
	write("sources.list", oneLine)
	write("sources.list.d/ignored.list.disabled", "deb http://disabled.invalid/ x main\n")
	before := treeHash(t, etc)

	out := t.TempDir()
	r := runRecipe(t, []string{"VELO_UCX_APT_ETC=" + etc}, "deb-src-list", out)
	wantAccepted(t, r)
	sources, _ := os.ReadFile(filepath.Join(out, "velo-deb-src.sources"))
	list, _ := os.ReadFile(filepath.Join(out, "velo-deb-src.list"))
	if got := strings.Count(string(sources), "Types: deb-src\n"); got != 2 {
		t.Errorf("want both stanzas as deb-src, got %d:\n%s", got, sources)
	}
	for _, keep := range []string{"URIs: http://deb.example.invalid/debian", "Suites: bookworm bookworm-updates",
		"Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg", "Suites: bookworm-security"} {
		if !strings.Contains(string(sources), keep) {
			t.Errorf("derived .sources lost %q:\n%s", keep, sources)
		}
	}
	if strings.Contains(string(sources), "Types: deb\n") {
		t.Errorf("derived .sources still has a binary entry:\n%s", sources)
	}
	wantList := "deb-src http://mirror.example.invalid/debian bookworm main\n" +
		"deb-src [signed-by=/k.gpg] http://other.example.invalid/debian bookworm main contrib\n"
	if string(list) != wantList {
		t.Errorf("derived .list:\n%s\nwant:\n%s", list, wantList)
	}
	if after := treeHash(t, etc); after != before {
		t.Errorf("the recipe changed the apt configuration it read")
	}

	empty := t.TempDir()
	r = runRecipe(t, []string{"VELO_UCX_APT_ETC=" + empty}, "deb-src-list", t.TempDir())
	wantRefusal(t, r, "found no Debian package sources", "UCX_TARBALL")
}

// treeHash hashes every file's path and content under dir.
func treeHash(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		h.Write([]byte(p))
		h.Write(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}
