//go:build cgo && linux

package ucx

import (
	"strings"
	"testing"
)

func settingOf(info childInfo, name string) Setting {
	for _, s := range info.Setting {
		if s.Name == name {
			return s
		}
	}
	return Setting{}
}

func envOf(info childInfo, name string) EnvDefault {
	for _, e := range info.Env {
		if e.Name == name {
			return e
		}
	}
	return EnvDefault{}
}

// TestEnvDefaults runs child processes: with nothing set, the binding turns UCX's
// registration cache and UCM's memory events off; values the user set are left alone.
func TestEnvDefaults(t *testing.T) {
	t.Run("defaults", func(t *testing.T) {
		info, _ := startChild(t, "env-report", "-UCX_RCACHE_ENABLE", "-UCX_MEM_EVENTS", "-UCX_HANDLE_ERRORS")
		if e := envOf(info, "UCX_HANDLE_ERRORS"); e.UserSet || e.Value != "none" || e.Via != "library constructor" {
			t.Errorf("UCX_HANDLE_ERRORS: %+v", e)
		}
		if e := envOf(info, "UCX_RCACHE_ENABLE"); e.UserSet || e.Value != "n" || e.Via != "environment" {
			t.Errorf("UCX_RCACHE_ENABLE: %+v", e)
		}
		if s := settingOf(info, "RCACHE_ENABLE"); s.Value != "n" {
			t.Errorf("effective RCACHE_ENABLE %+v, want n", s)
		}
		if e := envOf(info, "UCX_MEM_EVENTS"); e.UserSet || e.Value != "n" || e.Via != "ucm_set_global_opts" {
			t.Errorf("UCX_MEM_EVENTS: %+v", e)
		}
		if info.Events {
			t.Error("UCM memory events are still enabled")
		}
	})
	t.Run("user set", func(t *testing.T) {
		info, _ := startChild(t, "env-report", "UCX_RCACHE_ENABLE=y", "UCX_MEM_EVENTS=y", "UCX_HANDLE_ERRORS=bt")
		if e := envOf(info, "UCX_HANDLE_ERRORS"); !e.UserSet || e.Value != "bt" {
			t.Errorf("UCX_HANDLE_ERRORS: %+v", e)
		}
		if e := envOf(info, "UCX_RCACHE_ENABLE"); !e.UserSet || e.Value != "y" {
			t.Errorf("UCX_RCACHE_ENABLE: %+v", e)
		}
		if s := settingOf(info, "RCACHE_ENABLE"); s.Value != "y" || s.Source != SourceEnvironment {
			t.Errorf("effective RCACHE_ENABLE %+v, want y from the environment", s)
		}
		if e := envOf(info, "UCX_MEM_EVENTS"); !e.UserSet || e.Value != "y" {
			t.Errorf("UCX_MEM_EVENTS: %+v", e)
		}
		if !info.Events {
			t.Error("UCM memory events were turned off although the user enabled them")
		}
	})
}

// TestEnvironmentWinsOverConfig: ContextConfig.TLS applies only when UCX_TLS is unset.
func TestEnvironmentWinsOverConfig(t *testing.T) {
	info, _ := startChild(t, "env-report", "-UCX_TLS")
	if s := settingOf(info, "TLS"); s.Value != testTLS || s.Source != SourceProgram {
		t.Errorf("UCX_TLS unset: TLS %+v, want %q from the program", s, testTLS)
	}
	info, _ = startChild(t, "env-report", "UCX_TLS=tcp,self")
	if s := settingOf(info, "TLS"); s.Value != "tcp,self" || s.Source != SourceEnvironment {
		t.Errorf("UCX_TLS=tcp,self: TLS %+v, want the environment's value", s)
	}
}

// TestProtoEnableWarned: an explicit UCX_PROTO_ENABLE=n is logged loudly.
func TestProtoEnableWarned(t *testing.T) {
	info, _ := startChild(t, "env-report", "UCX_PROTO_ENABLE=n")
	if !strings.Contains(info.Log, "UCX_PROTO_ENABLE=n") || !strings.Contains(info.Log, "level=WARN") {
		t.Fatalf("no warning logged: %q", info.Log)
	}
	info, _ = startChild(t, "env-report", "-UCX_PROTO_ENABLE")
	if strings.Contains(info.Log, "PROTO_ENABLE") {
		t.Fatalf("warned although UCX_PROTO_ENABLE is unset: %q", info.Log)
	}
}
