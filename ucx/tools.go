package ucx

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

// ToolsDirEnv names a directory of UCX tools (ucx_info, ucx_perftest) that FindTool tries
// first, e.g. $UCX_DIR/bin for a MOFED or HPC-X UCX.
const ToolsDirEnv = "VELO_UCX_TOOLS"

// Tool is a UCX command-line tool of the same release as the library this process links.
type Tool struct {
	Path    string // the executable
	Version string // the UCX release it runs, from its ucx_info -v ("1.22.0")
}

// FindTool finds the UCX tool name (ucx_perftest, ucx_info) belonging to the UCX this
// binary links, so that a baseline measured with it compares two programs on one library.
// It looks in $VELO_UCX_TOOLS, then beside the static build this binary links (make
// ucx-static installs its ucx_info and ucx_perftest there), then on PATH, and accepts the
// first directory whose ucx_info reports the linked release. A tool of another release is
// refused with an error naming what was found and how to get the right one.
func FindTool(name string) (Tool, error) {
	v := Version()
	if v.Major == 0 { // a build without UCX
		return Tool{}, fmt.Errorf("ucx: no %s: %w", name, ErrNotCompiled)
	}
	want := v.releaseString()
	var dirs []string
	if d := os.Getenv(ToolsDirEnv); d != "" {
		dirs = append(dirs, d)
	}
	if d := staticToolsDir(); d != "" {
		dirs = append(dirs, d)
	}
	if p, err := exec.LookPath(name); err == nil {
		dirs = append(dirs, filepath.Dir(p))
	}
	var seen []string
	for _, d := range dirs {
		path := filepath.Join(d, name)
		if _, err := os.Stat(path); err != nil {
			continue
		}
		v, err := toolVersion(filepath.Join(d, "ucx_info"))
		if err != nil {
			seen = append(seen, fmt.Sprintf("%s (%v)", path, err))
			continue
		}
		if v == want {
			return Tool{Path: path, Version: v}, nil
		}
		seen = append(seen, fmt.Sprintf("%s (UCX %s)", path, v))
	}
	fix := "build the tools of this UCX (make ucx-static for the static one, or install the UCX's utilities) " +
		"or set " + ToolsDirEnv + " to the bin directory of the UCX this binary links"
	if len(seen) == 0 {
		return Tool{}, fmt.Errorf("ucx: no %s found for UCX %s: %s", name, want, fix)
	}
	return Tool{}, fmt.Errorf("ucx: no %s of UCX %s found (seen: %s): %s", name, want, strings.Join(seen, ", "), fix)
}

// 1.13 prints "# Version 1.13.1", later releases "# Library version: 1.22.0".
var libraryVersionLine = regexp.MustCompile(`(?m)^# (?:Library version:|Version) (\S+)`)

// toolVersion runs `ucx_info -v` and returns the release it reports.
func toolVersion(ucxInfo string) (string, error) {
	out, err := exec.Command(ucxInfo, "-v").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s -v: %w", ucxInfo, err)
	}
	m := libraryVersionLine.FindSubmatch(out)
	if m == nil {
		return "", errors.New(ucxInfo + " -v printed no library version")
	}
	return string(m[1]), nil
}
