package ucx

import (
	"strings"
	"testing"
)

func TestResolveSettingsEnvironmentWins(t *testing.T) {
	env := map[string]string{"UCX_TLS": "rc_mlx5,ud_mlx5,self"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	apply, overridden, err := resolveSettings(ContextConfig{
		TLS: "tcp", NetDevices: "lo",
		Settings: map[string]string{"ucx_keepalive_interval": "5s", "RNDV_THRESH": "8k"},
	}, lookup)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, s := range apply {
		if s.Source != SourceProgram {
			t.Errorf("%s: source %v", s.Name, s.Source)
		}
		got[s.Name] = s.Value
	}
	want := map[string]string{"NET_DEVICES": "lo", "KEEPALIVE_INTERVAL": "5s", "RNDV_THRESH": "8k"}
	if len(got) != len(want) {
		t.Fatalf("applied %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s=%q, want %q", k, got[k], v)
		}
	}
	if len(overridden) != 1 || overridden[0].Name != "TLS" || overridden[0].Value != "rc_mlx5,ud_mlx5,self" || overridden[0].Source != SourceEnvironment {
		t.Fatalf("overridden %+v", overridden)
	}
	if _, _, err := resolveSettings(ContextConfig{Settings: map[string]string{" ": "x"}}, lookup); err == nil {
		t.Fatal("an empty setting name was accepted")
	}
}

func TestParseConfigPrint(t *testing.T) {
	text := "#\n# comment\nUCX_TLS=tcp\nUCX_RCACHE_ENABLE=n\n\nUCX_PROTO_ENABLE=n\nnot a line\n"
	env := map[string]string{"UCX_RCACHE_ENABLE": "n"}
	got := parseConfigPrint(text, map[string]bool{"TLS": true}, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	want := []Setting{{"TLS", "tcp", SourceProgram}, {"RCACHE_ENABLE", "n", SourceEnvironment}, {"PROTO_ENABLE", "n", SourceDefault}}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestProtoEnableWarning(t *testing.T) {
	if w := protoEnableWarning("n", SourceDefault, 1, 13); w != "" {
		t.Errorf("default value warned: %s", w)
	}
	if w := protoEnableWarning("y", SourceEnvironment, 1, 18); w != "" {
		t.Errorf("y warned: %s", w)
	}
	if w := protoEnableWarning("n", SourceEnvironment, 1, 18); !strings.Contains(w, "DISABLES ALL RMA") {
		t.Errorf("1.18: %q", w)
	}
	if w := protoEnableWarning("no", SourceProgram, 1, 13); !strings.Contains(w, "recent UCX releases it disables all RMA") {
		t.Errorf("1.13: %q", w)
	}
}
