package faults

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSoakShort runs the soak (make soak) for a short while, so the harness that guards the long
// runs keeps working: it must end with PASS, nothing lost and nothing left pinned.
func TestSoakShort(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the soak for 30 s")
	}
	out, err := exec.Command("go", "run", "github.com/velo-go/velo/test/faults/cmd/soak", "-duration", "30s", "-fault-every", "1500ms").CombinedOutput()
	t.Logf("%s", out)
	require.NoError(t, err)
	for _, want := range []string{"soak: PASS", "loss                 0", "pinned at the end    0 bytes"} {
		require.True(t, strings.Contains(string(out), want), "the soak did not say %q", want)
	}
}
