//go:build cgo && linux && ucx_static

package ucxstatic_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// toolsDir is where the recipe installs the ucx_info and ucx_perftest it links against
// libvelo_ucx.a, the baselines of the benchmarks.
func toolsDir() string { return filepath.Join("..", "..", "third_party", "ucx", "build", "bin") }

// needTools skips a test when the build's tools were not built: the recipe builds them on demand
// (make ucx-static-tools, which make test-static runs first).
func needTools(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"ucx_info", "ucx_perftest"} {
		if _, err := os.Stat(filepath.Join(toolsDir(), tool)); err != nil {
			t.Skipf("no %s in %s: the tools are built on demand (make ucx-static-tools, or third_party/ucx/ucx-static.sh tools)", tool, toolsDir())
		}
	}
}

func runTool(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(toolsDir(), name), args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s %v:\n%s", name, args, out)
	return string(out)
}

// TestStaticToolsAreTheBuiltRelease: the static ucx_info reports the release the build
// folder names, opens tcp, and lists the InfiniBand pieces as compiled in; it needs no
// shared UCX (only rdma-core's libraries and libc).
func TestStaticToolsAreTheBuiltRelease(t *testing.T) {
	needTools(t)
	version := builtVersion(t)
	assert.Regexp(t, `(?m)^# (Library version:|Version) `+regexp.QuoteMeta(version)+`$`, runTool(t, nil, "ucx_info", "-v"))
	devices := runTool(t, []string{"UCX_TLS=tcp"}, "ucx_info", "-d")
	assert.Contains(t, devices, "Transport: tcp", "the tcp transport opens")
	build := runTool(t, nil, "ucx_info", "-b")
	for _, def := range []string{"HAVE_IB", "HAVE_MLX5_DV", "HAVE_DEVX", "HAVE_TL_RC", "HAVE_TL_DC", "HAVE_TL_UD"} {
		assert.Regexp(t, `(?m)^#define `+def+`\s+1$`, build, "%s is compiled in", def)
	}
	assert.Regexp(t, `(?m)^#define uct_MODULES\s+":ib:rdmacm:cma"`, build, "ib, rdmacm and cma are compiled in")
	// velo's patch set (0004) keeps UCX_TCP_PUT_ENABLE but makes it do nothing, and says so.
	config := runTool(t, nil, "ucx_info", "-c", "-f")
	assert.Contains(t, config, "Has no effect in this build (velo-ucx-guard)", "UCX_TCP_PUT_ENABLE's description")
	for _, tool := range []string{"ucx_info", "ucx_perftest"} {
		checkDynamicDeps(t, filepath.Join(toolsDir(), tool))
	}
}

// TestStaticPerftestRuns: the static ucx_perftest, the benchmarks' baseline, completes an AM
// round-trip test over tcp between two processes (UCX's own static link of it crashes at
// start: its transport modules are missing).
func TestStaticPerftestRuns(t *testing.T) {
	needTools(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	env := append(os.Environ(), "UCX_TLS=tcp")
	srv := exec.Command(filepath.Join(toolsDir(), "ucx_perftest"), "-p", port)
	srv.Env = env
	require.NoError(t, srv.Start())
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	var out []byte
	for attempt := 0; attempt < 50; attempt++ {
		cli := exec.Command(filepath.Join(toolsDir(), "ucx_perftest"), "127.0.0.1", "-p", port, "-t", "ucp_am_lat", "-s", "64", "-n", "1000")
		cli.Env = env
		if out, err = cli.CombinedOutput(); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond) // the server may not listen yet
	}
	require.NoError(t, err, "%s", out)
	assert.Regexp(t, `(?m)^Final:\s+1000\s`, string(out))
}
