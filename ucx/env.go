package ucx

import (
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"

	"github.com/velo-go/velo/ucx/internal/capi"
)

// UCX reads its configuration from UCX_* environment variables when a context is created
// (ucp_config_read). This binding keeps one rule everywhere: the environment wins. A value
// the program sets (ContextConfig.TLS, NetDevices, Settings) is applied with
// ucp_config_modify only when the matching UCX_* variable is unset, so an operator can
// always redirect a deployed binary (for example onto InfiniBand with UCX_TLS and
// UCX_NET_DEVICES) without a rebuild.

// envDefaults are applied before the first context unless the user set the variable.
// With both off, UCX patches no libc allocation functions and keeps no registration
// cache: this binding maps memory explicitly (Context.MapMemory), and a cache would keep
// registrations (and on InfiniBand, remote access) alive after the program unmapped them.
//
// UCX_RCACHE_ENABLE is a context setting, read by ucp_config_read, so setting it in the
// process environment works. UCX_MEM_EVENTS is a UCM global option that libucs parses in
// its library constructor — before a Go program's main — so the environment is read too
// early to change from Go; the cgo build applies it with ucm_set_global_opts instead
// (loadTime below). A user who sets UCX_MEM_EVENTS in the environment is honoured by UCX
// itself at load.
var envDefaults = [...]struct {
	name, value string
	loadTime    bool
}{
	{"UCX_RCACHE_ENABLE", "n", false},
	{"UCX_MEM_EVENTS", "n", true},
	// UCX's fault handlers removed before the Go runtime starts (see capi.c): a fault in C code
	// crashes the process with Go's report and a non-zero status.
	{"UCX_HANDLE_ERRORS", "none", true},
}

func init() {
	if capi.FaultSignalsYielded() >= 0 {
		// The constructor set it only for a libucs initialised after it (a static link); every
		// libucs of this process is initialised by now. Child processes start from the user's
		// environment, so UCX's own tools keep their default.
		_ = os.Unsetenv("UCX_HANDLE_ERRORS")
	}
}

// applyLoadTimeDefault applies a default for a variable UCX parsed when it was loaded. It
// reports whether it could (never in a build without UCX).
func applyLoadTimeDefault(name, value string) bool {
	if !capi.Compiled {
		return false
	}
	switch name {
	case "UCX_MEM_EVENTS":
		capi.UcmSetEvents(!isNegative(value))
		return true
	}
	return false
}

// setBeforeMain reports a default the binding's C constructor applied before main (so the
// variable is in the environment although the user did not set it).
func setBeforeMain(name string) bool {
	return name == "UCX_HANDLE_ERRORS" && capi.FaultSignalsYielded() >= 0
}

// EnvDefault records what the binding did with one default variable.
type EnvDefault struct {
	Name    string
	Value   string // the value in effect after the defaults were applied
	UserSet bool   // true when the variable was already set and left alone
	// Via says how a default was applied: "environment" (os.Setenv before the first
	// context), "ucm_set_global_opts" (UCX read the variable before main) or "library
	// constructor" (the binding applied it before main).
	Via string `json:",omitempty"`
}

var (
	envOnce    sync.Once
	envApplied []EnvDefault
)

// ApplyEnvDefaults applies UCX_RCACHE_ENABLE=n, UCX_MEM_EVENTS=n and UCX_HANDLE_ERRORS=none
// (the last before main, see docs/ucx.md) unless the user set
// them, once per process, and reports the outcome. NewContext, NewEngine and
// QueryResources call it; call it yourself only if something else in the process creates
// a UCX context first.
func ApplyEnvDefaults() []EnvDefault {
	envOnce.Do(func() {
		for _, d := range envDefaults {
			if setBeforeMain(d.name) {
				envApplied = append(envApplied, EnvDefault{Name: d.name, Value: d.value, Via: "library constructor"})
				continue
			}
			if v, ok := os.LookupEnv(d.name); ok {
				envApplied = append(envApplied, EnvDefault{Name: d.name, Value: v, UserSet: true})
				continue
			}
			if d.loadTime {
				if applyLoadTimeDefault(d.name, d.value) {
					envApplied = append(envApplied, EnvDefault{Name: d.name, Value: d.value, Via: "ucm_set_global_opts"})
				}
				continue
			}
			// os.Setenv reaches the C environment (setenv) in a cgo binary, which is
			// where ucp_config_read looks.
			_ = os.Setenv(d.name, d.value)
			envApplied = append(envApplied, EnvDefault{Name: d.name, Value: d.value, Via: "environment"})
		}
	})
	return append([]EnvDefault(nil), envApplied...)
}

