package velo

import (
	"bytes"
	"context"
	"fmt"
	"image/png"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// chromium finds a headless browser. make test installs Debian's chromium (make deps) and sets
// VELO_REQUIRE_BROWSER, so there a missing browser fails the test; elsewhere it skips, saying so.
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("VELO_REQUIRE_BROWSER") != "" {
		t.Fatal("no headless browser on PATH (Debian package chromium): run make deps")
	}
	t.Skip("no headless browser on PATH (Debian package chromium; make deps installs it): the page's render test is skipped")
	return ""
}

// TestDebugPageRendersInABrowser: the introspection page, loaded by a real headless browser, has
// the instance, its state, the peers and handlers in its DOM, and paints something.
func TestDebugPageRendersInABrowser(t *testing.T) {
	bin := chromium(t)
	vs := mesh(t, 2)
	a, b := vs[0], vs[1]
	require.NoError(t, b.RegisterHandler("echo", echo))
	_, err := a.Request(tctx(t), b.ID(), "echo", []byte("hi"))
	require.NoError(t, err)
	srv := httptest.NewServer(b.DebugHandler())
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	profile := t.TempDir() // a profile of its own: nothing read from or left in the user's
	flags := []string{"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--user-data-dir=" + profile}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, append(flags, "--dump-dom", srv.URL)...)
	cmd.Stderr = &stderr
	dom, err := cmd.Output()
	require.NoError(t, err, "chromium --dump-dom: %s", stderr.String())
	page := string(dom)
	id := fmt.Sprintf("%016x", uint64(b.ID()))
	assert.Contains(t, page, `<code id="instance">`+id+`</code>`)
	assert.Contains(t, page, `id="state" class="state-degraded"`)
	assert.Contains(t, page, fmt.Sprintf("<code>%016x</code>", uint64(a.ID())), "the peer is not in the rendered table")
	assert.Contains(t, page, "<td>echo</td>")
	assert.True(t, strings.Contains(page, `<table id="handlers">`) && strings.Contains(page, `<table id="peers">`), "tables missing")

	shot := filepath.Join(t.TempDir(), "page.png")
	cmd = exec.CommandContext(ctx, bin, append(flags, "--window-size=1200,900", "--screenshot="+shot, srv.URL)...)
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Run(), "chromium --screenshot: %s", stderr.String())
	f, err := os.Open(shot)
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err)
	// Painted: the screenshot is not one flat colour.
	bounds := img.Bounds()
	first := img.At(bounds.Min.X, bounds.Min.Y)
	differ := 0
	for y := bounds.Min.Y; y < bounds.Max.Y; y += 7 {
		for x := bounds.Min.X; x < bounds.Max.X; x += 7 {
			if img.At(x, y) != first {
				differ++
			}
		}
	}
	assert.Greater(t, differ, 100, "the screenshot is blank")
}
