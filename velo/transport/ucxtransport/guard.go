package ucxtransport

import (
	"errors"
	"fmt"
	"strings"

	"github.com/velo-go/velo/ucx"
)

// Whether this transport may run on the UCX it was linked with.
//
// A stock UCX serves software-emulated RMA — PUT, GET and atomics over any active-message lane
// (tcp; ud on InfiniBand), and the tcp transport's own PUT requests — by copying to or from
// whatever address the request names, without looking at a key. A process that reaches this
// instance's UCX worker could read and write all of its memory, whatever velo registered, and
// no velo authentication can stop it: the request never reaches velo. velo's static UCX (make
// ucx-static, linked with -tags ucx_static) carries a patch set that refuses such requests (velo's
// own reads go through the engine's guarded GET there and need none of them), and
// the ucx binding tells the two builds apart by the patch set's marker (ucx.SoftwareRMAGuard).
//
// The policy: New refuses a UCX without the guard (ErrUnguardedUCX) unless the operator says the
// network is trusted (VELO_UCX_TRUST_NETWORK=1 or Config.TrustNetwork). With that opt-in the
// transport runs, warns at start, and keeps saying so in the instance's health (degraded, still
// ready) and on its introspection page. With the guard it logs the patch set's version at start.

// TrustNetworkEnv, set to 1 (or true, yes, on), lets New run on a UCX that does not enforce keys
// on software RMA, like Config.TrustNetwork. Set it only where every process that can reach the
// node's UCX transports (its tcp interfaces, its InfiniBand partition) is trusted with all of the
// process's memory.
const TrustNetworkEnv = "VELO_UCX_TRUST_NETWORK"

// ErrUnguardedUCX is the error New returns (wrapped, with the fixes) when the linked UCX does not
// enforce keys on software RMA and the operator did not opt in.
var ErrUnguardedUCX = errors.New("ucx transport: the linked UCX does not enforce remote keys on software RMA")

// guardFix names both ways out, for errors, warnings and health reasons.
const guardFix = "link velo's enforcing UCX (make ucx-static, then build with -tags ucx_static)"

// guardState is what New decided about the linked UCX.
type guardState struct {
	rma ucx.RMAGuard
	// trustedBy names the opt-in that let an unguarded UCX run ("VELO_UCX_TRUST_NETWORK=1" or
	// "Config.TrustNetwork"); empty when the guard is enforced.
	trustedBy string
}

// checkGuard applies the policy to the linked UCX. Without UCX in the binary it lets New go on to
// the engine, which says "not compiled".
func checkGuard(cfg Config, getenv func(string) string) (guardState, error) {
	g, err := ucx.SoftwareRMAGuard()
	if err != nil {
		return guardState{rma: g}, nil
	}
	return decideGuard(g, cfg, getenv(TrustNetworkEnv))
}

// decideGuard is the policy: a guarded UCX runs; an unguarded one runs only with an opt-in (env is
// the value of VELO_UCX_TRUST_NETWORK).
func decideGuard(g ucx.RMAGuard, cfg Config, env string) (guardState, error) {
	if g.Enforced {
		return guardState{rma: g}, nil
	}
	switch {
	case affirmative(env):
		return guardState{rma: g, trustedBy: TrustNetworkEnv + "=" + strings.TrimSpace(env)}, nil
	case cfg.TrustNetwork:
		return guardState{rma: g, trustedBy: "Config.TrustNetwork"}, nil
	}
	ignored := ""
	if strings.TrimSpace(env) != "" {
		ignored = fmt.Sprintf(" (%s=%q is not an opt-in: only 1, true, yes or on is)", TrustNetworkEnv, env)
	}
	return guardState{}, fmt.Errorf("%w (UCX %s has no velo guard patch set): any process that reaches this worker over tcp "+
		"or ud could read and write all of this process's memory; %s, or, on a network you trust with that, set %s=1 or "+
		"Config.TrustNetwork%s (docs/security.md)", ErrUnguardedUCX, g.UCX, guardFix, TrustNetworkEnv, ignored)
}

func affirmative(s string) bool {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}

// logGuard is the start line: the guard's version, or the warning of a trusted network.
func (t *Transport) logGuard() {
	g := t.guard
	switch {
	case g.rma.Enforced:
		t.log.Info("ucx: software RMA is guarded: the linked UCX refuses software-emulated PUT, GET and atomics and tcp PUT requests",
			"guard", g.rma.Version, "ucx", g.rma.UCX)
	case g.trustedBy != "":
		t.log.Warn("ucx: WARNING: trust the network: "+g.detail(), "opt_in", g.trustedBy, "ucx", g.rma.UCX)
	}
}

// detail says what an unguarded UCX run by opt-in means, for the start warning and the health
// reason; empty otherwise.
func (g guardState) detail() string {
	if g.rma.Enforced || g.trustedBy == "" {
		return ""
	}
	return fmt.Sprintf("the linked UCX %s does not enforce remote keys on software RMA, so any process that reaches this "+
		"worker over tcp or ud can read and write all of this process's memory; %s says to trust the network (to stop: %s)",
		g.rma.UCX, g.trustedBy, guardFix)
}

// reason is the health reason of an unguarded UCX run by opt-in; empty otherwise.
func (g guardState) reason() string {
	if d := g.detail(); d != "" {
		return "UCX trusts the network: " + d
	}
	return ""
}

// describe is the guard's line on the introspection page.
func (g guardState) describe() string {
	switch {
	case g.rma.Enforced:
		return "enforced (" + g.rma.Version + ")"
	case g.trustedBy != "":
		return "NOT enforced, trusting the network (" + g.trustedBy + ")"
	}
	return "unknown"
}

// HealthReasons implements velo.HealthReporter: with an unguarded UCX run by opt-in, the reason
// that says so, and with the RDMA path kept over software lanes by opt-in (Config.RMAOverSoftwareLanes), once it
// applies to a peer, the reason that says so (the instance reads degraded and stays ready);
// nothing otherwise.
func (t *Transport) HealthReasons() []string {
	var out []string
	if r := t.guard.reason(); r != "" {
		out = append(out, r)
	}
	if r := t.softwareRMAReason(); r != "" {
		out = append(out, r)
	}
	return out
}

// SoftwareRMAGuard is the linked UCX's guard, as New found it, and the opt-in that let an
// unguarded UCX run ("" when the guard is enforced).
func (t *Transport) SoftwareRMAGuard() (guard ucx.RMAGuard, trustedBy string) {
	g, _ := ucx.SoftwareRMAGuard() // fresh counters; New already knows UCX is linked
	return g, t.guard.trustedBy
}
