package ucxstatic_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// patchesDir is the recipe's patch sets, one folder per UCX version.
var patchesDir = filepath.Join("..", "..", "third_party", "ucx", "patches")

// thePatchSet is the patch set, in the order it applies, the same for both releases.
var thePatchSet = []string{
	"0001-guard-marker-and-counters.patch",
	"0002-ptr-map-indirect-keys-only.patch",
	"0003-ucp-refuse-software-rma.patch",
	"0004-tcp-refuse-put-requests.patch",
	"0005-ucp-bound-wire-offsets.patch",
	"0006-tcp-no-event-on-freed-endpoint.patch",
	"0007-ucp-answer-atomics-without-amo.patch",
	"0008-tcp-accept-backs-off.patch",
	"0009-tcp-incoming-never-takes-over.patch",
	"0010-tcp-cap-connections-per-source.patch",
	"0011-uct-stub-am-log-limited.patch",
}

// patchSources are the releases whose source is at hand here, as the recipe's environment that
// selects each: the 1.22 git archive beside the checkout, and Debian's 1.13.1 once its source
// package is in the recipe's download cache (the first make ucx-static UCX_SOURCE=debian fetches
// it; a test does not go to the network).
func patchSources(t *testing.T) map[string][]string {
	t.Helper()
	sources := map[string][]string{}
	if _, err := os.Stat(sharedSource); err == nil {
		sources["1.22.0"] = []string{"UCX_TARBALL=" + sharedSource}
	}
	cached := true
	for _, f := range []string{"ucx_1.13.1-1.dsc", "ucx_1.13.1.orig.tar.xz", "ucx_1.13.1-1.debian.tar.xz"} {
		if _, err := os.Stat(filepath.Join("..", "..", "third_party", "ucx", "work", "debian", f)); err != nil {
			cached = false
		}
	}
	if cached {
		sources["1.13.1"] = []string{"UCX_SOURCE=debian"}
	}
	if len(sources) == 0 {
		t.Skip("no UCX source at hand (neither the 1.22 archive beside the checkout nor Debian's cached source package)")
	}
	return sources
}

// copyPatches copies the patch sets into a fresh folder, for a test to change them.
func copyPatches(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	for _, v := range []string{"1.13.1", "1.22.0"} {
		require.NoError(t, os.MkdirAll(filepath.Join(dst, v), 0o755))
		for _, name := range thePatchSet {
			b, err := os.ReadFile(filepath.Join(patchesDir, v, name))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(dst, v, name), b, 0o644))
		}
	}
	return dst
}

// TestPatchSetIsComplete: both releases carry the whole patch set, each patch opening with its
// header comment and holding a unified diff.
func TestPatchSetIsComplete(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"1.13.1", "1.22.0"} {
		entries, err := os.ReadDir(filepath.Join(patchesDir, v))
		require.NoError(t, err)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		assert.Equal(t, thePatchSet, names, "UCX %s", v)
		for _, name := range names {
			b, err := os.ReadFile(filepath.Join(patchesDir, v, name))
			require.NoError(t, err)
			text := string(b)
			assert.True(t, strings.HasPrefix(text, "# velo-ucx-guard "), "%s/%s opens with its header", v, name)
			assert.Contains(t, text, "\n--- a/src/", "%s/%s holds a unified diff", v, name)
			assert.Contains(t, text, "# For UCX "+v+":", "%s/%s says which source it is for", v, name)
		}
	}
}

// TestPatchesListsTheSet: `ucx-static.sh patches` lists the selected release's patch set in
// order, each with its SHA-256 and title.
func TestPatchesListsTheSet(t *testing.T) {
	t.Parallel()
	for v, env := range patchSources(t) {
		r := runRecipe(t, env, "patches")
		wantAccepted(t, r)
		var listed []string
		for _, m := range regexp.MustCompile(`(?m)^(\d{4}-[a-z0-9.-]+\.patch)  [0-9a-f]{64}  velo-ucx-guard \d{4}: `).FindAllStringSubmatch(r.out, -1) {
			listed = append(listed, m[1])
		}
		assert.Equal(t, thePatchSet, listed, "UCX %s:\n%s", v, r.out)
	}
}

// TestPatchSetAppliesCleanly unpacks each release at hand and applies its patch set, as a build
// does, without fuzz.
func TestPatchSetAppliesCleanly(t *testing.T) {
	t.Parallel()
	for v, env := range patchSources(t) {
		t.Run(v, func(t *testing.T) {
			t.Parallel()
			r := runRecipe(t, env, "patch-check")
			wantAccepted(t, r)
			assert.Contains(t, r.out, "the patch set for UCX "+v+" applies cleanly ("+strconv.Itoa(len(thePatchSet))+" patches")
		})
	}
}

// oneSource picks one release at hand for the refusal tests.
func oneSource(t *testing.T) (string, []string) {
	t.Helper()
	sources := patchSources(t)
	for _, v := range []string{"1.22.0", "1.13.1"} {
		if env, ok := sources[v]; ok {
			return v, env
		}
	}
	panic("unreachable")
}

