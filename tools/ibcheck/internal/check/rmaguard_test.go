package check

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/velo-go/velo/ucx"
)

// TestRMAGuardVerdicts: the guard passes; its absence fails unless the operator trusts the network
// (then it warns); an unaskable UCX is not compiled in or inconclusive. Every verdict but PASS
// names the static build as the fix.
func TestRMAGuardVerdicts(t *testing.T) {
	guarded := &ucx.RMAGuard{Enforced: true, Version: "velo-ucx-guard/2", UCX: "1.22.0"}
	open := &ucx.RMAGuard{UCX: "1.13.1"}
	cases := []struct {
		name    string
		guard   *ucx.RMAGuard
		ucxErr  error
		env     map[string]string
		want    Status
		mention string
	}{
		{"guarded", guarded, nil, nil, Pass, "velo-ucx-guard/2"},
		{"guarded-trust-set", guarded, nil, map[string]string{"VELO_UCX_TRUST_NETWORK": "1"}, Pass, "is not needed"},
		{"unguarded", open, nil, nil, Fail, "refuses to start"},
		{"unguarded-not-affirmative", open, nil, map[string]string{"VELO_UCX_TRUST_NETWORK": "off"}, Fail, "ErrUnguardedUCX"},
		{"unguarded-trusted", open, nil, map[string]string{"VELO_UCX_TRUST_NETWORK": "yes"}, Warn, "VELO_UCX_TRUST_NETWORK=yes trusts the network"},
		{"not-compiled", nil, ucx.ErrNotCompiled, nil, NotCompiled, "not compiled in"},
		{"probe-failed", open, errors.New("the UCX probe failed"), nil, Fail, "1.13.1"},
		{"not-asked", nil, nil, nil, Warn, "could not tell"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			info := testUCX
			info.Guard, info.Err = c.guard, c.ucxErr
			sys := fakeSystem(nil, nil)
			sys.UCX = func(context.Context, []string, bool) UCXInfo { return info }
			rep := Run(context.Background(), Config{Paths: fixture("cx7-ib-active"), Env: envMap(c.env)}, sys)
			r := resultOf(t, rep, "ucx_rma_guard")
			if r.Status != c.want {
				t.Errorf("status %v, want %v: %s", r.Status, c.want, r.Finding)
			}
			if !strings.Contains(r.Finding, c.mention) {
				t.Errorf("finding %q does not mention %q", r.Finding, c.mention)
			}
			if (r.Status == Fail || r.Status == Warn) && c.guard != nil && !strings.Contains(r.Fix, "make ucx-static, then go build -tags ucx_static") {
				t.Errorf("fix %q does not name the static build", r.Fix)
			}
			if r.Status == Fail && !strings.Contains(r.Fix, "VELO_UCX_TRUST_NETWORK=1") {
				t.Errorf("fix %q does not name the opt-in", r.Fix)
			}
		})
	}
}