// SettingSource says where an effective UCX setting came from.
type SettingSource int

const (
	// SourceDefault: neither the environment nor the program set it.
	SourceDefault SettingSource = iota
	// SourceEnvironment: a UCX_* variable set it (and overrode any program value).
	SourceEnvironment
	// SourceProgram: ContextConfig set it because the variable was unset.
	SourceProgram
)

func (s SettingSource) String() string {
	switch s {
	case SourceEnvironment:
		return "environment"
	case SourceProgram:
		return "program"
	}
	return "default"
}

// Setting is one configuration value of a context.
type Setting struct {
	Name   string // without the UCX_ prefix, as ucp_config_modify takes it: "TLS"
	Value  string
	Source SettingSource
}

// normalizeSettingName strips a UCX_ prefix and upper-cases.
func normalizeSettingName(name string) string {
	return strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(name)), "UCX_")
}

// resolveSettings decides which program values apply: those whose UCX_ variable is unset.
// It returns the values to pass to ucp_config_modify (sorted by name) and the values the
// environment overrode.
func resolveSettings(cfg ContextConfig, lookup func(string) (string, bool)) (apply, overridden []Setting, err error) {
	want := map[string]string{}
	for k, v := range cfg.Settings {
		n := normalizeSettingName(k)
		if n == "" {
			return nil, nil, fmt.Errorf("ucx: empty setting name in ContextConfig.Settings")
		}
		want[n] = v
	}
	if cfg.TLS != "" {
		want["TLS"] = cfg.TLS
	}
	if cfg.NetDevices != "" {
		want["NET_DEVICES"] = cfg.NetDevices
	}
	names := make([]string, 0, len(want))
	for n := range want {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if v, ok := lookup("UCX_" + n); ok {
			overridden = append(overridden, Setting{Name: n, Value: v, Source: SourceEnvironment})
			continue
		}
		apply = append(apply, Setting{Name: n, Value: want[n], Source: SourceProgram})
	}
	return apply, overridden, nil
}

// protoEnableWarning returns the warning for an explicit UCX_PROTO_ENABLE=n, or "".
//
// UCX_PROTO_ENABLE=n is a common workaround for protocol-v2 faults. On recent UCX releases
// (protocol v2 is their default and the only one that still carries RMA) it silently
// disables every RMA operation, and the rendezvous RDMA path with it. On UCX 1.13 (Debian
// 12) protocol v1 is the default and still carries RMA, so the setting changes nothing
// there — but the same binary breaks after an upgrade, so it is reported on every version.
func protoEnableWarning(value string, source SettingSource, major, minor uint) string {
	if source == SourceDefault || !isNegative(value) {
		return ""
	}
	if major == 1 && minor <= 13 {
		return fmt.Sprintf("UCX_PROTO_ENABLE=%s is set (%s): on UCX %d.%d this selects protocol v1, which is already "+
			"the default here, but on recent UCX releases it disables all RMA (GET/PUT); remove it", value, source, major, minor)
	}
	return fmt.Sprintf("UCX_PROTO_ENABLE=%s is set (%s): on UCX %d.%d this DISABLES ALL RMA (GET/PUT fail or fall back); "+
		"unset UCX_PROTO_ENABLE", value, source, major, minor)
}

func isAffirmative(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "y", "yes", "1", "on", "true":
		return true
	}
	return false
}

func isNegative(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "n", "no", "0", "off", "false", "none":
		return true
	}
	return false
}

func logger(l *slog.Logger) *slog.Logger {
	if l != nil {
		return l
	}
	return slog.Default()
}

// parseConfigPrint reads ucp_config_print output ("UCX_NAME=value" lines, comments and
// blank lines ignored) into settings, attributing each to its source.
func parseConfigPrint(text string, program map[string]bool, lookup func(string) (string, bool)) []Setting {
	var out []Setting
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "UCX_") {
			continue
		}
		eq := strings.IndexByte(line, '=')
		if eq < 0 {
			continue
		}
		name := line[len("UCX_"):eq]
		s := Setting{Name: name, Value: line[eq+1:], Source: SourceDefault}
		if _, ok := lookup("UCX_" + name); ok {
			s.Source = SourceEnvironment
		} else if program[name] {
			s.Source = SourceProgram
		}
		out = append(out, s)
	}
	return out
}

// memEventsEnabled reports whether UCM will install memory event hooks (UCX_MEM_EVENTS
// as UCM applies it).
func memEventsEnabled() bool { return capi.UcmEventsEnabled() }
