//go:build cgo && linux

package ucx

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCheckVersion: the start-up check refuses releases older than 1.13 with an error that
// names the fix, warns when the library differs from the headers, and is quiet otherwise.
func TestCheckVersion(t *testing.T) {
	for _, tc := range []struct {
		name    string
		v       VersionInfo
		err     bool
		warning string
	}{
		{"same release", VersionInfo{Major: 1, Minor: 22, Release: 0, APIMajor: 1, APIMinor: 22}, false, ""},
		{"1.13 headers and library", VersionInfo{Major: 1, Minor: 13, Release: 1, APIMajor: 1, APIMinor: 13}, false, ""},
		{"too old", VersionInfo{Major: 1, Minor: 12, Release: 1, APIMajor: 1, APIMinor: 12}, true, ""},
		{"ancient major", VersionInfo{Major: 0, Minor: 99, APIMajor: 1, APIMinor: 13}, true, ""},
		{"newer library than headers", VersionInfo{Major: 1, Minor: 22, Release: 0, APIMajor: 1, APIMinor: 13}, false, "compiled against UCX 1.13 headers but running with libucp 1.22.0"},
		{"older library than headers", VersionInfo{Major: 1, Minor: 13, Release: 1, APIMajor: 1, APIMinor: 22}, false, "compiled against UCX 1.22 headers but running with libucp 1.13.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			warning, err := checkVersion(tc.v)
			if tc.err {
				require.ErrorIs(t, err, StatusUnsupported)
				assert.Contains(t, err.Error(), "older than 1.13")
				assert.Contains(t, err.Error(), "make ucx-static", "the error names a fix")
				return
			}
			require.NoError(t, err)
			if tc.warning == "" {
				assert.Empty(t, warning)
				return
			}
			assert.Contains(t, warning, tc.warning)
			assert.Contains(t, warning, "rebuild against the UCX you run")
		})
	}
}

// TestReleaseTraits: the 1.13 workarounds apply to 1.13 and older only; a later release
// takes the direct way.
func TestReleaseTraits(t *testing.T) {
	old := traitsOf(VersionInfo{Major: 1, Minor: 13, Release: 1})
	assert.Equal(t, releaseTraits{v2Experimental: true, zcopyDoubleCompletion: true, sharedProcessWireup: true}, old)
	assert.Equal(t, releaseTraits{}, traitsOf(VersionInfo{Major: 1, Minor: 22}))
	assert.Equal(t, releaseTraits{}, traitsOf(VersionInfo{Major: 2, Minor: 0}))

	assert.Equal(t, "inf", engineSettings(nil, VersionInfo{Major: 1, Minor: 13})["ZCOPY_THRESH"])
	assert.NotContains(t, engineSettings(nil, VersionInfo{Major: 1, Minor: 22}), "ZCOPY_THRESH")
	assert.Equal(t, "8k", engineSettings(map[string]string{"UCX_ZCOPY_THRESH": "8k"}, VersionInfo{Major: 1, Minor: 13})["ZCOPY_THRESH"],
		"a setting of the program wins over the engine's default")
}

// TestFindTool: the baseline tools found are of the linked release; a directory of another
// release is passed over, and with nothing else the error names what it saw and the fix.
func TestFindTool(t *testing.T) {
	linked := Version().releaseString()
	tool, err := FindTool("ucx_perftest")
	if err != nil {
		t.Skipf("no ucx_perftest of the linked UCX %s here (make deps installs Debian's; make ucx-static builds the static one's): %v", linked, err)
	}
	assert.Equal(t, linked, tool.Version)
	assert.FileExists(t, tool.Path)
	if staticToolsDir() != "" {
		assert.Equal(t, filepath.Join(staticToolsDir(), "ucx_perftest"), tool.Path, "a static binary takes the tools of its own build")
	}

	// Another release's tools, first in line, are skipped (seen in the error below).
	other := otherReleaseTools(t, linked)
	t.Setenv(ToolsDirEnv, other)
	tool, err = FindTool("ucx_perftest")
	require.NoError(t, err)
	assert.NotEqual(t, filepath.Join(other, "ucx_perftest"), tool.Path)
	assert.Equal(t, linked, tool.Version)

	if staticToolsDir() == "" {
		t.Setenv("PATH", t.TempDir())
		_, err = FindTool("ucx_perftest")
		require.Error(t, err)
		assert.Contains(t, err.Error(), "no ucx_perftest of UCX "+linked)
		assert.Contains(t, err.Error(), filepath.Join(other, "ucx_perftest"))
		assert.Contains(t, err.Error(), ToolsDirEnv, "the error names the fix")
	}
}

// otherReleaseTools returns a bin directory of a UCX release other than linked: one of the
// static builds under third_party/ucx, or Debian's /usr/bin for a static binary.
func otherReleaseTools(t *testing.T, linked string) string {
	builds, _ := filepath.Glob(filepath.Join("..", "third_party", "ucx", "build-*", "bin"))
	for _, d := range append(builds, "/usr/bin") {
		if v, err := toolVersion(filepath.Join(d, "ucx_info")); err == nil && v != linked {
			abs, err := filepath.Abs(d)
			require.NoError(t, err)
			return abs
		}
	}
	t.Skip("no tools of a second UCX release here (make ucx-static builds one beside Debian's)")
	return ""
}