// TestCorruptedPatchStopsTheBuild: a patch whose context no longer matches the source stops the
// recipe before anything is built, naming the patch.
func TestCorruptedPatchStopsTheBuild(t *testing.T) {
	t.Parallel()
	v, env := oneSource(t)
	dir := copyPatches(t)
	p := filepath.Join(dir, v, thePatchSet[2])
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	// Change the first removed line of the diff, so its hunk matches nothing in the source.
	corrupted := regexp.MustCompile(`(?m)^-(\s+\S)`).ReplaceAllString(string(b), "-$1velo_corrupted_")
	require.NotEqual(t, string(b), corrupted)
	require.NoError(t, os.WriteFile(p, []byte(corrupted), 0o644))
	r := runRecipe(t, append(env, "VELO_UCX_PATCHES="+dir), "patch-check")
	wantRefusal(t, r, "patch "+thePatchSet[2]+" does not apply cleanly to UCX "+v, "regenerate "+thePatchSet[2])
	assert.NotContains(t, r.out, "applies cleanly (")
}

// TestExtraPatchStopsTheBuild: a patch added to the set that does not apply (here the first patch
// again, which the tree already carries) stops the recipe, naming it.
func TestExtraPatchStopsTheBuild(t *testing.T) {
	t.Parallel()
	v, env := oneSource(t)
	dir := copyPatches(t)
	b, err := os.ReadFile(filepath.Join(dir, v, thePatchSet[0]))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, v, "0006-extra.patch"), b, 0o644))
	r := runRecipe(t, append(env, "VELO_UCX_PATCHES="+dir), "patch-check")
	wantRefusal(t, r, "patch 0006-extra.patch does not apply cleanly to UCX "+v)
}

// TestStrayFileInPatchSetStops: the patch folder holds the set and nothing else, and every patch
// says what it closes; the checks refuse a leftover file and a patch without its header.
func TestStrayFileInPatchSetStops(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		write func(t *testing.T, dir string)
		want  []string
	}{
		{"backup file", func(t *testing.T, dir string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, thePatchSet[1]+".orig"), nil, 0o644))
		}, []string{"holds " + thePatchSet[1] + ".orig, which is not a patch of the set", "Remove it"}},
		{"unnumbered patch", func(t *testing.T, dir string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "fix.patch"), []byte("# x\n"), 0o644))
		}, []string{"holds fix.patch, which is not a patch of the set (NNNN-name.patch)"}},
		{"no header", func(t *testing.T, dir string) {
			p := filepath.Join(dir, thePatchSet[3])
			b, err := os.ReadFile(p)
			require.NoError(t, err)
			body := regexp.MustCompile(`(?m)^#.*\n`).ReplaceAllString(string(b), "")
			require.NoError(t, os.WriteFile(p, []byte(strings.TrimLeft(body, "\n")), 0o644))
		}, []string{"patch " + thePatchSet[3] + " does not open with its header comment"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := copyPatches(t)
			for _, v := range []string{"1.13.1", "1.22.0"} {
				tc.write(t, filepath.Join(dir, v))
			}
			r := runRecipe(t, []string{"VELO_UCX_PATCHES=" + dir}, "check")
			wantRefusal(t, r, tc.want...)
		})
	}
	t.Run("no patch set", func(t *testing.T) {
		t.Parallel()
		r := runRecipe(t, []string{"VELO_UCX_PATCHES=" + t.TempDir()}, "check")
		wantRefusal(t, r, "there is no patch set for UCX", "port them to this release first")
	})
}

// TestStampKeyFollowsThePatchSet: the stamp key names every patch with its SHA-256, so changing
// any byte of a patch (even its comment) rebuilds.
func TestStampKeyFollowsThePatchSet(t *testing.T) {
	t.Parallel()
	base := runRecipe(t, nil, "key")
	wantAccepted(t, base)
	for _, name := range thePatchSet {
		assert.Regexp(t, `(?m)^patch `+regexp.QuoteMeta(name)+` sha256=[0-9a-f]{64}$`, base.out)
	}
	dir := copyPatches(t)
	same := runRecipe(t, []string{"VELO_UCX_PATCHES=" + dir}, "key")
	wantAccepted(t, same)
	assert.Equal(t, base.out, same.out, "the same patches in another folder give the same key")
	for _, v := range []string{"1.13.1", "1.22.0"} {
		p := filepath.Join(dir, v, thePatchSet[1])
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(p, append([]byte("# one more comment line\n"), b...), 0o644))
	}
	changed := runRecipe(t, []string{"VELO_UCX_PATCHES=" + dir}, "key")
	wantAccepted(t, changed)
	assert.NotEqual(t, base.out, changed.out, "a changed patch must change the key")
	debian := runRecipe(t, []string{"UCX_SOURCE=debian", "VELO_UCX_PATCHES=" + dir}, "key")
	wantAccepted(t, debian)
	assert.Contains(t, debian.out, "patch "+thePatchSet[0]+" sha256=")
}
