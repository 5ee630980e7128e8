package ucx

import (
	"fmt"
	"log/slog"
	"os"
	"sync"

	"github.com/velo-go/velo/ucx/internal/capi"
)

// Context is a UCP context (ucp_context_h): the transports, memory domains and
// configuration that its workers share.
//
// Thread ownership: a Context and everything made from it (workers, endpoints, memory
// handles) belong to one OS thread at a time; UCX is initialised here in single-thread
// mode. The Engine is the goroutine-safe way to use all of it.
type Context struct {
	c        capi.Context
	settings []Setting
	log      *slog.Logger
	// protoV2: protocol v2 is enabled; replyBroken: AM sends with the reply flag would
	// crash this UCX (see NewContext).
	protoV2, replyBroken bool
	traits               releaseTraits // of the linked release
	mu                   sync.Mutex    // guards closed against a concurrent Close only
	closed               bool
}

// NewContext reads the UCX_* environment (after ApplyEnvDefaults), applies cfg's values
// for variables the environment leaves unset, and calls ucp_init.
//
// It refuses a UCX older than 1.13 and warns once per process when the linked library's
// version differs from the headers the binding was compiled with (see checkVersion).
func NewContext(cfg ContextConfig) (*Context, error) {
	if !capi.Compiled {
		return nil, errNoUCX
	}
	ApplyEnvDefaults()
	log := logger(cfg.Logger)
	version := Version()
	warning, err := checkVersion(version)
	if err != nil {
		return nil, err
	}
	if warning != "" {
		versionWarnOnce.Do(func() { log.Warn(warning) })
	}
	apply, overridden, err := resolveSettings(cfg, os.LookupEnv)
	if err != nil {
		return nil, err
	}
	conf, s := capi.UcpConfigRead()
	if s != capi.OK {
		return nil, fmt.Errorf("ucx: ucp_config_read: %w (an invalid UCX_* variable in the environment? check with 'ucx_info -c')", Status(s))
	}
	defer capi.UcpConfigRelease(conf)
	program := map[string]bool{}
	for _, a := range apply {
		if s := capi.UcpConfigModify(conf, a.Name, a.Value); s != capi.OK {
			return nil, fmt.Errorf("ucx: setting UCX_%s=%q: %w (check the name and value with 'ucx_info -c')", a.Name, a.Value, Status(s))
		}
		program[a.Name] = true
	}
	for _, o := range overridden {
		log.Debug("ucx: environment overrides program setting", "name", "UCX_"+o.Name, "value", o.Value)
	}
	text, _ := capi.UcpConfigPrint(conf)
	var features uint64
	f := cfg.features()
	if f&FeatureAM != 0 {
		features |= capi.FeatureAM
	}
	if f&FeatureRMA != 0 {
		features |= capi.FeatureRMA
	}
	if f&FeatureWakeup != 0 {
		features |= capi.FeatureWakeup
	}
	if f&FeatureAMO != 0 {
		features |= capi.FeatureAMO32 | capi.FeatureAMO64
	}
	c, s := capi.UcpInit(conf, features, false)
	if s != capi.OK {
		return nil, fmt.Errorf("ucx: ucp_init: %w (if UCX printed nothing, a UCX constructor did not run; check UCX_TLS/UCX_NET_DEVICES name available resources with 'ucx_info -d')", Status(s))
	}
	ctx := &Context{c: c, settings: parseConfigPrint(text, program, os.LookupEnv), log: log, traits: traitsOf(version)}
	if v, ok := ctx.Setting("PROTO_ENABLE"); ok {
		if w := protoEnableWarning(v.Value, v.Source, version.Major, version.Minor); w != "" {
			log.Warn("ucx: WARNING: " + w)
		}
		ctx.protoV2 = isAffirmative(v.Value)
	}
	// Measured on UCX 1.13.1: with protocol v2 (UCX_PROTO_ENABLE=y, experimental there)
	// every ucp_am_send_nbx with UCP_AM_SEND_FLAG_REPLY aborts the process ("stack
	// smashing detected"). Such sends are refused instead; see docs/ucx.md. Later releases
	// default to v2 and send them fine (the suite's guarded GETs run on 1.22's v2).
	ctx.replyBroken = ctx.protoV2 && ctx.traits.v2Experimental
	return ctx, nil
}

// versionWarnOnce keeps the header/library mismatch warning to one line per process.
var versionWarnOnce sync.Once

// errReplyBroken is returned for reply-flagged sends where they would crash UCX.
func errReplyBroken() error {
	return fmt.Errorf("ucx: UCP_AM_SEND_FLAG_REPLY with protocol v2 on UCX 1.13 aborts the process: %w (unset UCX_PROTO_ENABLE; protocol v1 is this release's default)", StatusUnsupported)
}

// Settings returns every effective setting of the context's configuration, as
// ucp_config_print shows them, each with its source. Trust this over any configuration
// header a program prints: the environment overrides program values.
func (c *Context) Settings() []Setting { return append([]Setting(nil), c.settings...) }

// Setting returns one effective setting by name ("TLS" or "UCX_TLS").
func (c *Context) Setting(name string) (Setting, bool) {
	n := normalizeSettingName(name)
	for _, s := range c.settings {
		if s.Name == n {
			return s, true
		}
	}
	return Setting{}, false
}

// Close calls ucp_cleanup. Close every worker and unmap every memory handle first.
func (c *Context) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	capi.UcpCleanup(c.c)
	return nil
}

func (c *Context) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}
