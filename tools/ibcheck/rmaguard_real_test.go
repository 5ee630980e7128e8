package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/velo-go/velo/tools/ibcheck/internal/check"
	"github.com/velo-go/velo/verbs"
)

// TestRMAGuardReal judges the UCX linked into this test binary for real. make test-ibcheck runs it
// twice: on the default link (Debian's shared UCX: no guard, so FAIL, and WARN with the opt-in) and
// on the static one (-tags ucx_static: the guard, so PASS naming its version).
func TestRMAGuardReal(t *testing.T) {
	if !check.Live().CGO {
		t.Skip("no UCX in a CGO_ENABLED=0 build: the check is N/C (TestGoldenEnvironments/not-compiled-in)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := func(env map[string]string) check.Result {
		rep := check.Run(ctx, check.Config{Paths: verbs.Paths{Sysfs: fixtureSysfs("cx7-ib-active")}, Env: envOf(env)}, check.Live())
		r, ok := rep.Result("ucx_rma_guard")
		if !ok {
			t.Fatal("no ucx_rma_guard result")
		}
		t.Logf("%s %s (fix: %s)", r.Status, r.Finding, r.Fix)
		return r
	}
	plain := run(nil)
	trusted := run(map[string]string{"VELO_UCX_TRUST_NETWORK": "1"})
	enforced := plain.Status == check.Pass
	if linkedStatic && !enforced {
		t.Fatalf("the static UCX must carry velo's guard patch set (rebuild it: make ucx-static): %s %s", plain.Status, plain.Finding)
	}
	if enforced {
		if !strings.Contains(plain.Finding, "velo-ucx-guard/") || trusted.Status != check.Pass {
			t.Errorf("guarded: %s %q; trusted %s", plain.Status, plain.Finding, trusted.Status)
		}
		return
	}
	if plain.Status != check.Fail || !strings.Contains(plain.Fix, "-tags ucx_static") || !strings.Contains(plain.Fix, "VELO_UCX_TRUST_NETWORK=1") {
		t.Errorf("unguarded: want FAIL naming the static build and the opt-in, got %s %q (fix %q)", plain.Status, plain.Finding, plain.Fix)
	}
	if trusted.Status != check.Warn || !strings.Contains(trusted.Finding, "trusts the network") {
		t.Errorf("unguarded, trusted: want WARN, got %s %q", trusted.Status, trusted.Finding)
	}
}
