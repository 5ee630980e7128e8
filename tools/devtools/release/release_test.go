package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCheckVersion(t *testing.T) {
	for _, v := range []string{"v0.1.0", "v1.2.3", "v0.1.0-rc.1"} {
		assert.NoError(t, CheckVersion(v), v)
	}
	for _, v := range []string{"", "v0.1", "0.1.0", "v0.1.0+x", "v2.0.0", "v0.0.0-20240101000000-abcdefabcdef", "vX"} {
		assert.Error(t, CheckVersion(v), v)
	}
}

const changelog = `# Changelog

## [Unreleased]

- ` + "`velo.Handler` is `velo.MessageHandler`; `(*Velo).Handle` is `(*Velo).RegisterHandler`" + `
- ucxt.Config.RMA moved.

## [v0.2.0] - Unreleased

Things.

## [v0.1.0] - 2026-01-02

- ` + "`velo.Old`" + ` appeared.
`

func TestChangelog(t *testing.T) {
	c := &Changelog{Text: changelog}
	assert.True(t, c.HasEntry("v0.1.0"))
	assert.True(t, c.HasEntry("v0.2.0"))
	assert.False(t, c.HasEntry("v0.1.1"))
	assert.False(t, c.HasEntry("v0.1"))

	day := time.Date(2026, 3, 4, 23, 0, 0, 0, time.UTC)
	stamped := c.Stamped("v0.2.0", day)
	assert.Contains(t, stamped, "## [v0.2.0] - 2026-03-04\n")
	assert.Contains(t, stamped, "## [Unreleased]\n", "only the version's heading is dated")
	assert.Equal(t, changelog, c.Stamped("v0.1.0", day), "a dated heading stays")

	assert.NotContains(t, c.Since("v0.1.0"), "velo.Old")
	assert.Contains(t, c.Since("v0.1.0"), "Things.")
	assert.Equal(t, changelog, c.Since("v0.0.1"))
}

func TestChangeNames(t *testing.T) {
	r := &Repo{Prefix: "github.com/velo-go/velo"}
	m := &Module{Dir: "velo", Path: "github.com/velo-go/velo/velo"}
	names := map[string][]string{
		"github.com/velo-go/velo/velo":                        {"velo"},
		"github.com/velo-go/velo/velo/transport/ucxtransport": {"ucxt", "ucx"},
	}
	since := (&Changelog{Text: changelog}).Since("v0.1.0")
	for msg, named := range map[string]bool{
		"Handler: removed":        true,
		"Handle: removed":         false, // velo.Handler is longer
		"(*Velo).Handle: removed": true,
		"Old: removed":            false, // named only before v0.1.0
		"./transport/ucxtransport.Config.RMA: changed from a to b": true,
		"./transport/ucxtransport.Config.Other: removed":           false,
		"package github.com/velo-go/velo/velo/gone: removed":       false,
	} {
		forms := ChangeNames(r, m, msg, names)
		require.NotEmpty(t, forms, msg)
		assert.Equal(t, named, Named(since, forms), "%s (forms %q)", msg, forms)
	}
	assert.Contains(t, ChangeNames(r, m, "package github.com/velo-go/velo/velo/gone: removed", names), "velo/gone")
	assert.Contains(t, ChangeNames(r, m, "./transport/ucxtransport.(*Engine).Close: removed", names), "ucxt.(*Engine).Close")
	assert.Contains(t, ChangeNames(r, m, "./transport/ucxtransport.(*Engine).Close: removed", names), "Engine.Close")
}
